"""The attention forward kernel over a packed batch of sequences (``warpspec.ops.attention_varlen``): the forward
kernel of ``warpspec.ops.attention_kernel`` in its packed mode, one launch for every sequence.

Q is [total_q, H, D] and K, V are [total_k, H_kv, D], sequence b being rows ``cu_seqlens[b] ...
cu_seqlens[b + 1]`` (``flash_attn_varlen_func``'s layout). The grid is (query tiles of the longest sequence,
H, B): block (x, h, b) reads its sequence's bounds from ``cu_seqlens_q`` and ``cu_seqlens_k`` with
``load_scalar`` and runs the dense kernel's body on query tile x of head h of sequence b. A tile past its
sequence's end starts no roles: it loads no Q, reads no keys and stores nothing. The views are head-major over the
packed rows ([H, total, D], strides [D, H·D, 1]), so each TMA box is the dense kernel's [1, rows, D] at the
sequence's row offset; keys past the sequence's end in its last tile are the next sequence's (or TMA's zeros past
the total), masked like the dense kernel's columns past S_k. The log-sum-exp leaves from registers
(``store_global``) with ``row_end`` at the sequence's end, and so does a warpgroup's O where its 64 rows pass that
end (a TMA box would also write the next sequence's rows); O of whole warpgroup tiles leaves by TMA store, as in
the dense kernel.

Causal masks are aligned at the bottom right of each sequence (query i of a sequence sees its keys
j <= i + S_k - S_q), as ``ops.attention`` aligns them. ``PackedRows`` (the views, the bounds and the stores that stop
at a sequence's end) is shared with the packed backward kernels of ``attention_backward_kernel``.
"""

from __future__ import annotations

from warpspec.dtypes import float32, int32
from warpspec.frontend.interpreter import cdiv
from warpspec.ops.attention_kernel import BLOCK_M, WARPS, Attention, _schedules
from warpspec.ops.naming import typed_kernel_name


class PackedRows:
    """The packed mode's shared pieces, for the forward kernel here and the backward kernels
    (``attention_backward_kernel``): the head-major views over packed rows, a block's sequence bounds read from
    ``cu_seqlens`` and the store of a warpgroup's 64 finished rows that stops at the sequence's end. Mixed into
    Scripts that have ``head_dim``, ``dtype`` and a ``store_output(buffer, view, tile, head, row)`` (the TMA store
    of a [1, 64, D] shared buffer)."""

    varlen = True

    def head_rows(self, ptr, heads, rows):
        """The packed [rows, H, D] array at ``ptr`` seen as [H, rows, D] (strides [D, H·D, 1]): a TMA box [1, n, D]
        at (h, r) is head h's rows r ... r + n - 1."""
        d = self.head_dim
        return self.global_view(ptr, dtype=self.dtype, shape=[heads, rows, d], strides=[d, heads * d, 1])

    def output_views(self, o_ptr, heads, rows):
        """An output [rows, H, D] twice: as rows of H·D elements (``store_global`` clips them at a sequence's end)
        and head-major (``head_rows``) for TMA stores."""
        return (self.global_view(o_ptr, dtype=self.dtype, shape=[rows, heads * self.head_dim]),
                self.head_rows(o_ptr, heads, rows))

    def sequence_bounds(self, batch, total_q, total_k, cu_q_ptr, cu_k_ptr):
        """(first query row, first key row, query rows, key rows) of sequence ``blockIdx.z``, read from the
        cumulative lengths and clamped into [0, total] in order: unchecked lengths (``check=False``) never reach past
        the views."""
        cu_q = self.global_view(cu_q_ptr, dtype=int32, shape=[batch + 1])
        cu_k = self.global_view(cu_k_ptr, dtype=int32, shape=[batch + 1])
        sequence: int32 = self.blockIdx.z
        q_start = min(max(self.load_scalar(cu_q, [sequence]), 0), total_q)
        k_start = min(max(self.load_scalar(cu_k, [sequence]), 0), total_k)
        seq_q: int32 = min(max(self.load_scalar(cu_q, [sequence + 1]), q_start), total_q) - q_start
        seq_k: int32 = min(max(self.load_scalar(cu_k, [sequence + 1]), k_start), total_k) - k_start
        return q_start, k_start, seq_q, seq_k

    def store_rows(self, buffer, views, tile, head, rows_from, start, count):
        """A warpgroup's 64 finished rows ``tile`` (in the kernel's dtype): rows ``rows_from ...`` of head ``head`` of
        the sequence whose ``count`` rows start at view row ``start`` (``views``: ``output_views``). Through the
        warpgroup's shared ``buffer`` and one TMA store when all 64 lie in the sequence; else from registers up to
        its end (a TMA box would write the next sequence's rows too)."""
        rows_view, heads_view = views
        row = start + rows_from
        if rows_from + 64 <= count:
            self.store_output(buffer, heads_view, tile, head, row)
        else:
            self.store_global(rows_view, tile, offsets=[row, head * self.head_dim], row_end=start + count)


