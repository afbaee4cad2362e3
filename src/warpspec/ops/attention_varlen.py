"""``warpspec.ops.attention_varlen``: attention over a packed batch of sequences of different lengths
(``flash_attn_varlen_func``'s convention), each sequence its own problem: no work is spent on padding.

The forward pass is one launch of the packed kernel (``warpspec.ops.attention_varlen_kernel``), whose blocks read
their sequence's bounds from ``cu_seqlens``: numpy arrays run it on the emulator, torch tensors through the custom op
``warpspec::attention_varlen`` (CUDA tensors on their GPU, CPU tensors on the emulator). The op is differentiable:
its backward is the custom op ``warpspec::attention_varlen_backward``, one launch of each of
``ops.attention_backward``'s kernels in their packed mode (``attention_backward_kernel``) over every sequence, on
the forward's log-sum-exp; it reads nothing back, so it can be captured in a CUDA graph.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from warpspec import runtime
from warpspec.dtypes import DType
from warpspec.errors import ArgumentError
from warpspec.ops.attention import (DEFAULT_SCHEDULES, MAX_GRID_Y, MAX_INT32, _contiguous, contiguous_copy,
                                    fold_scale_sign, validate)
from warpspec.ops.attention_backward import backward_kernels
from warpspec.ops.attention_backward_kernel import BACKWARD_HEAD_DIMS
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
    max_seq_k: int


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal=False, scale=None, max_seqlen_q=None,
                     max_seqlen_k=None, check=True, deterministic=True):
    """Attention per packed sequence: ``q`` [total_q, H, D], ``k`` and ``v`` [total_k, H_kv, D] (any strides: a
    tensor that is not contiguous, such as a slice of a packed [total, 3, H, D] projection, is read from a contiguous
    copy), ``cu_seqlens_q``
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
    sequence's query rows.

    The gradients (torch tensors) come from one launch of each packed backward kernel, which read no length on the
    host either. ``max_seqlen_k`` (the longest sequence's keys; with ``check=True`` read from ``cu_seqlens_k``, and
    checked if given) sizes the dK/dV kernel's grid; unchecked and not given, the grid takes every key row as one
    sequence's (k.shape[0]): the same gradients, with more blocks that find their sequence shorter and exit.
    Unchecked, keys of a sequence past ``max_seqlen_k`` get no dK and dV, as rows past ``max_seqlen_q`` get no
    output and no dQ.
    ``deterministic`` picks the backward's dQ path as ``ops.attention_backward`` takes it: True (default) computes
    dQ per query block, bit-identical from run to run; False accumulates it in float32 reduce-adds."""
    if not isinstance(check, bool):
        raise ArgumentError(f"check must be True or False, got {check!r}")
    if not isinstance(deterministic, bool):
        raise ArgumentError(f"deterministic must be True or False, got {deterministic!r}")
    for name, value, what in (("max_seqlen_q", max_seqlen_q, "query rows"), ("max_seqlen_k", max_seqlen_k, "keys")):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ArgumentError(f"{name} must be a non-negative int (the longest sequence's {what}), got {value!r}")
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
    q, scale, _ = fold_scale_sign(q, scale)
    # Any strides (a packed [total, 3, H, D] projection's q, k and v slices): read from contiguous copies, whose
    # gradients reach the views.
    q, k, v = contiguous_copy(q), contiguous_copy(k), contiguous_copy(v)
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
        starts_k = offsets("cu_seqlens_k", cu_seqlens_k, int(k.shape[0]), "k.shape[0]")
        max_seq_q = longest("max_seqlen_q", starts_q, max_seqlen_q, "query rows")
        max_seq_k = longest("max_seqlen_k", starts_k, max_seqlen_k, "keys")
    else:
        max_seq_q = max_seqlen_q
        max_seq_k = int(k.shape[0]) if max_seqlen_k is None else max_seqlen_k
    if int(k.shape[0]) == 0 or int(q.shape[0]) == 0 or max_seq_q == 0:
        return q * 0  # no keys anywhere (every row is 0), or no rows
    problem = VarlenProblem(entries - 1, row.heads, row.kv_heads, row.head_dim, row.dtype, row.causal, row.scale,
                            max_seq_q, max_seq_k)
    if kind == "torch":
        return _torch_op()(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seq_q, max_seq_k, problem.causal, problem.scale,
                           deterministic)[0]
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


def longest(name: str, starts: list[int], given, what: str) -> int:
    """The longest sequence's rows from checked cumulative lengths ``starts``; ``given`` (the caller's
    ``max_seqlen_q`` or ``max_seqlen_k``, or None) must not be below it."""
    lengths = [b - a for a, b in zip(starts, starts[1:])]
    found = max(lengths, default=0)  # an empty batch has no rows
    if given is not None and given < found:
        raise ArgumentError(f"{name} is {given}, but sequence {lengths.index(found)} has {found} {what}")
    return found


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
    """The custom op ``warpspec::attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seq_q, max_seq_k, causal,
    scale, deterministic) -> (out, lse2)`` (``lse2`` the kernel's base-2 log-sum-exp, [H, total_q]; ``max_seq_k``
    and ``deterministic`` serve the backward), differentiable: its backward is ``warpspec::attention_varlen_backward``
    (``_backward_op``). Registered at the first use, or when this module is imported after torch."""
    global _op
    if _op is None:
        import torch

        from warpspec.torch_ops import custom_op

        _op = custom_op("warpspec::attention_varlen", _op_implementation,
                        schema="(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
                               "int max_seq_q, int max_seq_k, bool causal, float scale, bool deterministic) -> "
                               "(Tensor, Tensor)")
        backward_op = _backward_op()

        def setup_context(ctx, inputs, output):
            q, k, v, cu_q, cu_k, *ctx.arguments = inputs
            ctx.save_for_backward(q, k, v, cu_q, cu_k, *output)
            ctx.mark_non_differentiable(output[1])
            ctx.set_materialize_grads(False)  # no zeros for the log-sum-exp's gradient, never read

        def backward(ctx, dout, _dlse):
            q, k, v, cu_q, cu_k, out, lse2 = ctx.saved_tensors
            grads = backward_op(q, k, v, out, dout.contiguous(), lse2, cu_q, cu_k, *ctx.arguments)
            return (*grads, None, None, None, None, None, None, None)

        torch.library.register_autograd("warpspec::attention_varlen", backward, setup_context=setup_context)
    return _op


def _op_implementation(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seq_q, max_seq_k, causal, scale, deterministic):
    """The op's real and fake implementation: allocate, then launch (nothing runs on fake or meta tensors). The
    caller validated the arguments."""
    import torch

    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse2 = torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device)
    if not runtime.shape_only((q, k, v)):
        launch(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse2,
               _problem(q, k, cu_seqlens_q, max_seq_q, max_seq_k, causal, scale))
    return out, lse2


def _problem(q, k, cu_seqlens_q, max_seq_q, max_seq_k, causal, scale) -> VarlenProblem:
    """The ``VarlenProblem`` of the ops' validated tensors and arguments."""
    dtype = dtype_of(q)
    assert dtype is not None
    return VarlenProblem(int(cu_seqlens_q.shape[0]) - 1, int(q.shape[1]), int(k.shape[1]), int(q.shape[2]), dtype,
                         causal, scale, max_seq_q, max_seq_k)


