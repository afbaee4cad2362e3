"""examples/matmul_v6.py with one bug planted per class, for tests/test_matmul_v6.py.

Each class overrides the one helper of ``MatmulWGMMAV6`` that it breaks. A line that an error must name ends with a
marker comment ``# <<< name``; ``marker_line(name)`` finds its number.
"""

from warpspec import float16, uint32
from matmul_v6 import MatmulWGMMAV6
from markers import markers_of


marker_line = markers_of(__file__)


class SchedulerRepeatsTiles(MatmulWGMMAV6):
    """The walk steps one block too few: the last block's tiles are also an earlier block's."""

    def tile_walk(self, consumer, consumers):
        return self.blockIdx.x + consumer * self.gridDim.x, consumers * self.gridDim.x - 1  # <<< repeat-step


class SchedulerSkipsTiles(MatmulWGMMAV6):
    """The walk steps one tile too far: every block jumps over a tile that no other block takes."""

    def tile_walk(self, consumer, consumers):
        return self.blockIdx.x + consumer * self.gridDim.x, consumers * self.gridDim.x + 1  # <<< skip-step


class EpilogueReusesBuffer(MatmulWGMMAV6):
    """The epilogue writes its buffer without waiting for the previous tile's TMA store to have read it."""

    def epilogue(self, acc, sc, gc, offset_m, offset_n):
        self.store_shared(sc, self.cast(acc, dtype=float16))  # <<< reuse-store
        self.fence_proxy_async()
        self.sync()
        with self.single_thread():
            self.tma.shared_to_global(src=sc, dst=gc, offsets=[offset_m, offset_n])
            self.tma.commit_group()


class EpilogueWithoutFence(MatmulWGMMAV6):
    """The TMA store reads ordinary shared stores that no ``fence_proxy_async`` made visible to the async proxy."""

    def epilogue(self, acc, sc, gc, offset_m, offset_n):
        with self.single_thread():
            self.tma.wait_group(0)
        self.sync()
        self.store_shared(sc, self.cast(acc, dtype=float16))
        self.sync()
        with self.single_thread():
            self.tma.shared_to_global(src=sc, dst=gc, offsets=[offset_m, offset_n])  # <<< unfenced-store
            self.tma.commit_group()


class PingPongWithoutOrder(MatmulWGMMAV6):
    """Ping-pong without its ordering barrier: warpgroup 1 waits on the ring's "full" barriers while they are still
    a lap behind the stages it wants."""

    def consume_pingpong(self, wg, pipe, turns, sa, sb, sc, gc, k_size, num_tiles, tiles_m, tiles_n):
        k_tiles = (k_size + self.block_k - 1) // self.block_k
        if wg == 1:
            self.skip_stages(pipe, k_tiles)
        first, step = self.tile_walk(wg, 2)
        for tile in self.range(first, num_tiles, step):
            offset_m, offset_n = self.tile_offsets(tile, tiles_m, tiles_n)
            acc = self.mainloop(pipe, sa, sb, k_size)  # <<< unordered-mainloop
            self.skip_stages(pipe, k_tiles)
            self.epilogue(acc, sc, gc, offset_m, offset_n)
        self.finish_stores()
