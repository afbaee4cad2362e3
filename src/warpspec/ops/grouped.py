"""``warpspec.ops.grouped_matmul``: one GEMM per group of rows, as a mixture-of-experts layer calls its experts, in
``torch._grouped_mm``'s 2-D × 3-D convention.

Today each group is one ``ops.matmul`` of its rows (a launch per group, empty groups computing nothing), so every
layout, the staging of ragged pitches and the backward (``warpspec::matmul_grad``) come from ops.matmul; the offsets
are read by the host, which for CUDA tensors waits for the device once per call. A single persistent launch walking
(group, tile) pairs, with the offsets read on the device, is not built yet.
"""

from __future__ import annotations

import sys

import numpy as np

from warpspec.errors import ArgumentError
from warpspec.ops.matmul import matmul
from warpspec.ops.operands import kind_of, same_kind


def grouped_matmul(a, b, offs, *, out_dtype=None):
    """``out[offs[g-1]:offs[g]] = a[offs[g-1]:offs[g]] @ b[g]`` for every group g (``offs[-1]`` = 0).

    * ``a`` [total_M, K]: the rows of all groups, sorted by group; rows from ``offs[G-1]`` on belong to no group
      and their output rows are 0.
    * ``b`` [G, K, N]: row-major, or the transposed view of [G, N, K] expert weights (``w.transpose(1, 2)``).
    * ``offs``: int32 [G], the cumulative row ends (non-decreasing, at most total_M; equal neighbours are empty
      groups), a numpy array or a tensor (on any device: it is read by the host).
    * ``out_dtype``: as ``ops.matmul``'s (the input dtype by default, float32 allowed). float16 and bfloat16.

    Returns a new [total_M, N] array/tensor; torch tensors that require a gradient give a differentiable one."""
    kind = same_kind("a", a, b=b)
    kind_of(offs, "offs")
    if len(a.shape) != 2:
        raise ArgumentError(f"a must be 2-D [total_M, K], got shape {tuple(a.shape)}")
    if len(b.shape) != 3:
        raise ArgumentError(f"b must be 3-D [G, K, N], got shape {tuple(b.shape)}")
    groups, k, n = (int(s) for s in b.shape)
    if int(a.shape[1]) != k:
        raise ArgumentError(f"b has K = {k} (b.shape[1]) but a has {a.shape[1]} columns")
    if tuple(offs.shape) != (groups,) or str(offs.dtype).rpartition(".")[2] != "int32":
        raise ArgumentError(f"offs must be int32 of shape ({groups},) (one cumulative row end per group), got "
                            f"{offs.dtype} of shape {tuple(offs.shape)}")
    ends = [int(end) for end in (offs.tolist() if kind == "torch" else offs)]
    total = int(a.shape[0])
    if any(later < earlier for earlier, later in zip([0] + ends, ends)) or (ends and ends[-1] > total):
        raise ArgumentError(f"offs must be non-decreasing from 0 to at most total_M = {total}, got {ends}")
    pieces, start = [], 0
    for group, end in enumerate(ends):
        pieces.append(matmul(a[start:end], b[group], out_dtype=out_dtype))
        start = end
    if kind == "numpy":
        dtype = pieces[0].dtype if pieces else a.dtype
        pieces.append(np.zeros((total - start, n), dtype=dtype))
        return np.concatenate(pieces)
    torch = sys.modules["torch"]
    dtype = pieces[0].dtype if pieces else a.dtype
    pieces.append(torch.zeros((total - start, n), dtype=dtype, device=a.device))
    return torch.cat(pieces)
