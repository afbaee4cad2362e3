"""The attention forward kernel behind ``warpspec.ops.attention`` and examples/attention_fwd.py, FlashAttention-3
style: O = softmax(scale · Q·Kᵀ) · V per (batch, head), with Q [B·H, S_q, D] and K, V [B·H_kv, S_k, D].

One block computes ``block_m`` = 64 · ``consumers`` query rows of one head (128 with the default two consumer
warpgroups; 192 with three, where their fragments fit: ``fragment_registers``). Its threads:

* **a producer warp** (the first warp of a fourth warpgroup, whose register budget ``setmaxnreg`` lowers to
  ``PRODUCER_REGISTERS``) loads the Q tile once, then every K tile and every V tile the block needs through two
  rings of shared-memory stages (``Pipeline``s): K and V have rings of their own, so a K stage is handed back as
  soon as QKᵀ has read it, while its V stage waits for PV;
* **two or three consumer warpgroups** (``CONSUMER_REGISTERS_OF``: 240 registers each for two, 160 for three), each
  owning 64 query rows of the tile: its own slice of Q, its own S = Q·Kᵀ and O accumulators, its own running row
  maximum and row sum (the online softmax). All read every K and V stage, so a stage is empty once every consumer
  thread released it.

FA3's two overlaps are in the consumer loop. Iteration j of a warpgroup issues S_j = Q·K_jᵀ, rescales O to the
previous block's maximum while S_j runs, issues O += P_{j-1}·V_{j-1} (the previous block's probabilities, from
registers), and only then waits for S_j: the softmax of block j runs while the tensor cores still work on PV of
block j-1 (**intra-warpgroup overlap**; ``S`` and ``P`` are two register tensors). The warpgroups take **turns**
issuing their GEMMs (an mbarrier per warpgroup, as in examples/matmul_v6.py's ping-pong, passed around a ring of
three when there are three): warpgroup 0 issues, hands the turn to warpgroup 1, and does its softmax while warpgroup
1's GEMMs run, so the exp2 of one hides under the others' tensor-core work.

Softmax: the logits are scaled by ``scale · log2(e)`` (``scale_log2``) and exponentiated with exp2; the row maximum
lives in that scaled domain, and moves only when a tile's passes it by more than ``RESCALE_SLACK`` (O's rescale is
then mostly by 1, which warps skip; ``softmax_step``). Masks: the columns past S_k of the last K tile, and for ``causal`` the keys after each
query, aligned at the bottom right (query i sees keys j <= i + S_k - S_q, as FlashAttention does); only tiles that
need a mask compute one. Causal blocks stop their K/V loop at the last tile any of their rows sees. A row that
sees no key at all (causal, S_q > S_k) outputs zeros: its maximum stays -inf, guarded so that exp2(-inf - -inf)
never happens, and its sum stays 0, taken as 1 where O is scaled by the sum's reciprocal.

Heads: the global views are 3-D ([B·H, S, D]) and every TMA box is [1, rows, D], so rows past a head's length
read as zeros (and stores past S_q are clipped) instead of touching the next head. Grouped-query attention maps
query head ``bh`` to K/V head ``bh // H · H_kv + bh % H // (H / H_kv)`` at run time. O leaves through shared
memory (the Q buffer, free once the last QKᵀ read it) with one TMA store per warpgroup.

Log-sum-exp: every row's ``m + log2(ℓ)`` (its running maximum and sum, in the exp2 domain of the scaled logits) is
stored to ``lse`` (float32 [B·H, S_q]) for the backward pass, which recomputes P = exp2(S · scale_log2 - lse)
without a second softmax. A row that sees no key stores +inf, so the backward's exp2 gives 0 there.

Packed sequences and paged caches (``attention_varlen_kernel``, ``attention_paged_kernel``) run this body through
``attend`` with their own views and row offsets, ``key_tile_offsets`` (where key tile j lies in the K and V views),
``tile_start`` (the key of a tile's first row) and ``store_result``.

The element type is the constructor's first argument (``Attention(bfloat16, head_dim=128, causal=True)``; its
kernels are named ``AttentionF16`` and ``AttentionBF16``). The schedule (``block_n``, ``num_stages``, ``unroll``) is
autotuned; ``consumers`` (2, or 3 at D 64 and at D 128 in tiles up to 80 keys) is a constructor argument
(``ops.attention.FORWARD_CONSUMERS``).
"""

from __future__ import annotations

