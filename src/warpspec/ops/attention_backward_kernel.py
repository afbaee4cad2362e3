"""The attention backward kernels behind ``warpspec.ops.attention_backward``, FlashAttention-3's structure. With
P = exp2(S · scale_log2 - lse) the forward's probabilities (S = Q·Kᵀ, lse the forward's base-2 log-sum-exp per query
row) and dO the output's gradient:

* ``Dot`` (preprocessing): D = rowsum(dO ∘ O) per query row, as the diagonal of the m64 WGMMA dO·Oᵀ (the language
  reduces accumulator rows only, and this costs one 64 × 64 tile per 64 rows);
* ``BackwardKV``: one block per 128 keys of one K/V head; each consumer warpgroup owns 64 of them and keeps
  its K and V tiles in shared memory while a producer warp streams the (Q, dO) tiles of every query head of the
  group through a ring. Per tile, with the keys as rows: Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ (two WGMMA groups), Pᵀ =
  exp2(Sᵀ · scale_log2 - lse) (lse a row vector: one value per query column), dV += Pᵀ·dO, dSᵀ = Pᵀ ∘ (dPᵀ - D),
  dK += dSᵀ·Q; Pᵀ and dSᵀ are cast in place into WGMMA's register A operand. Summing over the group's query heads
  inside the block makes grouped-query dK/dV deterministic;
* dQ, two ways. With ``deterministic=False``: ``BackwardKVDQ`` is ``BackwardKV`` that also computes each tile's
  dQ share dS·K over its 128 keys (dSᵀ handed between the warpgroups through shared memory, ``DQAccumulation``) and
  reduce-adds it in float32 into a zeroed accumulator, which ``ConvertDQ`` scales into q's dtype: 5 GEMMs per
  tile, but the order of the float32 adds differs between runs, and so may dQ's last bits. At D 64 the dense
  path runs ``BackwardFused`` instead (the packed path keeps ``BackwardKVDQVarlen``), whose warpgroups split each
  tile's query rows rather than the keys, so that a warpgroup's dQ share needs only its own dS (from registers)
  and dV and dK read both warpgroups' P and dS from shared memory. The deterministic default: ``BackwardQ``, one
  block per 128 query rows (64 per consumer warpgroup, as the forward), the producer streaming K and V tiles:
  S = Q·Kᵀ, dP = dO·Vᵀ, dS = P ∘ (dP - D), dQ += dS·K; recomputing S and dP costs two more GEMMs.

The dense kernels' grids are one-dimensional (``_RowBlocks.grid_order``): head-major without a mask; under a causal
mask, whose blocks differ in work up to the number of blocks a head, the longest blocks of 16 heads at a time come
first, so that a grid never ends on a long block.

dQ and dK leave multiplied by ``scale`` (dS is the gradient of the scaled logits). Masks: causal only, aligned at
the bottom right as in the forward (key j is seen by query i when j <= i + S_k - S_q); no ragged mask is needed,
since rows past a head's length read as zeros (Q, dO, K, V, lse and D alike), which makes their P finite and their
contributions zero (dO = 0 gives dP = 0 and dV += 0; K = 0 or Q = 0 zeroes dQ's or dK's share), and rows that see
no key have lse = +inf, so P = 0 there.

Packed sequences (``ops.attention_varlen``'s backward): ``DotVarlen``, ``BackwardKVVarlen``, ``BackwardQVarlen``
and ``BackwardKVDQVarlen`` (with ``ConvertDQ``) run these bodies over Q, dO, dQ [total_q, H, D] and K, V, dK, dV
[total_k, H_kv, D], lse and D [H, total_q], one launch each for every sequence, as the forward's packed mode does
(``attention_varlen_kernel.PackedRows``): head-major views ([H, total, D], strides [D, H·D, 1]) so each TMA box is
the dense kernels' at the sequence's row offset, grid z the sequence, whose bounds a block reads from
``cu_seqlens_q`` and ``cu_seqlens_k`` (clamped into [0, total] in order), blocks past the sequence's end starting no
roles, and a warpgroup's finished rows stored from registers up to the sequence's end where a TMA box would write
the next sequence's. D needs no bounds: ``DotVarlen`` runs over the packed rows. The zeros the dense kernels rely on
are gone there: the rows past a sequence's end in its last tile are the next sequence's, real data, so the packed
kernels mask explicitly (P = 0, and so dS = 0, selected after exp2): dK/dV the query columns past the end (and,
summing dQ shares over the keys without a causal mask, the key rows past it), dQ the keys past it (causal, the
diagonal already hides them). A row's own gradient past the end is computed and never stored.
"""

from __future__ import annotations

from warpspec.dtypes import float32, int32
from warpspec.errors import ArgumentError
from warpspec.frontend.interpreter import cdiv
from warpspec.ops.attention_kernel import (CONSUMER_REGISTERS, CONSUMER_THREADS, HEAD_DIMS, PRODUCER_REGISTERS,
                                           WARPGROUP, RowTileStore, element_dtype)
from warpspec.ops.attention_varlen_kernel import PackedRows
from warpspec.ops.naming import typed_kernel_name
from warpspec.pipeline import Pipeline
from warpspec.script import Class, Script

BLOCK_ROWS = 2 * 64  # two consumer warpgroups of 64 rows (keys in the dK/dV kernel, queries in the dQ kernel)
#: The heads a causal dense grid deals together, longest blocks first (``_RowBlocks.grid_order``): enough that their
#: blocks of one rank outlast a wave's tail, few enough that a head's blocks still run side by side (they stream the
#: same tiles, which L2 then serves to all).
LONGEST_FIRST_HEADS = 16
#: The backward's head dims: D = 256 needs dK and dV accumulators of 128 registers each per thread.
BACKWARD_HEAD_DIMS = (64, 128)


def _check_head_dim(head_dim):
    if head_dim not in BACKWARD_HEAD_DIMS:
        raise ArgumentError(f"head_dim must be one of {BACKWARD_HEAD_DIMS} for the backward, got {head_dim}")
    assert head_dim in HEAD_DIMS


class Dot(Script):
    """D = rowsum(dO ∘ O): one warpgroup per 64 query rows of one head, of ``dtype`` O and dO."""

    zeroes_dq = False  # DotZeroingDQ's: the dQ accumulator's rows zeroed too

    def __init__(self, dtype, head_dim):
        super().__init__()
        self.dtype = element_dtype(dtype)
        _check_head_dim(head_dim)
        self.head_dim = head_dim

    def kernel_name(self) -> str:
        """``DotF16`` or ``DotBF16``."""
        return typed_kernel_name(self, Dot, "Dot", (self.dtype,))

    def __call__(self, seq_q: int32, batch_heads: int32, o_ptr: ~self.dtype, do_ptr: ~self.dtype,
                 dd_ptr: ~float32):
        self.dot(seq_q, batch_heads, o_ptr, do_ptr, dd_ptr)

    def dot(self, seq_q, batch_heads, o_ptr, do_ptr, dd_ptr, dq_accum_ptr=None):
        """D[bh, rows] for rows ``64 · blockIdx.x ...`` of head ``bh = blockIdx.y``; with ``dq_accum_ptr`` (float32
        [B·H, S_q, D], ``zeroes_dq``) also those rows of the dQ accumulator zeroed."""
        d, dtype = self.head_dim, self.dtype
        self.attrs.blocks = [cdiv(seq_q, 64), batch_heads]
        self.attrs.warps = WARPGROUP // 32
        go = self.head_rows(o_ptr, batch_heads, seq_q)
        gdo = self.head_rows(do_ptr, batch_heads, seq_q)
        # D [B·H, S_q] seen as [S_q, B·H]: the [64, 1] column of the block's rows, rows past S_q clipped.
        gdd = self.global_view(dd_ptr, dtype=float32, shape=[seq_q, batch_heads], strides=[1, seq_q])
        so = self.shared_tensor(dtype=dtype, shape=[1, 64, d])
        sdo = self.shared_tensor(dtype=dtype, shape=[1, 64, d])
        loaded = self.mbarrier.alloc(counts=[1])
        rows_from: int32 = 64 * self.blockIdx.x
        bh: int32 = self.blockIdx.y
        with self.thread_group(thread_begin=0, num_threads=WARPGROUP):
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(loaded[0], so.nbytes + sdo.nbytes)
                self.tma.global_to_shared(src=go, dst=so, offsets=[bh, rows_from, 0], mbarrier=loaded[0])
                self.tma.global_to_shared(src=gdo, dst=sdo, offsets=[bh, rows_from, 0], mbarrier=loaded[0])
            if self.zeroes_dq:
                self.zero_rows(dq_accum_ptr, seq_q, batch_heads, bh, rows_from)  # while O and dO load
            self.mbarrier.wait(loaded[0], phase=0)
            products = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
            self.wgmma.fence()
            self.wgmma.mma(sdo[0], so[0].transpose(), products)  # (dO·Oᵀ)[i, i] = rowsum(dO ∘ O)[i]
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            diagonal = self.where(self.row_index(products) == self.col_index(products), products, 0.0)
            self.store_global(gdd, self.reduce_sum(diagonal), offsets=[rows_from, bh])

    def head_rows(self, ptr, heads, rows):
        """O or dO [B·H, S_q, D] as the view [heads, rows, D]."""
        return self.global_view(ptr, dtype=self.dtype, shape=[heads, rows, self.head_dim])


class DotZeroingDQ(Dot):
    """``Dot`` that also zeroes the accumulating path's float32 dQ accumulator [B·H, S_q, D] (the rows of its
    D), its stores issued while O and dO load: where the accumulator was zeroed by a pass of its own before the
    launches (a memset of 4·D bytes a query row), ``Dot``, which reads 4·D bytes a row at far below the memory's
    rate, now writes them too."""

    zeroes_dq = True

    def kernel_name(self) -> str:
        """``DotZeroingDQF16`` or ``DotZeroingDQBF16``."""
        return typed_kernel_name(self, DotZeroingDQ, "DotZeroingDQ", (self.dtype,))

    def __call__(self, seq_q: int32, batch_heads: int32, o_ptr: ~self.dtype, do_ptr: ~self.dtype,
                 dd_ptr: ~float32, dq_accum_ptr: ~float32):
        self.dot(seq_q, batch_heads, o_ptr, do_ptr, dd_ptr, dq_accum_ptr)

    def zero_rows(self, dq_accum_ptr, seq_q, batch_heads, bh, rows_from):
        """Rows ``rows_from ...`` (64, up to S_q) of head ``bh`` of the float32 accumulator [B·H, S_q, D], zeroed by
        the warpgroup (a blocked tile: 16-byte stores)."""
        accumulator = self.global_view(dq_accum_ptr, dtype=float32, shape=[batch_heads * seq_q, self.head_dim])
        zeros = self.register_tensor(dtype=float32, shape=[64, self.head_dim], init=0.0)
        first: int32 = bh * seq_q
        self.store_global(accumulator, zeros, offsets=[first + rows_from, 0], row_end=first + seq_q)


