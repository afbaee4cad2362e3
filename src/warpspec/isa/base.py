"""What every instruction family builds on: the base of language objects and the shared argument checks.

A family's methods run inside the front end with already-evaluated arguments (Python values for compile-time
ones, IR Exprs for runtime scalars, ``TensorValue``s for tensors). ``self.b`` is the build context, typed as the
Protocol ``warpspec.isa.contracts.BuildContext`` (the front end's ``KernelContext`` implements it): methods check
where they are used through it (``b.group``, ``b.depth``, ``b.in_thread_group()``), convert arguments
(``b.to_expr``, ``b.to_int``, ``b.to_tensor``), raise ``b.error(...)`` at the kernel line and ``b.emit(...)`` IR;
nothing else of the front end. The front end binds the arguments against the method's signature first, so a
missing or unknown argument is a CompileError at the kernel line too.
"""

from __future__ import annotations

from warpspec.dtypes import DType
from warpspec.isa.values import TensorValue, describe
from warpspec.isa.contracts import BuildContext
from warpspec.ir import nodes as ir
from warpspec.target import Target


def language_call(function):
    """Mark a method as callable from kernels with runtime arguments (the front end passes them through)."""
    function._language_call = True
    return function


class LanguageObject:
    """Base of objects reachable from ``self`` in a kernel; holds the build context (``self.b``).

    A family whose ``namespace`` is a name (``"mbarrier"``) is reached as ``self.mbarrier``; one whose namespace is
    None contributes its public ``language_call`` methods to ``self`` directly (``self.shared_tensor``).
    """

    namespace: str | None = None

    def __init__(self, context: BuildContext):
        self.b = context

    @property
    def target(self) -> Target:
        """The Target the kernel is built for."""
        return self.b.target

    def get_attribute(self, name: str):
        if name.startswith("_") or name == "b":
            raise self.b.error(f"{self.describe()} has no attribute {name!r}")
        try:
            return getattr(self, name)
        except AttributeError:
            raise self.b.error(f"{self.describe()} has no attribute {name!r}") from None

    def describe(self) -> str:
        return f"self.{self.namespace}" if self.namespace else type(self).__name__

    @classmethod
    def members(cls) -> tuple[str, ...]:
        """The language calls this family offers."""
        return tuple(name for name in dir(cls) if getattr(getattr(cls, name), "_language_call", False))


def static_tensor_type(b: BuildContext, dtype, shape, what: str) -> tuple[DType, tuple[int, ...]]:
    """``(dtype, shape)`` of a tensor whose shape is known at compile time, or a CompileError naming ``what``."""
    if not isinstance(dtype, DType):
        raise b.error(f"{what} dtype must be a dtype such as float16, got {describe(dtype)}")
    shape = list(shape) if isinstance(shape, (list, tuple)) else [shape]
    dims = tuple(b.to_int(s, f"{what} shape") for s in shape)
    if not dims or any(d <= 0 for d in dims):
        raise b.error(f"{what} shape must have positive extents, got {list(dims)}")
    return dtype, dims


def offsets_of(b: BuildContext, offsets, view: TensorValue, what: str) -> tuple[ir.Expr, ...]:
    """One int32 offset per dimension of ``view``: integers or runtime integer values, never floats."""
    offsets = list(offsets) if isinstance(offsets, (list, tuple)) else [offsets]
    if len(offsets) != len(view.shape):
        raise b.error(f"{what}: {view.name} has {len(view.shape)} dimensions but {len(offsets)} offsets were given")
    return tuple(b.to_index(o, f"{what} offset") for o in offsets)


def check_reduction(b: BuildContext, call: str, reduce, reductions: dict, operand: TensorValue) -> None:
    """Refuse ``reduce`` at the user's line unless it is None, or one of ``reductions`` (name -> the element types
    it combines) whose types hold ``operand``'s; ``call`` names the language call in the message."""
    if reduce is None:
        return
    if reduce not in reductions:
        raise b.error(f"{call} reduce must be None or one of {', '.join(map(repr, reductions))}, got {reduce!r}")
    if operand.dtype.name not in reductions[reduce]:
        raise b.error(f"{call} reduce={reduce!r} combines {' or '.join(reductions[reduce])} tiles; {operand.name} "
                      f"is {operand.dtype.name}")


def barrier_ref(b: BuildContext, value, what: str) -> ir.TensorRef:
    """The one mbarrier ``value`` names (``barriers[stage]``), or a CompileError naming ``what``."""
    if not isinstance(value, TensorValue) or value.kind != ir.BARRIER:
        raise b.error(f"{what} must be one mbarrier (e.g. barriers[stage]), got {describe(value)}")
    if value.shape != ():
        raise b.error(f"{what} must be one mbarrier: index the barrier array {value.name}")
    return value.ref
