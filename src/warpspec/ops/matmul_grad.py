"""The backward of ``warpspec.ops.matmul`` for torch tensors: the differentiable op ``warpspec::matmul_grad``.

A call whose operands need a gradient (grad mode on, ``a``, ``b`` or ``bias`` requiring it) goes through this
functional op, which returns the result instead of writing ``out``, and whose autograd formula
(``torch.library.register_autograd``) runs the backward's two GEMMs on ops.matmul's own kernel:

* dA = dZ · Bᵀ: ``ops.matmul(dz, b.T)``, where ``b.T`` is the other layout of ``b`` (a row-major ``b`` gives a
  K-major operand, ``w.T`` gives ``w``), so neither operand is copied;
* dB = Aᵀ · dZ: ``ops.matmul(a.T, dz)``, ``a.T`` a column-major A (or row-major, when ``a`` was ``x.T``), read
  as it is stored;
* dbias = the column sums of dZ (a torch reduction in float32);

with dZ the incoming gradient through the activation. relu stays fused into the forward kernel, its derivative
read from the saved output (y > 0 exactly where the pre-activation is). gelu and silu need the pre-activation
itself: with a gradient the kernel writes ``a @ b + bias`` and torch's ``gelu(approximate="tanh")`` and ``silu``
apply the activation (and differentiate it), one extra rounding of the pre-activation to the output dtype and
one elementwise pass more than the fused inference call. The gradients' GEMMs take operands of the input dtype:
a float32 incoming gradient (``out_dtype=float32``) is rounded to it first, as the kernel multiplies 16-bit
operands only. Paths without a backward refuse a call that needs one (``ArgumentError``): float8 inputs with
their scales, and ``out=`` (written in place, as torch's ``out=`` functions refuse operands that need a gradient).
"""

from __future__ import annotations

import torch

from warpspec.dtypes import float8_e4m3
from warpspec.errors import ArgumentError
from warpspec.ops.matmul import _padded_output, _torch_dtype, launch, matmul, signature, staged_copy
from warpspec.torch_ops import custom_op

#: Activations applied by torch ops to the kernel's pre-activation when a gradient is needed.
UNFUSED = {"gelu": lambda z: torch.nn.functional.gelu(z, approximate="tanh"), "silu": torch.nn.functional.silu}


def differentiable_matmul(a, b, bias, activation, out, out_dtype, scale_a, scale_b):
    """``ops.matmul`` for operands that need a gradient: every check, the refusals of paths without a backward,
    then the differentiable op (and the unfused activation)."""
    problem = signature(a, b, bias, activation, out, out_dtype).problem
    if problem.in_dtype == float8_e4m3 or scale_a is not None or scale_b is not None:
        raise ArgumentError("ops.matmul has no backward for float8 inputs with scale_a/scale_b, and a, b or bias "
                            "requires grad: detach them, or call under torch.no_grad()")
    if out is not None:
        raise ArgumentError("out=: ops.matmul writes out in place, which has no backward, and a, b or bias "
                            "requires grad: call without out= for a differentiable result")
    fused = None if activation in UNFUSED else activation
    result = _op()(a, b, bias, fused or "", _torch_dtype(problem.out_dtype))
    return UNFUSED[activation](result) if activation in UNFUSED else result


def _new_output(a, found):
    """The op's result: a new [M, N] tensor on ``a``'s device, its rows padded to TMA's pitch."""
    return _padded_output(lambda shape, dtype: torch.empty(shape, dtype=dtype, device=a.device), found.problem,
                          _torch_dtype(found.problem.out_dtype))


def _forward(a, b, bias, activation, out_dtype):
    """The op's implementation: a new output written by the kernel."""
    found = signature(a, b, bias, activation or None, None, out_dtype)
    out = _new_output(a, found)
    found = found.with_output(a, b, bias, out)
    launch(found, a, b, out, bias, None)
    return out


def _fake(a, b, bias, activation, out_dtype):
    """The op's fake implementation: the checks and the output's description (its padded row pitch too)."""
    return _new_output(a, signature(a, b, bias, activation or None, None, out_dtype))


def _setup_context(ctx, inputs, output):
    """What the backward needs: the operands, and the output when relu's derivative is read from it."""
    a, b, bias, activation, _ = inputs
    ctx.activation = activation
    ctx.bias_dtype = None if bias is None else bias.dtype
    ctx.save_for_backward(a, b, output if activation == "relu" else None)


def _backward(ctx, grad):
    """dA = dZ·Bᵀ and dB = Aᵀ·dZ on ops.matmul, dbias the column sums of dZ (only those that are needed)."""
    a, b, output = ctx.saved_tensors
    dz = torch.where(output > 0, grad, torch.zeros((), dtype=grad.dtype)) if ctx.activation == "relu" else grad
    need_a, need_b, need_bias = ctx.needs_input_grad[:3]
    operand = aligned(dz.to(a.dtype))
    grad_a = grad_b = grad_bias = None
    empty = 0 in (a.shape[0], b.shape[1])  # no GEMM: the gradients are zeros
    if need_a:
        grad_a = torch.zeros_like(a) if empty else matmul(operand, b.T)
    if need_b:
        grad_b = torch.zeros_like(b) if empty else matmul(a.T, operand)
    if need_bias:
        grad_bias = dz.float().sum(0).to(ctx.bias_dtype)
    return grad_a, grad_b, grad_bias, None, None


def aligned(value):
    """A 2-D tensor as a GEMM operand: itself when its last axis is contiguous, else a copy into rows padded to 16
    bytes (an incoming gradient may be an expanded view whose strides are 0). A ragged pitch is staged by
    ops.matmul itself."""
    if value.stride(1) == 1 and value.stride(0) >= value.shape[1] or value.shape[1] <= 1:
        return value
    return staged_copy(value, False)


_registered = None


def _op():
    """``warpspec::matmul_grad(a, b, bias?, activation, out_dtype) -> Tensor`` with its autograd formula."""
    global _registered
    if _registered is None:
        _registered = custom_op("warpspec::matmul_grad", _forward, fake=_fake,
                                schema="(Tensor a, Tensor b, Tensor? bias, str activation, ScalarType out_dtype) "
                                       "-> Tensor")
        torch.library.register_autograd("warpspec::matmul_grad", _backward, setup_context=_setup_context)
    return _registered


_op()
