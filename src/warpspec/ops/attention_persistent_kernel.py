"""The persistent attention forward (``AttentionPersistent``): the forward kernel of ``warpspec.ops.attention_kernel``
with one block per SM walking the launch's (query tile, head) pairs, so that a block's next tile starts while its
last one ends. For short sequences (seq 512-2048) a block of the one-tile kernel spends a large share of its life in
its prologue (barriers, Q's load, the first K and V tiles' latency) and epilogue (O's store), with the SM idle
between blocks; here the producer warp loads tile t+1's Q and first K/V stages while the consumers still run tile
t's last P·V and store its O.

The grid is ``min(tiles, num_sms)`` blocks over the ``ceil(S_q / block_m) · B·H`` tiles (``block_m`` = 64 ·
``consumers`` query rows, as in the one-tile kernel). Which tiles a block runs, and in what order, it reads from a
table in global memory, the walk (``tile_walk``, made on the host and cached): causal tiles differ in length by
up to S_q / block_m times, and dealing tile t to block t mod blocks left the block with the most work up to 43%
above the average (16384 rows). The walk deals the tiles longest first to the block with the least work so far,
within windows of one or two waves of tiles whose heads follow one another (``window_waves``), so that the blocks
running at once share few heads, whose K and V stay in L2 (walking the heads fastest, 132 blocks read 132 heads' K
and V at once and the kernel became bound by HBM). The K and V rings, the warpgroups' turns and every thread's
stage and phase run on from tile to tile.

Q has ``q_slots`` buffers (two where shared memory holds them beside the rings, else one), used by the block's tiles
in turn, so the producer loads tile t+1's Q while tile t runs. A Q buffer doubles as each warpgroup's O staging
buffer (as in the one-tile kernel), so the producer loads a slot's next Q only when every consumer warpgroup's O
store of its last tile has read it: ``q_free[slot]`` is the producer's barrier (one arrival per warpgroup, from the
thread that saw its TMA store read the buffer with ``tma.wait_group(0, read=True)``; the stores' global writes are
waited for once, at the block's end), ``q_loaded[slot]`` the consumers', each with a phase per use of its slot. The
loop is not unrolled: a tile's first stage is a runtime value.

Dense (B·H, S, D) views only; the element type is the constructor's first argument
(``AttentionPersistent(bfloat16, head_dim=128, causal=True, block_n=128, num_stages=2)``); ``consumers`` (2, or 3
where their fragments fit) as in the one-tile kernel. ``ops.attention`` runs it for short sequences, and causal up to
8192 rows (``warpspec.ops.attention.PERSISTENT_ROWS``, ``uses_persistent``); ``benchmarks/attention.py --persistent``
times it beside the one-tile kernel.
"""

from __future__ import annotations

import functools
import heapq

import numpy as np

from warpspec.dtypes import float32, int32, uint32
from warpspec.errors import ArgumentError
from warpspec.frontend.interpreter import cdiv
from warpspec.ops.attention_kernel import (CONSUMER_REGISTERS_OF, PRODUCER_REGISTERS, WARPGROUP, Attention,
                                           fragment_registers)
from warpspec.ops.naming import typed_kernel_name
from warpspec.pipeline import Pipeline
from warpspec.script import autotune
from warpspec.target import DEFAULT


#: What a tile costs the walk's model besides its keys, in steps of 128 keys: its prologue and epilogue (the first
#: QKᵀ waited for, the last P·V, O's store). From the fifth and fifteenth sessions' timings at seq 512 (a tile of
#: four 128-key steps took about 10.7 µs on an H100, one of 2.5 such steps with causal masking 11.2, cuDNN's 9.0 and
#: 7.1), about three steps.
TILE_OVERHEAD_STEPS = 3.0
#: Heads of at most this many query tiles are walked in windows of about one wave of tiles, longer ones in two
#: (``window_waves``).
SHORT_HEAD_TILES = 8
#: The causal persistent kernel holds more beside its O, S and P fragments (``fragment_registers``) than the one-tile
#: kernel, so with three consumer warpgroups they may take this many of its 160 registers a thread: ptxas built
#: D 64 with 96-key tiles (104) and D 128 with 64-key ones (112) clean, and spilled D 64's 128-key tiles (128: 144
#: bytes) and D 128's 80-key ones (124: 168 bytes), which the one-tile kernel's bound admits.
CAUSAL_THREE_CONSUMER_FRAGMENTS = 112


