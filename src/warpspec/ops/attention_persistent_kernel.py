"""The persistent attention forward (``AttentionPersistent``): the forward kernel of ``warpspec.ops.attention_kernel``
with one block per SM walking the launch's (query tile, head) pairs, so that a block's next tile starts while its
last one ends. For short sequences (seq 512-2048) a block of the one-tile kernel spends a large share of its life in
its prologue (barriers, Q's load, the first K and V tiles' latency) and epilogue (O's store), with the SM idle
between blocks; here the producer warp loads tile t+1's Q and first K/V stages while the consumers still run tile
t's last P·V and store its O.

The grid is ``min(tiles, num_sms)`` blocks; block b takes tiles ``b, b + gridDim.x, ...`` of the ``ceil(S_q / 128) ·
B·H`` tiles, tile t being query tile t // (B·H) of head row t mod (B·H); causal launches walk the query tiles from
the last (the longest rows first, as the one-tile kernel orders its blocks). The K and V rings, the warpgroups'
turns and every thread's stage and phase run on from tile to tile. Q's buffer doubles as each warpgroup's O staging
buffer (as in the one-tile kernel), so the producer loads the next Q only when both warpgroups' O stores of the
last tile have read it: ``q_free`` (one arrival per warpgroup, from the thread that waited for its TMA store) is
the producer's, ``q_loaded`` the consumers' barrier, both with a phase per tile. The loop is not unrolled: a tile's
first stage is a runtime value.

Dense (B·H, S, D) views only; the element type is the constructor's first argument
(``AttentionPersistent(bfloat16, head_dim=128, causal=True, block_n=128, num_stages=2)``). Not yet what
``ops.attention`` runs: ``benchmarks/attention.py --persistent`` times it beside the one-tile kernel.
"""

from __future__ import annotations

from warpspec.dtypes import float32, int32, uint32
from warpspec.frontend.interpreter import cdiv
from warpspec.ops.attention_kernel import (BLOCK_M, CONSUMER_REGISTERS, CONSUMER_THREADS, PRODUCER_REGISTERS,
                                           WARPGROUP, WARPS, Attention)
from warpspec.ops.naming import typed_kernel_name
from warpspec.script import autotune


def _persistent_schedules(cls):
    """The one-tile kernel's schedule space without its unrolled loops (``unroll`` 1 throughout)."""
    return autotune("block_n, num_stages", [
        [128, 2], [128, 3], [96, 2], [80, 2], [64, 2], [64, 3], [48, 3],
    ])(cls)


