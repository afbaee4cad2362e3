"""V6: persistent blocks, a tile scheduler with grouped rasterization, ``setmaxnreg`` and a TMA-store epilogue.

C = A @ B^T with A [M, K], B [N, K] and C [M, N] in float16, as in V3-V5. V5 launches one block per output tile,
so every block pays its prologue (barrier set-up, the first TMA loads' latency) and its epilogue (the store of C)
with the tensor cores idle. V6 changes four things:

* **Persistent blocks.** The grid is at most one block per SM (``num_sms``, 132 on the H200); each block walks the
  tiles ``blockIdx.x, blockIdx.x + gridDim.x, ...`` with a runtime-step loop. The producer walks the same tile
  sequence as the consumers, so the Pipeline's stages and phases simply continue from one tile to the next: the
  producer fills the next tile's first stages while the consumers finish the current one.
* **Grouped rasterization.** Consecutive tile indices walk ``GROUP_M`` tile rows of one band of columns before
  moving to the next band, so the blocks running at one time share B tiles (and A tiles) in L2.
* **``setmaxnreg``.** The producer warpgroup drops to 40 registers per thread and the two consumer warpgroups take
  232, which lets each consumer thread hold a 128x128 float32 accumulator fragment (128 registers) without spills.
* **A TMA-store epilogue overlapped with the next tile.** The accumulator is cast to float16, written to a shared
  epilogue buffer, fenced for the async proxy and stored with a TMA store; its bulk group is only waited for
  (``tma.wait_group``) when the buffer is about to be written again, so the store runs under what follows. With
  ``epilogue_n`` below ``block_n`` the tile goes out in column chunks of ``epilogue_n`` through two chunk buffers
  taking turns (``tma.wait_group(1)`` before one is rewritten lets the other's store run on): 128x256 needs 64 KB
  for a whole-tile buffer but 32 KB for two 128x64 chunks, which is what lets a fourth 48 KB stage fit.

Each consumer warpgroup hands a stage back with one ``mbarrier.arrive`` by one of its threads, after its own
``wgmma.wait_group`` (WGMMA completion is warpgroup-wide), as CUTLASS does: the "empty" barriers count one arrival
per warpgroup that reads the stage instead of one per thread (``release="thread"``: the per-thread arrivals, to
measure against).

Two consumer schedules (the compile-time ``variant``):

* ``"cooperative"``: both consumer warpgroups work on one ``block_m x block_n`` tile (``block_m / 2`` rows each)
  and share the epilogue buffer.
* ``"pingpong"``: each consumer warpgroup owns a whole ``block_m x block_n`` tile; the block's tiles alternate
  between them. An ordering barrier pair (``turns``) lets only one warpgroup issue its main loop's WGMMAs at a time,
  so one warpgroup's epilogue runs under the other's MMAs. The barrier also keeps each warpgroup's "full" waits at
  most one phase ahead of the barrier: a warpgroup starts its tile's main loop only after the other acquired every
  stage of the tile before it.

Run ``python examples/matmul_v6.py`` to check it against numpy (on the emulator when there is no Hopper GPU).
"""

import warpspec
from warpspec import cdiv, float16, float32, int32, uint32

from example_support import check_matmul

NUM_SMS = 132  # the H200's SMs: the language does not read the device's count, so the kernel takes it (num_sms)
GROUP_M = 8  # tile rows per rasterization band
CONSUMER_THREADS = 256  # two warpgroups
WARPGROUP = 128
PRODUCER_BEGIN = CONSUMER_THREADS  # the producer warpgroup follows them (setmaxnreg needs whole warpgroups)
PRODUCER_REGISTERS = 40
CONSUMER_REGISTERS = 232


