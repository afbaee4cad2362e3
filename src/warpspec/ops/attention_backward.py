"""``warpspec.ops.attention_backward``: dQ, dK, dV of ``ops.attention`` from its saved output and log-sum-exp, on the
kernels of ``warpspec.ops.attention_backward_kernel`` (docs/attention.md#backward): D = rowsum(dO ∘ O), then
dK/dV per K/V block (summed over a grouped-query head's group inside the block), then dQ per query block,
recomputing S and dP (two more GEMMs, no atomics: the default, ``deterministic=True``); or, with
``deterministic=False``, dK/dV with each block's dQ share reduce-added in float32 into an accumulator that a last
kernel scales into q's dtype. The default is the path that measured faster on the H200 (docs/performance.md,
2026-12-04: the accumulating path's dK/dV kernel, which also computes dQ, is slower than the two kernels it
replaces).

numpy arrays run on the emulator; torch tensors go through the custom op ``warpspec::attention_backward``, which
``ops.attention``'s autograd formula also calls. ``backward_kernels(..., packed=True)`` gives the kernels' packed
mode, which ``ops.attention_varlen``'s backward launches. Every unsupported argument is an ``ArgumentError`` naming it,
raised before anything is allocated.
"""

from __future__ import annotations

import sys

import numpy as np

from warpspec import runtime
from warpspec.errors import ArgumentError
from warpspec.ops.attention import Problem, _contiguous, contiguous_copy, fold_scale_sign, validate
from warpspec.ops.attention_backward_kernel import (BACKWARD_HEAD_DIMS, BackwardFused, BackwardKV, BackwardKVDQ,
                                                    BackwardKVDQVarlen, BackwardKVVarlen, BackwardQ, BackwardQVarlen,
                                                    ConvertDQ, Dot, DotVarlen, DotZeroingDQ)
from warpspec.ops.attention_kernel import LOG2_E
from warpspec.ops.frame import Signatures, describe, plain_cuda
from warpspec.ops.operands import dtype_of, same_device, same_kind

#: The shipped schedule of each head dim: the dK/dV kernels' query tile (``block_m``) and ring depth ("kv" for
#: BackwardKV, "kvdq" for BackwardKVDQ), the deterministic dQ kernel's K/V tile (``block_n``) and ring depth, and
#: where the dense accumulating path runs BackwardFused instead of BackwardKVDQ (D 64), its ring depth ("fused":
#: K and V 32 KB, three stages of 128 query rows' Q and dO 96 KB, P and dS 32 KB each, the float32 dQ staging
#: 32 KB: 224 of 227 KB; on an H100, 2026-12-07, bf16, the kernel alone, 0.6-1.6% faster than two stages at seq
#: 2048 and 8192, causal and not: 425 µs instead of 428, 6130 instead of 6170), and whether its dV and dK are
#: computed transposed, one warpgroup each over all 128 keys (``BackwardFused``'s ``transposed``: a quarter less
#: shared memory read for them; on the H200, 2026-12-07, bf16, the kernel alone at seq 8192: 6211 µs instead of
#: 6316, causal 3244 instead of 3355).
#: Each consumer thread holds dK and dV (D/2 registers each) with Sᵀ and dPᵀ (block_m/2 each) in the dK/dV kernels
#: (block_m 64 keeps D 128 at 192 of its 240; BackwardKVDQ adds D/4 for its half of the dQ tile once Sᵀ and dPᵀ are
#: dead), dQ (D/2) with S and dP (block_n/2 each) in the dQ kernel. BackwardKV at D 64 releases a stage only at the
#: next tile (its dK runs on under that tile's first GEMMs), so a third stage keeps the producer ahead (48 KB of
#: stages); D 128 keeps two, as before. Shared memory of BackwardKVDQ at D 128:
#: K, V and K's column halves 32 KB each, two (Q, dO) stages 64 KB, dSᵀ 16 KB, the float32 dQ staging 32 KB: 208 of
#: 227 KB, so two stages (a third would need 32 KB more); D 64 needs half of each. The dQ kernel at D 64 takes 128
#: keys a tile (S and dP 64 registers each beside dQ's 32): on an H100 (2026-12-06, bf16, the kernel alone) 2824 µs
#: instead of 2998 at seq 8192, 1467 instead of 1670 causal.
DEFAULT_BACKWARD_SCHEDULES: dict = {
    64: {"kv": {"block_m": 64, "num_stages": 3}, "kvdq": {"block_m": 64, "num_stages": 2},
         "fused": {"num_stages": 3, "transposed": True}, "q": {"block_n": 128, "num_stages": 2}},
    128: {"kv": {"block_m": 64, "num_stages": 2}, "kvdq": {"block_m": 64, "num_stages": 2},
          "q": {"block_n": 64, "num_stages": 2}},
}
#: The kernel classes of each mode: dense ([B, H, S, D] operands) and packed (``ops.attention_varlen``'s
#: [total, H, D] rows, per-sequence bounds read in the kernels); ConvertDQ serves both (its rows are any [rows, D]).
_CLASSES = {
    False: {"dot": Dot, "kv": BackwardKV, "q": BackwardQ, "kvdq": BackwardKVDQ},
    True: {"dot": DotVarlen, "kv": BackwardKVVarlen, "q": BackwardQVarlen, "kvdq": BackwardKVDQVarlen},
}
_kernels: dict = {}  # (dtype name, head_dim, causal, deterministic, packed) -> the path's Scripts
#: Where autograd's backward takes the accumulating path (unless torch's deterministic switch is on): head dim -> the
#: fewest keys from which it does. D 64 at every length: BackwardFused measured faster end to end than the
#: deterministic kernels (an H100, bf16, seq 2048 and 8192, causal and not: docs/performance.md, eighteenth
#: session). D 128 from 4096 keys: on an H100 (2026-12-07, bf16, batch 2, 16 heads, forward + backward) the
#: accumulating path (DotZeroingDQ, BackwardKVDQ, ConvertDQ) took 2.9-3.2% less than the deterministic kernels at
#: 4096, 1.4-4.7% at 8192 and 3.9-6.1% at 16384, causal and not, but 1-3% more at 2048 without a mask.
AUTOGRAD_ACCUMULATES = {64: 0, 128: 4096}