_backward = None


def _backward_op():
    """The custom op ``warpspec::attention_varlen_backward(q, k, v, out, dout, lse2, cu_seqlens_q, cu_seqlens_k,
    max_seq_q, max_seq_k, causal, scale, deterministic) -> (dq, dk, dv)``: the packed backward kernels, one launch
    each (``launch_backward``). Registered with the forward op."""
    global _backward
    if _backward is None:
        from warpspec.torch_ops import custom_op

        _backward = custom_op("warpspec::attention_varlen_backward", _backward_implementation,
                              schema="(Tensor q, Tensor k, Tensor v, Tensor out, Tensor dout, Tensor lse2, "
                                     "Tensor cu_seqlens_q, Tensor cu_seqlens_k, int max_seq_q, int max_seq_k, "
                                     "bool causal, float scale, bool deterministic) -> (Tensor, Tensor, Tensor)")
    return _backward


def _backward_implementation(q, k, v, out, dout, lse2, cu_seqlens_q, cu_seqlens_k, max_seq_q, max_seq_k, causal,
                             scale, deterministic):
    """The backward op's real and fake implementation: check the head dim, allocate the gradients, D's workspace
    and (accumulating) the zeroed float32 dQ accumulator, launch (nothing runs on fake or meta tensors)."""
    import torch

    if int(q.shape[2]) not in BACKWARD_HEAD_DIMS:
        raise ArgumentError(f"head_dim (q.shape[2]) is {int(q.shape[2])}; the backward of attention_varlen supports "
                            f"{', '.join(map(str, BACKWARD_HEAD_DIMS))}")
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    if not runtime.shape_only((q, k, v, out, dout, lse2)):
        dd = torch.empty(lse2.shape, dtype=torch.float32, device=q.device)
        dq_accum = None if deterministic else torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        launch_backward(q, k, v, out, dout, lse2, cu_seqlens_q, cu_seqlens_k, dq, dk, dv, dd,
                        _problem(q, k, cu_seqlens_q, max_seq_q, max_seq_k, causal, scale), dq_accum)
    return dq, dk, dv


def launch_backward(q, k, v, out, dout, lse2, cu_seqlens_q, cu_seqlens_k, dq, dk, dv, dd, problem: VarlenProblem,
                    dq_accum=None) -> list:
    """Run the packed backward kernels on validated operands on the selected back end: D = rowsum(dO ∘ O) over
    every packed row into ``dd`` (float32 [H, total_q]), then with ``dq_accum`` (a zeroed float32 array of q's
    shape) the accumulating path, without it the deterministic one; each one launch over every sequence. Returns
    the (Script, arguments) of each launch."""
    total_q, total_k = int(q.shape[0]), int(k.shape[0])
    dot, kv, last = backward_kernels(problem, deterministic=dq_accum is None, packed=True)
    sizes = (total_q, total_k, problem.heads, problem.heads // problem.kv_heads, problem.scale,
             problem.scale * LOG2_E, cu_seqlens_q, cu_seqlens_k, q, k, v, dout, lse2, dd)
    launches: list = [(dot, (total_q, problem.heads, out, dout, dd))]
    if problem.max_seq_k > 0:
        dk_args = (dk, dv) if dq_accum is None else (dk, dv, dq_accum)
        launches.append((kv, (problem.batch, problem.max_seq_k, *sizes, *dk_args)))
    else:  # unchecked lengths that claim no keys anywhere: no dK/dV block
        dk[...] = 0
        dv[...] = 0
    if dq_accum is None:
        launches.append((last, (problem.batch, problem.max_seq_q, *sizes, dq)))
    else:
        launches.append((last, (total_q * problem.heads, problem.scale, dq_accum, dq)))
    for script, args in launches:
        script(*args)
    return launches