class _RowBlocks(RowTileStore, Script):
    """What the dK/dV and dQ kernels share: the stores of a warpgroup's 64 finished rows in the dense mode (the
    packed mode's ``store_rows`` is ``PackedRows``')."""

    #: Packed sequences (``PackedRows``): rows past a block's sequence are the next sequence's, masked explicitly.
    varlen = False

    def store_rows(self, buffer, view, tile, head, rows_from, start, count):
        """A warpgroup's 64 finished rows ``tile`` (rows ``rows_from ...`` of head ``head``) by ``store_output``; the
        3-D view clips rows past the head's length (``start`` and ``count`` serve the packed mode)."""
        self.store_output(buffer, view, tile, head, rows_from)

    def grid_order(self, n_blocks, n_heads):
        """A one-dimensional dense grid of ``n_blocks`` blocks for each of ``n_heads`` heads, and this block's (rank,
        head): rank 0 the head's block with the most work under a causal mask. Without a mask every block has the
        same work and the grid is head-major (rank = blockIdx.x % n_blocks), each head's blocks side by side.
        Causal blocks differ in work up to n_blocks-fold, and the GPU starts blocks in index order: a head-major
        grid ended with the last heads' longest blocks still running while the other SMs idled (a tail up to a
        block's whole time). So ``LONGEST_FIRST_HEADS`` heads at a time are dealt rank by rank, the longest
        blocks of those heads first, and every grid ends with its shortest."""
        self.attrs.blocks = [n_blocks * n_heads]
        together = LONGEST_FIRST_HEADS if self.causal else 1
        linear: int32 = self.blockIdx.x
        first_head: int32 = linear // (together * n_blocks) * together
        heads_here: int32 = min(together, n_heads - first_head)  # the last group may be smaller
        within: int32 = linear - first_head * n_blocks
        rank: int32 = within // heads_here
        head: int32 = first_head + within % heads_here
        return rank, head


