"""Elementwise operations on register tensors: ``self.cast`` and the arithmetic operators (``acc * 2``,
``a + b``, ``-x``, ``min``/``max``).

Their IR statements and their emulation. Each is executed by the threads holding the tensor, element by element
in the tensor's register layout (both operands must share it); the CUDA emission is
``warpspec.cuda.sm90.elementwise`` (``cvt.rn`` conversions and float arithmetic in f32).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from warpspec import dtypes
from warpspec.dtypes import DType
from warpspec.isa.base import LanguageObject, language_call
from warpspec.isa.registry import emulates
from warpspec.isa.values import TensorValue, describe
from warpspec.ir import nodes as ir

#: Operators on register tensors (both back ends implement exactly these), with their numpy function.
TENSOR_OPERATORS = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "min": np.minimum,
                    "max": np.maximum}

# ------------------------------------------------------------------------------------------------------- IR


@dataclass(frozen=True, eq=False)
class Cast(ir.DefineTensor):
    """``decl`` = ``src`` converted elementwise to ``decl``'s type, rounding to nearest even."""

    src: ir.TensorRef

    def text(self, f) -> str:
        return f"{self.decl.name} = cast({f(self.src)}, {self.decl.dtype.name})"


@dataclass(frozen=True, eq=False)
class Arithmetic(ir.DefineTensor):
    """``decl`` = ``op`` applied elementwise: two operands (TensorRefs or scalar Exprs, at least one a tensor) for
    a binary operator, one tensor for unary minus (``op`` "neg")."""

    op: str
    operands: tuple

    def text(self, f) -> str:
        return f"{self.decl.name}: {self.decl.dtype.name} = {self.op}({', '.join(f(o) for o in self.operands)})"


# ------------------------------------------------------------------------------------------------ language


class Elementwise(LanguageObject):
    """``self.cast``; the arithmetic operators reach ``binary``/``negate`` through the front end."""

    @language_call
    def cast(self, tensor, dtype) -> TensorValue:
        """Convert register tensor ``tensor`` elementwise to the floating-point ``dtype`` (round to nearest even;
        float8 saturates to its largest finite value). Executed by the threads holding it; PTX ``cvt.rn`` (float8:
        ``cvt.rn.satfinite.e4m3x2.f32`` / ``e5m2x2``)."""
        b = self.b
        tensor = b.to_tensor(tensor, "cast tensor", (ir.REGISTER,))
        if not isinstance(dtype, DType):
            raise b.error(f"cast dtype must be a dtype, got {describe(dtype)}")
        if not dtype.is_float or not tensor.dtype.is_float:
            raise b.error(f"cast converts between floating-point types; {tensor.name} is {tensor.dtype.name} and the "
                          f"target is {dtype.name}")
        decl = b.new_register_tensor(f"{tensor.name}_{dtype.name}", dtype, tensor.shape)
        b.emit(Cast(b.loc, decl, tensor.ref))
        return TensorValue(ir.TensorRef(decl))


def binary(b, symbol: str, x, y) -> TensorValue:
    """``x symbol y`` where at least one side is a register tensor and the other a same-shaped tensor or a
    scalar; emitted at the builder's line."""
    if symbol not in TENSOR_OPERATORS:
        raise b.error(f"operator {symbol!r} is not supported on tensors; use one of {', '.join(TENSOR_OPERATORS)}")
    tensors = [v for v in (x, y) if isinstance(v, TensorValue)]
    for t in tensors:
        if t.kind != ir.REGISTER:
            raise b.error(f"arithmetic needs register tensors; {t.name} is a {t.kind} tensor (load it first)")
    if len(tensors) == 2 and x.shape != y.shape:
        raise b.error(f"shapes differ: {x.name}{list(x.shape)} {symbol} {y.name}{list(y.shape)}")
    first = tensors[0]
    if len(tensors) == 2 and x.dtype != y.dtype:
        raise b.error(f"dtypes differ: {x.name} is {x.dtype.name}, {y.name} is {y.dtype.name}; cast one")
    if symbol == "/" and not first.dtype.is_float:
        raise b.error(f"'/' on {first.dtype.name} tensors is not supported: tensor division is floating-point")
    operands = tuple(v.ref if isinstance(v, TensorValue) else _scalar_operand(b, v, first, symbol) for v in (x, y))
    decl = b.new_register_tensor("tmp", first.dtype, first.shape)
    b.emit(Arithmetic(b.loc, decl, symbol, operands))
    return TensorValue(ir.TensorRef(decl))


def _scalar_operand(b, value, tensor: TensorValue, symbol: str):
    """The scalar side of ``tensor symbol value`` in the tensor's type: into an integer tensor only an integer,
    never a truncated float."""
    if tensor.dtype.is_integer:
        return b.to_integer(value, tensor.dtype, f"the scalar operand of {symbol!r} on {tensor.dtype.name} tensor "
                                                 f"{tensor.name}")
    return b.to_expr(value, tensor.dtype, f"the scalar operand of {symbol!r} on {tensor.name}")


def negate(b, x: TensorValue) -> TensorValue:
    """``-x`` of a register tensor, emitted at the builder's line."""
    if x.kind != ir.REGISTER:
        raise b.error(f"arithmetic needs register tensors; {x.name} is a {x.kind} tensor")
    decl = b.new_register_tensor("tmp", x.dtype, x.shape)
    b.emit(Arithmetic(b.loc, decl, "neg", (x.ref,)))
    return TensorValue(ir.TensorRef(decl))


# ----------------------------------------------------------------------------------------------- emulation


@emulates(Cast)
def _cast(machine, task, s: Cast):
    src = machine.register(task, s.src, "cast")
    machine.define_register(task, s.decl, dtypes.round_to(s.decl.dtype, src.astype(np.float32)))


@emulates(Arithmetic)
def _arithmetic(machine, task, s: Arithmetic):
    values = [machine.register(task, o, s.op) if isinstance(o, ir.TensorRef) else machine.ev(task, o)
              for o in s.operands]
    if s.decl.dtype.is_float:
        values = [np.asarray(v, dtype=np.float32) for v in values]  # f32 arithmetic, as the GPU code does
    result = -values[0] if s.op == "neg" else TENSOR_OPERATORS[s.op](values[0], values[1])
    machine.define_register(task, s.decl, dtypes.round_to(s.decl.dtype, result))
