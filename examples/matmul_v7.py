"""V7: V5 in clusters of two blocks that share the B tile through TMA multicast.

C = A @ B^T with A [M, K], B [N, K] and C [M, N] in float16, as in V3 to V5. The two blocks of a cluster are
neighbours along M (blockIdx.x 2c and 2c + 1): they compute the C tiles at the same N offset, so they read the same
B tile of every K step. In V5 each block loads it; here rank 0 loads it once and TMA multicast writes it into the
shared memory of both blocks, halving B's traffic from L2. Each block still loads its own A tile.

What the cluster changes in V5's pipeline:

- A stage of a block is full when its own A tile and the multicast B tile have landed: each block expects the bytes
  of both on its own "full" barrier (rank 0's multicast completes B's bytes on the full barrier of each block).
- A stage may be refilled only when the consumers of both blocks are done with it, since rank 0 writes B into both.
  So each consumer thread releases a stage on the "empty" barrier of both blocks (``cta=rank``: one remote arrival
  through distributed shared memory), and an empty barrier counts the consumers of the two blocks.
- ``cluster_sync()`` after the barriers are created: no block signals its partner's barriers before they exist.
- ``cluster_sync()`` at the end: no block exits (and frees its barriers) while its partner may still arrive on them.
  This replaces V5's producer drain.

The grid has an even number of blocks along M (a cluster needs both); a block whose rows lie past M loads zeros and
stores nothing, but still takes part in its cluster's pipeline.

Run ``python examples/matmul_v7.py`` to check it against numpy (on the emulator when there is no Hopper GPU).
"""

import warpspec
from warpspec import cdiv, float16, float32, int32

from example_support import check_matmul

CONSUMER_THREADS = 256  # two warpgroups
PRODUCER_BEGIN = CONSUMER_THREADS  # the producer warp follows them: warpgroups must start at multiples of 128
CLUSTER = 2  # blocks per cluster, along M


@warpspec.autotune("num_stages", [3, 4])
@warpspec.autotune("block_m, block_n", [[128, 128], [128, 256], [256, 128]])
@warpspec.autotune("block_k", [64])
class MatmulWGMMAV7(warpspec.Script):
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
        self.attrs.blocks = [CLUSTER * cdiv(m_size, CLUSTER * self.block_m), cdiv(n_size, self.block_n)]
        self.attrs.cluster_blocks = [CLUSTER]
        self.attrs.warps = 9

        block_m, block_n, block_k = self.block_m, self.block_n, self.block_k
        offset_m: int32 = block_m * self.blockIdx.x
        offset_n: int32 = block_n * self.blockIdx.y  # the same in both blocks of a cluster: they share B

        ga = self.global_view(a_ptr, dtype=float16, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float16, shape=[n_size, k_size])
        sa = self.shared_tensor(dtype=float16, shape=[self.num_stages, block_m, block_k])
        sb = self.shared_tensor(dtype=float16, shape=[self.num_stages, block_n, block_k])
        acc = self.register_tensor(dtype=float32, shape=[block_m, block_n], init=0.0)
        # Full: this block's arrive_and_expect_tx plus its A bytes and the multicast B bytes. Empty: every consumer
        # thread of both blocks, because rank 0 refills B in both.
        pipe = warpspec.Pipeline(self.num_stages, producer_arrivals=1, consumer_arrivals=CLUSTER * CONSUMER_THREADS)
        self.cluster_sync()  # the partner's barriers exist before any block signals them

        with self.thread_group(thread_begin=PRODUCER_BEGIN, num_threads=32):
            for offset_k in self.range(0, k_size, block_k, unroll=self.num_stages):
                pipe.producer_acquire()
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(
                        pipe.producer_barrier(),
                        transaction_bytes=sa[pipe.producer_stage].nbytes + sb[pipe.producer_stage].nbytes,
                    )
                self.tma.global_to_shared(
                    src=ga,
                    dst=sa[pipe.producer_stage],
                    offsets=[offset_m, offset_k],
                    mbarrier=pipe.producer_barrier(),
                )
                if self.cluster_rank == 0:
                    self.tma.global_to_shared(
                        src=gb,
                        dst=sb[pipe.producer_stage],
                        offsets=[offset_n, offset_k],
                        mbarrier=pipe.producer_barrier(),
                        multicast=list(range(CLUSTER)),
                    )
                pipe.producer_advance()

        with self.thread_group(thread_begin=0, num_threads=CONSUMER_THREADS):
            for offset_k in self.range(0, k_size, block_k, unroll=self.num_stages):
                pipe.consumer_acquire()
                self.wgmma.fence()
                self.wgmma.mma(sa[pipe.consumer_stage], sb[pipe.consumer_stage].transpose(), acc)
                self.wgmma.commit_group()
                self.wgmma.wait_group(1)  # the previous K-tile's group is done reading its stage: release that one
                if offset_k > 0:
                    self.release(pipe, self.previous(pipe.consumer_stage))
                pipe.consumer_advance()
            self.wgmma.wait_group(0)  # the last group; consumer_advance moved past its stage
            self.release(pipe, self.previous(pipe.consumer_stage))
            self.sync()
            casted_acc = self.cast(acc, dtype=float16)
            gc = self.global_view(c_ptr, dtype=float16, shape=[m_size, n_size])
            self.store_global(gc, casted_acc, offsets=[offset_m, offset_n])

        self.cluster_sync()  # no block exits while its partner may still arrive on its barriers

    def release(self, pipe, stage):
        """Every consumer thread frees ``stage`` in both blocks of the cluster."""
        for rank in range(CLUSTER):
            self.mbarrier.arrive(pipe.empty_barriers[stage], cta=rank)

    def previous(self, stage):
        """The stage before ``stage`` in the ring."""
        return (stage + self.num_stages - 1) % self.num_stages


if __name__ == "__main__":
    check_matmul(MatmulWGMMAV7(), k=320)
