"""The attention forward kernel over a paged KV cache (``warpspec.ops.attention_paged``, vLLM's layout): the
packed kernel of ``warpspec.ops.attention_varlen_kernel`` whose producer warp finds each key tile's page in the
block table.

Q is [B, S_q, H, D] (sequence b's rows ``b·S_q ...`` of the packed view), the caches [num_pages, page_size, H_kv, D],
seen as [num_pages, page_size, H_kv·D]: K/V head h of a page's row r is the view's columns ``h·D ...`` of (page, r),
so a TMA box [1, block_n, D] never leaves its page (rows outside [0, page_size) read as zeros). Block (x, h, b) takes
its sequence's key count from ``seq_lens[b]``; for key tile j the producer warp reads page
``block_table[b, j·block_n / page_size]`` with ``load_scalar`` and issues the tile's TMA loads at that page's rows
(``block_n`` divides ``page_size``, so a tile lies inside one page).

The slots of the last page past ``seq_lens[b]`` are cache memory nobody wrote (NaN, for all the kernel knows): a
score there is masked, but P·V would multiply its probability 0 by the slot's V, and 0 · NaN is NaN. So the
sequence's last tile, when its keys end inside it, is loaded moved back to end at the last key (``tile_start``):
its rows are that key and the keys before it, down to the page's first row, and zeros (TMA's fill) above the page;
the keys of the tile before are masked like the keys past S_k. No unwritten slot is ever read.
"""

from __future__ import annotations

from warpspec.dtypes import float32, int32
from warpspec.errors import ArgumentError
from warpspec.frontend.interpreter import cdiv
from warpspec.ops.attention_kernel import BLOCK_M, WARPS, _schedules
from warpspec.ops.attention_varlen_kernel import _AttentionVarlen
from warpspec.ops.naming import typed_kernel_name


class _AttentionPaged(_AttentionVarlen):
    """The paged mode: each key tile's page read from the block table in the kernel."""

    tune_key = ("seq_q", "max_pages", "heads")
    moves_last_tile = True

    def __init__(self, dtype, head_dim, causal, page_size, block_n, num_stages, unroll):
        super().__init__(dtype, head_dim, causal, block_n, num_stages, unroll)
        if page_size % block_n:
            raise ArgumentError(f"block_n ({block_n}) must divide page_size ({page_size}): a key tile lies in one "
                                f"page")
        self.page_size = page_size

    def attention_paged(self, batch, seq_q, num_pages, max_pages, heads, group, scale_log2, table_ptr, lens_ptr,
                        q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr):
        """The kernel: query tile ``blockIdx.x`` of head ``blockIdx.y`` of sequence ``blockIdx.z``."""
        d, dtype = self.head_dim, self.dtype
        kv_heads = heads // group
        rows_q = batch * seq_q
        self.attrs.blocks = [cdiv(seq_q, BLOCK_M), heads, batch]
        self.attrs.warps = WARPS
        gq = self.global_view(q_ptr, dtype=dtype, shape=[heads, rows_q, d], strides=[d, heads * d, 1])
        gk = self.global_view(k_ptr, dtype=dtype, shape=[num_pages, self.page_size, kv_heads * d])
        gv = self.global_view(v_ptr, dtype=dtype, shape=[num_pages, self.page_size, kv_heads * d])
        go = self.output_views(o_ptr, heads, rows_q)
        glse = self.global_view(lse_ptr, dtype=float32, shape=[rows_q, heads], strides=[1, rows_q])
        table = self.global_view(table_ptr, dtype=int32, shape=[batch, max_pages])
        lens = self.global_view(lens_ptr, dtype=int32, shape=[batch])
        sequence: int32 = self.blockIdx.z
        # Clamped to the table's capacity: unchecked lengths (``check=False``) never send a lookup past the row.
        seq_k = min(max(self.load_scalar(lens, [sequence]), 0), max_pages * self.page_size)
        head: int32 = self.blockIdx.y
        self.attend(gq, gk, gv, go, glse, seq_q, seq_k, scale_log2, head, head // group, sequence * seq_q,
                    (table, sequence, num_pages, seq_k))

    def key_tile_offsets(self, k_row, kv_bh, j):
        """The view offsets of key tile j of the sequence, K/V head ``kv_bh``: (page, row in the page, the head's
        first column), its page from the block table, its rows moved back by ``tile_start`` when the sequence's
        keys end inside it (rows above the page read as zeros). A page index outside [0, num_pages) (an unchecked
        table) is clamped to -1 or num_pages, which lie outside the view: TMA reads them as zeros."""
        table, sequence, num_pages, seq_k = k_row
        first = j * self.block_n
        page = min(max(self.load_scalar(table, [sequence, first // self.page_size]), -1), num_pages)
        return [page, first % self.page_size - (first - self.tile_start(first, seq_k)), kv_bh * self.head_dim]

    def tile_start(self, first_key, seq_k):
        """The key held by the tile's row 0: ``first_key``, or for the tile holding the sequence's last key with
        rows past it, the key ``block_n`` before the end (so the tile ends at the last key)."""
        return min(first_key, seq_k - self.block_n)


@_schedules
class AttentionPaged(_AttentionPaged):
    """Q, the caches and O of the constructor's element type (float16 or bfloat16)."""

    def kernel_name(self) -> str:
        """``AttentionPagedF16`` or ``AttentionPagedBF16``."""
        return typed_kernel_name(self, AttentionPaged, "AttentionPaged", (self.dtype,))

    def __call__(self, batch: int32, seq_q: int32, num_pages: int32, max_pages: int32, heads: int32, group: int32,
                 scale_log2: float32, table_ptr: ~int32, lens_ptr: ~int32, q_ptr: ~self.dtype, k_ptr: ~self.dtype,
                 v_ptr: ~self.dtype, o_ptr: ~self.dtype, lse_ptr: ~float32):
        self.attention_paged(batch, seq_q, num_pages, max_pages, heads, group, scale_log2, table_ptr, lens_ptr,
                             q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr)
