"""``warpspec.ops.attention_varlen``: attention over a packed batch of sequences of different lengths
(``flash_attn_varlen_func``'s convention), each sequence its own problem: no work is spent on padding.

The forward pass is one launch of the packed kernel (``warpspec.ops.attention_varlen_kernel``), whose blocks read
their sequence's bounds from ``cu_seqlens``: numpy arrays run it on the emulator, torch tensors through the custom
op ``warpspec::attention_varlen`` (CUDA tensors on their GPU, CPU tensors on the emulator). The op is differentiable;
its backward runs ``ops.attention_backward``'s kernels once per sequence, on the sequence's rows and the forward's
log-sum-exp.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from warpspec import runtime
from warpspec.dtypes import DType
from warpspec.errors import ArgumentError
from warpspec.ops.attention import DEFAULT_SCHEDULES, MAX_GRID_Y, MAX_INT32, _contiguous, validate
from warpspec.ops.attention_kernel import LOG2_E
from warpspec.ops.attention_varlen_kernel import AttentionVarlen
from warpspec.ops.operands import dtype_of, same_device, same_kind


@dataclass(frozen=True)
class VarlenProblem:
    """One validated call."""

    batch: int
    heads: int
    kv_heads: int
    head_dim: int
    dtype: DType
    causal: bool
    scale: float
    max_seq_q: int


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal=False, scale=None, max_seqlen_q=None,
                     check=True):
    """Attention per packed sequence: ``q`` [total_q, H, D], ``k`` and ``v`` [total_k, H_kv, D], ``cu_seqlens_q``
    and ``cu_seqlens_k`` int32 [B + 1] (sequence b is rows ``cu_seqlens[b]:cu_seqlens[b + 1]``; they start at 0,
    never decrease and end at the total). ``causal`` and ``scale`` as ``ops.attention`` takes them (causal aligned
    at the bottom right of each sequence). Returns [total_q, H, D] in q's dtype and kind; rows of a sequence
    without keys are 0. One kernel launch for the whole batch; torch tensors are differentiable.

    ``check`` (default True) reads the cumulative lengths on the host, checks them and takes the longest
    sequence's query rows from them (the grid's extent): for CUDA tensors that copy waits for the GPU's queued
    work, and inside CUDA graph capture it is refused, naming ``check=False``. ``check=False`` reads nothing back
    and takes the grid from ``max_seqlen_q`` (required then, as ``flash_attn_varlen_func`` takes it): rows of a
    sequence past ``max_seqlen_q`` are not computed. The kernel clamps each sequence's bounds into [0, total] in
    order, so unchecked bad lengths never read or write outside q, k, v and the output (sequences whose rows then
    overlap write them in any order). Given with ``check=True``, ``max_seqlen_q`` must be at least the longest
    sequence's query rows."""
    if not isinstance(check, bool):
        raise ArgumentError(f"check must be True or False, got {check!r}")
    if max_seqlen_q is not None and (not isinstance(max_seqlen_q, int) or isinstance(max_seqlen_q, bool)
                                     or max_seqlen_q < 0):
        raise ArgumentError(f"max_seqlen_q must be a non-negative int (the longest sequence's query rows), got "
                            f"{max_seqlen_q!r}")
    if not check and max_seqlen_q is None:
        raise ArgumentError("check=False reads nothing back, so max_seqlen_q (the longest sequence's query rows, "
                            "which sizes the grid) must be given")
    kind = same_kind("q", q, k=k, v=v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k)
    if kind == "torch":
        same_device("q", q, k=k, v=v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k)
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
        row = validate(heads_first(q[:1]), heads_first(k[:1]), heads_first(v[:1]), causal, scale)
        if max(int(q.shape[0]) * row.heads, int(k.shape[0]) * row.kv_heads) * row.head_dim > MAX_INT32:
            raise ArgumentError("q, k or v has more than 2**31 - 1 elements, which the kernel's int32 offsets "
                                "cannot address")
    for name, value in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        check_layout(name, value)
    entries = int(cu_seqlens_q.shape[0])
    if entries != int(cu_seqlens_k.shape[0]):
        raise ArgumentError(f"cu_seqlens_q has {entries} entries but cu_seqlens_k {int(cu_seqlens_k.shape[0])}: "
                            f"one [batch + 1] pair")
    if entries - 1 > MAX_GRID_Y:
        raise ArgumentError(f"cu_seqlens_q holds {entries - 1} sequences; at most {MAX_GRID_Y} (the grid's z extent)")
    if check:
        if kind == "torch" and q.is_cuda and sys.modules["torch"].cuda.is_current_stream_capturing():
            raise ArgumentError("attention_varlen cannot read cu_seqlens_q's and cu_seqlens_k's values inside CUDA "
                                "graph capture (they are checked on the host); pass check=False and max_seqlen_q")
        starts_q = offsets("cu_seqlens_q", cu_seqlens_q, int(q.shape[0]), "q.shape[0]")
        offsets("cu_seqlens_k", cu_seqlens_k, int(k.shape[0]), "k.shape[0]")
        lengths_q = [b - a for a, b in zip(starts_q, starts_q[1:])]
        max_seq_q = max(lengths_q)
        if max_seqlen_q is not None and max_seqlen_q < max_seq_q:
            raise ArgumentError(f"max_seqlen_q is {max_seqlen_q}, but sequence {lengths_q.index(max_seq_q)} has "
                                f"{max_seq_q} query rows")
    else:
        max_seq_q = max_seqlen_q
    if int(k.shape[0]) == 0 or int(q.shape[0]) == 0 or max_seq_q == 0:
        return q * 0  # no keys anywhere (every row is 0), or no rows
    problem = VarlenProblem(entries - 1, row.heads, row.kv_heads, row.head_dim, row.dtype, row.causal, row.scale,
                            max_seq_q)
    if kind == "torch":
        return _torch_op()(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seq_q, problem.causal, problem.scale)[0]
    out = np.empty(q.shape, dtype=q.dtype)
    with runtime.use_backend("emulator"):
        launch(q, k, v, cu_seqlens_q, cu_seqlens_k, out, np.empty((problem.heads, q.shape[0]), np.float32),
               problem)
    return out


