"""The split-KV (flash-decoding) attention forward behind ``warpspec.ops.attention`` for few query rows (decode and
speculative decoding) against many keys: the keys of each (batch, K/V head) are split into ``n_splits`` chunks of
``chunk`` keys (a multiple of ``block_n``), one block per chunk, so that even batch 1 fills every SM.

Query heads that share a K/V head (grouped-query attention) are packed into one block: ``pack`` consecutive query
heads (a divisor of the group) of S_q rows each are the block's ``pack · S_q <= 64`` query rows, so K and V are read
once per pack instead of once per query head. Decode reads every key once per block, so this divides the bytes
read, its whole cost, by ``pack``. The q and out tensors [B·H, S_q, D] are viewed as [B·H / pack, pack · S_q, D]:
a pack's rows are consecutive in memory.

The grid is (n_splits, B·H / pack). A block's threads:

* **a producer warp** loads the (at most 64) query rows once, then the K and V tiles of the block's chunk through
  one ring of shared-memory stages (a ``Pipeline``; decode is bandwidth-bound, so the ring only has to keep enough
  loads in flight);
* **one consumer warpgroup** runs the forward's online softmax over the chunk and ends with a partial result: O_s
  normalised by its own row sum and lse_s = m_s + log2(ℓ_s) (-inf for rows that saw no key of the chunk). Row r
  is query r mod S_q of head r // S_q of the pack: the causal mask reads it so.

Every block leaves its partial in a float32 workspace (ordinary stores of the pack's real rows); every block but
the last split of a pack then counts it on the pack's flag (``flag.add``). The last split, launched after the
others of its pack (blockIdx.x is the fastest index), waits once for the count of all of them, gives the flag back
(0, for the next launch) and folds the pack's partials: with m the largest lse, O = Σ 2^(lse_s - m)·O_s /
Σ 2^(lse_s - m), lse = m + log2 of that sum. The fold is spread over the whole warpgroup (4 elements of O per
thread, each partial's 4 one 16-byte load, ``FOLD_ELEMENTS / D`` query rows at a time) and loads ``FOLD_WIDTH``
partials at once, all of their loads issued before the first is folded: in the accumulator's layout only the 16
threads holding the pack's real rows would work, one partial after another. Folding each partial as it arrived
cost a round trip per partial (0.28 µs each on the H200, whatever ``FOLD_WIDTH`` was); two passes (the maximum
first, then the sums) cost more (0.48). It stores
O (cast, clipped at the pack's last row) and the row's log-sum-exp (+inf for a row that sees no key, as the forward
kernel stores it).
"""

from __future__ import annotations

from warpspec.dtypes import float32, int32
from warpspec.errors import ArgumentError
from warpspec.frontend.interpreter import cdiv
from warpspec.ops.attention_kernel import WARPGROUP, element_dtype, kernel_head_dim
from warpspec.ops.naming import typed_kernel_name
from warpspec.pipeline import Pipeline
from warpspec.script import Script

#: The decode kernel's query rows per block: one m64 WGMMA row block.
DECODE_ROWS = 64
#: The partials the fold loads at once (one round trip to memory for all of them: every load is issued before any
#: of their values is used). On an H100 (2026-12-06) 4, 8 and 16 gave 15.5, 15.2 and 15.4 µs at batch 1 × 8192
#: keys in 16 splits and 17.1, 16.8 and 16.2 in 32; at batch 32 (2 splits) 4 and 16 were within 0.3%.
FOLD_WIDTH = 8
#: Elements of O the fold takes per step: 4 for each thread of the warpgroup.
FOLD_ELEMENTS = 4 * WARPGROUP
#: Keys of one load of the paged decode kernel: every page size is a multiple, so a load lies in one page.
PAGE_LOAD = 16


