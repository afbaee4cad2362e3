"""A planted bug that only a rare interleaving shows: random schedules (``WARPSPEC_EMULATOR_SEED``) miss it, the
deterministic one too, and ``warpspec.emulator.prove`` finds it.

``CopyWithLaggingMonitor`` is the double-buffered TMA copy (producer warp 0, consumer warp 1) with a monitor warp
that follows the consumer's progress: after each tile's TMA store has completed, the consumer arrives on
``progress``, and the monitor waits on it with the tile's parity, then keeps a tally in shared memory (a few
stores). Nothing makes the consumer wait for the monitor, and a phase must be waited on before the next one is
arrived on: if the monitor does not run (still tallying, or woken but not yet scheduled) while the consumer
finishes two more tiles, their copies completing early enough, the consumer's second arrival starts a phase nobody
waited on: a ``BarrierError`` at the arrival (marker ``progress-arrive``). A random schedule runs every ready
partition each round, so the monitor falls that far behind in few of them: seeds 0..199 all pass. The fix is a
second barrier on which the monitor hands each phase back, as ``empty`` does for ``full``.

A line a test names ends with ``# <<< marker``; ``marker_line`` finds it.
"""

from warpspec import Script, cdiv, float16, float32, int32, uint32
from tests.support.markers import markers_of

#: Stores of the monitor's tally per tile: each is a point where a schedule may switch away from the monitor.
TALLY_STORES = 4


class CopyWithLaggingMonitor(Script):
    def __init__(self, tile_m=64, tile_n=64):
        super().__init__()
        self.tile_m = tile_m
        self.tile_n = tile_n

    def __call__(self, m_size: int32, n_size: int32, src_ptr: ~float16, dst_ptr: ~float16):
        self.attrs.blocks = [cdiv(m_size, self.tile_m)]
        self.attrs.warps = 3
        offset_m: int32 = self.tile_m * self.blockIdx.x
        num_tiles: int32 = cdiv(n_size, self.tile_n)
        src = self.global_view(src_ptr, dtype=float16, shape=[m_size, n_size])
        dst = self.global_view(dst_ptr, dtype=float16, shape=[m_size, n_size])
        buffers = self.shared_tensor(dtype=float16, shape=[2, self.tile_m, self.tile_n])
        tally = self.shared_tensor(dtype=float32, shape=[32, 4])
        full = self.mbarrier.alloc(counts=[1, 1])
        empty = self.mbarrier.alloc(counts=[1, 1])
        progress = self.mbarrier.alloc(counts=[1])
        with self.thread_group(thread_begin=0, num_threads=32):
            for tile in self.range(num_tiles):
                buffer: int32 = tile % 2
                lap_parity: uint32 = (tile // 2) & 1
                self.mbarrier.wait(empty[buffer], phase=lap_parity ^ 1)
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(full[buffer], transaction_bytes=buffers[buffer].nbytes)
                    self.tma.global_to_shared(src=src, dst=buffers[buffer], offsets=[offset_m, tile * self.tile_n],
                                              mbarrier=full[buffer])
        with self.thread_group(thread_begin=32, num_threads=32):
            for tile in self.range(num_tiles):
                buffer: int32 = tile % 2
                lap_parity: uint32 = (tile // 2) & 1
                self.mbarrier.wait(full[buffer], phase=lap_parity)
                with self.single_thread():
                    self.tma.shared_to_global(src=buffers[buffer], dst=dst, offsets=[offset_m, tile * self.tile_n])
                    self.tma.commit_group()
                    self.tma.wait_group(0)
                    self.mbarrier.arrive(empty[buffer])
                    self.mbarrier.arrive(progress[0])  # <<< progress-arrive
        with self.thread_group(thread_begin=64, num_threads=32):
            count = self.register_tensor(dtype=float32, shape=[32, 4], init=0.0)
            for tile in self.range(num_tiles):
                self.mbarrier.wait(progress[0], phase=tile & 1)  # <<< progress-wait
                for _ in range(TALLY_STORES):
                    count = count + 1.0
                    self.store_shared(tally, count)


marker_line = markers_of(__file__)
