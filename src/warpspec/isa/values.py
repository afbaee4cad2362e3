"""What the language hands around besides Python values (compile-time) and IR Exprs (runtime scalars)."""

from __future__ import annotations

from dataclasses import dataclass

from warpspec.dtypes import DType, PointerType
from warpspec.ir import nodes as ir


@dataclass(frozen=True)
class TensorValue:
    """A tensor as the kernel sees it: a reference to a declared tensor, perhaps indexed or transposed."""

    ref: ir.TensorRef

    @property
    def shape(self) -> tuple:
        return self.ref.shape

    @property
    def dtype(self):
        return self.ref.dtype

    @property
    def kind(self) -> str:
        return self.ref.kind

    @property
    def name(self) -> str:
        return self.ref.decl.name


@dataclass(frozen=True)
class RuntimeRange:
    """``self.range(...)``: iterating it in a ``for`` makes a runtime loop."""

    start: ir.Expr
    stop: ir.Expr
    step: int | ir.Expr  # a runtime step only when unroll is 1
    unroll: int


def describe(value) -> str:
    """How an error message names a value the kernel passed: ``shared tensor sa``, ``a runtime int32 value``."""
    if isinstance(value, TensorValue):
        return f"{value.kind} tensor {value.name}"
    if isinstance(value, ir.Expr):
        return f"a runtime {value.dtype.name} value"
    if isinstance(value, (PointerType, DType)):
        return repr(value)
    described = getattr(value, "describe_value", None)
    if described is not None:
        return described()
    return f"{type(value).__name__} {value!r}" if isinstance(value, (int, float, str, list, tuple)) else \
        type(value).__name__
