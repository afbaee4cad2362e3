"""V1: the simplest WGMMA matmul on Hopper, one shared stage and no pipelining.

C = A @ B^T with A [M, K], B [N, K] and C [M, N] in float16, as in V3. One warpgroup (4 warps, 128 threads) does
everything in lockstep for each K-tile: one thread declares the bytes on the stage's mbarrier and issues the two TMA
loads, all threads wait for them, the warpgroup runs WGMMA and waits for it, and a block-wide sync makes sure every
warp is done reading the stage before the next load overwrites it. Memory latency is never hidden behind math:
V2 adds a ring of stages, V3 a dedicated producer warp.

Run ``python examples/matmul_v1.py`` to check it against numpy (on the emulator when there is no Hopper GPU).
"""

import warpspec
from warpspec import cdiv, float16, float32, int32, uint32

from example_support import check_matmul


@warpspec.autotune("block_m, block_n", [[64, 64], [128, 128], [128, 256]])
@warpspec.autotune("block_k", [16, 32, 64])
class MatmulWGMMAV1(warpspec.Script):
    def __init__(self, block_m, block_n, block_k):
        super().__init__()
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

        block_m, block_n, block_k = self.block_m, self.block_n, self.block_k
        offset_m: int32 = block_m * self.blockIdx.x
        offset_n: int32 = block_n * self.blockIdx.y

        ga = self.global_view(a_ptr, dtype=float16, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float16, shape=[n_size, k_size])
        sa = self.shared_tensor(dtype=float16, shape=[block_m, block_k])
        sb = self.shared_tensor(dtype=float16, shape=[block_n, block_k])
        acc = self.register_tensor(dtype=float32, shape=[block_m, block_n], init=0.0)
        tma_barriers = self.mbarrier.alloc(counts=[1])
        phase: uint32 = 0

        for offset_k in self.range(0, k_size, block_k):
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(tma_barriers[0], transaction_bytes=sa.nbytes + sb.nbytes)
                self.tma.global_to_shared(src=ga, dst=sa, offsets=[offset_m, offset_k], mbarrier=tma_barriers[0])
                self.tma.global_to_shared(src=gb, dst=sb, offsets=[offset_n, offset_k], mbarrier=tma_barriers[0])
            self.mbarrier.wait(tma_barriers[0], phase=phase)
            phase ^= 1  # the single barrier completes once per K-tile, so its parity alternates
            self.wgmma.fence()
            self.wgmma.mma(sa, sb.transpose(), acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            # wait_group only covers this warp's share of the warpgroup's reads: the whole block must be done with
            # the stage before the next iteration's TMA overwrites it.
            self.sync()

        casted_acc = self.cast(acc, dtype=float16)
        gc = self.global_view(c_ptr, dtype=float16, shape=[m_size, n_size])
        self.store_global(gc, casted_acc, offsets=[offset_m, offset_n])


if __name__ == "__main__":
    check_matmul(MatmulWGMMAV1())