_scripts: dict = {}  # (dtype name, head dim, causal) -> the packed kernel pinned to the head dim's schedule


def launch(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse2, problem: VarlenProblem) -> None:
    """One launch of the packed kernel on validated operands on the selected back end (``lse2`` float32
    [H, total_q] receives the base-2 log-sum-exp), with the dense kernel's shipped schedule of the head dim."""
    key = (problem.dtype.name, problem.head_dim, problem.causal)
    if key not in _scripts:
        tuned = AttentionVarlen(problem.dtype, head_dim=problem.head_dim, causal=problem.causal)
        _scripts[key] = tuned.instantiate(dict(DEFAULT_SCHEDULES[problem.head_dim]))
    _scripts[key](problem.batch, problem.max_seq_q, int(q.shape[0]), int(k.shape[0]), problem.heads,
                  problem.heads // problem.kv_heads, problem.scale * LOG2_E, cu_seqlens_q, cu_seqlens_k, q, k, v,
                  out, lse2)


def check_layout(name: str, value) -> None:
    """The checks of cumulative lengths that read no value: 1-D int32 [batch + 1], contiguous."""
    if len(value.shape) != 1 or int(value.shape[0]) < 1:
        raise ArgumentError(f"{name} must be 1-D int32 [batch + 1], got shape {tuple(value.shape)}")
    found = dtype_of(value)
    if found is None or found.name != "int32":
        raise ArgumentError(f"{name} must be int32, got dtype {found.name if found else value.dtype}")
    if not _contiguous(value):
        raise ArgumentError(f"{name} must be contiguous (the kernel reads it as a dense array); make a contiguous "
                            f"copy first")


