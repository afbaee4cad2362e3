"""What names stand for while the front end walks a kernel: besides Python values (compile-time) and IR Exprs
(runtime scalars), these handles."""

from __future__ import annotations

from dataclasses import dataclass, field

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
    step: int
    unroll: int


@dataclass
class Binding:
    """A name's value and the runtime nesting depth at which it was bound (compile-time values bound outside a
    runtime loop or branch cannot change inside it)."""

    value: object
    depth: int


@dataclass(eq=False)
class ClassInstance:
    """An instance of a ``warpspec.Class`` created inside a kernel; its attributes are bindings like names."""

    cls: type
    attributes: dict = field(default_factory=dict)


@dataclass(frozen=True)
class InlineFunction:
    """A Python function written in the language, inlined at each call; ``receiver`` binds its first parameter."""

    function: object
    receiver: object = None