class BackwardKV(_RowBlocks):
    """dK and dV of 128 keys of one K/V head, summed over the query heads of its group; ``dtype`` operands and
    gradients."""

    accumulates_dq = False  # BackwardKVDQ's: the dQ shares of the block's keys too

    def __init__(self, dtype, head_dim, causal, block_m, num_stages):
        super().__init__()
        self.dtype = element_dtype(dtype)
        _check_head_dim(head_dim)
        self.head_dim = head_dim
        self.causal = causal
        self.block_m = block_m
        self.num_stages = num_stages
        #: Whether the deterministic path overlaps each tile's dK with the next tile (``overlapped_tiles``): at D 64,
        #: whose registers hold a tile's dSᵀ beside the next tile's tensors (at D 128 they spill).
        self.overlaps = head_dim == 64

    def kernel_name(self) -> str:
        """``BackwardKVF16`` or ``BackwardKVBF16``."""
        return typed_kernel_name(self, BackwardKV, "BackwardKV", (self.dtype,))

    def __call__(self, seq_q: int32, seq_k: int32, batch_heads: int32, heads: int32, group: int32, scale: float32,
                 scale_log2: float32, q_ptr: ~self.dtype, k_ptr: ~self.dtype, v_ptr: ~self.dtype,
                 do_ptr: ~self.dtype, lse_ptr: ~float32, dd_ptr: ~float32, dk_ptr: ~self.dtype, dv_ptr: ~self.dtype):
        self.backward_kv(seq_q, seq_k, batch_heads, heads, group, scale, scale_log2, q_ptr, k_ptr, v_ptr, do_ptr,
                         lse_ptr, dd_ptr, dk_ptr, dv_ptr)

    def backward_kv(self, seq_q, seq_k, batch_heads, heads, group, scale, scale_log2, q_ptr, k_ptr, v_ptr, do_ptr,
                    lse_ptr, dd_ptr, dk_ptr, dv_ptr, dq_accum_ptr=None):
        """dK, dV for one key block of one K/V head (``key_blocks``); with ``dq_accum_ptr`` (float32
        [B·H, S_q, D]) also each streamed tile's dQ share over these keys, reduce-added into it."""
        d, dtype = self.head_dim, self.dtype
        gq, gdo, gk, gv, key_block, kv_bh, first_bh = self.key_blocks(seq_q, seq_k, batch_heads, heads, group, q_ptr,
                                                                      k_ptr, v_ptr, do_ptr)
        gdk = self.global_view(dk_ptr, dtype=dtype, shape=[batch_heads // group, seq_k, d])
        gdv = self.global_view(dv_ptr, dtype=dtype, shape=[batch_heads // group, seq_k, d])
        glse = self.global_view(lse_ptr, dtype=float32, shape=[batch_heads, seq_q])
        gdd = self.global_view(dd_ptr, dtype=float32, shape=[batch_heads, seq_q])
        dq_view = None
        if self.accumulates_dq:
            dq_view = self.dq_accumulator(dq_accum_ptr, batch_heads, seq_q)
        self.kv_block(gq, gdo, gk, gv, gdk, gdv, glse, gdd, dq_view, group, scale, scale_log2, key_block, kv_bh,
                      first_bh, 0, 0, seq_q, seq_k)

    def key_blocks(self, seq_q, seq_k, batch_heads, heads, group, q_ptr, k_ptr, v_ptr, do_ptr):
        """The dense grid of key blocks, ⌈S_k/128⌉ for each of B·H_kv heads (``grid_order``), each with two consumer
        warpgroups and a producer warpgroup: the [heads, rows, D] views of Q, dO, K and V, the block's key block
        (its keys ``128 · key_block ...``), K/V head row and the first query head row of its group."""
        d, dtype = self.head_dim, self.dtype
        kv_heads = heads // group
        # Key block 0 sees every query tile under a causal mask, the last the fewest: the rank is the key block.
        key_block, kv_bh = self.grid_order(cdiv(seq_k, BLOCK_ROWS), batch_heads // group)
        self.attrs.warps = (CONSUMER_THREADS + WARPGROUP) // 32
        gq = self.global_view(q_ptr, dtype=dtype, shape=[batch_heads, seq_q, d])
        gdo = self.global_view(do_ptr, dtype=dtype, shape=[batch_heads, seq_q, d])
        gk = self.global_view(k_ptr, dtype=dtype, shape=[batch_heads // group, seq_k, d])
        gv = self.global_view(v_ptr, dtype=dtype, shape=[batch_heads // group, seq_k, d])
        first_bh: int32 = kv_bh // kv_heads * heads + kv_bh % kv_heads * group  # the group's first query head
        return gq, gdo, gk, gv, key_block, kv_bh, first_bh

    def query_tiles(self, seq_q, seq_k, group, block_m, key_block):
        """The first key of key block ``key_block`` and the query tiles of ``block_m`` rows it walks: (``offset_n``,
        the first tile that sees one of its keys, the tiles a query head from there, the (head, tile) items of the
        group)."""
        offset_n: int32 = BLOCK_ROWS * key_block
        first_tile: int32 = 0
        if self.causal:
            # Key offset_n is first seen by query offset_n - (S_k - S_q): earlier query tiles see none of the block.
            first_tile = max(offset_n - (seq_k - seq_q), 0) // block_m
        tiles_per_head: int32 = max(cdiv(seq_q, block_m) - first_tile, 0)
        return offset_n, first_tile, tiles_per_head, group * tiles_per_head

    def dq_accumulator(self, dq_accum_ptr, batch_heads, seq_q):
        """The float32 dQ accumulator [B·H, S_q, D]: a workspace added into in part (causal rows that see no key
        get no share and keep the zeros given)."""
        return self.global_view(dq_accum_ptr, dtype=float32, shape=[batch_heads, seq_q, self.head_dim], scratch=True)

    def kv_block(self, gq, gdo, gk, gv, gdk, gdv, glse, gdd, dq_view, group, scale, scale_log2, key_block, kv_bh,
                 first_bh, q_start, k_start, seq_q, seq_k):
        """Keys ``128 · key_block ...`` of K/V head row ``kv_bh`` against the query heads ``first_bh ...`` of its
        group: the sequence's queries are view rows ``q_start ...`` (``seq_q`` of them), its keys rows ``k_start
        ...`` (``seq_k``); both starts are 0 unless sequences are packed. ``dq_view``: the dQ accumulator's view
        when accumulating."""
        d, block_m, dtype = self.head_dim, self.block_m, self.dtype
        sk = self.shared_tensor(dtype=dtype, shape=[2, 1, 64, d])  # one 64-key slice per consumer warpgroup
        sv = self.shared_tensor(dtype=dtype, shape=[2, 1, 64, d])
        sq = self.shared_tensor(dtype=dtype, shape=[self.num_stages, 1, block_m, d])
        sdo = self.shared_tensor(dtype=dtype, shape=[self.num_stages, 1, block_m, d])
        kv_loaded = self.mbarrier.alloc(counts=[1])
        pipe = Pipeline(self.num_stages, consumer_arrivals=CONSUMER_THREADS)
        dq = None
        if self.accumulates_dq:
            dq = DQAccumulation(dq_view, dtype, d, block_m)

        offset_n, first_tile, tiles_per_head, n_items = self.query_tiles(seq_q, seq_k, group, block_m, key_block)

        # Packed sequences: a key block of the longest sequence only loads nothing and stores nothing.
        if not self.varlen or offset_n < seq_k:
            with self.thread_group(thread_begin=CONSUMER_THREADS, num_threads=WARPGROUP,
                                   max_registers=PRODUCER_REGISTERS):
                with self.thread_group(thread_begin=CONSUMER_THREADS, num_threads=32):
                    self.produce_kv(gq, gdo, gk, gv, sq, sdo, sk, sv, kv_loaded, pipe, kv_bh, first_bh,
                                    q_start, k_start + offset_n, first_tile, tiles_per_head, n_items, dq)
            with self.thread_group(thread_begin=0, num_threads=CONSUMER_THREADS, max_registers=CONSUMER_REGISTERS):
                for wg in range(2):
                    with self.thread_group(thread_begin=wg * WARPGROUP, num_threads=WARPGROUP):
                        self.consume_kv(wg, sk[wg], sv[wg], sq, sdo, glse, gdd, gdk, gdv, kv_loaded, pipe, scale,
                                        scale_log2, kv_bh, first_bh, offset_n, first_tile, tiles_per_head, n_items,
                                        q_start, k_start, seq_q, seq_k, dq)

    def produce_kv(self, gq, gdo, gk, gv, sq, sdo, sk, sv, kv_loaded, pipe, kv_bh, first_bh, q_start, k_row,
                   first_tile, tiles_per_head, n_items, dq=None):
        """The producer warp: the block's K and V once from view row ``k_row`` (K also in column halves when
        accumulating dQ), then (Q, dO) of every query tile of every head of the group (view rows ``q_start ...``)
        into one ring."""
        with self.single_thread():
            halves_bytes = 0
            if self.accumulates_dq:
                halves_bytes = dq.k_halves.nbytes
            self.mbarrier.arrive_and_expect_tx(kv_loaded[0], sk.nbytes + sv.nbytes + halves_bytes)
            for wg in range(2):
                self.tma.global_to_shared(src=gk, dst=sk[wg], offsets=[kv_bh, k_row + 64 * wg, 0],
                                          mbarrier=kv_loaded[0])
                self.tma.global_to_shared(src=gv, dst=sv[wg], offsets=[kv_bh, k_row + 64 * wg, 0],
                                          mbarrier=kv_loaded[0])
                if self.accumulates_dq:
                    for half in range(2):
                        self.tma.global_to_shared(src=gk, dst=dq.k_halves[wg][half],
                                                  offsets=[kv_bh, k_row + 64 * wg, half * (self.head_dim // 2)],
                                                  mbarrier=kv_loaded[0])
        for item in self.range(n_items):
            bh: int32 = first_bh + item // tiles_per_head
            q_row: int32 = q_start + (first_tile + item % tiles_per_head) * self.block_m
            pipe.producer_acquire()
            with self.single_thread():
                stage = pipe.producer_stage
                self.mbarrier.arrive_and_expect_tx(pipe.producer_barrier(), sq[stage].nbytes + sdo[stage].nbytes)
                self.tma.global_to_shared(src=gq, dst=sq[stage], offsets=[bh, q_row, 0],
                                          mbarrier=pipe.producer_barrier())
                self.tma.global_to_shared(src=gdo, dst=sdo[stage], offsets=[bh, q_row, 0],
                                          mbarrier=pipe.producer_barrier())
            pipe.producer_advance()
        # Stay until the consumers released every filled stage (their arrivals target this warp's barriers).
        for _ in self.range(min(self.num_stages, n_items)):
            pipe.producer_acquire()
            pipe.producer_advance()

    def consume_kv(self, wg, sk, sv, sq, sdo, glse, gdd, gdk, gdv, kv_loaded, pipe, scale, scale_log2, kv_bh,
                   first_bh, offset_n, first_tile, tiles_per_head, n_items, q_start, k_start, seq_q, seq_k, dq=None):
        """Consumer warpgroup ``wg``: keys ``offset_n + 64·wg ...`` against every streamed (Q, dO) tile, keys as
        rows so that Pᵀ and dSᵀ are the A operands of dV's and dK's WGMMAs straight from registers; with ``dq``,
        also the tile's dQ columns of half ``wg`` over the block's keys (``DQAccumulation``)."""
        d, block_m, dtype = self.head_dim, self.block_m, self.dtype
        pipe.consumer_stage = 0
        pipe.consumer_phase = self.mbarrier.consumer_initial_phase
        acc_dk = self.register_tensor(dtype=float32, shape=[64, d], init=0.0)
        acc_dv = self.register_tensor(dtype=float32, shape=[64, d], init=0.0)
        keys_from: int32 = offset_n + 64 * wg
        causal_shift: int32 = seq_k - seq_q
        self.mbarrier.wait(kv_loaded[0], phase=0)
        if self.overlaps and not self.accumulates_dq:
            self.overlapped_tiles(sk, sv, sq, sdo, glse, gdd, pipe, scale_log2, first_bh, first_tile, tiles_per_head,
                                  n_items, keys_from, q_start, seq_q, seq_k, causal_shift, acc_dk, acc_dv)
        else:
            for item in self.range(n_items):
                bh: int32 = first_bh + item // tiles_per_head
                offset_m: int32 = (first_tile + item % tiles_per_head) * block_m
                pipe.consumer_acquire()
                stage = pipe.consumer_stage
                acc_s, acc_dp = self.scores(sk, sv, sq, sdo, stage)
                # The tile's lse and D (a value per query column) loaded together under the Sᵀ and dPᵀ GEMMs: D's
                # round trip to memory used to start after dV's issue and stall dSᵀ (on the H100, 2026-12-06, this
                # kernel took 3.67 ms instead of 3.99 at seq 8192, D 128). lse before the stage's wait was slower
                # (3.79: it then stays in registers across the wait); both there made ptxas inject WGMMA waits.
                lse = self.load_global(glse, offsets=[bh, q_start + offset_m], shape=[1, block_m])
                dd = self.load_global(gdd, offsets=[bh, q_start + offset_m], shape=[1, block_m])
                self.wgmma.wait_group(1)
                probs16, probs = self.probabilities(acc_s, lse, scale_log2, keys_from, offset_m, seq_q, seq_k,
                                                    causal_shift)
                self.wgmma.fence()  # after the cast writes the A registers
                self.wgmma.mma(probs16, sdo[stage][0], acc_dv)  # dV += Pᵀ·dO
                self.wgmma.commit_group()
                self.wgmma.wait_group(1)  # dPᵀ is done (dV's group may still run)
                grads = self.cast(probs * (acc_dp - dd), dtype)
                if self.accumulates_dq:
                    self.share_grads(dq, wg, item, grads)  # before dK's WGMMA: its A registers stay untouched after
                self.wgmma.fence()
                self.wgmma.mma(grads, sq[stage][0], acc_dk)  # dK += dSᵀ·Q
                self.wgmma.commit_group()
                if self.accumulates_dq:
                    self.accumulate_dq(dq, wg, item, bh, q_start + offset_m)
                self.retire_tile(pipe)
        if self.accumulates_dq:
            with self.single_thread():
                self.tma.wait_group(0)  # the last reduce-add has read its staging tile before the block exits
        self.store_rows(sk, gdk, self.cast(acc_dk * scale, dtype), kv_bh, keys_from, k_start, seq_k)
        self.store_rows(sv, gdv, self.cast(acc_dv, dtype), kv_bh, keys_from, k_start, seq_k)

    def scores(self, sk, sv, sq, sdo, stage):
        """Issue Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ of the tile in ``stage`` (two WGMMA groups); their accumulators."""
        acc_s = self.register_tensor(dtype=float32, shape=[64, self.block_m], init=0.0)
        acc_dp = self.register_tensor(dtype=float32, shape=[64, self.block_m], init=0.0)
        self.wgmma.fence()
        self.wgmma.mma(sk[0], sq[stage][0].transpose(), acc_s)  # Sᵀ = K·Qᵀ
        self.wgmma.commit_group()
        self.wgmma.mma(sv[0], sdo[stage][0].transpose(), acc_dp)  # dPᵀ = V·dOᵀ
        self.wgmma.commit_group()
        return acc_s, acc_dp

    def probabilities(self, acc_s, lse, scale_log2, keys_from, offset_m, seq_q, seq_k, causal_shift):
        """Pᵀ = exp2(Sᵀ · scale_log2 - lse) of the warpgroup's keys ``keys_from ...`` (rows) and the query tile
        ``offset_m ...`` (columns), 0 where the pair is masked: in the kernel's dtype (dV's register A operand) and in
        float32 (for dSᵀ, which is then 0 there too).

        Masked, where the tile holds such a pair (a runtime branch: most tiles hold none): for ``causal``, keys past
        each query's last (bottom-right aligned); packed, query columns past the sequence's end, which are the next
        sequence's rows (their Q, dO, lse and D are real, so their P and dS would be too, and reach dV and dK), and,
        when dQ shares are summed over the keys, key rows past it (the next sequence's keys). Without the shares a
        key row's P and dS only reach its own dK and dV rows, which are not stored; and causal, a key past the end is
        after the last key of every query of the sequence. The mask selects 0 after exp2, so a column's lse of
        another sequence (or +inf: a row without keys) never reaches dV or dK through an inf or NaN."""
        probs = self.exp2(acc_s * scale_log2 - lse)
        needs_mask = False
        if self.varlen:
            needs_mask = offset_m + self.block_m > seq_q
            if self.accumulates_dq and not self.causal:
                needs_mask = needs_mask or keys_from + 64 > seq_k
        if self.causal:
            needs_mask = needs_mask or keys_from + 63 > offset_m + causal_shift  # the tile crosses the diagonal
        if needs_mask:
            queries = self.col_index(probs) + offset_m
            if self.causal:
                keep = self.row_index(probs) + keys_from <= queries + causal_shift
                if self.varlen:
                    keep = keep & (queries < seq_q)
            else:
                keep = queries < seq_q
                if self.accumulates_dq:
                    keep = keep & (self.row_index(probs) + keys_from < seq_k)
            probs = self.where(keep, probs, 0.0)
        return self.cast(probs, self.dtype), probs

    def overlapped_tiles(self, sk, sv, sq, sdo, glse, gdd, pipe, scale_log2, first_bh, first_tile, tiles_per_head,
                         n_items, keys_from, q_start, seq_q, seq_k, causal_shift, acc_dk, acc_dv):
        """The deterministic path's walk over the (Q, dO) tiles, with each tile's dK WGMMA issued at the next
        tile, behind its Sᵀ and dPᵀ: the tensor cores run it while this warpgroup exponentiates. Its stage goes
        back to the producer once that dK is done. Nothing is in flight across the loop's back edge (ptxas
        serializes every WGMMA of a loop whose groups stay in flight from one iteration to the next, advisory
        C7513), so dV is waited for at the end of its own tile, after dSᵀ is computed under it. Only for D 64
        (``overlaps``): at D 128 the previous tile's dSᵀ beside this tile's tensors passes the consumers' 240
        registers and spills."""
        block_m, dtype = self.block_m, self.dtype
        if n_items > 0:
            # Tile 0, peeled: no earlier dK to issue (the loop's body stays free of branches around WGMMAs).
            offset_m: int32 = first_tile * block_m
            pipe.consumer_acquire()
            held: int32 = pipe.consumer_stage  # the stage whose Q the pending dK reads
            # Names of their own: the loop below rebinds its tile's tensors, which must not be these.
            first_s, first_dp = self.scores(sk, sv, sq, sdo, held)
            first_lse = self.load_global(glse, offsets=[first_bh, q_start + offset_m], shape=[1, block_m])
            first_dd = self.load_global(gdd, offsets=[first_bh, q_start + offset_m], shape=[1, block_m])
            self.wgmma.wait_group(1)
            first_p16, first_p = self.probabilities(first_s, first_lse, scale_log2, keys_from, offset_m, seq_q,
                                                    seq_k, causal_shift)
            self.wgmma.fence()
            self.wgmma.mma(first_p16, sdo[held][0], acc_dv)  # dV += Pᵀ·dO
            self.wgmma.commit_group()
            self.wgmma.wait_group(1)  # dPᵀ
            grads = self.cast(first_p * (first_dp - first_dd), dtype)
            self.wgmma.wait_group(0)  # dV
            pipe.consumer_advance()
            for item in self.range(1, n_items):
                bh: int32 = first_bh + item // tiles_per_head
                offset_m = (first_tile + item % tiles_per_head) * block_m
                pipe.consumer_acquire()
                stage = pipe.consumer_stage
                acc_s, acc_dp = self.scores(sk, sv, sq, sdo, stage)
                self.wgmma.mma(grads, sq[held][0], acc_dk)  # the previous tile's dK, behind Sᵀ and dPᵀ
                self.wgmma.commit_group()
                lse = self.load_global(glse, offsets=[bh, q_start + offset_m], shape=[1, block_m])
                dd = self.load_global(gdd, offsets=[bh, q_start + offset_m], shape=[1, block_m])
                self.wgmma.wait_group(2)  # Sᵀ (dPᵀ and the previous dK run on)
                probs16, probs = self.probabilities(acc_s, lse, scale_log2, keys_from, offset_m, seq_q, seq_k,
                                                    causal_shift)
                self.wgmma.fence()
                self.wgmma.mma(probs16, sdo[stage][0], acc_dv)  # dV += Pᵀ·dO
                self.wgmma.commit_group()
                self.retire_previous(pipe, held, 1)  # dPᵀ and the previous dK (dV runs on)
                grads = self.cast(probs * (acc_dp - dd), dtype)  # the previous dK, their reader, is done
                self.wgmma.wait_group(0)  # dV
                held = stage
                pipe.consumer_advance()
            self.wgmma.fence()
            self.wgmma.mma(grads, sq[held][0], acc_dk)  # the last tile's dK
            self.wgmma.commit_group()
            self.retire_previous(pipe, held, 0)

    def retire_previous(self, pipe, held, pending):
        """Wait until at most ``pending`` WGMMA groups are in flight (the previous tile's dK, the last reader of
        its stage, among those done), then hand that stage, ``held``, back to the producer."""
        self.wgmma.wait_group(pending)
        self.mbarrier.arrive(pipe.empty_barriers[held])

    def share_grads(self, dq, wg, item, grads):
        """Warpgroup ``wg`` stores its dSᵀ (``grads``, [64 keys, block_m]) into ``dq.grads[wg]`` once the other
        warpgroup's dQ WGMMA of the previous tile has read it (a fresh barrier passes parity 1: tile 0 waits for
        nothing)."""
        self.mbarrier.wait(dq.handoff[1], phase=(item & 1) ^ 1)
        self.store_shared(dq.grads[wg], grads)
        self.fence_proxy_async()  # the ordinary stores become visible to the other warpgroup's WGMMA (async proxy)
        self.mbarrier.arrive(dq.handoff[0])

    def accumulate_dq(self, dq, wg, item, bh, q_row):
        """Warpgroup ``wg``: column half ``wg`` of the tile's dQ share from both dSᵀ tiles, reduce-added at view row
        ``q_row``."""
        self.mbarrier.wait(dq.handoff[0], phase=item & 1)
        acc_dq = self.register_tensor(dtype=float32, shape=[self.block_m, dq.half], init=0.0)
        self.wgmma.fence()
        for j in range(2):
            self.wgmma.mma(dq.grads[j].transpose(), dq.k_halves[j][wg][0], acc_dq)  # += dS_j · K_j[:, half wg]
        self.wgmma.commit_group()
        self.wgmma.wait_group(0)  # also dK's and dV's: the stage may go back to the producer after this
        self.mbarrier.arrive(dq.handoff[1])
        self.reduce_dq(dq, wg, acc_dq, bh, q_row)

    def reduce_dq(self, dq, wg, acc_dq, bh, q_row):
        """Warpgroup ``wg``'s column half of the tile's dQ share, reduce-added at view row ``q_row``."""
        self.reduce_share(dq.staging[wg], dq.view, acc_dq, bh, q_row, wg * dq.half)

    def reduce_share(self, staging, view, acc_dq, bh, row, column):
        """``acc_dq`` -> ``staging`` once the previous tile's reduce-add has read it -> one TMA reduce-add into the
        float32 accumulator ``view`` at (``bh``, ``row``, ``column``), waited for at the next tile (or the block's
        end), not here."""
        with self.single_thread():
            self.tma.wait_group(0)
        self.sync()  # the issuing thread's wait orders the warpgroup's stores below
        self.store_shared(staging[0], acc_dq)
        self.fence_proxy_async()
        self.sync()
        with self.single_thread():
            self.tma.shared_to_global(src=staging, dst=view, offsets=[bh, row, column], reduce="add")
            self.tma.commit_group()

    def retire_tile(self, pipe):
        """Wait for dV's and dK's WGMMAs (they read the stage's dO and Q) and only then hand the stage back to the
        producer, whose next TMA load may overwrite it."""
        self.wgmma.wait_group(0)
        pipe.consumer_release()
        pipe.consumer_advance()


class BackwardKVDQ(BackwardKV):
    """``BackwardKV`` that also accumulates dQ: per streamed (Q, dO) tile, the block's share dS·K over its 128 keys
    is reduce-added in float32 into ``dq_accum`` [B·H, S_q, D] (zero before the launch; dQ is ``scale`` times the
    sum of every block's shares, in whatever order they land)."""

    accumulates_dq = True

    def kernel_name(self) -> str:
        """``BackwardKVDQF16`` or ``BackwardKVDQBF16``."""
        return typed_kernel_name(self, BackwardKVDQ, "BackwardKVDQ", (self.dtype,))

    def __call__(self, seq_q: int32, seq_k: int32, batch_heads: int32, heads: int32, group: int32, scale: float32,
                 scale_log2: float32, q_ptr: ~self.dtype, k_ptr: ~self.dtype, v_ptr: ~self.dtype,
                 do_ptr: ~self.dtype, lse_ptr: ~float32, dd_ptr: ~float32, dk_ptr: ~self.dtype, dv_ptr: ~self.dtype,
                 dq_accum_ptr: ~float32):
        self.backward_kv(seq_q, seq_k, batch_heads, heads, group, scale, scale_log2, q_ptr, k_ptr, v_ptr, do_ptr,
                         lse_ptr, dd_ptr, dk_ptr, dv_ptr, dq_accum_ptr)


class BackwardFused(BackwardKVDQ):
    """dK and dV of 128 keys of one K/V head and each streamed query tile's dQ share over them, in one kernel whose
    consumer warpgroups split the query rows instead of the keys (FlashAttention-3's arrangement); ``dtype``
    operands and gradients, D 64 (at 128, dK, dV, S and dP of 128 keys would take 256 registers a thread).

    Per (Q, dO) tile of 128 query rows, warpgroup w takes rows 64·w ...: S = Q·Kᵀ and dP = dO·Vᵀ against the block's
    128 keys (m64n128 WGMMAs), P with lse one value a row (a column vector: two registers, not a row vector of 32),
    stored (16-bit) into shared memory by key half as ``probs[h][w]``; once both warpgroups stored theirs
    (``p_written``), dV of key half w over both query halves, dV_w += Σⱼ P[w][j]ᵀ·dOⱼ, runs under this warpgroup's
    dS = P ∘ (dP - D), which goes to ``grads[h][w]`` (``ds_written``) and, straight from registers, into the rows'
    dQ share dS·K; then dK_w += Σⱼ dS[w][j]ᵀ·Qⱼ runs while the share is reduce-added in float32 into ``dq_accum``, as
    ``BackwardKVDQ``'s shares are. Both warpgroups' arrivals on ``read`` (their dV and dK done) free the shared P
    and dS for the next tile. One exponential and five GEMMs an element of S, and no hand-off of dQ between the
    warpgroups.

    ``transposed``: warpgroup 0 computes dVᵀ = Σⱼ dOⱼᵀ·P[j] and warpgroup 1 dKᵀ = Σⱼ Qⱼᵀ·dS[j] of all 128 keys
    ([D, 128] accumulators: the same 64 registers a thread as dK and dV of 64 keys), P and dS stored [query half,
    64 queries, 128 keys]. Each of those GEMMs is then m64n128k16 steps, which read 6 KB of shared memory per
    262 kFLOP where the m64n64k16 steps of a key half read 4 KB per 131 kFLOP: per tile, 96 KB of operand reads
    for dV and dK instead of 128, of 320 KB of shared-memory traffic in all (P and dS stores included). Each
    warpgroup waits only for the barrier its GEMM needs (``p_written`` for dV, ``ds_written`` for dK), and dK and
    dV leave transposed back through the (Q, dO) ring and TMA stores (``store_keys_major``)."""

    def __init__(self, dtype, head_dim, causal, num_stages, transposed=False):
        super().__init__(dtype, head_dim, causal, block_m=BLOCK_ROWS, num_stages=num_stages)
        if head_dim != 64:
            raise ArgumentError(f"BackwardFused takes head_dim 64 (at 128 its tiles pass the registers and the "
                                f"227 KB of shared memory), got {head_dim}")
        if not isinstance(transposed, bool):
            raise ArgumentError(f"BackwardFused transposed must be True or False, got {transposed!r}")
        self.transposed = transposed

    def kernel_name(self) -> str:
        """``BackwardFusedF16`` or ``BackwardFusedBF16``."""
        return typed_kernel_name(self, BackwardFused, "BackwardFused", (self.dtype,))

    def backward_kv(self, seq_q, seq_k, batch_heads, heads, group, scale, scale_log2, q_ptr, k_ptr, v_ptr, do_ptr,
                    lse_ptr, dd_ptr, dk_ptr, dv_ptr, dq_accum_ptr=None):
        """dK, dV for one key block of one K/V head (``key_blocks``) and each streamed tile's dQ share
        over them, reduce-added into ``dq_accum_ptr`` (float32 [B·H, S_q, D])."""
        d, dtype = self.head_dim, self.dtype
        gq, gdo, gk, gv, key_block, kv_bh, first_bh = self.key_blocks(seq_q, seq_k, batch_heads, heads, group, q_ptr,
                                                                      k_ptr, v_ptr, do_ptr)
        if self.transposed:  # [K/V heads, S_k, D]: TMA stores of the [D, keys] accumulators' transposes
            gdk = self.global_view(dk_ptr, dtype=dtype, shape=[batch_heads // group, seq_k, d])
            gdv = self.global_view(dv_ptr, dtype=dtype, shape=[batch_heads // group, seq_k, d])
        else:  # [K/V heads · S_k, D]: rows stored from registers, each store bounded by its head's last key
            gdk = self.global_view(dk_ptr, dtype=dtype, shape=[batch_heads // group * seq_k, d])
            gdv = self.global_view(dv_ptr, dtype=dtype, shape=[batch_heads // group * seq_k, d])
        # lse and D [B·H, S_q] seen as [S_q, B·H]: a warpgroup's [64, 1] column per query tile, as BackwardQ's.
        glse = self.global_view(lse_ptr, dtype=float32, shape=[seq_q, batch_heads], strides=[1, seq_q])
        gdd = self.global_view(dd_ptr, dtype=float32, shape=[seq_q, batch_heads], strides=[1, seq_q])
        gdq = self.dq_accumulator(dq_accum_ptr, batch_heads, seq_q)

        sk = self.shared_tensor(dtype=dtype, shape=[1, BLOCK_ROWS, d])  # the block's 128 keys
        sv = self.shared_tensor(dtype=dtype, shape=[1, BLOCK_ROWS, d])
        sq = self.shared_tensor(dtype=dtype, shape=[self.num_stages, 2, 1, 64, d])  # a tile's two query halves
        sdo = self.shared_tensor(dtype=dtype, shape=[self.num_stages, 2, 1, 64, d])
        # [key half, query half, queries, keys], or transposed [query half, queries, keys]
        held = [2, 64, BLOCK_ROWS] if self.transposed else [2, 2, 64, 64]
        probs = self.shared_tensor(dtype=dtype, shape=held)
        grads = self.shared_tensor(dtype=dtype, shape=held)
        staging = self.shared_tensor(dtype=float32, shape=[2, 1, 64, d])  # each warpgroup's dQ share
        kv_loaded = self.mbarrier.alloc(counts=[1])
        handoff = self.mbarrier.alloc(counts=[CONSUMER_THREADS] * 3)  # P written, dS written, both read
        pipe = Pipeline(self.num_stages, consumer_arrivals=CONSUMER_THREADS)

        offset_n, first_tile, tiles_per_head, n_items = self.query_tiles(seq_q, seq_k, group, BLOCK_ROWS, key_block)

        with self.thread_group(thread_begin=CONSUMER_THREADS, num_threads=WARPGROUP, max_registers=PRODUCER_REGISTERS):
            with self.thread_group(thread_begin=CONSUMER_THREADS, num_threads=32):
                self.produce_fused(gq, gdo, gk, gv, sq, sdo, sk, sv, kv_loaded, pipe, kv_bh, first_bh, offset_n,
                                   first_tile, tiles_per_head, n_items)
        with self.thread_group(thread_begin=0, num_threads=CONSUMER_THREADS, max_registers=CONSUMER_REGISTERS):
            for wg in range(2):
                with self.thread_group(thread_begin=wg * WARPGROUP, num_threads=WARPGROUP):
                    self.consume_fused(wg, sk, sv, sq, sdo, probs, grads, staging, handoff, glse, gdd, gdk, gdv, gdq,
                                       kv_loaded, pipe, scale, scale_log2, kv_bh, first_bh, offset_n, first_tile,
                                       tiles_per_head, n_items, seq_q, seq_k)

    def produce_fused(self, gq, gdo, gk, gv, sq, sdo, sk, sv, kv_loaded, pipe, kv_bh, first_bh, offset_n, first_tile,
                      tiles_per_head, n_items):
        """The producer warp: the block's K and V once, then (Q, dO) of every 128-row query tile of every head of
        the group, each in two halves of 64 rows, into one ring."""
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(kv_loaded[0], sk.nbytes + sv.nbytes)
            self.tma.global_to_shared(src=gk, dst=sk, offsets=[kv_bh, offset_n, 0], mbarrier=kv_loaded[0])
            self.tma.global_to_shared(src=gv, dst=sv, offsets=[kv_bh, offset_n, 0], mbarrier=kv_loaded[0])
        for item in self.range(n_items):
            bh: int32 = first_bh + item // tiles_per_head
            q_row: int32 = (first_tile + item % tiles_per_head) * BLOCK_ROWS
            pipe.producer_acquire()
            with self.single_thread():
                stage = pipe.producer_stage
                self.mbarrier.arrive_and_expect_tx(pipe.producer_barrier(), sq[stage].nbytes + sdo[stage].nbytes)
                for j in range(2):
                    self.tma.global_to_shared(src=gq, dst=sq[stage][j], offsets=[bh, q_row + 64 * j, 0],
                                              mbarrier=pipe.producer_barrier())
                    self.tma.global_to_shared(src=gdo, dst=sdo[stage][j], offsets=[bh, q_row + 64 * j, 0],
                                              mbarrier=pipe.producer_barrier())
            pipe.producer_advance()
        # Stay until the consumers released every filled stage (their arrivals target this warp's barriers).
        for _ in self.range(min(self.num_stages, n_items)):
            pipe.producer_acquire()
            pipe.producer_advance()

    def consume_fused(self, wg, sk, sv, sq, sdo, probs, grads, staging, handoff, glse, gdd, gdk, gdv, gdq, kv_loaded,
                      pipe, scale, scale_log2, kv_bh, first_bh, offset_n, first_tile, tiles_per_head, n_items, seq_q,
                      seq_k):
        """Consumer warpgroup ``wg``: query rows 64·wg ... of every streamed tile against the block's 128 keys, and
        dK, dV of keys ``offset_n + 64·wg ...`` (``transposed``: dVᵀ of all 128 keys for warpgroup 0, dKᵀ for 1)."""
        d, dtype = self.head_dim, self.dtype
        pipe.consumer_stage = 0
        pipe.consumer_phase = self.mbarrier.consumer_initial_phase
        # Which of dV and dK this warpgroup computes, and their accumulators' shape.
        does_dv, does_dk = (wg == 0, wg == 1) if self.transposed else (True, True)
        shape = [d, BLOCK_ROWS] if self.transposed else [64, d]
        acc_dk = self.register_tensor(dtype=float32, shape=shape, init=0.0) if does_dk else None
        acc_dv = self.register_tensor(dtype=float32, shape=shape, init=0.0) if does_dv else None
        tiles = FusedTiles(wg, sk, sv, sq, sdo, probs, grads, staging, handoff, glse, gdd, gdq, scale_log2, first_bh,
                           offset_n, first_tile, tiles_per_head, seq_k - seq_q)
        self.mbarrier.wait(kv_loaded[0], phase=0)
        for item in self.range(n_items):
            pipe.consumer_acquire()
            stage = pipe.consumer_stage
            acc_s, acc_dp = self.fused_scores(tiles, stage)
            lse, dd = self.fused_row_values(tiles, item)
            self.wgmma.wait_group(1)  # S
            p = self.fused_probabilities(tiles, acc_s, lse, item)
            self.fused_store_p(tiles, p, item)
            if does_dv:
                self.fused_dv(tiles, item, stage, acc_dv)
            self.wgmma.wait_group(1 if does_dv else 0)  # dP (dV runs on under dS)
            ds = self.fused_store_ds(tiles, p, acc_dp, dd)
            acc_dq = self.fused_dq(tiles, ds)
            if does_dk:
                self.fused_dk(tiles, item, stage, acc_dk)
            self.wgmma.wait_group(1 if does_dk else 0)  # dV and the dQ share (dK runs on under its reduce-add)
            self.fused_reduce(tiles, acc_dq, item)
            self.wgmma.wait_group(0)
            self.mbarrier.arrive(tiles.read)
            pipe.consumer_release()
            pipe.consumer_advance()
        if self.transposed:  # the last reduce-add runs on under the stores, whose wait covers it
            if does_dk:
                self.store_keys_major(tiles, sq, gdk, self.cast(acc_dk * scale, dtype), kv_bh, n_items)
            else:
                self.store_keys_major(tiles, sdo, gdv, self.cast(acc_dv, dtype), kv_bh, n_items)
        else:
            with self.single_thread():
                self.tma.wait_group(0)  # the last reduce-add has read its staging tile before the block exits
            # From registers (the shared K and V, which the other warpgroup may still read, hold the block's 128
            # keys), up to the head's last key.
            head_end: int32 = kv_bh * seq_k + seq_k
            row: int32 = kv_bh * seq_k + offset_n + 64 * wg
            self.store_global(gdk, self.cast(acc_dk * scale, dtype), offsets=[row, 0], row_end=head_end)
            self.store_global(gdv, self.cast(acc_dv, dtype), offsets=[row, 0], row_end=head_end)

    def store_keys_major(self, tiles, ring, view, grad, kv_bh, n_items):
        """The warpgroup's finished [D, 128 keys] gradient ``grad`` (``transposed``) -> its transpose, the block's
        keys as rows, in the first stage of ``ring`` (its two [64, D] query halves, one a key half each) -> two TMA
        stores into the [K/V heads, S_k, D] ``view``, which clip keys past the head's end. (Stored from registers
        into global memory, a [D, keys] fragment's neighbours land a row apart: one uncoalesced 2-byte store each,
        about 3 µs of a 55 µs block at seq 2048 in the H100's timeline.) The ring is free once both warpgroups' last
        GEMMs are done, each arriving on ``read`` after them (the last tile's parity): the producer loads no more
        than the tiles consumed."""
        if n_items > 0:
            self.mbarrier.wait(tiles.read, phase=(n_items - 1) & 1)
        self.ring_stores(tiles, ring, view, grad, kv_bh)

    def ring_stores(self, tiles, ring, view, grad, kv_bh):
        """``store_keys_major``'s stores, once the ring is free: ``grad``'s transpose into the ring's first stage, a
        key half per query half, then one TMA store of each."""
        for half in range(2):
            self.store_shared(ring[0][half][0].transpose(), grad, column=64 * half)
        self.fence_proxy_async()  # the ordinary stores become visible to the TMA stores' async-proxy reads
        self.sync()
        with self.single_thread():
            for half in range(2):
                self.tma.shared_to_global(src=ring[0][half], dst=view,
                                          offsets=[kv_bh, tiles.offset_n + 64 * half, 0])
            self.tma.commit_group()
            self.tma.wait_group(0)  # these stores and the last reduce-add of dQ, before the block exits

    def fused_scores(self, tiles, stage):
        """Issue S = Q·Kᵀ and dP = dO·Vᵀ of the warpgroup's 64 rows of the tile in ``stage`` against the block's
        128 keys (two WGMMA groups); their [64, 128] accumulators."""
        acc_s = self.register_tensor(dtype=float32, shape=[64, BLOCK_ROWS], init=0.0)
        acc_dp = self.register_tensor(dtype=float32, shape=[64, BLOCK_ROWS], init=0.0)
        self.wgmma.fence()
        self.wgmma.mma(tiles.sq[stage][tiles.wg][0], tiles.sk[0].transpose(), acc_s)  # S = Q·Kᵀ
        self.wgmma.commit_group()
        self.wgmma.mma(tiles.sdo[stage][tiles.wg][0], tiles.sv[0].transpose(), acc_dp)  # dP = dO·Vᵀ
        self.wgmma.commit_group()
        return acc_s, acc_dp

    def fused_row_values(self, tiles, item):
        """The lse and D of the warpgroup's rows of tile ``item`` (columns: one value a row), loaded while S and dP
        run: loaded after their waits, each round trip to memory stalled the tile (as in ``consume_kv``)."""
        rows_from: int32 = tiles.rows_of(item)
        head: int32 = tiles.head_of(item)
        lse = self.load_global(tiles.glse, offsets=[rows_from, head], shape=[64, 1])
        dd = self.load_global(tiles.gdd, offsets=[rows_from, head], shape=[64, 1])
        return lse, dd

    def fused_probabilities(self, tiles, acc_s, lse, item):
        """P = exp2(S · scale_log2 - lse) of the warpgroup's rows of tile ``item`` against the block's keys (lse a
        column: one value a row), 0 past the causal diagonal where the tile crosses it (a runtime branch). Rows and
        keys past the head's lengths read as zeros and need no mask (their dO, Q or K rows are zero)."""
        rows_from: int32 = tiles.rows_of(item)
        p = self.exp2(acc_s * tiles.scale_log2 - lse)
        if self.causal:
            if tiles.offset_n + BLOCK_ROWS - 1 > rows_from + tiles.causal_shift:  # the tile crosses the diagonal
                keep = self.col_index(p) + tiles.offset_n <= self.row_index(p) + (rows_from + tiles.causal_shift)
                p = self.where(keep, p, 0.0)
        return p

    def fused_store_p(self, tiles, p, item):
        """Tile ``item``'s P (``p``) of the warpgroup's rows into the shared buffer once both warpgroups' dV and dK
        have read the previous tile's, announced on ``p_written``."""
        # A fresh barrier passes parity 1: tile 0 waits for nothing.
        self.mbarrier.wait(tiles.read, phase=(item & 1) ^ 1)
        p16 = self.cast(p, self.dtype)
        if self.transposed:
            self.store_shared(tiles.probs[tiles.wg], p16)
        else:
            for h in range(2):
                self.store_shared(tiles.probs[h][tiles.wg], p16, column=64 * h)
        self.fence_proxy_async()  # the ordinary stores become visible to both warpgroups' WGMMAs (async proxy)
        self.mbarrier.arrive(tiles.p_written)

    def fused_store_ds(self, tiles, p, acc_dp, dd):
        """The tile's dS = P ∘ (dP - D) of the warpgroup's rows (dP done; ``dd``: their D) into the shared buffer,
        announced on ``ds_written``; dS, the dQ share's register A operand."""
        ds = self.cast(p * (acc_dp - dd), self.dtype)
        if self.transposed:
            self.store_shared(tiles.grads[tiles.wg], ds)
        else:
            for h in range(2):
                self.store_shared(tiles.grads[h][tiles.wg], ds, column=64 * h)
        self.fence_proxy_async()
        self.mbarrier.arrive(tiles.ds_written)
        return ds

    def fused_dq(self, tiles, ds):
        """Issue the warpgroup's rows' dQ share dS·K (dS from registers; one WGMMA group); its accumulator."""
        acc_dq = self.register_tensor(dtype=float32, shape=[64, self.head_dim], init=0.0)
        self.wgmma.fence()
        self.wgmma.mma(ds, tiles.sk[0], acc_dq)
        self.wgmma.commit_group()
        return acc_dq

    def fused_dv(self, tiles, item, stage, acc_dv):
        """Once both warpgroups stored tile ``item``'s P, issue dV += Σⱼ P[w][j]ᵀ·dOⱼ of this warpgroup's key half w
        over both query halves, or (``transposed``) dVᵀ += Σⱼ dOⱼᵀ·P[j] of all 128 keys (a WGMMA group)."""
        self.mbarrier.wait(tiles.p_written, phase=item & 1)
        self.wgmma.fence()
        for j in range(2):
            if self.transposed:
                self.wgmma.mma(tiles.sdo[stage][j][0].transpose(), tiles.probs[j], acc_dv)
            else:
                self.wgmma.mma(tiles.probs[tiles.wg][j].transpose(), tiles.sdo[stage][j][0], acc_dv)
        self.wgmma.commit_group()

    def fused_dk(self, tiles, item, stage, acc_dk):
        """Once both warpgroups stored tile ``item``'s dS, issue dK += Σⱼ dS[w][j]ᵀ·Qⱼ of this warpgroup's key half
        w over both query halves, or (``transposed``) dKᵀ += Σⱼ Qⱼᵀ·dS[j] of all 128 keys (a WGMMA group)."""
        self.mbarrier.wait(tiles.ds_written, phase=item & 1)
        self.wgmma.fence()
        for j in range(2):
            if self.transposed:
                self.wgmma.mma(tiles.sq[stage][j][0].transpose(), tiles.grads[j], acc_dk)
            else:
                self.wgmma.mma(tiles.grads[tiles.wg][j].transpose(), tiles.sq[stage][j][0], acc_dk)
        self.wgmma.commit_group()

    def fused_reduce(self, tiles, acc_dq, item):
        """Tile ``item``'s dQ share of the warpgroup's rows, reduce-added into the float32 accumulator."""
        self.reduce_share(tiles.staging[tiles.wg], tiles.gdq, acc_dq, tiles.head_of(item), tiles.rows_of(item), 0)


class FusedTiles(Class):
    """What ``BackwardFused``'s per-tile steps read for consumer warpgroup ``wg``: the shared tiles and barriers, the
    views of lse, D and the dQ accumulator, and where tile ``item`` lies (its query head and rows). The barriers of
    the shared P and dS (``p_written``, ``ds_written``, ``read``: 256 arrivals, both warpgroups) complete once per
    tile, so a tile's parity is its phase."""

    def __init__(self, wg, sk, sv, sq, sdo, probs, grads, staging, handoff, glse, gdd, gdq, scale_log2, first_bh,
                 offset_n, first_tile, tiles_per_head, causal_shift):
        self.wg = wg
        self.sk, self.sv, self.sq, self.sdo = sk, sv, sq, sdo
        self.probs, self.grads, self.staging = probs, grads, staging
        self.p_written = handoff[0]
        self.ds_written = handoff[1]
        self.read = handoff[2]
        self.glse, self.gdd, self.gdq = glse, gdd, gdq
        self.scale_log2 = scale_log2
        self.first_bh: int32 = first_bh
        self.offset_n: int32 = offset_n
        self.first_tile: int32 = first_tile
        self.tiles_per_head: int32 = tiles_per_head
        self.causal_shift: int32 = causal_shift

    def head_of(self, item):
        """The query head row of tile ``item``."""
        return self.first_bh + item // self.tiles_per_head

    def rows_of(self, item):
        """The first query row of the warpgroup's half of tile ``item``."""
        return (self.first_tile + item % self.tiles_per_head) * BLOCK_ROWS + 64 * self.wg


class DQAccumulation(Class):
    """The state of ``BackwardKVDQ``'s dQ shares (``BackwardKV.share_grads``, ``accumulate_dq``, ``reduce_dq``):
    per (Q, dO) tile, dQ[block_m, D] += dS·K over the block's 128 keys.

    Each consumer warpgroup holds dSᵀ of its 64 keys; both store them (16-bit) into ``grads`` [2, 64 keys,
    block_m], and then warpgroup h computes dQ's column half h from both: Σ_j grads[j]ᵀ · K_j[:, half h] (an
    MN-major A and B from shared memory), so each does half the GEMM and neither waits on the other beyond the
    hand-off. K's column halves are a second copy of K (``k_halves``: shared tiles are indexed by leading
    dimensions only, not sliced). The float32 half goes through ``staging[h]`` and one TMA reduce-add of the
    warpgroup's own into dQ: the same bytes as one reduce-add of the whole tile. Two mbarriers of 256 arrivals
    (both warpgroups) hand ``grads`` over: ``written`` (both halves stored, fenced) and ``read`` (both dQ WGMMAs
    done, so the next tile may overwrite it); each completes once per tile, so the tile's parity is its phase.
    ``view`` is the float32 accumulator's 3-D view, [heads, rows, D]."""

    def __init__(self, view, dtype, d, block_m):
        self.half = d // 2
        self.view = view
        self.k_halves = self.shared_tensor(dtype=dtype, shape=[2, 2, 1, 64, d // 2])
        self.grads = self.shared_tensor(dtype=dtype, shape=[2, 64, block_m])
        self.staging = self.shared_tensor(dtype=float32, shape=[2, 1, block_m, d // 2])
        self.handoff = self.mbarrier.alloc(counts=[CONSUMER_THREADS, CONSUMER_THREADS])  # written, read
        self.block_m = block_m


class ConvertDQ(Script):
    """dq = scale · dq_accum in ``dtype``: one warpgroup per 64 rows of the [rows, D] float32 accumulator that
    ``BackwardKVDQ`` reduce-added into (rows = B·H·S_q, every head's rows one after another)."""

    def __init__(self, dtype, head_dim):
        super().__init__()
        self.dtype = element_dtype(dtype)
        _check_head_dim(head_dim)
        self.head_dim = head_dim

    def kernel_name(self) -> str:
        """``ConvertDQF16`` or ``ConvertDQBF16``."""
        return typed_kernel_name(self, ConvertDQ, "ConvertDQ", (self.dtype,))

    def __call__(self, rows: int32, scale: float32, dq_accum_ptr: ~float32, dq_ptr: ~self.dtype):
        self.attrs.blocks = [cdiv(rows, 64)]
        self.attrs.warps = WARPGROUP // 32
        accumulated = self.global_view(dq_accum_ptr, dtype=float32, shape=[rows, self.head_dim])
        gdq = self.global_view(dq_ptr, dtype=self.dtype, shape=[rows, self.head_dim])
        rows_from: int32 = 64 * self.blockIdx.x
        tile = self.load_global(accumulated, offsets=[rows_from, 0], shape=[64, self.head_dim])
        self.store_global(gdq, self.cast(tile * scale, self.dtype), offsets=[rows_from, 0])


class BackwardQ(_RowBlocks):
    """dQ of 128 query rows of one head, over every K/V tile they see; ``dtype`` operands and gradient."""

    def __init__(self, dtype, head_dim, causal, block_n, num_stages):
        super().__init__()
        self.dtype = element_dtype(dtype)
        _check_head_dim(head_dim)
        self.head_dim = head_dim
        self.causal = causal
        self.block_n = block_n
        self.num_stages = num_stages

    def kernel_name(self) -> str:
        """``BackwardQF16`` or ``BackwardQBF16``."""
        return typed_kernel_name(self, BackwardQ, "BackwardQ", (self.dtype,))

    def __call__(self, seq_q: int32, seq_k: int32, batch_heads: int32, heads: int32, group: int32, scale: float32,
                 scale_log2: float32, q_ptr: ~self.dtype, k_ptr: ~self.dtype, v_ptr: ~self.dtype,
                 do_ptr: ~self.dtype, lse_ptr: ~float32, dd_ptr: ~float32, dq_ptr: ~self.dtype):
        self.backward_q(seq_q, seq_k, batch_heads, heads, group, scale, scale_log2, q_ptr, k_ptr, v_ptr, do_ptr,
                        lse_ptr, dd_ptr, dq_ptr)

    def backward_q(self, seq_q, seq_k, batch_heads, heads, group, scale, scale_log2, q_ptr, k_ptr, v_ptr, do_ptr,
                   lse_ptr, dd_ptr, dq_ptr):
        """dQ for one block of 128 query rows of one head (``grid_order``; under a causal mask the last block
        sees the most keys, so rank 0 is the last block)."""
        d, dtype = self.head_dim, self.dtype
        n_blocks = cdiv(seq_q, BLOCK_ROWS)
        rank, bh = self.grid_order(n_blocks, batch_heads)
        query_block = n_blocks - 1 - rank if self.causal else rank
        self.attrs.warps = (CONSUMER_THREADS + WARPGROUP) // 32
        gq = self.global_view(q_ptr, dtype=dtype, shape=[batch_heads, seq_q, d])
        gdo = self.global_view(do_ptr, dtype=dtype, shape=[batch_heads, seq_q, d])
        gdq = self.global_view(dq_ptr, dtype=dtype, shape=[batch_heads, seq_q, d])
        gk = self.global_view(k_ptr, dtype=dtype, shape=[batch_heads // group, seq_k, d])
        gv = self.global_view(v_ptr, dtype=dtype, shape=[batch_heads // group, seq_k, d])
        # lse and D [B·H, S_q] seen as [S_q, B·H]: a warpgroup's [64, 1] column per row block.
        glse = self.global_view(lse_ptr, dtype=float32, shape=[seq_q, batch_heads], strides=[1, seq_q])
        gdd = self.global_view(dd_ptr, dtype=float32, shape=[seq_q, batch_heads], strides=[1, seq_q])
        kv_bh: int32 = bh // heads * (heads // group) + bh % heads // group
        self.q_block(gq, gdo, gk, gv, gdq, glse, gdd, scale, scale_log2, query_block, bh, kv_bh, 0, 0, seq_q, seq_k)

    def q_block(self, gq, gdo, gk, gv, gdq, glse, gdd, scale, scale_log2, query_block, bh, kv_bh, q_start, k_start,
                seq_q, seq_k):
        """Query rows ``128 · query_block ...`` of head row ``bh`` against K/V head row ``kv_bh``: the sequence's
        queries are view rows ``q_start ...`` (``seq_q`` of them), its keys rows ``k_start ...`` (``seq_k``); both
        starts are 0 unless sequences are packed."""
        d, block_n, dtype = self.head_dim, self.block_n, self.dtype
        sq = self.shared_tensor(dtype=dtype, shape=[2, 1, 64, d])
        sdo = self.shared_tensor(dtype=dtype, shape=[2, 1, 64, d])
        sk = self.shared_tensor(dtype=dtype, shape=[self.num_stages, 1, block_n, d])
        sv = self.shared_tensor(dtype=dtype, shape=[self.num_stages, 1, block_n, d])
        q_loaded = self.mbarrier.alloc(counts=[1])
        pipe = Pipeline(self.num_stages, consumer_arrivals=CONSUMER_THREADS)

        offset_m: int32 = BLOCK_ROWS * query_block
        causal_shift: int32 = seq_k - seq_q
        n_end: int32 = seq_k
        if self.causal:
            n_end = max(min(seq_k, offset_m + BLOCK_ROWS + causal_shift), 0)
        n_tiles: int32 = cdiv(n_end, block_n)

        # Packed sequences: a query block of the longest sequence only loads nothing and stores nothing.
        if not self.varlen or offset_m < seq_q:
            with self.thread_group(thread_begin=CONSUMER_THREADS, num_threads=WARPGROUP,
                                   max_registers=PRODUCER_REGISTERS):
                with self.thread_group(thread_begin=CONSUMER_THREADS, num_threads=32):
                    self.produce_q(gq, gdo, gk, gv, sq, sdo, sk, sv, q_loaded, pipe, bh, kv_bh, q_start + offset_m,
                                   k_start, n_tiles)
            with self.thread_group(thread_begin=0, num_threads=CONSUMER_THREADS, max_registers=CONSUMER_REGISTERS):
                for wg in range(2):
                    with self.thread_group(thread_begin=wg * WARPGROUP, num_threads=WARPGROUP):
                        self.consume_q(wg, sq[wg], sdo[wg], sk, sv, glse, gdd, gdq, q_loaded, pipe, scale,
                                       scale_log2, bh, offset_m, n_tiles, q_start, seq_q, seq_k)

    def produce_q(self, gq, gdo, gk, gv, sq, sdo, sk, sv, q_loaded, pipe, bh, kv_bh, q_row, k_row, n_tiles):
        """The producer warp: the block's Q and dO once (view rows ``q_row ...``), then (K_j, V_j) of every tile
        (view rows ``k_row + j·block_n ...``) into one ring."""
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(q_loaded[0], sq.nbytes + sdo.nbytes)
            for wg in range(2):
                self.tma.global_to_shared(src=gq, dst=sq[wg], offsets=[bh, q_row + 64 * wg, 0],
                                          mbarrier=q_loaded[0])
                self.tma.global_to_shared(src=gdo, dst=sdo[wg], offsets=[bh, q_row + 64 * wg, 0],
                                          mbarrier=q_loaded[0])
        for j in self.range(n_tiles):
            pipe.producer_acquire()
            with self.single_thread():
                stage = pipe.producer_stage
                self.mbarrier.arrive_and_expect_tx(pipe.producer_barrier(), sk[stage].nbytes + sv[stage].nbytes)
                self.tma.global_to_shared(src=gk, dst=sk[stage], offsets=[kv_bh, k_row + j * self.block_n, 0],
                                          mbarrier=pipe.producer_barrier())
                self.tma.global_to_shared(src=gv, dst=sv[stage], offsets=[kv_bh, k_row + j * self.block_n, 0],
                                          mbarrier=pipe.producer_barrier())
            pipe.producer_advance()
        for _ in self.range(min(self.num_stages, n_tiles)):
            pipe.producer_acquire()
            pipe.producer_advance()

    def tile_scores(self, sq, sdo, sk, sv, stage):
        """Issue S = Q·Kᵀ and dP = dO·Vᵀ of the K/V tile in ``stage`` (two WGMMA groups); their accumulators."""
        acc_s = self.register_tensor(dtype=float32, shape=[64, self.block_n], init=0.0)
        acc_dp = self.register_tensor(dtype=float32, shape=[64, self.block_n], init=0.0)
        self.wgmma.fence()
        self.wgmma.mma(sq[0], sk[stage][0].transpose(), acc_s)  # S = Q·Kᵀ
        self.wgmma.commit_group()
        self.wgmma.mma(sdo[0], sv[stage][0].transpose(), acc_dp)  # dP = dO·Vᵀ
        self.wgmma.commit_group()
        return acc_s, acc_dp

    def tile_probabilities(self, acc_s, lse, scale_log2, j, rows_from, seq_k, causal_shift):
        """P = exp2(S · scale_log2 - lse) of K/V tile ``j``, 0 where it crosses the causal diagonal, and packed,
        where its keys pass the sequence's end (the next sequence's keys, whose P, dS and dS·K would be real and
        nonzero; causal, the diagonal already hides them from every row of the sequence). Rows past the sequence's
        end are the next sequence's queries: their dQ is computed and never stored."""
        block_n = self.block_n
        probs = self.exp2(acc_s * scale_log2 - lse)
        if self.causal:
            if j * block_n + block_n - 1 > rows_from + causal_shift:  # the tile crosses the diagonal
                keep = self.col_index(probs) + j * block_n <= self.row_index(probs) + (rows_from + causal_shift)
                probs = self.where(keep, probs, 0.0)
        elif self.varlen:
            if j * block_n + block_n > seq_k:  # the tile passes the sequence's last key
                probs = self.where(self.col_index(probs) + j * block_n < seq_k, probs, 0.0)
        return probs

    def consume_q(self, wg, sq, sdo, sk, sv, glse, gdd, gdq, q_loaded, pipe, scale, scale_log2, bh, offset_m,
                  n_tiles, q_start, seq_q, seq_k):
        """Consumer warpgroup ``wg``: rows ``offset_m + 64·wg ...``; dQ += dS·K over the block's K/V tiles."""
        d, dtype = self.head_dim, self.dtype
        pipe.consumer_stage = 0
        pipe.consumer_phase = self.mbarrier.consumer_initial_phase
        rows_from: int32 = offset_m + 64 * wg
        causal_shift: int32 = seq_k - seq_q
        acc_dq = self.register_tensor(dtype=float32, shape=[64, d], init=0.0)
        lse = self.load_global(glse, offsets=[q_start + rows_from, bh], shape=[64, 1])
        dd = self.load_global(gdd, offsets=[q_start + rows_from, bh], shape=[64, 1])
        self.mbarrier.wait(q_loaded[0], phase=0)
        for j in self.range(n_tiles):
            pipe.consumer_acquire()
            stage = pipe.consumer_stage
            acc_s, acc_dp = self.tile_scores(sq, sdo, sk, sv, stage)
            self.wgmma.wait_group(1)
            probs = self.tile_probabilities(acc_s, lse, scale_log2, j, rows_from, seq_k, causal_shift)
            self.wgmma.wait_group(0)
            grads = self.cast(probs * (acc_dp - dd), dtype)
            self.wgmma.fence()
            self.wgmma.mma(grads, sk[stage][0], acc_dq)  # dQ += dS·K
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            pipe.consumer_release()
            pipe.consumer_advance()
        # Through the Q buffer: its last reader, S's WGMMA, is done.
        self.store_rows(sq, gdq, self.cast(acc_dq * scale, dtype), bh, rows_from, q_start, seq_q)


# --------------------------------------------------------------------------------------------- packed sequences


class DotVarlen(PackedRows, Dot):
    """``Dot`` over packed rows: O and dO [total_q, H, D] (head-major views), D [H, total_q]. A row's D needs no
    sequence bounds, so the grid is the packed rows' (⌈total_q/64⌉, H), called as ``Dot`` with ``seq_q`` = total_q
    and ``batch_heads`` = H; rows past total_q read as zeros and are not stored."""

    def kernel_name(self) -> str:
        """``DotVarlenF16`` or ``DotVarlenBF16``."""
        return typed_kernel_name(self, DotVarlen, "DotVarlen", (self.dtype,))


class BackwardKVVarlen(PackedRows, BackwardKV):
    """``BackwardKV`` over packed sequences: Q, dO [total_q, H, D], K, V, dK, dV [total_k, H_kv, D], lse and D
    [H, total_q]; the grid (key blocks of the longest sequence, H_kv, B)."""

    def kernel_name(self) -> str:
        """``BackwardKVVarlenF16`` or ``BackwardKVVarlenBF16``."""
        return typed_kernel_name(self, BackwardKVVarlen, "BackwardKVVarlen", (self.dtype,))

    def __call__(self, batch: int32, max_seq_k: int32, total_q: int32, total_k: int32, heads: int32, group: int32,
                 scale: float32, scale_log2: float32, cu_q_ptr: ~int32, cu_k_ptr: ~int32, q_ptr: ~self.dtype,
                 k_ptr: ~self.dtype, v_ptr: ~self.dtype, do_ptr: ~self.dtype, lse_ptr: ~float32, dd_ptr: ~float32,
                 dk_ptr: ~self.dtype, dv_ptr: ~self.dtype):
        self.backward_kv_varlen(batch, max_seq_k, total_q, total_k, heads, group, scale, scale_log2, cu_q_ptr,
                                cu_k_ptr, q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, dd_ptr, dk_ptr, dv_ptr)

    def backward_kv_varlen(self, batch, max_seq_k, total_q, total_k, heads, group, scale, scale_log2, cu_q_ptr,
                           cu_k_ptr, q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, dd_ptr, dk_ptr, dv_ptr, dq_accum_ptr=None):
        """dK, dV for keys ``128 · blockIdx.x ...`` of K/V head ``blockIdx.y`` of sequence ``blockIdx.z``; with
        ``dq_accum_ptr`` (float32 [total_q, H, D]) also the dQ shares, reduce-added."""
        d = self.head_dim
        kv_heads = heads // group
        self.attrs.blocks = [cdiv(max_seq_k, BLOCK_ROWS), kv_heads, batch]
        self.attrs.warps = (CONSUMER_THREADS + WARPGROUP) // 32
        gq = self.head_rows(q_ptr, heads, total_q)
        gdo = self.head_rows(do_ptr, heads, total_q)
        gk = self.head_rows(k_ptr, kv_heads, total_k)
        gv = self.head_rows(v_ptr, kv_heads, total_k)
        gdk = self.output_views(dk_ptr, kv_heads, total_k)
        gdv = self.output_views(dv_ptr, kv_heads, total_k)
        glse = self.global_view(lse_ptr, dtype=float32, shape=[heads, total_q])
        gdd = self.global_view(dd_ptr, dtype=float32, shape=[heads, total_q])
        dq_view = None
        if self.accumulates_dq:
            # The last query tile of a sequence also adds its (zero) shares of the next sequence's rows: a TMA box
            # is not clipped at a sequence's end.
            dq_view = self.global_view(dq_accum_ptr, dtype=float32, shape=[heads, total_q, d],
                                       strides=[d, heads * d, 1], scratch=True)
        q_start, k_start, seq_q, seq_k = self.sequence_bounds(batch, total_q, total_k, cu_q_ptr, cu_k_ptr)
        kv_head: int32 = self.blockIdx.y
        self.kv_block(gq, gdo, gk, gv, gdk, gdv, glse, gdd, dq_view, group, scale, scale_log2, self.blockIdx.x,
                      kv_head, kv_head * group, q_start, k_start, seq_q, seq_k)


class BackwardKVDQVarlen(BackwardKVVarlen):
    """``BackwardKVDQ`` over packed sequences: ``BackwardKVVarlen`` that also reduce-adds the dQ shares into
    ``dq_accum`` (float32 [total_q, H, D], zero before the launch; ``ConvertDQ`` over its total_q·H rows)."""

    accumulates_dq = True

    def kernel_name(self) -> str:
        """``BackwardKVDQVarlenF16`` or ``BackwardKVDQVarlenBF16``."""
        return typed_kernel_name(self, BackwardKVDQVarlen, "BackwardKVDQVarlen", (self.dtype,))

    def __call__(self, batch: int32, max_seq_k: int32, total_q: int32, total_k: int32, heads: int32, group: int32,
                 scale: float32, scale_log2: float32, cu_q_ptr: ~int32, cu_k_ptr: ~int32, q_ptr: ~self.dtype,
                 k_ptr: ~self.dtype, v_ptr: ~self.dtype, do_ptr: ~self.dtype, lse_ptr: ~float32, dd_ptr: ~float32,
                 dk_ptr: ~self.dtype, dv_ptr: ~self.dtype, dq_accum_ptr: ~float32):
        self.backward_kv_varlen(batch, max_seq_k, total_q, total_k, heads, group, scale, scale_log2, cu_q_ptr,
                                cu_k_ptr, q_ptr, k_ptr, v_ptr, do_ptr, lse_ptr, dd_ptr, dk_ptr, dv_ptr, dq_accum_ptr)


class BackwardQVarlen(PackedRows, BackwardQ):
    """``BackwardQ`` over packed sequences (the layouts of ``BackwardKVVarlen``, dQ [total_q, H, D]); the grid
    (query blocks of the longest sequence, H, B)."""

    def kernel_name(self) -> str:
        """``BackwardQVarlenF16`` or ``BackwardQVarlenBF16``."""
        return typed_kernel_name(self, BackwardQVarlen, "BackwardQVarlen", (self.dtype,))

    def __call__(self, batch: int32, max_seq_q: int32, total_q: int32, total_k: int32, heads: int32, group: int32,
                 scale: float32, scale_log2: float32, cu_q_ptr: ~int32, cu_k_ptr: ~int32, q_ptr: ~self.dtype,
                 k_ptr: ~self.dtype, v_ptr: ~self.dtype, do_ptr: ~self.dtype, lse_ptr: ~float32, dd_ptr: ~float32,
                 dq_ptr: ~self.dtype):
        kv_heads = heads // group
        self.attrs.blocks = [cdiv(max_seq_q, BLOCK_ROWS), heads, batch]
        self.attrs.warps = (CONSUMER_THREADS + WARPGROUP) // 32
        gq = self.head_rows(q_ptr, heads, total_q)
        gdo = self.head_rows(do_ptr, heads, total_q)
        gk = self.head_rows(k_ptr, kv_heads, total_k)
        gv = self.head_rows(v_ptr, kv_heads, total_k)
        gdq = self.output_views(dq_ptr, heads, total_q)
        # lse and D [H, total_q] seen as [total_q, H], as the dense kernel sees its [B·H, S_q].
        glse = self.global_view(lse_ptr, dtype=float32, shape=[total_q, heads], strides=[1, total_q])
        gdd = self.global_view(dd_ptr, dtype=float32, shape=[total_q, heads], strides=[1, total_q])
        q_start, k_start, seq_q, seq_k = self.sequence_bounds(batch, total_q, total_k, cu_q_ptr, cu_k_ptr)
        head: int32 = self.blockIdx.y
        self.q_block(gq, gdo, gk, gv, gdq, glse, gdd, scale, scale_log2, self.blockIdx.x, head, head // group,
                     q_start, k_start, seq_q, seq_k)