def autograd_accumulates(head_dim: int, seq_k: int) -> bool:
    """Whether autograd's backward of a call with this head dim and this many keys takes the accumulating path
    (``AUTOGRAD_ACCUMULATES``; torch's deterministic switch, checked by the caller, overrides it)."""
    fewest = AUTOGRAD_ACCUMULATES.get(head_dim)
    return fewest is not None and seq_k >= fewest


def backward_kernels(problem, deterministic: bool = True, packed: bool = False):
    """The pinned Scripts of the problem's dtype, head dim and causality (``problem``: ops.attention's ``Problem``
    or, ``packed``, ops.attention_varlen's ``VarlenProblem``): (preprocessing, dK/dV, dQ) for the deterministic
    path, (preprocessing, dK/dV with dQ shares, dQ conversion) for the accumulating one."""
    key = (problem.dtype.name, problem.head_dim, problem.causal, deterministic, packed)
    if key not in _kernels:
        dtype, head_dim, schedule = problem.dtype, problem.head_dim, DEFAULT_BACKWARD_SCHEDULES[problem.head_dim]
        classes = _CLASSES[packed]
        last: tuple
        if deterministic:
            last = (classes["kv"](dtype, head_dim=head_dim, causal=problem.causal, **schedule["kv"]),
                    classes["q"](dtype, head_dim=head_dim, causal=problem.causal, **schedule["q"]))
        else:
            if "fused" in schedule and not packed:
                accumulating = BackwardFused(dtype, head_dim=head_dim, causal=problem.causal, **schedule["fused"])
            else:
                accumulating = classes["kvdq"](dtype, head_dim=head_dim, causal=problem.causal, **schedule["kvdq"])
            last = (accumulating,
                    ConvertDQ(dtype, head_dim=head_dim))
        # The dense accumulating path's preprocessing also zeroes the dQ accumulator (no memset of its own).
        dot = DotZeroingDQ if not deterministic and not packed else classes["dot"]
        _kernels[key] = (dot(dtype, head_dim=head_dim), *last)
    return _kernels[key]


