"""``warpspec.ops.attention_backward``: dQ, dK, dV of ``ops.attention`` from its saved output and log-sum-exp, on the
three kernels of ``warpspec.ops.attention_backward_kernel`` (docs/attention.md#backward): D = rowsum(dO ∘ O), then
dK/dV per K/V block (summed over a grouped-query head's group inside the block), then dQ per query block —
deterministic, no atomics.

numpy arrays run on the emulator; torch tensors go through the custom op ``warpspec::attention_backward``, which
``ops.attention``'s autograd formula also calls. Every unsupported argument is an ``ArgumentError`` naming it,
raised before anything is allocated.
"""

from __future__ import annotations

import sys

import numpy as np

from warpspec import runtime
from warpspec.errors import ArgumentError
from warpspec.ops.attention import Problem, _contiguous, validate
from warpspec.ops.attention_backward_kernel import BACKWARD_HEAD_DIMS, BackwardKV, BackwardQ, Dot
from warpspec.ops.attention_kernel import LOG2_E
from warpspec.ops.operands import dtype_of, same_device, same_kind

#: The shipped schedule of each head dim: the dK/dV kernel's query tile (``block_m``) and ring depth, the dQ
#: kernel's K/V tile (``block_n``) and ring depth. Each consumer thread holds dK and dV (D/2 registers each) with
#: Sᵀ and dPᵀ (block_m/2 each) in the dK/dV kernel, dQ (D/2) with S and dP (block_n/2 each) in the dQ kernel.
DEFAULT_BACKWARD_SCHEDULES = {
    64: {"kv": {"block_m": 64, "num_stages": 2}, "q": {"block_n": 64, "num_stages": 2}},
    128: {"kv": {"block_m": 64, "num_stages": 2}, "q": {"block_n": 64, "num_stages": 2}},
}

_kernels: dict = {}  # (dtype name, head_dim, causal) -> (preprocessing, dK/dV, dQ) Scripts


def backward_kernels(problem: Problem):
    """The pinned (preprocessing, dK/dV, dQ) Scripts of the problem's dtype, head dim and causality."""
    key = (problem.dtype.name, problem.head_dim, problem.causal)
    if key not in _kernels:
        dtype, schedule = problem.dtype, DEFAULT_BACKWARD_SCHEDULES[problem.head_dim]
        _kernels[key] = (Dot(dtype, head_dim=problem.head_dim),
                         BackwardKV(dtype, head_dim=problem.head_dim, causal=problem.causal, **schedule["kv"]),
                         BackwardQ(dtype, head_dim=problem.head_dim, causal=problem.causal, **schedule["q"]))
    return _kernels[key]


def attention_backward(q, k, v, out, dout, lse, *, causal=False, scale=None):
    """The gradients ``(dq, dk, dv)`` of ``out = ops.attention(q, k, v, causal=causal, scale=scale)`` for the
    output gradient ``dout``, from ``out`` and ``lse`` as ``ops.attention(..., return_lse=True)`` returned them.

    * ``q``, ``k``, ``v``, ``causal``, ``scale``: as ``ops.attention`` takes them; D 64 or 128;
    * ``out``, ``dout``: q's shape and dtype, contiguous; ``lse``: float32 [B, H, S_q], contiguous.

    dq has q's shape, dk and dv k's (summed over the query heads sharing a K/V head), all in q's dtype and kind.
    """
    kind = same_kind("q", q, k=k, v=v, out=out, dout=dout, lse=lse)
    problem = validate_backward(q, k, v, out, dout, lse, causal, scale)
    if kind == "torch":
        same_device("q", q, k=k, v=v, out=out, dout=dout, lse=lse)
        return torch_backward_op()(q, k, v, out, dout, lse * LOG2_E, problem.causal, problem.scale)
    dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)
    with runtime.use_backend("emulator"):
        launch_backward(q, k, v, out, dout, (lse * np.float32(LOG2_E)).astype(np.float32), dq, dk, dv, problem,
                        np.empty(lse.shape, np.float32))
    return dq, dk, dv