def window_waves(m_tiles: int) -> int:
    """How many waves of tiles one window of the walk spans, for heads of ``m_tiles`` query tiles. Short rows move
    as many bytes as long ones for a fraction of the work (at 512 rows, D 128, causal, 268 MB of Q, K, V and O for
    34 GFLOP), so their blocks are bound by HBM, and fewer heads read at once keep more of their K and V in L2: on an
    H100 (FlashAttention-3's grid, fp16) one wave was 1.09x two at D 128 and 512 rows and 1.03x at 1024, equal at D 64.
    Longer heads are walked in two waves, where longest first has room to even out tiles of very different lengths
    (from 2048 rows one wave was up to 7% slower)."""
    return 1 if m_tiles <= SHORT_HEAD_TILES else 2


def tile_keys(seq_q: int, seq_k: int, block_m: int, causal: bool) -> np.ndarray:
    """The keys each query tile of ``block_m`` rows reads, as ``Attention.key_tiles`` bounds them (before rounding
    to whole key tiles): all ``seq_k``, or causal (bottom-right aligned) up to its last row's last key."""
    m_tiles = -(-seq_q // block_m)
    if not causal:
        return np.full(m_tiles, seq_k, dtype=np.int64)
    ends = np.arange(1, m_tiles + 1, dtype=np.int64) * block_m + (seq_k - seq_q)
    return np.clip(ends, 0, seq_k)


@functools.lru_cache(maxsize=256, typed=True)  # typed: waves=True must not be served waves=1's walk
def tile_walk(seq_q: int, seq_k: int, batch_heads: int, block_m: int, causal: bool, num_sms: int,
              waves: float | None = None) -> np.ndarray:
    """Which (query tile, head row) tiles each block of the persistent kernel runs, and in what order: an int32
    table of ``blocks + 1`` starts (block b runs list entries ``starts[b] ... starts[b + 1] - 1``) followed by the
    ``tiles`` entries ``head row · m_tiles + query tile``, where ``blocks = min(tiles, num_sms)``.

    Tiles are dealt greedily, longest first, to the block with the least work so far (a tile costing its keys plus
    ``TILE_OVERHEAD_STEPS``), as a queue would hand them to blocks that finish in that order, but decided on the
    host: causal tiles of every length share the blocks evenly, where dealing tile t to block t mod blocks gave the
    busiest block up to 43% more work than the average (16384 rows). Longest first is taken within windows of
    ``window_waves`` waves of tiles (``waves`` instead, when given: how the walk's windows were chosen is timed that
    way, ``benchmarks/attention.py --window-waves``), whole heads each, in head order: the blocks running at once
    read few heads, whose K and V stay in L2. Tiles of one cost (no mask) go round the blocks in head order, block b
    taking tiles b, b + blocks, ... The result is cached and read-only."""
    if waves is not None and (isinstance(waves, bool) or not isinstance(waves, (int, float)) or not waves > 0):
        raise ArgumentError(f"tile_walk: waves must be a positive number of waves of tiles per window, got {waves!r}")
    m_tiles = -(-seq_q // block_m)
    tiles = m_tiles * batch_heads
    blocks = min(tiles, num_sms)
    cost = TILE_OVERHEAD_STEPS + tile_keys(seq_q, seq_k, block_m, causal) / 128.0
    if (cost == cost[0]).all():  # what the greedy deal comes to, without its loop over the tiles
        by_block = np.concatenate([np.arange(b, tiles, blocks) for b in range(blocks)])
        starts = np.concatenate([[0], np.cumsum([len(range(b, tiles, blocks)) for b in range(blocks)])])
        return _table(starts, by_block)
    # Windows of whole heads, about window_waves waves of tiles each (the last no smaller, so the end is as even as
    # the rest).
    if waves is None:
        waves = window_waves(m_tiles)
    windows = max(1, int(batch_heads * m_tiles // (waves * blocks)))
    owner = np.empty(tiles, dtype=np.int64)
    loads = [(0.0, b) for b in range(blocks)]
    dealt = []
    for heads in np.array_split(np.arange(batch_heads), windows):
        # The window's tiles longest first; tiles of one cost (all of them, without a mask) head by head.
        window = (heads[:, None] * m_tiles + np.arange(m_tiles)[None, :]).reshape(-1)
        for t in window[np.argsort(-cost[window % m_tiles], kind="stable")]:
            load, b = heapq.heappop(loads)
            heapq.heappush(loads, (load + cost[t % m_tiles], b))
            owner[t] = b
            dealt.append(t)
    dealt = np.asarray(dealt, dtype=np.int64)
    by_block = dealt[np.argsort(owner[dealt], kind="stable")]  # each block's tiles in the order they were dealt
    starts = np.searchsorted(owner[by_block], np.arange(blocks + 1))
    return _table(starts, by_block)


def _table(starts, by_block) -> np.ndarray:
    """The walk's read-only int32 table: the blocks' starts, then their tiles."""
    table = np.concatenate([starts, by_block]).astype(np.int32)
    table.setflags(write=False)
    return table


def _persistent_schedules(cls):
    """The one-tile kernel's schedule space without its unrolled loops (``unroll`` 1 throughout), and 48-key
    tiles in 2 stages: at D 256 the only tile beside which two Q buffers fit."""
    return autotune("block_n, num_stages", [
        [128, 2], [128, 3], [96, 2], [80, 2], [64, 2], [64, 3], [48, 3], [48, 2],
    ])(cls)


@_persistent_schedules
class AttentionPersistent(Attention):
    """The persistent forward of ``dtype`` (float16 or bfloat16) Q, K, V and O."""

    def __init__(self, dtype, head_dim, causal, block_n, num_stages, consumers=2):
        super().__init__(dtype, head_dim, causal, block_n, num_stages, unroll=1, consumers=consumers)
        if consumers == 3 and causal and fragment_registers(head_dim, block_n) > CAUSAL_THREE_CONSUMER_FRAGMENTS:
            raise ArgumentError(
                f"the persistent causal kernel with consumers=3 needs O, S and P in "
                f"{CAUSAL_THREE_CONSUMER_FRAGMENTS} of its 160 registers a thread (head_dim/2 + 3 * block_n/4): "
                f"head_dim {head_dim} with block_n {block_n} needs {fragment_registers(head_dim, block_n)}; "
                f"head_dim 64 takes block_n up to 96, 128 up to 64")
        # Two Q buffers where they fit beside the rings (D 256 at 80-key tiles does not), and a KiB for the barriers.
        q_bytes = self.block_m * head_dim * self.dtype.nbytes
        ring_bytes = 2 * num_stages * block_n * head_dim * self.dtype.nbytes
        self.q_slots = 2 if 2 * q_bytes + ring_bytes + 1024 <= DEFAULT.shared_limit else 1

    def kernel_name(self) -> str:
        """``AttentionPersistentF16`` or ``AttentionPersistentBF16``."""
        return typed_kernel_name(self, AttentionPersistent, "AttentionPersistent", (self.dtype,))

    def __call__(self, seq_q: int32, seq_k: int32, batch_heads: int32, heads: int32, group: int32,
                 scale_log2: float32, q_ptr: ~self.dtype, k_ptr: ~self.dtype, v_ptr: ~self.dtype,
                 o_ptr: ~self.dtype, lse_ptr: ~float32, walk_ptr: ~int32, num_sms: int32):
        self.attention_persistent(seq_q, seq_k, batch_heads, heads, group, scale_log2, q_ptr, k_ptr, v_ptr, o_ptr,
                                  lse_ptr, walk_ptr, num_sms)

    def attention_persistent(self, seq_q, seq_k, batch_heads, heads, group, scale_log2, q_ptr, k_ptr, v_ptr,
                             o_ptr, lse_ptr, walk_ptr, num_sms):
        """The kernel: ``min(tiles, num_sms)`` blocks, each walking its share of the (query tile, head) tiles as
        the walk ``walk_ptr`` (``tile_walk``'s table for the same sizes, block_m and ``num_sms``) lists them."""
        m_tiles: int32 = cdiv(seq_q, self.block_m)
        tiles: int32 = m_tiles * batch_heads
        blocks: int32 = min(tiles, num_sms)
        self.attrs.blocks = [blocks]
        self.attrs.warps = (self.consumer_threads + WARPGROUP) // 32
        gq, gk, gv, go, glse = self.dense_views(seq_q, seq_k, batch_heads, group, q_ptr, k_ptr, v_ptr, o_ptr,
                                                 lse_ptr)
        walk = self.global_view(walk_ptr, dtype=int32, shape=[blocks + 1 + tiles])
        sq, sk, sv, q_loaded, q_free, pipe_k, pipe_v, turns = self.persistent_buffers()
        consumer_threads = self.consumer_threads
        with self.thread_group(thread_begin=consumer_threads, num_threads=WARPGROUP, max_registers=PRODUCER_REGISTERS):
            with self.thread_group(thread_begin=consumer_threads, num_threads=32):
                self.produce_tiles(gq, gk, gv, sq, sk, sv, q_loaded, q_free, pipe_k, pipe_v, seq_q, seq_k,
                                   heads, group, m_tiles, walk, blocks)
        with self.thread_group(thread_begin=0, num_threads=consumer_threads,
                               max_registers=CONSUMER_REGISTERS_OF[self.consumers]):
            for wg in range(self.consumers):
                with self.thread_group(thread_begin=wg * WARPGROUP, num_threads=WARPGROUP):
                    self.consume_tiles(wg, sq, sk, sv, go, glse, q_loaded, q_free, pipe_k, pipe_v, turns, seq_q,
                                       seq_k, scale_log2, m_tiles, walk, blocks)

    def persistent_buffers(self):
        """The one-tile kernel's buffers with ``q_slots`` Q buffers (each a 64-row slice per consumer warpgroup), a
        ``q_loaded`` barrier per slot and a ``q_free`` barrier per slot (one arrival per warpgroup: its O store has
        read its slice)."""
        d, block_n, dtype, consumers = self.head_dim, self.block_n, self.dtype, self.consumers
        sq = self.shared_tensor(dtype=dtype, shape=[self.q_slots, consumers, 1, 64, d])
        sk = self.shared_tensor(dtype=dtype, shape=[self.num_stages, 1, block_n, d])
        sv = self.shared_tensor(dtype=dtype, shape=[self.num_stages, 1, block_n, d])
        q_loaded = self.mbarrier.alloc(counts=[1] * self.q_slots)
        q_free = self.mbarrier.alloc(counts=[consumers] * self.q_slots)
        pipe_k = Pipeline(self.num_stages, consumer_arrivals=self.consumer_threads)
        pipe_v = Pipeline(self.num_stages, consumer_arrivals=self.consumer_threads)
        turns = self.mbarrier.alloc(counts=[WARPGROUP] * consumers)
        return sq, sk, sv, q_loaded, q_free, pipe_k, pipe_v, turns

    def block_walk(self, walk):
        """(first, end) positions of this block's tiles in the walk's list: entries ``blockIdx.x`` and
        ``blockIdx.x + 1`` of its head."""
        first: int32 = self.load_scalar(walk, [self.blockIdx.x])
        end: int32 = self.load_scalar(walk, [self.blockIdx.x + 1])
        return first, end

    def tile_at(self, walk, blocks, position, m_tiles):
        """(first query row, head row) of the tile at ``position`` of the walk's list, whose entries are
        ``head row · m_tiles + query tile``."""
        t: int32 = self.load_scalar(walk, [blocks + 1 + position])
        return self.block_m * (t % m_tiles), t // m_tiles

    def produce_tiles(self, gq, gk, gv, sq, sk, sv, q_loaded, q_free, pipe_k, pipe_v, seq_q, seq_k, heads, group,
                      m_tiles, walk, blocks):
        """The producer warp: for each of the block's tiles, once every consumer warpgroup has stored its O of the
        last tile that used its Q slot, the tile's Q into that slot and its K and V tiles into the rings, which run on
        from tile to tile; then it stays until the consumers released every stage and stored their last O."""
        filled: int32 = 0  # K (and V) stages filled, to drain
        slot: int32 = 0
        free_phase: uint32 = self.mbarrier.producer_initial_phase  # each slot is free at once for its first tile
        first, end = self.block_walk(walk)
        for position in self.range(first, end):
            offset_m, bh = self.tile_at(walk, blocks, position, m_tiles)
            kv_bh: int32 = bh // heads * (heads // group) + bh % heads // group
            n_tiles = self.key_tiles(offset_m, seq_q, seq_k)
            self.mbarrier.wait(q_free[slot], phase=free_phase)
            self.produce_tile(gq, gk, gv, sq[slot], sk, sv, q_loaded[slot], pipe_k, pipe_v, bh, kv_bh, offset_m, 0,
                              n_tiles)
            filled = filled + n_tiles
            slot, free_phase = self.next_slot(slot, free_phase)
        for _ in self.range(self.q_slots):  # the last O stores (a slot never used passes at once)
            self.mbarrier.wait(q_free[slot], phase=free_phase)
            slot, free_phase = self.next_slot(slot, free_phase)
        self.drain(pipe_k, pipe_v, filled)

    def next_slot(self, slot, phase):
        """The Q slot after ``slot`` and the phase its barriers are at: the phase flips as the slots wrap around."""
        slot = slot + 1
        if slot == self.q_slots:
            slot = 0
            phase = phase ^ 1
        return slot, phase

    def consume_tiles(self, wg, sq, sk, sv, go, glse, q_loaded, q_free, pipe_k, pipe_v, turns, seq_q, seq_k,
                      scale_log2, m_tiles, walk, blocks):
        """Consumer warpgroup ``wg``: its 64 rows of each of the block's tiles, as the one-tile kernel's consumer,
        its stages, phases and turns running on from tile to tile, the tiles' Q slots in turn; after each tile's
        O store, the slot's ``q_free``."""
        self.rewind(pipe_k, pipe_v)
        turn_phase: uint32 = self.first_turn_phase(wg)
        slot: int32 = 0
        q_phase: uint32 = 0
        first, end = self.block_walk(walk)
        for position in self.range(first, end):
            offset_m, bh = self.tile_at(walk, blocks, position, m_tiles)
            n_tiles = self.key_tiles(offset_m, seq_q, seq_k)
            turn_phase = self.consume_tile(wg, sq[slot][wg], sk, sv, go, glse, q_loaded[slot], pipe_k, pipe_v,
                                           turns, seq_q, seq_k, scale_log2, bh, offset_m, n_tiles, 0, q_phase,
                                           turn_phase)
            self.free_q(q_free[slot])
            slot, q_phase = self.next_slot(slot, q_phase)
        with self.single_thread():
            self.tma.wait_group(0)  # the O stores' global writes, before the block ends

    def store_output(self, sq, go, out, bh, rows_from):
        """The one-tile kernel's O store, whose thread waits only for the store to have read the Q buffer
        (``wait_group(read=True)``): the next tile need not wait for O's global write."""
        self.store_shared(sq[0], out)
        self.fence_proxy_async()
        self.sync()
        with self.single_thread():
            self.tma.shared_to_global(src=sq, dst=go, offsets=[bh, rows_from, 0])
            self.tma.commit_group()
            self.tma.wait_group(0, read=True)

    def free_q(self, q_free):
        """The thread that issued the warpgroup's O store and saw it read the Q buffer (``store_output``'s single
        thread) arrives on barrier ``q_free``: the slot may take the next tile's Q."""
        with self.single_thread():
            self.mbarrier.arrive(q_free)