@_persistent_schedules
class AttentionPersistent(Attention):
    """The persistent forward of ``dtype`` (float16 or bfloat16) Q, K, V and O."""

    def __init__(self, dtype, head_dim, causal, block_n, num_stages):
        super().__init__(dtype, head_dim, causal, block_n, num_stages, unroll=1)

    def kernel_name(self) -> str:
        """``AttentionPersistentF16`` or ``AttentionPersistentBF16``."""
        return typed_kernel_name(self, AttentionPersistent, "AttentionPersistent", (self.dtype,))

    def __call__(self, seq_q: int32, seq_k: int32, batch_heads: int32, heads: int32, group: int32,
                 scale_log2: float32, q_ptr: ~self.dtype, k_ptr: ~self.dtype, v_ptr: ~self.dtype,
                 o_ptr: ~self.dtype, lse_ptr: ~float32, num_sms: int32):
        self.attention_persistent(seq_q, seq_k, batch_heads, heads, group, scale_log2, q_ptr, k_ptr, v_ptr, o_ptr,
                                  lse_ptr, num_sms)

    def attention_persistent(self, seq_q, seq_k, batch_heads, heads, group, scale_log2, q_ptr, k_ptr, v_ptr,
                             o_ptr, lse_ptr, num_sms):
        """The kernel: ``min(tiles, num_sms)`` blocks, each walking its share of the (query tile, head) tiles."""
        m_tiles: int32 = cdiv(seq_q, BLOCK_M)
        tiles: int32 = m_tiles * batch_heads
        self.attrs.blocks = [min(tiles, num_sms)]
        self.attrs.warps = WARPS
        gq, gk, gv, go, glse = self.dense_views(seq_q, seq_k, batch_heads, group, q_ptr, k_ptr, v_ptr, o_ptr,
                                                 lse_ptr)
        sq, sk, sv, q_loaded, pipe_k, pipe_v, turns = self.buffers()
        q_free = self.mbarrier.alloc(counts=[2])  # one arrival per warpgroup: its O store has read its Q buffer
        with self.thread_group(thread_begin=CONSUMER_THREADS, num_threads=WARPGROUP, max_registers=PRODUCER_REGISTERS):
            with self.thread_group(thread_begin=CONSUMER_THREADS, num_threads=32):
                self.produce_tiles(gq, gk, gv, sq, sk, sv, q_loaded, q_free, pipe_k, pipe_v, seq_q, seq_k,
                                   batch_heads, heads, group, m_tiles, tiles)
        with self.thread_group(thread_begin=0, num_threads=CONSUMER_THREADS, max_registers=CONSUMER_REGISTERS):
            for wg in range(2):
                with self.thread_group(thread_begin=wg * WARPGROUP, num_threads=WARPGROUP):
                    self.consume_tiles(wg, sq[wg], sk, sv, go, glse, q_loaded, q_free, pipe_k, pipe_v, turns, seq_q,
                                       seq_k, scale_log2, batch_heads, m_tiles, tiles)

    def tile_at(self, t, m_tiles, batch_heads):
        """(first query row, head row) of tile ``t``: causal launches walk the query tiles from the last."""
        row: int32 = t // batch_heads
        tile_m: int32 = m_tiles - 1 - row if self.causal else row
        return BLOCK_M * tile_m, t % batch_heads

    def produce_tiles(self, gq, gk, gv, sq, sk, sv, q_loaded, q_free, pipe_k, pipe_v, seq_q, seq_k, batch_heads,
                      heads, group, m_tiles, tiles):
        """The producer warp: for each of the block's tiles, once both warpgroups have stored the last tile's O
        out of the Q buffer, the tile's Q and its K and V tiles into the rings, which run on from tile to tile;
        then it stays until the consumers released every stage and stored their last O."""
        filled: int32 = 0  # K (and V) stages filled, to drain
        free_phase: uint32 = self.mbarrier.producer_initial_phase  # the first tile's Q buffer is free at once
        for t in self.range(self.blockIdx.x, tiles, self.gridDim.x):
            offset_m, bh = self.tile_at(t, m_tiles, batch_heads)
            kv_bh: int32 = bh // heads * (heads // group) + bh % heads // group
            n_tiles = self.key_tiles(offset_m, seq_q, seq_k)
            self.mbarrier.wait(q_free[0], phase=free_phase)
            free_phase = free_phase ^ 1
            self.produce_tile(gq, gk, gv, sq, sk, sv, q_loaded, pipe_k, pipe_v, bh, kv_bh, offset_m, 0, n_tiles)
            filled = filled + n_tiles
        self.mbarrier.wait(q_free[0], phase=free_phase)  # the last tile's O stores
        self.drain(pipe_k, pipe_v, filled)

    def consume_tiles(self, wg, sq, sk, sv, go, glse, q_loaded, q_free, pipe_k, pipe_v, turns, seq_q, seq_k,
                      scale_log2, batch_heads, m_tiles, tiles):
        """Consumer warpgroup ``wg``: its 64 rows of each of the block's tiles, as the one-tile kernel's consumer,
        its stages, phases and turns running on from tile to tile; after each tile's O store, ``q_free``."""
        self.rewind(pipe_k, pipe_v)
        turn_phase: uint32 = self.first_turn_phase(wg)
        q_phase: uint32 = 0
        for t in self.range(self.blockIdx.x, tiles, self.gridDim.x):
            offset_m, bh = self.tile_at(t, m_tiles, batch_heads)
            n_tiles = self.key_tiles(offset_m, seq_q, seq_k)
            turn_phase = self.consume_tile(wg, sq, sk, sv, go, glse, q_loaded, pipe_k, pipe_v, turns, seq_q, seq_k,
                                           scale_log2, bh, offset_m, n_tiles, 0, q_phase, turn_phase)
            self.free_q(q_free)
            q_phase = q_phase ^ 1

    def free_q(self, q_free):
        """The thread that issued and waited for the warpgroup's O store (``store_output``'s single thread) arrives
        on ``q_free``: the Q buffer may take the next tile's Q."""
        with self.single_thread():
            self.mbarrier.arrive(q_free[0])