def offsets(name: str, value, total: int, total_name: str) -> list[int]:
    """The validated cumulative lengths as Python ints (read on the host: a CUDA tensor is copied); the caller
    checked their layout (``check_layout``)."""
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


def heads_first(x):
    """[S, H, D] rows as the contiguous [1, H, S, D] that ops.attention takes (differentiable for tensors)."""
    if isinstance(x, np.ndarray):
        return np.ascontiguousarray(x.transpose(1, 0, 2))[None]
    return x.transpose(0, 1).unsqueeze(0).contiguous()


# --------------------------------------------------------------------------------------------- torch op

_op = None


def _torch_op():
    """The custom op ``warpspec::attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seq_q, causal, scale)
    -> (out, lse2)`` (``lse2`` the kernel's base-2 log-sum-exp, [H, total_q]), differentiable: its backward runs
    ``attention_backward``'s kernels per sequence. Registered at the first use, or when this module is imported
    after torch."""
    global _op
    if _op is None:
        import torch

        from warpspec.torch_ops import custom_op

        _op = custom_op("warpspec::attention_varlen", _op_implementation,
                        schema="(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
                               "int max_seq_q, bool causal, float scale) -> (Tensor, Tensor)")

        def setup_context(ctx, inputs, output):
            q, k, v, cu_q, cu_k, _, causal, scale = inputs
            ctx.save_for_backward(q, k, v, cu_q, cu_k, *output)
            ctx.causal, ctx.scale = causal, scale
            ctx.mark_non_differentiable(output[1])

        def backward(ctx, dout, _dlse):
            q, k, v, cu_q, cu_k, out, lse2 = ctx.saved_tensors
            grads = sequence_gradients(q, k, v, cu_q, cu_k, out, dout.contiguous(), lse2, ctx.causal, ctx.scale)
            return (*grads, None, None, None, None, None)

        torch.library.register_autograd("warpspec::attention_varlen", backward, setup_context=setup_context)
    return _op


def _op_implementation(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seq_q, causal, scale):
    """The op's real and fake implementation: allocate, then launch (nothing runs on fake or meta tensors). The
    caller validated the arguments."""
    import torch

    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse2 = torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device)
    if not runtime.shape_only((q, k, v)):
        dtype = dtype_of(q)
        assert dtype is not None
        problem = VarlenProblem(int(cu_seqlens_q.shape[0]) - 1, int(q.shape[1]), int(k.shape[1]), int(q.shape[2]),
                                dtype, causal, scale, max_seq_q)
        launch(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse2, problem)
    return out, lse2


def sequence_gradients(q, k, v, cu_q, cu_k, out, dout, lse2, causal, scale):
    """(dq, dk, dv) of the packed forward, one ``attention_backward`` per sequence (its rows as [1, H, S, D] and
    its log-sum-exp row); a sequence without queries or keys has zero gradients."""
    import torch

    from warpspec.ops.attention_backward import torch_backward_op

    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    starts_q, starts_k = cu_q.tolist(), cu_k.tolist()
    for b in range(len(starts_q) - 1):
        rows, keys = slice(starts_q[b], starts_q[b + 1]), slice(starts_k[b], starts_k[b + 1])
        if rows.start == rows.stop or keys.start == keys.stop:
            continue
        grads = torch_backward_op()(heads_first(q[rows]), heads_first(k[keys]), heads_first(v[keys]),
                                    heads_first(out[rows]), heads_first(dout[rows]),
                                    lse2[:, rows].unsqueeze(0).contiguous(), causal, scale)
        for total, part, span in zip((dq, dk, dv), grads, (rows, keys, keys)):
            total[span] = part[0].transpose(0, 1)
    return dq, dk, dv


if "torch" in sys.modules:
    _torch_op()
