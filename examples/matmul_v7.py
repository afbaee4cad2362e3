"""V7: V6's cooperative schedule in clusters of two blocks that share the B tile through TMA multicast.

C = A @ B^T with A [M, K], B [N, K] and C [M, N] in float16, as in V3-V6. The two blocks of a cluster (ranks 0 and
1) always compute vertically adjacent C tiles, rows ``2 i`` and ``2 i + 1`` of tiles at the same column ``j``, so
they read the same B tile at every K step. In V6 each block loads it; here rank 0 loads it once and TMA multicast
writes it into the shared memory of both blocks, halving B's traffic from L2. Each block still loads its own A.

Everything else is V6's cooperative schedule (it is a subclass: persistent blocks, grouped rasterization,
``setmaxnreg``, the TMA-store epilogue under the next tile), with these changes:

- **A cluster tile scheduler.** The persistent walk is over cluster tiles (a pair of tile rows at one column): the
  cluster ``blockIdx.x // 2`` takes cluster tiles ``c, c + clusters, ...`` in V6's grouped order, and rank r takes
  tile row ``2 i + r`` of each. The grid is at most ``num_sms`` blocks, an even number.
- **Full stages** expect the bytes of both tiles on each block's own barrier: its A and the multicast B (rank 0's
  multicast completes B's bytes on the "full" barrier of each destination).
- **Empty stages** are released in both blocks' names on rank 0: rank 0 refills B in both, so a stage is free there
  only when both blocks are done with it. The consumers release a stage in their own block only, one arrival per
  warpgroup as in V6. Rank 1's producer, which waits for its own consumers anyway, forwards each release to rank
  0's barrier (``cta=0``, a remote arrival through distributed shared memory) when it next acquires the stage,
  and arrives on its own barrier in place of that forward, so both blocks' empty barriers count three arrivals.
  A remote arrival orders everything before it at cluster scope (``mbarrier.arrive.release.cluster``, a full
  memory barrier in the issuing thread): made by the consumers, as V7 first did, it stalled a consumer warpgroup
  at every K step; made by a producer thread that has written nothing, it costs that thread alone.
- **Two cluster barriers.** ``cluster_sync()`` after the barriers are created (no block signals its partner's
  barriers before they exist) and at the end (no block exits, freeing its barriers, while its partner may still
  arrive on them), which replaces V6's producer drain.

A block whose rows lie past M (M not a multiple of ``2 * block_m``) loads zeros and stores nothing, but still
takes part in its cluster's pipeline.

Run ``python examples/matmul_v7.py`` to check it against numpy (on the emulator when there is no Hopper GPU).
"""

import warpspec
from warpspec import cdiv, float16, int32

from example_support import check_matmul
from matmul_v6 import (CONSUMER_REGISTERS, CONSUMER_THREADS, NUM_SMS, PRODUCER_BEGIN, PRODUCER_REGISTERS, WARPGROUP,
                       MatmulWGMMAV6)

CLUSTER = 2  # blocks per cluster, along M
CONSUMER_WARPGROUPS = CONSUMER_THREADS // WARPGROUP


