"""V4: the warp-specialized matmul written with ``warpspec.Pipeline`` and two consumer warpgroups.

C = A @ B^T with A [M, K], B [N, K] and C [M, N] in float16, as in V3. Two changes from V3:

- The output tile is computed by two consumer warpgroups (threads 0-255): one ``wgmma.mma`` over the whole
  [block_m, block_n] accumulator gives each warpgroup its own half of the rows, and both read the same B tile.
- The barrier bookkeeping lives in a ``Pipeline`` object that owns each role's stage and phase: the producer warp
  (threads 256-287) calls ``producer_acquire`` (wait for an empty stage), fills it with copies that complete on
  ``producer_barrier()``, then ``producer_advance``; the consumers call ``consumer_acquire`` (wait for a full stage),
  run WGMMA, ``consumer_release`` (all 256 threads arrive on the "empty" barrier) and ``consumer_advance``. Nobody
  computes a parity by hand.

Run ``python examples/matmul_v4.py`` to check it against numpy (on the emulator when there is no Hopper GPU).
"""

import warpspec
from warpspec import cdiv, float16, float32, int32

from example_support import check_matmul

CONSUMER_THREADS = 256  # two warpgroups
PRODUCER_BEGIN = CONSUMER_THREADS  # the producer warp follows them: warpgroups must start at multiples of 128


@warpspec.autotune("num_stages", [2, 3, 4])
@warpspec.autotune("block_m, block_n", [[128, 64], [128, 128], [256, 128]])
@warpspec.autotune("block_k", [16, 32, 64])
class MatmulWGMMAV4(warpspec.Script):
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
        self.attrs.warps = 9

        block_m, block_n, block_k = self.block_m, self.block_n, self.block_k
        offset_m: int32 = block_m * self.blockIdx.x
        offset_n: int32 = block_n * self.blockIdx.y

        ga = self.global_view(a_ptr, dtype=float16, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float16, shape=[n_size, k_size])
        sa = self.shared_tensor(dtype=float16, shape=[self.num_stages, block_m, block_k])
        sb = self.shared_tensor(dtype=float16, shape=[self.num_stages, block_n, block_k])
        acc = self.register_tensor(dtype=float32, shape=[block_m, block_n], init=0.0)
        # A stage is full after one arrive_and_expect_tx plus its TMA bytes, empty after every consumer thread
        # arrived on it.
        pipe = warpspec.Pipeline(self.num_stages, producer_arrivals=1, consumer_arrivals=CONSUMER_THREADS)

        with self.thread_group(thread_begin=PRODUCER_BEGIN, num_threads=32):
            for offset_k in self.range(0, k_size, block_k, unroll=self.num_stages):
                pipe.producer_acquire()
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(
                        pipe.producer_barrier(),
                        transaction_bytes=sa[pipe.producer_stage].nbytes + sb[pipe.producer_stage].nbytes,
                    )
                # A one-warp group issues TMA from one elected lane.
                self.tma.global_to_shared(
                    src=ga,
                    dst=sa[pipe.producer_stage],
                    offsets=[offset_m, offset_k],
                    mbarrier=pipe.producer_barrier(),
                )
                self.tma.global_to_shared(
                    src=gb,
                    dst=sb[pipe.producer_stage],
                    offsets=[offset_n, offset_k],
                    mbarrier=pipe.producer_barrier(),
                )
                pipe.producer_advance()
            # Drain: stay until the consumers released every stage that was filled, so their arrivals never target
            # a barrier whose waiter has exited (fewer stages were filled when K has fewer tiles than stages).
            for _ in self.range(min(self.num_stages, cdiv(k_size, block_k))):
                pipe.producer_acquire()
                pipe.producer_advance()

        with self.thread_group(thread_begin=0, num_threads=CONSUMER_THREADS):
            self.consume(pipe, sa, sb, acc, k_size)
            self.sync()
            casted_acc = self.cast(acc, dtype=float16)
            gc = self.global_view(c_ptr, dtype=float16, shape=[m_size, n_size])
            self.store_global(gc, casted_acc, offsets=[offset_m, offset_n])

    def consume(self, pipe, sa, sb, acc, k_size):
        """The consumers' main loop: accumulate every K-tile's WGMMA into ``acc``, releasing each stage."""
        for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
            pipe.consumer_acquire()
            self.wgmma.fence()
            self.wgmma.mma(sa[pipe.consumer_stage], sb[pipe.consumer_stage].transpose(), acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)  # the tensor cores are done reading the stage: only now release it
            pipe.consumer_release()
            pipe.consumer_advance()


if __name__ == "__main__":
    check_matmul(MatmulWGMMAV4())
