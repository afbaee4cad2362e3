"""V2: a pipelined WGMMA matmul without warp specialization.

C = A @ B^T with A [M, K], B [N, K] and C [M, N] in float16, as in V3. The shared tiles become a ring of
``num_stages`` stages with one "TMA landed" mbarrier each, so the loads of the next K-tiles are in flight while the
tensor cores work on the current one. Every one of the 4 warps still does every job: a prefill issues the first
stages, then each iteration waits for its stage, runs WGMMA, syncs the whole block (the stage is then free: nobody
reads it any more) and refills that stage with the K-tile ``num_stages`` ahead. Each stage's barrier completes once
per lap of the ring, so a per-stage phase array tracks the parity to wait for. V3 replaces the block-wide sync with
a dedicated producer warp and "empty" barriers.

Run ``python examples/matmul_v2.py`` to check it against numpy (on the emulator when there is no Hopper GPU).
"""

import warpspec
from warpspec import cdiv, float16, float32, int32, uint32

from example_support import check_matmul


@warpspec.autotune("num_stages", [2, 3, 4])
@warpspec.autotune("block_m, block_n", [[64, 64], [128, 128], [128, 256]])
@warpspec.autotune("block_k", [16, 32, 64])
class MatmulWGMMAV2(warpspec.Script):
    def __init__(self, num_stages, block_m, block_n, block_k):
        super().__init__()
        self.num_stages = num_stages
        self.block_m = block_m
        self.block_n = block_n
        self.block_k = block_k

    def __call__(
        self,
        m_size: int32,
        n_size: int,
        k_size: int,
        a_ptr: ~float16,
        b_ptr: ~float16,
        c_ptr: ~float16,
    ):
        self.attrs.blocks = [cdiv(m_size, self.block_m), cdiv(n_size, self.block_n)]
        self.attrs.warps = 4

        num_stages = self.num_stages
        block_m, block_n, block_k = self.block_m, self.block_n, self.block_k
        offset_m: int32 = block_m * self.blockIdx.x
        offset_n: int32 = block_n * self.blockIdx.y
        k_tiles = cdiv(k_size, block_k)

        ga = self.global_view(a_ptr, dtype=float16, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float16, shape=[n_size, k_size])
        sa = self.shared_tensor(dtype=float16, shape=[num_stages, block_m, block_k])
        sb = self.shared_tensor(dtype=float16, shape=[num_stages, block_n, block_k])
        acc = self.register_tensor(dtype=float32, shape=[block_m, block_n], init=0.0)
        tma_barriers = self.mbarrier.alloc(counts=[1 for _ in range(num_stages)])
        phases = self.register_tensor(dtype=uint32, shape=[num_stages], init=0)

        # Prefill: with fewer K-tiles than stages, only that many stages are ever filled.
        for prefill_stage in range(min(num_stages, k_tiles)):
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(
                    tma_barriers[prefill_stage],
                    transaction_bytes=sa[prefill_stage].nbytes + sb[prefill_stage].nbytes,
                )
                self.tma.global_to_shared(
                    src=ga,
                    dst=sa[prefill_stage],
                    offsets=[offset_m, prefill_stage * block_k],
                    mbarrier=tma_barriers[prefill_stage],
                )
                self.tma.global_to_shared(
                    src=gb,
                    dst=sb[prefill_stage],
                    offsets=[offset_n, prefill_stage * block_k],
                    mbarrier=tma_barriers[prefill_stage],
                )

        stage: int32 = 0
        for k_tile in self.range(k_tiles, unroll=num_stages):
            self.mbarrier.wait(tma_barriers[stage], phase=phases[stage])
            phases[stage] ^= 1
            self.wgmma.fence()
            self.wgmma.mma(sa[stage], sb[stage].transpose(), acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            # Every warp must be done reading the stage before one thread refills it.
            self.sync()
            next_k_tile = k_tile + num_stages
            if next_k_tile < k_tiles:
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(
                        tma_barriers[stage], transaction_bytes=sa[stage].nbytes + sb[stage].nbytes
                    )
                    self.tma.global_to_shared(
                        src=ga,
                        dst=sa[stage],
                        offsets=[offset_m, next_k_tile * block_k],
                        mbarrier=tma_barriers[stage],
                    )
                    self.tma.global_to_shared(
                        src=gb,
                        dst=sb[stage],
                        offsets=[offset_n, next_k_tile * block_k],
                        mbarrier=tma_barriers[stage],
                    )
            stage = (stage + 1) % num_stages

        casted_acc = self.cast(acc, dtype=float16)
        gc = self.global_view(c_ptr, dtype=float16, shape=[m_size, n_size])
        self.store_global(gc, casted_acc, offsets=[offset_m, offset_n])


if __name__ == "__main__":
    check_matmul(MatmulWGMMAV2())
