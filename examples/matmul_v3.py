"""The seed tutorial's warp-specialized Hopper matmul (V3), exactly as written there; only imports were added.

C = A @ B^T with A [M, K], B [N, K] and C [M, N] in float16: one TMA producer warp (threads 128-159) fills a ring of
shared-memory stages while one consumer warpgroup (threads 0-127) runs WGMMA on them.
"""

import warpspec as tilus
from warpspec import cdiv, float16, float32, int32, uint32


@tilus.autotune("num_stages", [2, 3, 4, 5, 6, 7])
@tilus.autotune(
    "block_m, block_n", [[128, 64], [128, 128], [128, 256], [256, 128], [256, 256]]
)
@tilus.autotune("block_k", [16, 32, 64])
class MatmulWGMMAV3(tilus.Script):
    def __init__(
        self,
        num_stages,
        block_m,
        block_n,
        block_k,
    ):
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
        self.attrs.blocks = [
            cdiv(m_size, self.block_m),
            cdiv(n_size, self.block_n),
        ]
        self.attrs.warps = 5

        block_m, block_n, block_k = self.block_m, self.block_n, self.block_k
        offset_m: int32 = block_m * self.blockIdx.x
        offset_n: int32 = block_n * self.blockIdx.y

        ga = self.global_view(a_ptr, dtype=float16, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float16, shape=[n_size, k_size])
        sa = self.shared_tensor(dtype=float16, shape=[self.num_stages, block_m, block_k])
        sb = self.shared_tensor(dtype=float16, shape=[self.num_stages, block_n, block_k])
        acc = self.register_tensor(dtype=float32, shape=[block_m, block_n], init=0.0)

        consumer_barriers = self.mbarrier.alloc(
            counts=[1 for _ in range(self.num_stages)]
        )
        producer_barriers = self.mbarrier.alloc(
            counts=[128 for _ in range(self.num_stages)]
        )

        with self.thread_group(thread_begin=128, num_threads=32):
            stage: int32 = 0
            producer_phases = self.register_tensor(
                dtype=uint32, shape=[self.num_stages], init=1
            )
            for offset_k in self.range(0, k_size, block_k, unroll=self.num_stages):
                self.mbarrier.wait(producer_barriers[stage], phase=producer_phases[stage])
                producer_phases[stage] ^= 1
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(
                        consumer_barriers[stage],
                        transaction_bytes=sa[stage].nbytes + sb[stage].nbytes,
                    )
                    self.tma.global_to_shared(
                        src=ga,
                        dst=sa[stage],
                        offsets=[offset_m, offset_k],
                        mbarrier=consumer_barriers[stage],
                    )
                    self.tma.global_to_shared(
                        src=gb,
                        dst=sb[stage],
                        offsets=[offset_n, offset_k],
                        mbarrier=consumer_barriers[stage],
                    )
                stage = (stage + 1) % self.num_stages

            for _ in self.range(min(self.num_stages, cdiv(k_size, self.block_k))):
                self.mbarrier.wait(
                    producer_barriers[stage], phase=producer_phases[stage]
                )  # wait until the stage is ready to be filled
                producer_phases[stage] ^= 1
                stage = (stage + 1) % self.num_stages

        with self.thread_group(thread_begin=0, num_threads=128):
            consumer_phases = self.register_tensor(
                dtype=uint32, shape=[self.num_stages], init=0
            )
            stage: int32 = 0
            for offset_k in self.range(0, k_size, block_k, unroll=self.num_stages):
                self.mbarrier.wait(consumer_barriers[stage], phase=consumer_phases[stage])
                consumer_phases[stage] ^= 1
                self.wgmma.fence()
                self.wgmma.mma(sa[stage], sb[stage].transpose(), acc)
                self.wgmma.commit_group()
                self.wgmma.wait_group(0)
                self.mbarrier.arrive(producer_barriers[stage])
                stage = (stage + 1) % self.num_stages
            self.sync()
            casted_acc = self.cast(acc, dtype=float16)
            gc = self.global_view(c_ptr, dtype=float16, shape=[m_size, n_size])
            self.store_global(gc, casted_acc, offsets=[offset_m, offset_n])