def attention_backward(q, k, v, out, dout, lse, *, causal=False, scale=None, deterministic=True):
    """The gradients ``(dq, dk, dv)`` of ``out = ops.attention(q, k, v, causal=causal, scale=scale)`` for the
    output gradient ``dout``, from ``out`` and ``lse`` as ``ops.attention(..., return_lse=True)`` returned them.

    * ``q``, ``k``, ``v``, ``causal``, ``scale``: as ``ops.attention`` takes them; D 64 or 128;
    * ``out``, ``dout``: q's shape and dtype; ``lse``: float32 [B, H, S_q]; any of the six that is not contiguous
      is read from a contiguous copy, as ``ops.attention`` does;
    * ``deterministic``: True (default) computes dQ in a kernel per query block that recomputes S and dP (two more
      GEMMs), bit-identical from run to run; False accumulates dQ in the dK/dV kernel with float32 reduce-adds,
      whose order varies from run to run (so may dQ's last bits; dK and dV never vary).

    dq has q's shape, dk and dv k's (summed over the query heads sharing a K/V head), all in q's dtype and kind.
    """
    # A zero or negative scale runs as the forward ran it: on sign · q, whose gradient is sign times q's.
    q, scale, sign = fold_scale_sign(q, scale)
    q, k, v, out, dout, lse = (contiguous_copy(x) for x in (q, k, v, out, dout, lse))
    kind = same_kind("q", q, k=k, v=v, out=out, dout=dout, lse=lse)
    problem = validate_backward(q, k, v, out, dout, lse, causal, scale, deterministic)
    if kind == "torch":
        same_device("q", q, k=k, v=v, out=out, dout=dout, lse=lse)
        dq, dk, dv = torch_backward_op()(q, k, v, out, dout, lse * LOG2_E, problem.causal, problem.scale,
                                         deterministic)
    else:
        dq, dk, dv = np.empty_like(q), np.empty_like(k), np.empty_like(v)
        dq_accum = None if deterministic else np.empty(q.shape, np.float32)  # zeroed by DotZeroingDQ
        with runtime.use_backend("emulator"):
            launch_backward(q, k, v, out, dout, (lse * np.float32(LOG2_E)).astype(np.float32), dq, dk, dv,
                            problem, np.empty(lse.shape, np.float32), dq_accum)
    return (dq if sign == 1 else dq * sign), dk, dv


def validate_backward(q, k, v, out, dout, lse, causal, scale, deterministic=True) -> Problem:
    """ops.attention's checks, the backward's head dims, the shapes, dtypes and layouts of out, dout, lse, and
    ``deterministic`` a bool."""
    problem = validate(q, k, v, causal, scale)
    if not isinstance(deterministic, bool):
        raise ArgumentError(f"deterministic must be True or False, got {deterministic!r}")
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


def launch_backward(q, k, v, out, dout, lse2, dq, dk, dv, problem: Problem, dd, dq_accum=None) -> list:
    """Run the kernels on validated operands (``lse2`` the base-2 log-sum-exp, ``dd`` a float32 [B, H, S_q]
    workspace for D) on the selected back end: with ``dq_accum`` (a float32 array of q's shape, which the first
    kernel zeroes) the accumulating path, without it the deterministic one. Returns the (Script, arguments) of each
    launch."""
    if problem.seq_q == 0 or problem.batch * problem.heads == 0:
        dk[...] = 0
        dv[...] = 0
        return []
    dot, kv, last = backward_kernels(problem, deterministic=dq_accum is None)
    batch_heads = problem.batch * problem.heads
    sizes = (problem.seq_q, problem.seq_k, batch_heads, problem.heads, problem.heads // problem.kv_heads,
             problem.scale, problem.scale * LOG2_E)
    launches = [(dot, (problem.seq_q, batch_heads, out, dout, dd, *((dq_accum,) if dot.zeroes_dq else ())))]
    if dq_accum is None:
        launches += [(kv, (*sizes, q, k, v, dout, lse2, dd, dk, dv)), (last, (*sizes, q, k, v, dout, lse2, dd, dq))]
    else:
        launches += [(kv, (*sizes, q, k, v, dout, lse2, dd, dk, dv, dq_accum)),
                     (last, (batch_heads * problem.seq_q, problem.scale, dq_accum, dq))]
    for script, args in launches:
        script(*args)
    return launches


