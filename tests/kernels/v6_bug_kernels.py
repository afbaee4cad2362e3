"""examples/matmul_v6.py with one bug planted per class, for tests/test_matmul_v6.py.

Each class overrides the one helper of ``MatmulWGMMAV6`` that it breaks. A line that an error must name ends with a
marker comment ``# <<< name``; ``marker_line(name)`` finds its number.
"""

import warpspec
from warpspec import float16, float32
from matmul_v6 import MatmulWGMMAV6
from tests.support.markers import markers_of


marker_line = markers_of(__file__)


class SchedulerRepeatsTiles(MatmulWGMMAV6):
    """The walk steps one block too few: the last block's tiles are also an earlier block's."""

    def tile_walk(self, consumer, consumers):
        return self.blockIdx.x + consumer * self.gridDim.x, consumers * self.gridDim.x - 1  # <<< repeat-step


@warpspec.autotune("variant, num_stages, block_m, block_n, epilogue_n", [["cooperative", 4, 128, 128, 128]])
class SchedulerSkipsTiles(MatmulWGMMAV6):
    """The walk steps one tile too far: every block jumps over a tile that no other block takes."""

    def tile_walk(self, consumer, consumers):
        return self.blockIdx.x + consumer * self.gridDim.x, consumers * self.gridDim.x + 1  # <<< skip-step


class EpilogueReusesBuffer(MatmulWGMMAV6):
    """The epilogue writes its buffer without waiting for the previous tile's TMA store to have read it."""

    def epilogue(self, acc, sc, gc, offset_m, offset_n):
        self.store_shared(sc[0], self.cast(acc, dtype=float16))  # <<< reuse-store
        self.fence_proxy_async()
        self.sync()
        with self.single_thread():
            self.tma.shared_to_global(src=sc[0], dst=gc, offsets=[offset_m, offset_n])
            self.tma.commit_group()


class ChunkWaitTooLoose(MatmulWGMMAV6):
    """The chunked epilogue lets as many stores stay in flight as it has chunk buffers (``wait_group(2)`` for two):
    the store that last read a buffer may still be reading it when the next chunk is written there."""

    def epilogue(self, acc, sc, gc, offset_m, offset_n):
        out = self.cast(acc, dtype=float16)
        buffers = self.epilogue_buffers
        for chunk in range(self.block_n // self.epilogue_n):
            column = chunk * self.epilogue_n
            with self.single_thread():
                self.tma.wait_group(buffers)
            self.sync()
            self.store_shared(sc[chunk % buffers], out, column=column)  # <<< loose-chunk-store
            self.fence_proxy_async()
            self.sync()
            with self.single_thread():
                self.tma.shared_to_global(src=sc[chunk % buffers], dst=gc, offsets=[offset_m, offset_n + column])
                self.tma.commit_group()


class ChunkOutsideTile(MatmulWGMMAV6):
    """The last chunk's column window starts a chunk too late and reaches past the tile."""

    def epilogue(self, acc, sc, gc, offset_m, offset_n):
        self.store_shared(sc[0], self.cast(acc, dtype=float16), column=self.block_n - 32)  # <<< outside-chunk


class EpilogueWithoutFence(MatmulWGMMAV6):
    """The TMA store reads ordinary shared stores that no ``fence_proxy_async`` made visible to the async proxy."""

    def epilogue(self, acc, sc, gc, offset_m, offset_n):
        with self.single_thread():
            self.tma.wait_group(0)
        self.sync()
        self.store_shared(sc[0], self.cast(acc, dtype=float16))
        self.sync()
        with self.single_thread():
            self.tma.shared_to_global(src=sc[0], dst=gc, offsets=[offset_m, offset_n])  # <<< unfenced-store
            self.tma.commit_group()


class EpilogueWithoutSync(MatmulWGMMAV6):
    """No sync between the consumers' shared stores and the TMA store: in the cooperative schedule the storing
    thread is warpgroup 0's, and warpgroup 1's rows are not ordered before its read."""

    def epilogue(self, acc, sc, gc, offset_m, offset_n):
        with self.single_thread():
            self.tma.wait_group(0)
        self.sync()
        self.store_shared(sc[0], self.cast(acc, dtype=float16))
        self.fence_proxy_async()
        with self.single_thread():
            self.tma.shared_to_global(src=sc[0], dst=gc, offsets=[offset_m, offset_n])  # <<< unsynced-store
            self.tma.commit_group()


class ReleaseBeforeWait(MatmulWGMMAV6):
    """Each warpgroup's one arrival comes before its ``wgmma.wait_group``: the stage goes back to the producer while
    the warpgroup's WGMMAs may still read it."""

    def mainloop(self, pipe, sa, sb, k_size, turn=None):
        acc = self.register_tensor(dtype=float32, shape=[self.block_m, self.block_n], init=0.0)
        for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
            pipe.consumer_acquire()
            self.wgmma.fence()
            self.wgmma.mma(sa[pipe.consumer_stage], sb[pipe.consumer_stage].transpose(), acc)
            self.wgmma.commit_group()
            self.release_stage(pipe.empty_barriers[pipe.consumer_stage])  # <<< early-release
            self.wgmma.wait_group(0)
            pipe.consumer_advance()
        if turn is not None:
            self.mbarrier.arrive(turn)
        return acc


class ReleaseOnceForBothWarpgroups(MatmulWGMMAV6):
    """Cooperative: one thread releases each stage for both warpgroups (an "empty" count of 1), after only its own
    warpgroup's ``wgmma.wait_group``: warpgroup 1's WGMMAs may still read the stage."""

    def release_arrivals(self):
        return 1

    def release_stage(self, empty):
        with self.single_thread():
            self.mbarrier.arrive(empty)  # <<< one-release


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