def validate_backward(q, k, v, out, dout, lse, causal, scale) -> Problem:
    """ops.attention's checks, the backward's head dims, and the shapes, dtypes and layouts of out, dout, lse."""
    problem = validate(q, k, v, causal, scale)
    if problem.head_dim not in BACKWARD_HEAD_DIMS:
        raise ArgumentError(f"head_dim (q.shape[3]) is {problem.head_dim}; attention_backward supports "
                            f"{', '.join(map(str, BACKWARD_HEAD_DIMS))}")
    for name, value in (("out", out), ("dout", dout)):
        if tuple(value.shape) != tuple(q.shape):
            raise ArgumentError(f"{name} must have q's shape {tuple(q.shape)}, got {tuple(value.shape)}")
        if dtype_of(value) != problem.dtype:
            found = dtype_of(value)
            raise ArgumentError(f"{name} has dtype {found.name if found else value.dtype} but q has "
                                f"{problem.dtype.name}")
        if not _contiguous(value):
            raise ArgumentError(f"{name} must be contiguous; make a contiguous copy first")
    if tuple(lse.shape) != tuple(q.shape[:3]):
        raise ArgumentError(f"lse must have shape {tuple(q.shape[:3])} ([batch, heads, seq_q]), got "
                            f"{tuple(lse.shape)}")
    found = dtype_of(lse)
    if found is None or found.name != "float32" or not _contiguous(lse):
        raise ArgumentError(f"lse must be a contiguous float32 array (as ops.attention(..., return_lse=True) "
                            f"returns it), got dtype {found.name if found else lse.dtype}")
    return problem


def launch_backward(q, k, v, out, dout, lse2, dq, dk, dv, problem: Problem, dd) -> None:
    """Run the three kernels on validated operands (``lse2`` the base-2 log-sum-exp, ``dd`` a float32 [B, H, S_q]
    workspace for D) on the selected back end."""
    if problem.seq_q == 0 or problem.batch * problem.heads == 0:
        dk[...] = 0
        dv[...] = 0
        return
    dot, kv, query = backward_kernels(problem)
    batch_heads = problem.batch * problem.heads
    dot(problem.seq_q, batch_heads, out, dout, dd)
    sizes = (problem.seq_q, problem.seq_k, batch_heads, problem.heads, problem.heads // problem.kv_heads,
             problem.scale, problem.scale * LOG2_E)
    kv(*sizes, q, k, v, dout, lse2, dd, dk, dv)
    query(*sizes, q, k, v, dout, lse2, dd, dq)


# --------------------------------------------------------------------------------------------- torch op

_op = None


def torch_backward_op():
    """The custom op ``warpspec::attention_backward(q, k, v, out, dout, lse2, causal, scale) -> (dq, dk, dv)``
    (``lse2`` the base-2 log-sum-exp the forward op returns), registered at the first use."""
    global _op
    if _op is None:
        from warpspec.torch_ops import custom_op

        _op = custom_op("warpspec::attention_backward", _op_implementation,
                        schema="(Tensor q, Tensor k, Tensor v, Tensor out, Tensor dout, Tensor lse2, bool causal, "
                               "float scale) -> (Tensor, Tensor, Tensor)")
    return _op


def _op_implementation(q, k, v, out, dout, lse2, causal, scale):
    """The op's real and fake implementation: validate, allocate the gradients, run the kernels (nothing runs on
    fake or meta tensors)."""
    import torch

    problem = validate_backward(q, k, v, out, dout, lse2, causal, scale)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    if not runtime.shape_only((q, k, v, out, dout, lse2)):
        dd = torch.empty(lse2.shape, dtype=torch.float32, device=q.device)
        launch_backward(q, k, v, out, dout, lse2, dq, dk, dv, problem, dd)
    return dq, dk, dv


if "torch" in sys.modules:
    torch_backward_op()