from warpspec.dtypes import DType, bfloat16, float16, float32, int32, uint32
from warpspec.errors import ArgumentError
from warpspec.frontend.interpreter import cdiv
from warpspec.ops.naming import typed_kernel_name
from warpspec.pipeline import Pipeline
from warpspec.script import Script, autotune

#: log2(e): exp(x) = exp2(x · log2 e), so the softmax scale is folded into one multiplication.
LOG2_E = 1.4426950408889634
#: How far (in log2 units) a tile's row maximum may pass the running one before the running one moves to it: P is
#: then at most 2**8 = 256, well inside float16 and bfloat16, and rows rarely rescale O after their first tiles.
RESCALE_SLACK = 8.0
HEAD_DIMS = (64, 128, 256)
DTYPES = (float16, bfloat16)  # the element types of Q, K, V and O (and their gradients)
WARPGROUP = 128
#: The query tile of two consumer warpgroups of 64 rows (one m64 WGMMA row block each): ``Attention``'s default, and
#: the tile of the kernels built on it (persistent, packed, paged).
BLOCK_M = 2 * 64
CONSUMER_THREADS = 2 * WARPGROUP
WARPS = (CONSUMER_THREADS + WARPGROUP) // 32  # the consumers and the producer's warpgroup
#: The producer needs few registers (addresses and phases); its warpgroup gives the rest to the consumers, whose
#: O (D/2 registers per thread), S (block_n/2) and P (block_n/4) fragments are live at once. 24 + 2 · 240 fits
#: the SM's 65536 registers per warpgroup lane (setmaxnreg's rule: 24 + 240 + 240 <= 512).
PRODUCER_REGISTERS = 24
CONSUMER_REGISTERS = 240
#: The consumers' registers by their number: three warpgroups of 160 (24 + 3 · 160 <= 512; ``Attention``'s
#: ``consumers``), where O, S and P (``fragment_registers``) may take ``THREE_CONSUMER_FRAGMENTS``: ptxas built
#: D 64 with 128-key tiles and D 128 with 48-80-key tiles without spilling, and spilled D 128's 96-key tiles (136).
CONSUMER_REGISTERS_OF = {2: CONSUMER_REGISTERS, 3: 160}
THREE_CONSUMER_FRAGMENTS = 128


def fragment_registers(head_dim: int, block_n: int) -> int:
    """The registers a consumer thread holds its O (head_dim/2 floats), S (block_n/2) and P (block_n/4, pairs of
    16-bit values) fragments in."""
    return head_dim // 2 + 3 * block_n // 4


def _schedules(cls):
    """The schedule space: K/V tiles of 48 to 128 rows, 2 or 3 stages per ring (where shared memory allows: D=256
    fits 80 rows in 2 stages, 48 in 3), and the main loop as it is or unrolled once per stage (``unroll``: every
    stage index a constant, for two or three times the code; only D <= 128 unrolled, D=256 would spill)."""
    return autotune("block_n, num_stages, unroll", [
        [128, 2, 1], [128, 2, 2], [128, 3, 1], [128, 3, 3], [96, 2, 1], [80, 2, 1], [64, 2, 1], [64, 3, 1],
        [48, 3, 1],
    ])(cls)


def element_dtype(dtype: DType) -> DType:
    """``dtype`` when the attention kernels take it (``DTYPES``), else an ArgumentError."""
    if dtype not in DTYPES:
        raise ArgumentError(f"the attention kernels take {' or '.join(d.name for d in DTYPES)} operands, got "
                            f"{getattr(dtype, 'name', dtype)!r}")
    return dtype


def kernel_head_dim(head_dim: int) -> int:
    """``head_dim`` when the attention kernels are built for it (``HEAD_DIMS``), else an ArgumentError."""
    if head_dim not in HEAD_DIMS:
        raise ArgumentError(f"head_dim must be one of {HEAD_DIMS}, got {head_dim}")
    return head_dim


class RowTileStore:
    """The TMA store of a warpgroup's 64 finished rows, shared by the attention kernels, forward and backward (mixed
    into their Scripts)."""

    def store_output(self, buffer, view, tile, head, row):
        """``tile`` (a warpgroup's 64 rows in the kernel's dtype) -> the warpgroup's shared ``buffer`` [1, 64, D],
        whose last reader is done (the forward's Q buffer, after its last QKᵀ) -> one TMA store into the 3-D ``view``
        at (``head``, ``row``), which clips rows past the view's."""
        self.store_shared(buffer[0], tile)
        self.fence_proxy_async()  # the ordinary stores become visible to the TMA store's async-proxy read
        self.sync()
        with self.single_thread():
            self.tma.shared_to_global(src=buffer, dst=view, offsets=[head, row, 0])
            self.tma.commit_group()
            self.tma.wait_group(0)  # the shared source must stay valid until the copy has read it