class _AttentionVarlen(PackedRows, Attention):
    """The packed mode: per-sequence bounds read in the kernel; ``AttentionVarlen`` and ``AttentionPaged`` give
    the kernels' parameters."""

    tune_key = ("max_seq_q", "total_k", "heads")

    def attention_varlen(self, batch, max_seq_q, total_q, total_k, heads, group, scale_log2, cu_q_ptr, cu_k_ptr,
                         q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr):
        """The kernel: query tile ``blockIdx.x`` of head ``blockIdx.y`` of sequence ``blockIdx.z``."""
        kv_heads = heads // group
        self.attrs.blocks = [cdiv(max_seq_q, BLOCK_M), heads, batch]
        self.attrs.warps = WARPS
        gq = self.head_rows(q_ptr, heads, total_q)
        gk = self.head_rows(k_ptr, kv_heads, total_k)
        gv = self.head_rows(v_ptr, kv_heads, total_k)
        go = self.output_views(o_ptr, heads, total_q)
        # lse [H, total_q] seen as [total_q, H], as the dense kernel sees its [B·H, S_q].
        glse = self.global_view(lse_ptr, dtype=float32, shape=[total_q, heads], strides=[1, total_q])
        q_start, k_start, seq_q, seq_k = self.sequence_bounds(batch, total_q, total_k, cu_q_ptr, cu_k_ptr)
        head: int32 = self.blockIdx.y
        self.attend(gq, gk, gv, go, glse, seq_q, seq_k, scale_log2, head, head // group, q_start, k_start)

    def store_result(self, sq, go, glse, out, lse, bh, rows_from, q_start, seq_q):
        """A warpgroup's 64 rows of O and of the log-sum-exp (``go``: ``output_views``): the log-sum-exp from
        registers up to the sequence's end, O by ``store_rows``."""
        self.store_global(glse, lse, offsets=[q_start + rows_from, bh], row_end=q_start + seq_q)
        self.store_rows(sq, go, self.cast(out, self.dtype), bh, rows_from, q_start, seq_q)


@_schedules
class AttentionVarlen(_AttentionVarlen):
    """Q, K, V and O of the constructor's element type (float16 or bfloat16), over packed sequences."""

    def kernel_name(self) -> str:
        """``AttentionVarlenF16`` or ``AttentionVarlenBF16``."""
        return typed_kernel_name(self, AttentionVarlen, "AttentionVarlen", (self.dtype,))

    def __call__(self, batch: int32, max_seq_q: int32, total_q: int32, total_k: int32, heads: int32, group: int32,
                 scale_log2: float32, cu_q_ptr: ~int32, cu_k_ptr: ~int32, q_ptr: ~self.dtype, k_ptr: ~self.dtype,
                 v_ptr: ~self.dtype, o_ptr: ~self.dtype, lse_ptr: ~float32):
        self.attention_varlen(batch, max_seq_q, total_q, total_k, heads, group, scale_log2, cu_q_ptr, cu_k_ptr,
                              q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr)