@warpspec.autotune("num_stages, block_m, block_n, epilogue_n", [
    [3, 128, 256, 256],
    [4, 128, 256, 64],  # V6's chunked epilogue: a fourth stage gives the forwarded releases more time
    [3, 256, 128, 128],
    [4, 128, 128, 128],
    [5, 128, 128, 128],
])
class MatmulWGMMAV7(MatmulWGMMAV6):
    """V6 cooperative in 2-block clusters multicasting B; the runtime ``num_sms`` bounds the grid."""

    def __init__(self, num_stages, block_m, block_n, epilogue_n, block_k=64):
        # epilogue_n = block_n: the tile stored whole; fewer: in chunks of that many columns (V6's chunked epilogue)
        super().__init__("cooperative", num_stages, block_m, block_n, epilogue_n, block_k)

    def __call__(
        self,
        m_size: int32,
        n_size: int,
        k_size: int,
        a_ptr: ~float16,
        b_ptr: ~float16,
        c_ptr: ~float16,
        num_sms: int32 = NUM_SMS,
    ):
        block_m, block_n, block_k = self.block_m, self.block_n, self.block_k
        pair_rows = cdiv(m_size, CLUSTER * block_m)  # rows of cluster tiles
        tiles_n = cdiv(n_size, block_n)
        num_pairs = pair_rows * tiles_n
        self.attrs.blocks = [CLUSTER * min(num_pairs, num_sms // CLUSTER)]
        self.attrs.cluster_blocks = [CLUSTER]
        self.attrs.warps = (CONSUMER_THREADS + WARPGROUP) // 32

        ga = self.global_view(a_ptr, dtype=float16, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float16, shape=[n_size, k_size])
        gc = self.global_view(c_ptr, dtype=float16, shape=[m_size, n_size])
        sa = self.shared_tensor(dtype=float16, shape=[self.num_stages, block_m, block_k])
        sb = self.shared_tensor(dtype=float16, shape=[self.num_stages, block_n, block_k])
        sc = self.shared_tensor(dtype=float16, shape=[self.epilogue_buffers, block_m, self.epilogue_n])
        # Full: this block's arrive_and_expect_tx plus its A bytes and the multicast B bytes. Empty: one arrival per
        # consumer warpgroup of this block, plus on rank 0 rank 1's forwarded release (rank 0 refills B in both)
        # and on rank 1 its producer's own arrival in its place.
        pipe = warpspec.Pipeline(self.num_stages, producer_arrivals=1, consumer_arrivals=CONSUMER_WARPGROUPS + 1)
        self.cluster_sync()  # the partner's barriers exist before any block signals them

        with self.thread_group(thread_begin=PRODUCER_BEGIN, num_threads=WARPGROUP, max_registers=PRODUCER_REGISTERS):
            with self.thread_group(thread_begin=PRODUCER_BEGIN, num_threads=32):
                self.produce(pipe, ga, gb, sa, sb, k_size, num_pairs, pair_rows, tiles_n)

        with self.thread_group(thread_begin=0, num_threads=CONSUMER_THREADS, max_registers=CONSUMER_REGISTERS):
            first, step = self.tile_walk(0, 1)
            for pair in self.range(first, num_pairs, step):
                offset_m, offset_n = self.cluster_tile_offsets(pair, pair_rows, tiles_n)
                acc = self.mainloop(pipe, sa, sb, k_size)
                self.epilogue(acc, sc, gc, offset_m, offset_n)
            self.finish_stores()

        self.cluster_sync()  # no block exits while its partner may still arrive on its barriers

    def tile_walk(self, consumer, consumers):
        """The cluster tile scheduler: this cluster's first cluster tile and the step of its walk (both blocks of a
        cluster walk the same sequence)."""
        cluster = self.blockIdx.x // CLUSTER
        clusters = self.gridDim.x // CLUSTER
        return cluster + consumer * clusters, consumers * clusters

    def cluster_tile_offsets(self, pair, pair_rows, tiles_n):
        """This block's output offsets in cluster tile ``pair``: V6's grouped order over cluster tiles, then this
        block's row of the pair."""
        pair_m, offset_n = self.tile_offsets(pair, pair_rows, tiles_n)  # pair_m = block_m * (cluster tile row)
        return CLUSTER * pair_m + self.cluster_rank * self.block_m, offset_n

    def produce(self, pipe, ga, gb, sa, sb, k_size, num_pairs, pair_rows, tiles_n):
        """The producer warp: every K-tile of every cluster tile of this cluster, into the ring: this block's A,
        and on rank 0 the pair's B, multicast into both blocks."""
        first, step = self.tile_walk(0, 1)
        fills: int32 = 0  # stages this producer acquired so far
        for pair in self.range(first, num_pairs, step):
            offset_m, offset_n = self.cluster_tile_offsets(pair, pair_rows, tiles_n)
            for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
                pipe.producer_acquire()
                if self.cluster_rank != 0:
                    with self.single_thread():
                        self.forward_release(pipe.empty_barriers[pipe.producer_stage], fills >= self.num_stages)
                fills = fills + 1
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(
                        pipe.producer_barrier(),
                        transaction_bytes=sa[pipe.producer_stage].nbytes + sb[pipe.producer_stage].nbytes,
                    )
                self.tma.global_to_shared(src=ga, dst=sa[pipe.producer_stage], offsets=[offset_m, offset_k],
                                          mbarrier=pipe.producer_barrier())
                if self.cluster_rank == 0:
                    self.tma.global_to_shared(src=gb, dst=sb[pipe.producer_stage], offsets=[offset_n, offset_k],
                                              mbarrier=pipe.producer_barrier(), multicast=list(range(CLUSTER)))
                pipe.producer_advance()

    def forward_release(self, empty, filled_before):
        """Rank 1's producer, having acquired the stage of "empty" barrier ``empty`` (its consumers released the
        stage's last fill): pass that release on to rank 0's barrier, which counts it with rank 0's own consumers
        (``filled_before``: the stage was filled before, so there is a release to pass on), then arrive on its own
        barrier in place of the forward rank 0 gets, so that both count three arrivals per phase."""
        if filled_before:
            self.mbarrier.arrive(empty, cta=0)
        self.mbarrier.arrive(empty)

if __name__ == "__main__":
    check_matmul(MatmulWGMMAV7(), k=320)
