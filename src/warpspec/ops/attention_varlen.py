"""``warpspec.ops.attention_varlen``: attention over a packed batch of sequences of different lengths
(``flash_attn_varlen_func``'s convention), each sequence its own problem: no work is spent on padding.

This version runs each sequence through ``ops.attention`` (a [1, H, S, D] view of its rows), so numpy arrays run on
the emulator and torch tensors are differentiable, forward and backward alike; one launch per sequence. Reading
``cu_seqlens`` inside one kernel needs a scalar load from global memory, which the language does not have yet
(register tiles are distributed over threads and cannot be indexed: docs/language.md).
"""

from __future__ import annotations

import sys

import numpy as np

from warpspec.errors import ArgumentError
from warpspec.ops.attention import _contiguous, attention, validate
from warpspec.ops.operands import dtype_of, same_device, same_kind


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal=False, scale=None):
    """Attention per packed sequence: ``q`` [total_q, H, D], ``k`` and ``v`` [total_k, H_kv, D], ``cu_seqlens_q``
    and ``cu_seqlens_k`` int32 [B + 1] (sequence b is rows ``cu_seqlens[b]:cu_seqlens[b + 1]``; they start at 0,
    never decrease and end at the total). ``causal`` and ``scale`` as ``ops.attention`` takes them (causal aligned
    at the bottom right of each sequence). Returns [total_q, H, D] in q's dtype and kind; rows of a sequence
    without keys are 0."""
    kind = same_kind("q", q, k=k, v=v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k)
    if kind == "torch":
        same_device("q", q, k=k, v=v)
    for name, value in (("q", q), ("k", k), ("v", v)):
        if len(value.shape) != 3:
            raise ArgumentError(f"{name} must be 3-D [total_tokens, heads, head_dim], got shape {tuple(value.shape)}")
    if tuple(v.shape) != tuple(k.shape):
        raise ArgumentError(f"v must have k's shape {tuple(k.shape)}, got {tuple(v.shape)}")
    for name, value in (("q", q), ("k", k), ("v", v)):
        if not _contiguous(value):
            raise ArgumentError(f"{name} must be contiguous [total_tokens, heads, head_dim]; make a contiguous copy "
                                f"first")
    if int(k.shape[0]) > 0:
        # ops.attention's checks (dtypes, head dim, head counts, causal, scale) on one row of each, up front.
        validate(heads_first(q[:1]), heads_first(k[:1]), heads_first(v[:1]), causal, scale)
    starts_q = offsets("cu_seqlens_q", cu_seqlens_q, int(q.shape[0]), "q.shape[0]")
    starts_k = offsets("cu_seqlens_k", cu_seqlens_k, int(k.shape[0]), "k.shape[0]")
    if len(starts_q) != len(starts_k):
        raise ArgumentError(f"cu_seqlens_q has {len(starts_q)} entries but cu_seqlens_k {len(starts_k)}: one "
                            f"[batch + 1] pair")
    pieces = []
    for b in range(len(starts_q) - 1):
        q_b = q[starts_q[b]:starts_q[b + 1]]
        k_b, v_b = k[starts_k[b]:starts_k[b + 1]], v[starts_k[b]:starts_k[b + 1]]
        pieces.append(sequence_attention(q_b, k_b, v_b, causal, scale))
    if not pieces:
        return q[:0] * 0
    if kind == "torch":
        return sys.modules["torch"].cat(pieces)
    return np.concatenate(pieces)


def offsets(name: str, value, total: int, total_name: str) -> list[int]:
    """The validated cumulative lengths as Python ints (read on the host: a CUDA tensor is copied)."""
    if len(value.shape) != 1 or int(value.shape[0]) < 1:
        raise ArgumentError(f"{name} must be 1-D int32 [batch + 1], got shape {tuple(value.shape)}")
    found = dtype_of(value)
    if found is None or found.name != "int32":
        raise ArgumentError(f"{name} must be int32, got dtype {found.name if found else value.dtype}")
    values = [int(x) for x in (value.tolist())]
    if values[0] != 0:
        raise ArgumentError(f"{name} must start at 0, got {values[0]}")
    for b in range(1, len(values)):
        if values[b] < values[b - 1]:
            raise ArgumentError(f"{name} must not decrease: {name}[{b}] = {values[b]} < {name}[{b - 1}] = "
                                f"{values[b - 1]}")
    if values[-1] != total:
        raise ArgumentError(f"{name} must end at the total {total_name} = {total}, got {values[-1]}")
    return values


def sequence_attention(q_b, k_b, v_b, causal, scale):
    """One sequence's [S_q, H, D] rows against its [S_k, H_kv, D] keys through ``ops.attention``; zeros when it
    has no keys."""
    if int(k_b.shape[0]) == 0:
        return q_b * 0
    out = attention(heads_first(q_b), heads_first(k_b), heads_first(v_b), causal=causal, scale=scale)[0]
    return out.transpose(1, 0, 2) if isinstance(out, np.ndarray) else out.transpose(0, 1)


def heads_first(x):
    """[S, H, D] rows as the contiguous [1, H, S, D] that ops.attention takes (differentiable for tensors)."""
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x.transpose(1, 0, 2))[None]
    return x.transpose(0, 1).unsqueeze(0).contiguous()
