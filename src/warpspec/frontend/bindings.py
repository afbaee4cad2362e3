"""What the front end binds names to besides Python values, Exprs and tensors: bindings with their runtime depth,
``warpspec.Class`` instances and functions to inline."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Binding:
    """A name's value and the runtime nesting depth at which it was bound (compile-time values bound outside a
    runtime loop or branch cannot change inside it). ``borrowed``: a helper's parameter bound to its caller's
    register tensor or runtime variable, or a runtime loop's variable, which a new value of the name must never be
    computed or assigned into (Python rebinds the name; the caller's tensor or variable, and the loop's counter,
    keep their values), with ``block``, the statements being built where it was bound (where a copy of its own is
    made when the name is given a new value)."""

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