@_schedules
class Attention(RowTileStore, Script):
    """The forward kernel of ``dtype`` (float16 or bfloat16) Q, K, V and O; the pointer annotations
    ``~self.dtype`` take the constructor's element type."""

    #: The lengths and the number of (batch, head) rows choose the schedule (ops.attention keys its choices alike).
    tune_key = ("seq_q", "seq_k", "batch_heads")
    #: Packed sequences (``attention_varlen_kernel``): a block's query tile may lie past its sequence's end.
    varlen = False
    #: Whether a sequence's last key tile, when its keys end inside it, is loaded moved back to end at the last key
    #: (``tile_start``; the paged kernel, whose rows past the last key are cache slots nobody wrote).
    moves_last_tile = False

    def __init__(self, dtype, head_dim, causal, block_n, num_stages, unroll, consumers=2):
        super().__init__()
        self.dtype = element_dtype(dtype)
        self.head_dim = kernel_head_dim(head_dim)
        self.causal = causal
        self.block_n = block_n
        self.num_stages = num_stages
        self.unroll = unroll
        if consumers not in CONSUMER_REGISTERS_OF:
            raise ArgumentError(f"consumers must be 2 or 3 (consumer warpgroups of 64 query rows), got {consumers!r}")
        if consumers == 3 and fragment_registers(head_dim, block_n) > THREE_CONSUMER_FRAGMENTS:
            raise ArgumentError(
                f"consumers=3 needs O, S and P in {THREE_CONSUMER_FRAGMENTS} of three consumer warpgroups' 160 "
                f"registers a thread (head_dim/2 + 3 * block_n/4): head_dim {head_dim} with block_n {block_n} needs "
                f"{fragment_registers(head_dim, block_n)}; head_dim 64 takes block_n up to 128, 128 up to 80")
        #: Consumer warpgroups of 64 query rows each: a block's query tile is ``block_m`` = 64 · consumers rows.
        self.consumers = consumers
        self.block_m = 64 * consumers
        self.consumer_threads = consumers * WARPGROUP

    def kernel_name(self) -> str:
        """``AttentionF16`` or ``AttentionBF16``."""
        return typed_kernel_name(self, Attention, "Attention", (self.dtype,))

    def __call__(self, seq_q: int32, seq_k: int32, batch_heads: int32, heads: int32, group: int32,
                 scale_log2: float32, q_ptr: ~self.dtype, k_ptr: ~self.dtype, v_ptr: ~self.dtype,
                 o_ptr: ~self.dtype, lse_ptr: ~float32):
        self.attention(seq_q, seq_k, batch_heads, heads, group, scale_log2, q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr)

    def attention(self, seq_q, seq_k, batch_heads, heads, group, scale_log2, q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr):
        """The kernel: O[bh] = softmax(scale · Q[bh]·K[kv(bh)]ᵀ) · V[kv(bh)] for query rows
        ``block_m · blockIdx.x ...`` of head ``bh = blockIdx.y``."""
        self.attrs.blocks = [cdiv(seq_q, self.block_m), batch_heads]
        self.attrs.warps = (self.consumer_threads + WARPGROUP) // 32
        gq, gk, gv, go, glse = self.dense_views(seq_q, seq_k, batch_heads, group, q_ptr, k_ptr, v_ptr, o_ptr,
                                                 lse_ptr)
        bh: int32 = self.blockIdx.y
        kv_bh: int32 = bh // heads * (heads // group) + bh % heads // group
        self.attend(gq, gk, gv, go, glse, seq_q, seq_k, scale_log2, bh, kv_bh, 0, 0)

    def dense_views(self, seq_q, seq_k, batch_heads, group, q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr):
        """The global views of dense operands: Q and O [B·H, S_q, D], K and V [B·H_kv, S_k, D], and lse."""
        d, dtype = self.head_dim, self.dtype
        gq = self.global_view(q_ptr, dtype=dtype, shape=[batch_heads, seq_q, d])
        go = self.global_view(o_ptr, dtype=dtype, shape=[batch_heads, seq_q, d])
        gk = self.global_view(k_ptr, dtype=dtype, shape=[batch_heads // group, seq_k, d])
        gv = self.global_view(v_ptr, dtype=dtype, shape=[batch_heads // group, seq_k, d])
        # lse [B·H, S_q] seen as [S_q, B·H]: a warpgroup's [64, 1] column is stored at (rows, bh), rows past S_q
        # clipped instead of reaching the next head's.
        glse = self.global_view(lse_ptr, dtype=float32, shape=[seq_q, batch_heads], strides=[1, seq_q])
        return gq, gk, gv, go, glse

    def attend(self, gq, gk, gv, go, glse, seq_q, seq_k, scale_log2, bh, kv_bh, q_start, k_start):
        """Query tile ``blockIdx.x`` of head row ``bh`` (index 0 of ``gq``/``go``/``glse``'s head axis) against
        K/V head row ``kv_bh``: the sequence's queries are view rows ``q_start ...`` (``seq_q`` of them), its keys
        rows ``k_start ...`` (``seq_k``); both starts are 0 unless sequences are packed."""
        sq, sk, sv, q_loaded, pipe_k, pipe_v, turns = self.buffers()
        # Causal blocks walk the longest rows first: the last query tiles see the most keys.
        tile_m = self.gridDim.x - 1 - self.blockIdx.x if self.causal else self.blockIdx.x
        offset_m: int32 = self.block_m * tile_m
        n_tiles = self.key_tiles(offset_m, seq_q, seq_k)
        consumer_threads = self.consumer_threads
        # Packed sequences: a tile of the longest sequence only loads no Q, reads no keys and stores no rows.
        if not self.varlen or offset_m < seq_q:
            with self.thread_group(thread_begin=consumer_threads, num_threads=WARPGROUP,
                                   max_registers=PRODUCER_REGISTERS):
                with self.thread_group(thread_begin=consumer_threads, num_threads=32):
                    self.produce(gq, gk, gv, sq, sk, sv, q_loaded[0], pipe_k, pipe_v, bh, kv_bh, q_start + offset_m,
                                 k_start, n_tiles)

            with self.thread_group(thread_begin=0, num_threads=consumer_threads,
                                   max_registers=CONSUMER_REGISTERS_OF[self.consumers]):
                for wg in range(self.consumers):
                    with self.thread_group(thread_begin=wg * WARPGROUP, num_threads=WARPGROUP):
                        self.consume(wg, sq[wg], sk, sv, go, glse, q_loaded[0], pipe_k, pipe_v, turns, seq_q, seq_k,
                                     scale_log2, bh, offset_m, n_tiles, q_start)

    def buffers(self):
        """The block's shared memory and barriers: Q's 64-row slices (one per consumer warpgroup), the K and V
        rings (``Pipeline``s whose stages all consumer threads release), Q's barrier and the warpgroups' turns."""
        d, block_n, dtype, consumers = self.head_dim, self.block_n, self.dtype, self.consumers
        sq = self.shared_tensor(dtype=dtype, shape=[consumers, 1, 64, d])  # one 64-row slice per consumer warpgroup
        sk = self.shared_tensor(dtype=dtype, shape=[self.num_stages, 1, block_n, d])
        sv = self.shared_tensor(dtype=dtype, shape=[self.num_stages, 1, block_n, d])
        q_loaded = self.mbarrier.alloc(counts=[1])
        pipe_k = Pipeline(self.num_stages, consumer_arrivals=self.consumer_threads)
        pipe_v = Pipeline(self.num_stages, consumer_arrivals=self.consumer_threads)
        # turns[w] completes a phase when the warpgroup before w (in a ring) has issued an iteration's GEMMs: then
        # w may issue.
        turns = self.mbarrier.alloc(counts=[WARPGROUP] * consumers)
        return sq, sk, sv, q_loaded, pipe_k, pipe_v, turns

    def key_tiles(self, offset_m, seq_q, seq_k):
        """The K/V tiles the query tile of rows ``offset_m ...`` reads: all of S_k, or causal, up to its last row's
        last key."""
        n_end: int32 = seq_k
        if self.causal:
            # The block's last row, offset_m + block_m - 1, sees keys up to offset_m + block_m - 1 + seq_k - seq_q.
            n_end = max(min(seq_k, offset_m + self.block_m + seq_k - seq_q), 0)
        n_tiles: int32 = cdiv(n_end, self.block_n)
        return n_tiles

    def produce(self, gq, gk, gv, sq, sk, sv, q_loaded, pipe_k, pipe_v, bh, kv_bh, q_row, k_row, n_tiles):
        """The producer warp: the block's tile (``produce_tile``), then the drain."""
        self.produce_tile(gq, gk, gv, sq, sk, sv, q_loaded, pipe_k, pipe_v, bh, kv_bh, q_row, k_row, n_tiles)
        self.drain(pipe_k, pipe_v, n_tiles)

    def produce_tile(self, gq, gk, gv, sq, sk, sv, q_loaded, pipe_k, pipe_v, bh, kv_bh, q_row, k_row, n_tiles):
        """The Q tile (view rows ``q_row ...``) into ``sq`` on barrier ``q_loaded``, then K_j and V_j (rows
        ``k_row + j·block_n ...``) for every tile j of the query tile, each into its ring."""
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(q_loaded, sq.nbytes)
            for wg in range(self.consumers):
                self.tma.global_to_shared(src=gq, dst=sq[wg], offsets=[bh, q_row + 64 * wg, 0],
                                          mbarrier=q_loaded)
        for j in self.range(n_tiles):
            offsets = self.key_tile_offsets(k_row, kv_bh, j)
            for pipe, gx, sx in ((pipe_k, gk, sk), (pipe_v, gv, sv)):
                pipe.producer_acquire()
                self.load_stage(pipe, gx, sx, offsets)
                pipe.producer_advance()

    def drain(self, pipe_k, pipe_v, filled):
        """Stay until the consumers released every filled stage (``filled`` of each ring, or all of them), so their
        arrivals never target a barrier whose waiter has exited."""
        for pipe in (pipe_k, pipe_v):
            for _ in self.range(min(self.num_stages, filled)):
                pipe.producer_acquire()
                pipe.producer_advance()

    def load_stage(self, pipe, gx, sx, offsets):
        """One thread of the producer warp fills the producer's stage of ``sx`` with the K or V tile at view
        ``offsets``, announcing its bytes on the stage's full barrier."""
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(pipe.producer_barrier(), sx[pipe.producer_stage].nbytes)
            self.tma.global_to_shared(src=gx, dst=sx[pipe.producer_stage], offsets=offsets,
                                      mbarrier=pipe.producer_barrier())

    def key_tile_offsets(self, k_row, kv_bh, j):
        """The K/V view offsets of key tile j of K/V head ``kv_bh``: view row ``k_row`` (the sequence's first key
        row) + j·block_n."""
        return [kv_bh, k_row + j * self.block_n, 0]

    def tile_start(self, first_key, seq_k):
        """The key held by row 0 of the tile whose first key is ``first_key``: that key (the paged kernel moves a
        sequence's last tile back, ``attention_paged_kernel``)."""
        return first_key

    def consume(self, wg, sq, sk, sv, go, glse, q_loaded, pipe_k, pipe_v, turns, seq_q, seq_k, scale_log2, bh,
                offset_m, n_tiles, q_start):
        """Consumer warpgroup ``wg``: its rows of the block's query tile (``consume_tile``), from the rings' first
        stages."""
        self.rewind(pipe_k, pipe_v)
        self.consume_tile(wg, sq, sk, sv, go, glse, q_loaded, pipe_k, pipe_v, turns, seq_q, seq_k, scale_log2, bh,
                          offset_m, n_tiles, q_start, 0, self.first_turn_phase(wg))

    def rewind(self, pipe_k, pipe_v):
        """Both warpgroups walk both rings from the first stage, each thread holding its own position. Saying so
        keeps the stages compile-time constants in the unrolled loop of the second warpgroup too (after the first
        warpgroup's code the code generator no longer knows them)."""
        for pipe in (pipe_k, pipe_v):
            pipe.consumer_stage = 0
            pipe.consumer_phase = self.mbarrier.consumer_initial_phase

    def first_turn_phase(self, wg):
        """The phase of warpgroup ``wg``'s first turn: warpgroup 0 issues first (its first wait passes at once, as
        a producer's first wait on an empty stage)."""
        return self.mbarrier.producer_initial_phase if wg == 0 else self.mbarrier.consumer_initial_phase

    def consume_tile(self, wg, sq, sk, sv, go, glse, q_loaded, pipe_k, pipe_v, turns, seq_q, seq_k, scale_log2, bh,
                     offset_m, n_tiles, q_start, q_phase, first_turn):
        """Consumer warpgroup ``wg`` on one query tile: rows ``offset_m + 64·wg ...``, once phase ``q_phase`` of
        barrier ``q_loaded`` says Q has landed, the online softmax over the tile's K/V tiles with S_j's QKᵀ issued
        before P_{j-1}'s PV, taking turns with the other warpgroup to issue them from turn phase ``first_turn``;
        then O and the log-sum-exp stored. Returns the turn phase the warpgroup's next tile starts from."""
        d, block_n, dtype = self.head_dim, self.block_n, self.dtype
        row_max = self.register_tensor(dtype=float32, shape=[64, 1], init=float("-inf"))
        row_sum = self.register_tensor(dtype=float32, shape=[64, 1], init=0.0)
        # exp2(previous max - current max): O's rescale before the next P·V adds to it (1 while O is 0).
        correction = self.register_tensor(dtype=float32, shape=[64, 1], init=1.0)
        acc_o = self.register_tensor(dtype=float32, shape=[64, d], init=0.0)
        p = self.register_tensor(dtype=dtype, shape=[64, block_n])  # P_{j-1}: PV's register A operand
        turn_phase: uint32 = first_turn
        rows_from: int32 = offset_m + 64 * wg  # this warpgroup's first query row
        # Keys a row r may see: col < seq_k, and causal col <= r + causal_shift (bottom-right alignment).
        causal_shift: int32 = seq_k - seq_q
        self.mbarrier.wait(q_loaded, phase=q_phase)
        # The first tile is peeled: it has no PV to overlap, and branch-free iterations let ptxas see that every
        # accumulator is waited for before it is read (else it serializes the WGMMAs).
        if n_tiles > 0:
            pipe_k.consumer_acquire()
            self.wait_turn(turns[wg], turn_phase)
            turn_phase = turn_phase ^ 1
            first_s = self.register_tensor(dtype=float32, shape=[64, block_n], init=0.0)
            self.wgmma.fence()
            self.wgmma.mma(sq[0], sk[pipe_k.consumer_stage][0].transpose(), first_s)
            self.wgmma.commit_group()
            self.mbarrier.arrive(turns[(wg + 1) % self.consumers])
            self.wgmma.wait_group(0)
            pipe_k.consumer_release()
            pipe_k.consumer_advance()
            first_s = self.masked_scores(first_s, 0, seq_k, rows_from, causal_shift)
            first_p, first_max, _ = self.softmax_step(first_s, row_max, scale_log2)
            row_sum = row_sum + self.reduce_sum(first_p)
            row_max = max(row_max, first_max)
            p = self.cast(first_p, dtype)
            for j in self.range(1, n_tiles, unroll=self.unroll):
                pipe_k.consumer_acquire()
                self.wait_turn(turns[wg], turn_phase)
                turn_phase = turn_phase ^ 1
                acc_s = self.register_tensor(dtype=float32, shape=[64, block_n], init=0.0)
                self.wgmma.fence()
                self.wgmma.mma(sq[0], sk[pipe_k.consumer_stage][0].transpose(), acc_s)  # S_j = Q·K_jᵀ
                self.wgmma.commit_group()
                acc_o = acc_o * correction  # to P_{j-1}'s maximum, while S_j runs on the tensor cores
                pipe_v.consumer_acquire()
                self.wgmma.fence()  # the rescaled O, before the mma that accumulates into it
                self.wgmma.mma(p, sv[pipe_v.consumer_stage][0], acc_o)  # O += P_{j-1}·V_{j-1}
                self.wgmma.commit_group()
                self.mbarrier.arrive(turns[(wg + 1) % self.consumers])  # queued: the next warpgroup may issue
                self.wgmma.wait_group(1)  # S_j is done; PV_{j-1} runs on under the softmax
                pipe_k.consumer_release()
                pipe_k.consumer_advance()
                acc_s = self.masked_scores(acc_s, j * block_n, seq_k, rows_from, causal_shift)
                probs, new_max, subtrahend = self.softmax_step(acc_s, row_max, scale_log2)
                correction = self.exp2(row_max - subtrahend)
                row_sum = row_sum * correction + self.reduce_sum(probs)
                row_max = max(row_max, new_max)
                self.retire_pv(pipe_v)  # PV_{j-1} is done: its P registers may be overwritten
                p = self.cast(probs, dtype)
            acc_o = acc_o * correction
            pipe_v.consumer_acquire()
            self.wgmma.fence()
            self.wgmma.mma(p, sv[pipe_v.consumer_stage][0], acc_o)
            self.wgmma.commit_group()
            self.retire_pv(pipe_v)
        # One reciprocal a row, then a multiply an element: a float32 division is a routine of about ten
        # instructions with a MUFU.RCP, and 64 of them a thread cost a tile's end as much as a K/V tile's softmax,
        # which short rows pay on every few K/V tiles. A row that saw no key takes 1 instead of 0 (its O is 0).
        out = acc_o * (1.0 / self.where(row_sum == 0.0, 1.0, row_sum))
        lse = self.where(row_sum == 0.0, float("inf"), row_max + self.log2(row_sum))
        self.store_result(sq, go, glse, out, lse, bh, rows_from, q_start, seq_q)
        return turn_phase

    def store_result(self, sq, go, glse, out, lse, bh, rows_from, q_start, seq_q):
        """A warpgroup's 64 rows of O (float32, stored in the kernel's dtype) and of the log-sum-exp, from view row
        ``q_start + rows_from`` (the packed mode's sequence start; 0 here)."""
        self.store_global(glse, lse, offsets=[rows_from, bh])
        self.store_output(sq, go, self.cast(out, self.dtype), bh, rows_from)

    def wait_turn(self, turn, phase):
        """Wait until the other warpgroup has issued its GEMMs (ping-pong): this warpgroup's turn to issue."""
        self.mbarrier.wait(turn, phase=phase)

    def retire_pv(self, pipe_v):
        """Wait for the PV WGMMA (the last group in flight) and only then hand its V stage back to the producer,
        whose next TMA load may overwrite it."""
        self.wgmma.wait_group(0)
        pipe_v.consumer_release()
        pipe_v.consumer_advance()

    def masked_scores(self, acc_s, first_key, seq_k, rows_from, causal_shift):
        """S tile ``acc_s`` of the key tile whose first key is ``first_key`` (its columns hold keys ``tile_start``
        ...) with the keys no row may see at -inf: columns past S_k, keys before ``first_key`` (a moved-back tile's
        rows of the tile before), and for ``causal`` those past each row's last key, where the tile holds any (a
        runtime branch: most tiles hold none). Callers move their tile in (``acc_s = self.masked_scores(acc_s,
        ...)``), so the mask is computed into its registers."""
        block_n = self.block_n
        offset_n = self.tile_start(first_key, seq_k)
        needs_mask = offset_n + block_n > seq_k
        if self.moves_last_tile:
            needs_mask = needs_mask or offset_n < first_key
        if self.causal:
            needs_mask = needs_mask or offset_n + block_n - 1 > rows_from + causal_shift
        if needs_mask:
            cols = self.col_index(acc_s) + offset_n
            keep = cols < seq_k
            if self.moves_last_tile:
                keep = keep & (cols >= first_key)
            if self.causal:
                keep = keep & (cols <= self.row_index(acc_s) + (rows_from + causal_shift))
            acc_s = self.where(keep, acc_s, float("-inf"))
        return acc_s

    def softmax_step(self, acc_s, row_max, scale_log2):
        """The online softmax of one masked S tile: exponentiated against the running maximum, which moves to the
        tile's only where that passes it by more than ``RESCALE_SLACK`` (so P stays below 2**RESCALE_SLACK).
        Returns (P in float32, the new running maximum, the value subtracted from the scaled logits: that maximum,
        or 0 for rows still without a visible key). The earlier O and row sum are rescaled by exp2(old maximum -
        that value), which is 1 for a row whose maximum stays, and a warp whose rows all keep theirs skips O's
        rescale (``cuda.sm90.elementwise``): the softmax's normalization is exact whatever maximum each row
        subtracts, as long as O, the row sum and the log-sum-exp all use the same one."""
        tile_max = self.reduce_max(acc_s) * scale_log2
        new_max = self.where(tile_max > row_max + RESCALE_SLACK, tile_max, row_max)
        subtrahend = new_max
        if self.causal:
            # A row with no visible key yet keeps the maximum -inf: subtract 0 instead, so exp2 sees -inf (and gives
            # 0), never -inf - -inf = NaN.
            subtrahend = self.where(new_max == float("-inf"), 0.0, new_max)
        return self.exp2(acc_s * scale_log2 - subtrahend), new_max, subtrahend