class Call:
    """What the first backward call of a description decided: its validated problem and, once its path launched on
    plain CUDA tensors, ``direct(q, k, v, out, dout, lse2) -> (dq, dk, dv)``: new gradients and D (and, on the
    accumulating path, a float32 dQ accumulator, which the first kernel zeroes), then the three kernels' bound
    launches with the arrays' addresses alone (a training step's backward otherwise pays three launches' general
    path, longer than the kernels at short sequences)."""

    __slots__ = ("problem", "direct")

    def __init__(self, problem: Problem):
        self.problem = problem
        self.direct = None

    def bind(self, q, k, launches: list, accumulating: bool) -> None:
        """Make ``direct`` from the first launch's (Script, arguments) of each kernel of the path."""
        bound = [runtime.pointer_launcher(script, args) for script, args in launches]
        if len(bound) != 3 or None in bound:
            return
        dot, kv, last = bound
        torch = sys.modules["torch"]
        current_stream, empty, float32 = torch._C._cuda_getCurrentRawStream, torch.empty, torch.float32
        device, index, dtype = q.device, q.device.index, q.dtype
        q_shape, k_shape, rows = tuple(q.shape), tuple(k.shape), tuple(q.shape[:3])

        def direct(q, k, v, out, dout, lse2):
            dq, dk, dv = (empty(shape, dtype=dtype, device=device) for shape in (q_shape, k_shape, k_shape))
            dd = empty(rows, dtype=float32, device=device)
            stream = current_stream(index)
            pq, pk, pv, pdo, plse, pdd = (x.data_ptr() for x in (q, k, v, dout, lse2, dd))
            if accumulating:
                dq_accum = empty(q_shape, dtype=float32, device=device)  # zeroed by the first kernel
                dot(out.data_ptr(), pdo, pdd, dq_accum.data_ptr(), stream=stream)
                kv(pq, pk, pv, pdo, plse, pdd, dk.data_ptr(), dv.data_ptr(), dq_accum.data_ptr(), stream=stream)
                last(dq_accum.data_ptr(), dq.data_ptr(), stream=stream)
            else:
                dot(out.data_ptr(), pdo, pdd, stream=stream)
                kv(pq, pk, pv, pdo, plse, pdd, dk.data_ptr(), dv.data_ptr(), stream=stream)
                last(pq, pk, pv, pdo, plse, pdd, dq.data_ptr(), stream=stream)
            return dq, dk, dv

        self.direct = direct


_calls = Signatures()  # the description of a backward call's arrays and arguments -> its Call


def call_for(q, k, v, out, dout, lse, causal, scale, deterministic) -> Call:
    """The ``Call`` of these arguments: made at the first call of their description (``validate_backward``'s
    checks), then looked up."""
    try:
        # The types are part of the key: True == 1 would otherwise let a refused argument find an accepted one's.
        key = (describe(q), describe(k), describe(v), describe(out), describe(dout), describe(lse), causal,
               type(causal), scale, type(scale), deterministic, type(deterministic))
        found = _calls.get(key)
    except (TypeError, AttributeError):  # not arrays, unhashable arguments, symbolic sizes: checked afresh
        key = found = None
    if found is None:
        found = _calls.remember(key, Call(validate_backward(q, k, v, out, dout, lse, causal, scale,
                                                            deterministic)))
    return found


# --------------------------------------------------------------------------------------------- torch op

_op = None


def torch_backward_op():
    """The custom op ``warpspec::attention_backward(q, k, v, out, dout, lse2, causal, scale, deterministic=True)
    -> (dq, dk, dv)`` (``lse2`` the base-2 log-sum-exp the forward op returns), registered at the first use."""
    global _op
    if _op is None:
        from warpspec.torch_ops import custom_op

        _op = custom_op("warpspec::attention_backward", _op_implementation,
                        schema="(Tensor q, Tensor k, Tensor v, Tensor out, Tensor dout, Tensor lse2, bool causal, "
                               "float scale, bool deterministic=True) -> (Tensor, Tensor, Tensor)")
    return _op


def _op_implementation(q, k, v, out, dout, lse2, causal, scale, deterministic=True):
    """The op's real and fake implementation: validate, allocate the gradients (and the float32 dQ
    accumulator of the accumulating path), run the kernels (nothing runs on fake or meta tensors); a call of a
    description (the path chosen included) that launched on plain CUDA tensors before takes its bound launches."""
    import torch

    found = call_for(q, k, v, out, dout, lse2, causal, scale, deterministic)
    if found.direct is not None and runtime.direct_launches():
        return found.direct(q, k, v, out, dout, lse2)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    if not runtime.shape_only((q, k, v, out, dout, lse2)):
        dd = torch.empty(lse2.shape, dtype=torch.float32, device=q.device)
        dq_accum = None if deterministic else torch.empty(q.shape, dtype=torch.float32, device=q.device)
        launches = launch_backward(q, k, v, out, dout, lse2, dq, dk, dv, found.problem, dd, dq_accum)
        if plain_cuda(q, k, v, out, dout, lse2):
            found.bind(q, k, launches, accumulating=not deterministic)
    return dq, dk, dv

