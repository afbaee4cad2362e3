"""What the front end binds names to besides Python values, Exprs and tensors: bindings with their runtime depth,
``warpspec.Class`` instances and functions to inline."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Binding:
    """A name's value and the runtime nesting depth at which it was bound (compile-time values bound outside a
    runtime loop or branch cannot change inside it). ``borrowed``: a helper's parameter bound to its caller's
    register tensor, whose registers a new value of the parameter must never be computed into (Python rebinds the
    parameter; the caller's tensor keeps its value), with ``block``, the statements being built where it was
    bound (where a copy of its own is made if it must be updated in place inside a runtime loop or branch)."""

    value: object
    depth: int
    borrowed: bool = False
    block: list | None = None


@dataclass(eq=False)
class ClassInstance:
    """An instance of a ``warpspec.Class`` created inside a kernel; its attributes are bindings like names."""

    cls: type
    attributes: dict = field(default_factory=dict)

    def describe_value(self) -> str:
        return f"a {self.cls.__name__} instance"


@dataclass(frozen=True)
class InlineFunction:
    """A Python function written in the language, inlined at each call; ``receiver`` binds its first parameter."""

    function: object
    receiver: object = None