class Decode(Script):
    """The split-KV decode kernel of ``dtype`` (float16 or bfloat16) Q, K, V and O, with ``pack`` query heads of a
    K/V head per block (``pack · seq_q <= 64`` at the call; ``pack`` divides the group); the pointer annotations
    ``~self.dtype`` take the constructor's element type."""

    #: Whether the load holding a sequence's last key, when its keys end inside it, is moved back to end at that
    #: key (``load_start``): a paged cache's slots past the last key are memory nobody wrote. The dense views end
    #: at S_k, and TMA fills rows past a view's end with zeros.
    moves_last_load = False

    def __init__(self, dtype, head_dim, causal, block_n, num_stages, pack=1):
        super().__init__()
        self.dtype = element_dtype(dtype)
        self.head_dim = kernel_head_dim(head_dim)
        self.causal = causal
        self.block_n = block_n
        #: Keys of one TMA load of K and of V: a stage holds block_n / sub_n of them (the paged kernel loads 16);
        #: the whole tile here.
        self.sub_n = block_n
        self.num_stages = num_stages
        if not isinstance(pack, int) or isinstance(pack, bool) or not 1 <= pack <= DECODE_ROWS:
            raise ArgumentError(f"pack must be an integer in [1, {DECODE_ROWS}] (query heads per block), got {pack!r}")
        self.pack = pack

    def kernel_name(self) -> str:
        """``DecodeF16`` or ``DecodeBF16``."""
        return typed_kernel_name(self, Decode, "Decode", (self.dtype,))

    def __call__(self, seq_q: int32, seq_k: int32, batch_heads: int32, heads: int32, group: int32,
                 scale_log2: float32, chunk: int32, n_splits: int32, q_ptr: ~self.dtype, k_ptr: ~self.dtype,
                 v_ptr: ~self.dtype, o_ptr: ~self.dtype, lse_ptr: ~float32, ws_o_ptr: ~float32, ws_lse_ptr: ~float32,
                 flags_ptr: ~int32):
        self.decode(seq_q, seq_k, batch_heads, heads, group, scale_log2, chunk, n_splits, q_ptr, k_ptr, v_ptr,
                    o_ptr, lse_ptr, ws_o_ptr, ws_lse_ptr, flags_ptr)

    def decode(self, seq_q, seq_k, batch_heads, heads, group, scale_log2, chunk, n_splits, q_ptr, k_ptr, v_ptr,
               o_ptr, lse_ptr, ws_o_ptr, ws_lse_ptr, flags_ptr):
        """Dense K and V [B·H_kv, S_k, D]: split ``blockIdx.x`` of the pack of query heads ``blockIdx.y`` reads keys
        ``chunk · blockIdx.x ...`` of its K/V head."""
        d, dtype = self.head_dim, self.dtype
        self.set_grid(n_splits, batch_heads)
        gk = self.global_view(k_ptr, dtype=dtype, shape=[batch_heads // group, seq_k, d])
        gv = self.global_view(v_ptr, dtype=dtype, shape=[batch_heads // group, seq_k, d])
        self.split_keys(seq_q, seq_k, batch_heads, heads, group, scale_log2, chunk, n_splits, q_ptr, o_ptr, lse_ptr,
                        ws_o_ptr, ws_lse_ptr, flags_ptr, gk, gv, None)

    def set_grid(self, n_splits, batch_heads):
        """The launch: (n_splits, packs) blocks of a consumer warpgroup and a producer warp."""
        self.attrs.blocks = [n_splits, batch_heads // self.pack]
        self.attrs.warps = (WARPGROUP + 32) // 32

    def split_keys(self, seq_q, seq_k, batch_heads, heads, group, scale_log2, chunk, n_splits, q_ptr, o_ptr,
                   lse_ptr, ws_o_ptr, ws_lse_ptr, flags_ptr, gk, gv, pages):
        """The kernel over the K and V views ``gk`` and ``gv``: split ``blockIdx.x`` of the pack of query heads
        ``blockIdx.y``, keys ``chunk · blockIdx.x ...`` of the ``seq_k`` its sequence has; ``key_offsets(pages,
        ...)`` places each key tile in the views."""
        d, block_n, dtype, pack = self.head_dim, self.block_n, self.dtype, self.pack
        packs = batch_heads // pack
        gq = self.global_view(q_ptr, dtype=dtype, shape=[packs, pack * seq_q, d])
        # O and its log-sum-exp as the fold stores them: a row per query row, the packs one after another.
        go = self.global_view(o_ptr, dtype=dtype, shape=[packs * pack * seq_q, d])
        glse = self.global_view(lse_ptr, dtype=float32, shape=[packs * pack * seq_q, 1])
        # One partial (O and lse) per block, of the pack's pack · S_q real rows alone: slot s is columns
        # [s·D, (s+1)·D) of O's view and column s of lse's, so the 64-row tiles' other rows fall outside the views,
        # neither stored nor read. One count per pack, of its splits that left their partial.
        slots = n_splits * packs
        ws_o = self.global_view(ws_o_ptr, dtype=float32, shape=[pack * seq_q, slots * d], scratch=True)
        ws_lse = self.global_view(ws_lse_ptr, dtype=float32, shape=[pack * seq_q, slots], scratch=True)
        flags = self.global_view(flags_ptr, dtype=int32, shape=[packs])
        sq = self.shared_tensor(dtype=dtype, shape=[1, DECODE_ROWS, d])
        # A stage is block_n / sub_n loads of sub_n keys each (one, of the whole tile, unless pages are smaller).
        sk = self.shared_tensor(dtype=dtype, shape=[self.num_stages, block_n // self.sub_n, 1, self.sub_n, d])
        sv = self.shared_tensor(dtype=dtype, shape=[self.num_stages, block_n // self.sub_n, 1, self.sub_n, d])
        q_loaded = self.mbarrier.alloc(counts=[1])
        pipe = Pipeline(self.num_stages, consumer_arrivals=WARPGROUP)

        split: int32 = self.blockIdx.x
        pb: int32 = self.blockIdx.y
        bh: int32 = pb * pack  # the pack's first query head; all of its heads read one K/V head
        kv_bh: int32 = bh // heads * (heads // group) + bh % heads // group
        # Causal or not, every key is seen by some row: the last query row (S_q <= 64) sees them all.
        keys_from: int32 = split * chunk
        n_tiles: int32 = cdiv(max(min(seq_k - keys_from, chunk), 0), block_n)

        with self.thread_group(thread_begin=WARPGROUP, num_threads=32):
            self.produce(gq, gk, gv, sq, sk, sv, q_loaded, pipe, pb, kv_bh, keys_from, n_tiles, pages)
        with self.thread_group(thread_begin=0, num_threads=WARPGROUP):
            row_max, acc_o = self.consume(sq, sk, sv, q_loaded, pipe, seq_q, seq_k, scale_log2, keys_from, n_tiles)
            slot: int32 = pb * n_splits + split
            self.leave_partial(acc_o, row_max, ws_o, ws_lse, slot)
            if split < n_splits - 1:
                self.count_partial(flags, pb)
            else:
                self.fold_partials(ws_o, ws_lse, go, glse, flags, pb, n_splits, pack * seq_q)

    def produce(self, gq, gk, gv, sq, sk, sv, q_loaded, pipe, pb, kv_bh, keys_from, n_tiles, pages):
        """The producer warp: the pack's query rows once, then K_j and V_j of every tile of the chunk into one
        ring, one load of each per ``sub_n`` keys (each placed by ``key_offsets``, looked up before the wait for
        its stage)."""
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(q_loaded[0], sq.nbytes)
            self.tma.global_to_shared(src=gq, dst=sq, offsets=[pb, 0, 0], mbarrier=q_loaded[0])
        for j in self.range(n_tiles):
            first: int32 = keys_from + j * self.block_n
            places = [self.key_offsets(pages, kv_bh, first + part * self.sub_n)
                      for part in range(self.block_n // self.sub_n)]
            pipe.producer_acquire()
            self.load_tile(pipe, gk, gv, sk, sv, places)
            pipe.producer_advance()
        for _ in self.range(min(self.num_stages, n_tiles)):
            pipe.producer_acquire()
            pipe.producer_advance()

    def load_tile(self, pipe, gk, gv, sk, sv, places):
        """One thread of the producer warp fills the producer's stage with a tile's K and V loads (``places``: the
        view offsets of each) on the stage's full barrier, announcing the bytes of all of them first
        (``mbarrier.arrive.expect_tx``, then ``cp.async.bulk.tensor`` per load)."""
        with self.single_thread():
            stage = pipe.producer_stage
            self.mbarrier.arrive_and_expect_tx(pipe.producer_barrier(), sk[stage].nbytes + sv[stage].nbytes)
            for part in range(self.block_n // self.sub_n):
                self.tma.global_to_shared(src=gk, dst=sk[stage][part], offsets=places[part],
                                          mbarrier=pipe.producer_barrier())
                self.tma.global_to_shared(src=gv, dst=sv[stage][part], offsets=places[part],
                                          mbarrier=pipe.producer_barrier())

    def key_offsets(self, pages, kv_bh, key):
        """The view offsets of the key tile that starts at key ``key`` of K/V head ``kv_bh`` (dense: that row)."""
        return [kv_bh, key, 0]

    def load_start(self, first_key, seq_k):
        """The key held by row 0 of the load whose first key is ``first_key``: that key (the paged kernel moves the
        load holding the sequence's last key back)."""
        return first_key

    def consume(self, sq, sk, sv, q_loaded, pipe, seq_q, seq_k, scale_log2, keys_from, n_tiles):
        """The online softmax over the chunk's tiles; returns (lse_s, O_s) of the chunk: O normalised by the
        chunk's row sum, lse_s = m + log2(ℓ), -inf (and O 0) for a row that saw none of its keys. A tile of
        several loads (``sub_n`` < ``block_n``) is one S accumulator per load, one WGMMA group for all of their
        QKᵀ and one for their PV, and one maximum and one sum per row over all of them."""
        d, block_n, sub_n, dtype = self.head_dim, self.block_n, self.sub_n, self.dtype
        parts = block_n // sub_n
        row_max = self.register_tensor(dtype=float32, shape=[DECODE_ROWS, 1], init=float("-inf"))
        row_sum = self.register_tensor(dtype=float32, shape=[DECODE_ROWS, 1], init=0.0)
        acc_o = self.register_tensor(dtype=float32, shape=[DECODE_ROWS, d], init=0.0)
        causal_shift: int32 = seq_k - seq_q
        self.mbarrier.wait(q_loaded[0], phase=0)
        for j in self.range(n_tiles):
            offset_n: int32 = keys_from + j * block_n
            pipe.consumer_acquire()
            stage = pipe.consumer_stage
            scores = [self.register_tensor(dtype=float32, shape=[DECODE_ROWS, sub_n], init=0.0)
                      for _ in range(parts)]
            self.wgmma.fence()
            for part in range(parts):
                self.wgmma.mma(sq[0], sk[stage][part][0].transpose(), scores[part])
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            scores = [self.masked(scores[part], offset_n + part * sub_n, seq_q, seq_k, causal_shift)
                      for part in range(parts)]
            tile_max = scores[0]
            for part in range(1, parts):
                tile_max = max(tile_max, scores[part])
            new_max = max(row_max, self.reduce_max(tile_max) * scale_log2)
            # Rows without a visible key yet subtract 0, never -inf - -inf.
            subtrahend = self.where(new_max == float("-inf"), 0.0, new_max)
            probs = [self.exp2(scores[part] * scale_log2 - subtrahend) for part in range(parts)]
            correction = self.exp2(row_max - subtrahend)
            tile_sum = probs[0]
            for part in range(1, parts):
                tile_sum = tile_sum + probs[part]
            row_sum = row_sum * correction + self.reduce_sum(tile_sum)
            row_max = max(row_max, new_max)
            acc_o = acc_o * correction
            probs16 = [self.cast(probs[part], dtype) for part in range(parts)]
            self.wgmma.fence()
            for part in range(parts):
                self.wgmma.mma(probs16[part], sv[stage][part][0], acc_o)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            pipe.consumer_release()
            pipe.consumer_advance()
        lse = self.where(row_sum == 0.0, float("-inf"), row_max + self.log2(row_sum))
        # A reciprocal a row and a multiply an element, not a float32 division (a routine) an element.
        return lse, acc_o * (1.0 / self.where(row_sum == 0.0, 1.0, row_sum))

    def masked(self, acc_s, first_key, seq_q, seq_k, causal_shift):
        """Scores ``acc_s`` of the load whose first key is ``first_key`` (its columns hold keys ``load_start``
        ...) with the keys no row may see (past S_k; before ``first_key``, a moved-back load's keys of the load
        before; causal: past the row's last) at -inf, where the load holds any (a runtime branch: most hold
        none)."""
        width = acc_s.shape[1]
        offset_n = self.load_start(first_key, seq_k)
        needs_mask = offset_n + width > seq_k
        if self.moves_last_load:
            needs_mask = needs_mask or offset_n < first_key
        if self.causal:
            needs_mask = needs_mask or offset_n + width - 1 > causal_shift
        if needs_mask:
            cols = self.col_index(acc_s) + offset_n
            keep = cols < seq_k
            if self.moves_last_load:
                keep = keep & (cols >= first_key)
            if self.causal:
                keep = keep & self.causal_visible(acc_s, cols, seq_q, causal_shift)
            acc_s = self.where(keep, acc_s, float("-inf"))
        return acc_s

    def causal_visible(self, acc_s, cols, seq_q, causal_shift):
        """Which logits of tile ``acc_s`` (key index ``cols``) a causal query row sees: row r is query r mod S_q of
        the pack's head r // S_q, which sees keys up to (r mod S_q) + S_k - S_q. Unrolled over the pack's heads
        (the registers' integer operations have no modulo)."""
        rows = self.row_index(acc_s)
        if self.pack == 1:
            return cols <= rows + causal_shift
        visible = (rows < seq_q) & (cols <= rows + causal_shift)
        for head in range(1, self.pack):
            first = head * seq_q
            visible = visible | ((rows >= first) & (rows < first + seq_q) & (cols <= rows - first + causal_shift))
        return visible

    def leave_partial(self, acc_o, lse, ws_o, ws_lse, slot):
        """Store this chunk's partial (O and lse of the pack's real rows) into its workspace slot."""
        self.store_global(ws_o, acc_o, offsets=[0, slot * self.head_dim])
        self.store_global(ws_lse, lse, offsets=[0, slot])

    def count_partial(self, flags, pb):
        """Count this split's partial on the pack's flag, after every thread's stores of it."""
        self.sync()
        with self.single_thread():
            self.flag.add(flags, pb, 1)

    def wait_for_partials(self, ws_lse, flags, pb, n_splits):
        """One thread waits for the count of the pack's other splits and gives it back; the sync orders every
        thread's loads of the partials after the wait (and after this block's own stores of its partial).
        (``ws_lse``: what the partials' loads read.)"""
        with self.single_thread():
            self.flag.wait(flags, pb, n_splits - 1)
            self.flag.signal(flags, pb, 0)
        self.sync()

    def fold_rows(self):
        """The query rows of one step of the fold: ``FOLD_ELEMENTS / head_dim`` rows of O, so that each of the
        warpgroup's threads holds one vector of 4 elements of each partial."""
        return max(1, FOLD_ELEMENTS // self.head_dim)

    def fold_partials(self, ws_o, ws_lse, go, glse, flags, pb, n_splits, rows):
        """The pack's last split, its own partial already in its slot: wait until the other splits all left
        theirs (one wait on their count), give the count back (0, for the next launch), then fold the
        ``n_splits`` partials of the pack's ``rows`` query rows and store O and its log-sum-exp.

        The fold is spread over the whole warpgroup in a blocked layout (``fold_rows()`` rows at a time, 4
        elements per thread, one vector load of a partial's 4) and loads ``FOLD_WIDTH`` partials at once: with m
        the largest lse of the partials so far, the sum of weights and the weighted O are rescaled by 2^(m - m') per
        step and gain Σ 2^(lse_s - m')·O_s; at the end O = weighted O / sum and lse = m + log2(sum)."""
        d, fold = self.head_dim, self.fold_rows()
        first: int32 = pb * n_splits  # the pack's first slot
        last: int32 = n_splits - 1
        self.wait_for_partials(ws_lse, flags, pb, n_splits)
        for block in self.range(cdiv(rows, fold)):
            row: int32 = block * fold
            top = self.register_tensor(dtype=float32, shape=[fold, 1], init=float("-inf"))
            total = self.register_tensor(dtype=float32, shape=[fold, 1], init=0.0)
            acc = self.register_tensor(dtype=float32, shape=[fold, d], init=0.0)
            for step in self.range(cdiv(n_splits, FOLD_WIDTH)):
                # Unrolled, every load before any arithmetic: a load's value is waited for where it is first used,
                # so folding a partial between two loads would make each partial a round trip to memory of its
                # own (the vector load's alignment test is a branch the compiler does not move loads across).
                # Past the pack's last split, its slot is read again and given weight 0: its values are finite.
                lses = [self.load_global(ws_lse, offsets=[row, first + min(step * FOLD_WIDTH + lane, last)],
                                         shape=[fold, 1]) for lane in range(FOLD_WIDTH)]
                parts = [self.load_global(ws_o, offsets=[row, (first + min(step * FOLD_WIDTH + lane, last)) * d],
                                          shape=[fold, d]) for lane in range(FOLD_WIDTH)]
                for lane in range(FOLD_WIDTH):
                    split: int32 = step * FOLD_WIDTH + lane
                    other_lse = self.where(self.col_index(lses[lane]) + split <= last, lses[lane], float("-inf"))
                    new_top = max(top, other_lse)
                    # Rows where no split saw a key yet subtract 0, never -inf - -inf; their weights are 0.
                    subtrahend = self.where(new_top == float("-inf"), 0.0, new_top)
                    rescale = self.exp2(top - subtrahend)
                    theirs = self.exp2(other_lse - subtrahend)
                    total = total * rescale + theirs
                    acc = acc * rescale + parts[lane] * theirs
                    top = max(top, other_lse)  # updated in place (new_top is a tensor of its own)
            final = self.where(top == float("-inf"), 0.0, top)
            out = acc * (1.0 / self.where(total == 0.0, 1.0, total))
            # +inf for a row that sees no key, as the forward kernel stores it.
            lse = self.where(total == 0.0, float("inf"), final + self.log2(total))
            self.store_global(go, self.cast(out, self.dtype), offsets=[pb * rows + row, 0], row_end=pb * rows + rows)
            self.store_global(glse, lse, offsets=[pb * rows + row, 0], row_end=pb * rows + rows)


class DecodePaged(Decode):
    """The split-KV decode kernel over a paged KV cache (vLLM's layout, ``warpspec.ops.attention_paged``): the caches
    [num_pages, page_size, H_kv, D] are read in place; the block's sequence takes its key count from ``seq_lens``,
    splits its own keys into ``n_splits`` chunks of whole tiles, and the producer warp reads the page of each load
    from ``block_table``:
    a tile of ``block_n`` keys (the dense decode tile) is ``block_n / 16`` loads of ``PAGE_LOAD`` = 16 keys, each
    inside one page whatever the page size (small pages cost no more trips through the softmax than large ones).
    Q and O are [B · H, S_q, D] as for the dense kernel. The caches are viewed as [num_pages, page_size, H_kv·D]
    (K/V head h: columns ``h·D ...``), so a load's rows outside its page read as zeros. The slots of the last page
    past the sequence's keys were never written (NaN, for all the kernel knows; a masked score's probability is 0,
    but 0 · NaN is NaN): the load that holds the last key, when its keys end inside it, is moved back to end at
    that key (``load_start``), its keys of the load before masked as keys past S_k are. No unwritten slot is
    read."""

    moves_last_load = True

    def __init__(self, dtype, head_dim, causal, block_n, num_stages, pack=1, page_size=64):
        super().__init__(dtype, head_dim, causal, block_n, num_stages, pack)
        if not isinstance(page_size, int) or isinstance(page_size, bool) or page_size < 1 or page_size % PAGE_LOAD:
            raise ArgumentError(f"page_size must be a positive multiple of {PAGE_LOAD} (the keys of one load); got "
                                f"{page_size!r}")
        if block_n % PAGE_LOAD:
            raise ArgumentError(f"block_n must be a multiple of {PAGE_LOAD} (the keys of one load); got {block_n!r}")
        self.page_size = page_size
        self.sub_n = PAGE_LOAD

    def kernel_name(self) -> str:
        """``DecodePagedF16`` or ``DecodePagedBF16``."""
        return typed_kernel_name(self, DecodePaged, "DecodePaged", (self.dtype,))

    def __call__(self, seq_q: int32, batch: int32, num_pages: int32, max_pages: int32, heads: int32, group: int32,
                 scale_log2: float32, n_splits: int32, table_ptr: ~int32, lens_ptr: ~int32, q_ptr: ~self.dtype,
                 k_ptr: ~self.dtype, v_ptr: ~self.dtype, o_ptr: ~self.dtype, lse_ptr: ~float32, ws_o_ptr: ~float32,
                 ws_lse_ptr: ~float32, flags_ptr: ~int32):
        d, dtype = self.head_dim, self.dtype
        self.set_grid(n_splits, batch * heads)
        kv_heads = heads // group
        gk = self.global_view(k_ptr, dtype=dtype, shape=[num_pages, self.page_size, kv_heads * d])
        gv = self.global_view(v_ptr, dtype=dtype, shape=[num_pages, self.page_size, kv_heads * d])
        table = self.global_view(table_ptr, dtype=int32, shape=[batch, max_pages])
        lens = self.global_view(lens_ptr, dtype=int32, shape=[batch])
        sequence: int32 = self.blockIdx.y * self.pack // heads  # a pack's heads are of one sequence
        # Clamped to the table's capacity: unchecked lengths (``check=False``) never send a lookup past the row.
        seq_k = min(max(self.load_scalar(lens, [sequence]), 0), max_pages * self.page_size)
        # Each sequence's own keys split evenly (the table's capacity may be far above them).
        chunk: int32 = cdiv(cdiv(seq_k, n_splits), self.block_n) * self.block_n
        self.split_keys(seq_q, seq_k, batch * heads, heads, group, scale_log2, chunk, n_splits, q_ptr, o_ptr,
                        lse_ptr, ws_o_ptr, ws_lse_ptr, flags_ptr, gk, gv,
                        (table, sequence, kv_heads, num_pages, seq_k))

    def key_offsets(self, pages, kv_bh, key):
        """The view offsets (page, row in the page, first column) of the load that starts at key ``key`` of the
        sequence, for K/V head ``kv_bh`` mod H_kv: its page from the block table, its rows moved back by
        ``load_start`` when the sequence's keys end inside it (rows above the page read as zeros). A page index
        outside [0, num_pages) (an unchecked table) is clamped to -1 or num_pages, which lie outside the view: TMA
        reads them as zeros. So are a tile's loads that start past the sequence's last key (pages of the last
        tile the sequence does not reach): their table entries are not looked up."""
        table, sequence, kv_heads, num_pages, seq_k = pages
        page: int32 = -1
        if key < seq_k:
            page = min(max(self.load_scalar(table, [sequence, key // self.page_size]), -1), num_pages)
        row: int32 = key % self.page_size - (key - self.load_start(key, seq_k))
        return [page, row, kv_bh % kv_heads * self.head_dim]

    def load_start(self, first_key, seq_k):
        """The key held by the load's row 0: ``first_key``, or for a load with keys past the sequence's last, the
        key ``sub_n`` before the end (a load past the end reads zeros wherever it starts)."""
        return min(first_key, seq_k - self.sub_n)