@warpspec.autotune("variant, num_stages, block_m, block_n, epilogue_n", [
    ["cooperative", 3, 128, 256, 256],
    ["cooperative", 4, 128, 256, 64],  # two 128x64 chunk buffers (32 KB) leave room for a fourth stage
    ["cooperative", 3, 256, 128, 128],
    ["cooperative", 4, 256, 128, 32],  # two 256x32 chunk buffers (32 KB)
    ["cooperative", 4, 128, 128, 128],
    ["cooperative", 5, 128, 128, 128],
    ["cooperative", 6, 128, 128, 64],  # two 128x64 chunk buffers (32 KB): 6 x 32 KB stages
    ["pingpong", 4, 128, 128, 128],
    ["pingpong", 5, 128, 128, 128],
    ["pingpong", 3, 64, 256, 256],
    ["pingpong", 4, 64, 256, 256],
])
class MatmulWGMMAV6(warpspec.Script):
    """Persistent warp-specialized GEMM; the runtime ``num_sms`` bounds the grid (one block per SM)."""

    def __init__(self, variant, num_stages, block_m, block_n, epilogue_n, block_k=64, release="warpgroup"):
        super().__init__()
        assert variant in ("cooperative", "pingpong"), f"variant must be cooperative or pingpong, got {variant!r}"
        assert block_n % epilogue_n == 0, f"epilogue_n={epilogue_n} must divide block_n={block_n}"
        assert release in ("warpgroup", "thread"), f"release must be warpgroup or thread, got {release!r}"
        self.variant = variant
        self.num_stages = num_stages
        self.block_m = block_m
        self.block_n = block_n
        self.epilogue_n = epilogue_n
        self.block_k = block_k
        self.release = release
        # One buffer when the tile goes out whole; two taking turns when it goes out in chunks.
        self.epilogue_buffers = 1 if epilogue_n == block_n else 2
        assert block_n // epilogue_n % self.epilogue_buffers == 0, "the chunk buffers take turns over whole tiles"

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
        pingpong = self.variant == "pingpong"
        tiles_m = cdiv(m_size, block_m)
        tiles_n = cdiv(n_size, block_n)
        num_tiles = tiles_m * tiles_n
        self.attrs.blocks = [min(num_tiles, num_sms)]
        self.attrs.warps = (CONSUMER_THREADS + WARPGROUP) // 32

        ga = self.global_view(a_ptr, dtype=float16, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float16, shape=[n_size, k_size])
        gc = self.global_view(c_ptr, dtype=float16, shape=[m_size, n_size])
        sa = self.shared_tensor(dtype=float16, shape=[self.num_stages, block_m, block_k])
        sb = self.shared_tensor(dtype=float16, shape=[self.num_stages, block_n, block_k])
        # Epilogue buffers per tile in flight: the cooperative warpgroups share theirs, ping-pong has its own each.
        sc = self.shared_tensor(dtype=float16, shape=[2 if pingpong else 1, self.epilogue_buffers, block_m,
                                                      self.epilogue_n])
        pipe = warpspec.Pipeline(self.num_stages, producer_arrivals=1, consumer_arrivals=self.release_arrivals())
        # Ping-pong's ordering barriers: turns[w] completes a phase when the other warpgroup finished issuing its
        # main loop, which lets warpgroup w issue its own.
        turns = self.mbarrier.alloc(counts=[WARPGROUP, WARPGROUP]) if pingpong else None

        with self.thread_group(thread_begin=PRODUCER_BEGIN, num_threads=WARPGROUP, max_registers=PRODUCER_REGISTERS):
            with self.thread_group(thread_begin=PRODUCER_BEGIN, num_threads=32):
                self.produce(pipe, ga, gb, sa, sb, k_size, num_tiles, tiles_m, tiles_n)

        with self.thread_group(thread_begin=0, num_threads=CONSUMER_THREADS, max_registers=CONSUMER_REGISTERS):
            if pingpong:
                for wg in range(2):
                    with self.thread_group(thread_begin=wg * WARPGROUP, num_threads=WARPGROUP):
                        self.consume_pingpong(wg, pipe, turns, sa, sb, sc[wg], gc, k_size, num_tiles, tiles_m,
                                              tiles_n)
            else:
                first, step = self.tile_walk(0, 1)
                for tile in self.range(first, num_tiles, step):
                    offset_m, offset_n = self.tile_offsets(tile, tiles_m, tiles_n)
                    acc = self.mainloop(pipe, sa, sb, k_size)
                    self.epilogue(acc, sc[0], gc, offset_m, offset_n)
                self.finish_stores()

    def tile_walk(self, consumer, consumers):
        """The tile scheduler: the first tile index and the step of the walk of consumer ``consumer`` of
        ``consumers`` taking turns in this block. The block's tiles are ``blockIdx.x, blockIdx.x + gridDim.x, ...``;
        ping-pong deals them out to its two warpgroups in turn, the producer and the cooperative pair take all."""
        return self.blockIdx.x + consumer * self.gridDim.x, consumers * self.gridDim.x

    def tile_offsets(self, tile, tiles_m, tiles_n):
        """The output offsets of tile index ``tile`` under grouped rasterization: bands of ``GROUP_M`` tile rows,
        walked column by column, so consecutive tiles reuse one B tile column from L2."""
        band_tiles = GROUP_M * tiles_n
        first_m = tile // band_tiles * GROUP_M
        band_rows = min(tiles_m - first_m, GROUP_M)  # the last band may be shorter
        in_band = tile % band_tiles
        tile_m = first_m + in_band % band_rows
        tile_n = in_band // band_rows
        return self.block_m * tile_m, self.block_n * tile_n

    def produce(self, pipe, ga, gb, sa, sb, k_size, num_tiles, tiles_m, tiles_n):
        """The producer warp: every K-tile of every tile of this block, in the consumers' order, into the ring."""
        block_k = self.block_k
        filled: int32 = 0  # stages filled, to drain
        first, step = self.tile_walk(0, 1)
        for tile in self.range(first, num_tiles, step):
            offset_m, offset_n = self.tile_offsets(tile, tiles_m, tiles_n)
            filled = filled + cdiv(k_size, block_k)
            for offset_k in self.range(0, k_size, block_k, unroll=self.num_stages):
                pipe.producer_acquire()
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(
                        pipe.producer_barrier(),
                        transaction_bytes=sa[pipe.producer_stage].nbytes + sb[pipe.producer_stage].nbytes,
                    )
                self.tma.global_to_shared(src=ga, dst=sa[pipe.producer_stage], offsets=[offset_m, offset_k],
                                          mbarrier=pipe.producer_barrier())
                self.tma.global_to_shared(src=gb, dst=sb[pipe.producer_stage], offsets=[offset_n, offset_k],
                                          mbarrier=pipe.producer_barrier())
                pipe.producer_advance()
        # Drain: stay until the consumers released every stage that was filled, so their arrivals never target a
        # barrier whose waiter has exited (fewer stages were filled when the block has fewer K-tiles than stages).
        for _ in self.range(min(self.num_stages, filled)):
            pipe.producer_acquire()
            pipe.producer_advance()

    def mainloop(self, pipe, sa, sb, k_size, turn=None):
        """One tile's K loop as in V5 (one WGMMA group in flight), into a fresh accumulator, which it returns.
        ``turn`` (ping-pong): the other warpgroup's ordering barrier, arrived on once every WGMMA is issued."""
        acc = self.register_tensor(dtype=float32, shape=[self.block_m, self.block_n], init=0.0)
        for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
            pipe.consumer_acquire()
            self.wgmma.fence()
            self.wgmma.mma(sa[pipe.consumer_stage], sb[pipe.consumer_stage].transpose(), acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(1)  # the previous K-tile's group is done reading its stage: release that one
            if offset_k > 0:
                self.release_stage(pipe.empty_barriers[self.previous(pipe.consumer_stage)])
            pipe.consumer_advance()
        if turn is not None:
            self.mbarrier.arrive(turn)  # the tensor cores have this tile's work queued: the other may issue
        self.wgmma.wait_group(0)  # the last group; consumer_advance moved past its stage
        self.release_stage(pipe.empty_barriers[self.previous(pipe.consumer_stage)])
        return acc

    def release_arrivals(self):
        """The arrivals that empty a stage: those of the warpgroups that read it, both (cooperative) or the one
        owning the tile (ping-pong), one each or (``release="thread"``) one per thread."""
        readers = WARPGROUP if self.variant == "pingpong" else CONSUMER_THREADS
        return readers // WARPGROUP if self.release == "warpgroup" else readers

    def release_stage(self, empty):
        """Hand a stage back on its "empty" barrier ``empty``, after the caller's ``wgmma.wait_group`` covered the
        reads of it: one arrival per consumer warpgroup by one of its threads (the wait is warpgroup-wide, so any
        of them knows its warpgroup is done), or with ``release="thread"`` one per thread."""
        if self.release == "thread":
            self.mbarrier.arrive(empty)
        elif self.variant == "pingpong":  # the caller is one warpgroup's thread group
            with self.single_thread():
                self.mbarrier.arrive(empty)
        else:
            for wg in range(CONSUMER_THREADS // WARPGROUP):
                with self.thread_group(thread_begin=wg * WARPGROUP, num_threads=WARPGROUP):
                    with self.single_thread():
                        self.mbarrier.arrive(empty)

    def consume_pingpong(self, wg, pipe, turns, sa, sb, sc, gc, k_size, num_tiles, tiles_m, tiles_n):
        """Consumer warpgroup ``wg`` of ping-pong: the block's tiles ``wg, wg + 2, ...`` of its sequence, skipping
        the other warpgroup's stages in the ring."""
        k_tiles = cdiv(k_size, self.block_k)
        # Warpgroup 0 goes first: its first wait passes at once, as a producer's first wait on an empty stage.
        turn_phase: uint32 = self.mbarrier.producer_initial_phase if wg == 0 else self.mbarrier.consumer_initial_phase
        if wg == 1:
            self.skip_stages(pipe, k_tiles)  # the ring starts with warpgroup 0's first tile
        first, step = self.tile_walk(wg, 2)
        for tile in self.range(first, num_tiles, step):
            offset_m, offset_n = self.tile_offsets(tile, tiles_m, tiles_n)
            self.mbarrier.wait(turns[wg], phase=turn_phase)
            turn_phase = turn_phase ^ 1
            acc = self.mainloop(pipe, sa, sb, k_size, turn=turns[1 - wg])
            self.skip_stages(pipe, k_tiles)  # the other warpgroup's next tile
            self.epilogue(acc, sc, gc, offset_m, offset_n)
        self.finish_stores()

    def skip_stages(self, pipe, count):
        """Move the consumer position ``count`` stages on in the ring (over another warpgroup's tile), flipping the
        phase once per wrap as ``count`` calls of ``consumer_advance`` would."""
        position = pipe.consumer_stage + count
        pipe.consumer_stage = position % self.num_stages
        pipe.consumer_phase = pipe.consumer_phase ^ uint32(position // self.num_stages & 1)

    def epilogue(self, acc, sc, gc, offset_m, offset_n):
        """acc -> float16 -> the shared buffers ``sc`` -> a TMA store per chunk of ``epilogue_n`` columns, each in
        its own bulk group; the last stores are left in flight under the next tile."""
        buffers = self.epilogue_buffers
        for chunk in range(self.block_n // self.epilogue_n):
            column = chunk * self.epilogue_n
            with self.single_thread():
                # The store that last read this buffer was ``buffers`` groups ago: all but the newest
                # ``buffers - 1`` groups done means it has.
                self.tma.wait_group(buffers - 1)
            self.sync()  # ... and every writer of the buffer knows it
            # Cast here, after the wait: converting the accumulator ahead of it made ptxas serialize ping-pong
            # 64x256's WGMMAs (advisory C7514). Per chunk, only the chunk's columns are converted (the rest is dead).
            self.store_shared(sc[chunk % buffers], self.cast(acc, dtype=float16), column=column)
            self.fence_proxy_async()  # the ordinary stores become visible to the TMA store's async-proxy read
            self.sync()
            with self.single_thread():
                self.tma.shared_to_global(src=sc[chunk % buffers], dst=gc, offsets=[offset_m, offset_n + column])
                self.tma.commit_group()

    def finish_stores(self):
        """Wait for the last TMA store: its shared source must stay valid until the copy has read it."""
        with self.single_thread():
            self.tma.wait_group(0)

    def previous(self, stage):
        """The stage before ``stage`` in the ring."""
        return (stage + self.num_stages - 1) % self.num_stages


if __name__ == "__main__":
    check_matmul(MatmulWGMMAV6(), k=320)
