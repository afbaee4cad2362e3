"""``warpspec.ops.attention_paged``: attention of the newest query tokens of each sequence against a paged KV cache
(vLLM's layout): the keys of sequence b are the first ``seq_lens[b]`` rows of its pages ``block_table[b, :]``.

This version gathers each sequence's pages on the host side of the launch (an index into the cache, then
``ops.attention`` on the gathered [1, H_kv, S_k, D] keys), so numpy arrays run on the emulator and torch tensors
are differentiable in q. Gathering the pages inside the kernel, by the producer warp's TMA loads at offsets read
from ``block_table``, needs a scalar load from global memory, which the language does not have yet (register tiles
are distributed over threads and cannot be indexed: docs/language.md).
"""

from __future__ import annotations

import sys

import numpy as np

from warpspec.errors import ArgumentError
from warpspec.frontend.interpreter import cdiv
from warpspec.ops.attention import _contiguous, attention, validate
from warpspec.ops.attention_varlen import heads_first
from warpspec.ops.operands import dtype_of, same_device, same_kind

PAGE_SIZES = (16, 256)  # the smallest and largest page size taken


def attention_paged(q, k_cache, v_cache, block_table, seq_lens, *, causal=True, scale=None):
    """Attention for ``q`` [B, S_q, H, D] (the newest S_q tokens of each sequence: decode or chunked prefill)
    against ``k_cache`` and ``v_cache`` [num_pages, page_size, H_kv, D] (page_size 16-256), ``block_table`` int32
    [B, max_pages] (sequence b's pages, in order) and ``seq_lens`` int32 [B] (its keys, the new tokens included).
    ``causal`` aligns at the bottom right: query i of sequence b sees keys j <= i + seq_lens[b] - S_q. Returns
    [B, S_q, H, D] in q's dtype and kind. Every check is an ``ArgumentError`` naming the argument, before anything
    is allocated (the table and the lengths are read on the host)."""
    kind = same_kind("q", q, k_cache=k_cache, v_cache=v_cache, block_table=block_table, seq_lens=seq_lens)
    if kind == "torch":
        same_device("q", q, k_cache=k_cache, v_cache=v_cache, block_table=block_table, seq_lens=seq_lens)
    pages, lengths = validate_paged(q, k_cache, v_cache, block_table, seq_lens, causal, scale)
    page_size = int(k_cache.shape[1])
    outputs = []
    for b, (row, length) in enumerate(zip(pages, lengths)):
        index = row[:cdiv(length, page_size)]
        if kind == "torch":
            index = sys.modules["torch"].tensor(index, dtype=sys.modules["torch"].long, device=k_cache.device)
        keys = k_cache[index].reshape(-1, *k_cache.shape[2:])[:length]
        values = v_cache[index].reshape(-1, *v_cache.shape[2:])[:length]
        out = attention(heads_first(q[b]), heads_first(keys), heads_first(values), causal=causal, scale=scale)[0]
        outputs.append(out.transpose(1, 0, 2) if kind == "numpy" else out.transpose(0, 1))
    if kind == "torch":
        return sys.modules["torch"].stack(outputs)
    return np.stack(outputs)


def validate_paged(q, k_cache, v_cache, block_table, seq_lens, causal, scale):
    """Every check; the block table and the lengths as Python lists."""
    if len(q.shape) != 4:
        raise ArgumentError(f"q must be 4-D [batch, seq_q, heads, head_dim], got shape {tuple(q.shape)}")
    for name, value in (("k_cache", k_cache), ("v_cache", v_cache)):
        if len(value.shape) != 4:
            raise ArgumentError(f"{name} must be 4-D [num_pages, page_size, kv_heads, head_dim], got shape "
                                f"{tuple(value.shape)}")
    if tuple(v_cache.shape) != tuple(k_cache.shape):
        raise ArgumentError(f"v_cache must have k_cache's shape {tuple(k_cache.shape)}, got {tuple(v_cache.shape)}")
    batch, seq_q = int(q.shape[0]), int(q.shape[1])
    num_pages, page_size = int(k_cache.shape[0]), int(k_cache.shape[1])
    if not PAGE_SIZES[0] <= page_size <= PAGE_SIZES[1]:
        raise ArgumentError(f"page_size (k_cache.shape[1]) is {page_size}; attention_paged takes "
                            f"{PAGE_SIZES[0]} to {PAGE_SIZES[1]}")
    for name, value in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if not _contiguous(value):
            raise ArgumentError(f"{name} must be contiguous; make a contiguous copy first")
    # ops.attention's checks (dtypes, head dims, head counts, causal, scale) on one token of each, up front.
    validate(heads_first(q[0, :1]), heads_first(k_cache[0, :1]), heads_first(v_cache[0, :1]), causal, scale)
    for name, value, rank in (("block_table", block_table, 2), ("seq_lens", seq_lens, 1)):
        found = dtype_of(value)
        if len(value.shape) != rank or found is None or found.name != "int32":
            raise ArgumentError(f"{name} must be a {rank}-D int32 array, got shape {tuple(value.shape)} and dtype "
                                f"{found.name if found else value.dtype}")
    if int(block_table.shape[0]) != batch or int(seq_lens.shape[0]) != batch:
        raise ArgumentError(f"block_table has {int(block_table.shape[0])} rows and seq_lens {int(seq_lens.shape[0])} "
                            f"entries; q has batch {batch}")
    max_pages = int(block_table.shape[1])
    pages, lengths = block_table.tolist(), [int(x) for x in seq_lens.tolist()]
    for b, length in enumerate(lengths):
        if length < max(seq_q, 1):
            raise ArgumentError(f"seq_lens[{b}] is {length}; it counts the sequence's keys, the {seq_q} new "
                                f"tokens included, so it must be at least {max(seq_q, 1)}")
        if length > max_pages * page_size:
            raise ArgumentError(f"seq_lens[{b}] is {length}, above the table's capacity max_pages * page_size = "
                                f"{max_pages} * {page_size} = {max_pages * page_size}")
        for p, page in enumerate(pages[b][:cdiv(length, page_size)]):
            if not 0 <= page < num_pages:
                raise ArgumentError(f"block_table[{b}, {p}] is {page}: a page index must lie in [0, {num_pages}) "
                                    f"(k_cache.shape[0])")
    return pages, lengths
