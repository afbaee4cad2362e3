"""The IR: typed, immutable statements and expressions that both back ends read.

A kernel is a tree of statements. Runtime scalars are ``Var``s; tensors are declared once (``TensorDecl``) and used
through ``TensorRef``s that may index leading dimensions (``sa[stage]``) and transpose the last two. Everything the
front end could compute in Python is already a constant here. Every statement carries the ``Loc`` of the kernel
source line it came from, so both back ends can name it in errors.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import ClassVar, Union

from warpspec.dtypes import DType, PointerType, int32

_uids = itertools.count()


def fresh_uid() -> int:
    """A process-unique integer, so two variables that share a user name stay distinct."""
    return next(_uids)


@dataclass(frozen=True)
class Loc:
    """A kernel source position: file path and 1-based line.

    A line inside an inlined helper (a Script's helper method, a ``warpspec.Class`` method such as
    ``Pipeline.consumer_acquire``) carries the call site it was inlined at, so errors name the user's line first and
    then the library line: ``str(loc)`` is ``user.py:40 -> Pipeline.consumer_acquire at pipeline.py:45``.
    """

    file: str
    line: int
    inlined_at: "Loc | None" = None
    function: str | None = None  # the inlined function this line belongs to (None at the kernel's top level)

    def frames(self) -> list["Loc"]:
        """The chain outermost (the kernel's own line) first, this line last."""
        chain, loc = [], self
        while loc is not None:
            chain.append(loc)
            loc = loc.inlined_at
        return chain[::-1]

    def __str__(self) -> str:
        frames = self.frames()
        text = f"{frames[0].file}:{frames[0].line}"
        for frame in frames[1:]:
            text += f" -> {frame.function} at {frame.file}:{frame.line}"
        return text


# ---------------------------------------------------------------------------------------------------- expressions


@dataclass(frozen=True, eq=False)
class Expr:
    """A runtime scalar expression; ``dtype`` is its type."""

    @property
    def dtype(self) -> DType:  # pragma: no cover - every subclass defines it
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class Const(Expr):
    """A constant of a scalar type."""

    value: Union[int, float, bool]
    type: DType

    @property
    def dtype(self) -> DType:
        return self.type


@dataclass(frozen=True, eq=False)
class Var(Expr):
    """A runtime scalar variable: a kernel parameter, a local or a loop variable. Identity is ``uid``."""

    name: str
    type: DType
    uid: int = field(default_factory=fresh_uid)

    @property
    def dtype(self) -> DType:
        return self.type


@dataclass(frozen=True, eq=False)
class Special(Expr):
    """A launch index read by every thread alike: ``blockIdx.x``, ``gridDim.y``, ``clusterRank``."""

    name: str

    @property
    def dtype(self) -> DType:
        return int32


#: Comparison operators: their result is boolean whatever the operand type.
COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")


@dataclass(frozen=True, eq=False)
class Binary(Expr):
    """``a op b`` with both operands already converted to ``type`` (comparisons: to a common operand type)."""

    op: str
    a: Expr
    b: Expr
    type: DType

    @property
    def dtype(self) -> DType:
        return self.type


@dataclass(frozen=True, eq=False)
class Unary(Expr):
    """``-a``, ``~a`` or ``not a``."""

    op: str
    a: Expr

    @property
    def dtype(self) -> DType:
        return self.a.dtype


@dataclass(frozen=True, eq=False)
class Select(Expr):
    """``a if cond else b``."""

    cond: Expr
    a: Expr
    b: Expr

    @property
    def dtype(self) -> DType:
        return self.a.dtype


@dataclass(frozen=True, eq=False)
class Convert(Expr):
    """A scalar converted to another scalar type."""

    a: Expr
    type: DType

    @property
    def dtype(self) -> DType:
        return self.type


@dataclass(frozen=True, eq=False)
class Load(Expr):
    """One element of a register tensor, read at runtime indices."""

    tensor: "TensorRef"
    indices: tuple[Expr, ...]

    @property
    def dtype(self) -> DType:
        return self.tensor.decl.dtype


# -------------------------------------------------------------------------------------------------------- tensors

GLOBAL, SHARED, REGISTER, BARRIER = "global", "shared", "register", "barrier"


@dataclass(frozen=True, eq=False)
class TensorDecl:
    """A tensor the kernel declares, named as in the source.

    ``shape`` holds ints for shared, register and barrier tensors; Exprs (over parameters) for global views.
    """

    name: str
    kind: str
    dtype: DType
    shape: tuple
    loc: Loc
    uid: int = field(default_factory=fresh_uid)

    def __repr__(self) -> str:
        return f"{self.name}#{self.uid}"


@dataclass(frozen=True, eq=False)
class TensorRef:
    """A use of a tensor: ``decl`` indexed on its leading dimensions by ``index``, optionally with its last two
    dimensions swapped (``.transpose()``). Shared, register and barrier shapes are static."""

    decl: TensorDecl
    index: tuple[Expr, ...] = ()
    transposed: bool = False

    @property
    def shape(self) -> tuple:
        shape = tuple(self.decl.shape[len(self.index):])
        if self.transposed:
            shape = shape[:-2] + (shape[-1], shape[-2])
        return shape

    @property
    def kind(self) -> str:
        return self.decl.kind

    @property
    def dtype(self) -> DType:
        return self.decl.dtype

    @property
    def nbytes(self) -> int:
        count = 1
        for extent in self.shape:
            count *= extent
        return count * self.decl.dtype.nbytes


# ----------------------------------------------------------------------------------------------------- statements


@dataclass(frozen=True, eq=False)
class Stmt:
    """A statement; ``loc`` is the kernel source line it came from.

    ``abstract``: a base class, not a statement (the registry skips it). ``blocks``: the fields holding nested
    statement lists, in execution order.
    """

    abstract = True
    blocks: ClassVar[tuple[str, ...]] = ()
    loc: Loc


@dataclass(frozen=True, eq=False)
class Declare(Stmt):
    """Declare a runtime scalar and give it its first value."""

    var: Var
    value: Expr


@dataclass(frozen=True, eq=False)
class Assign(Stmt):
    """Give a runtime scalar a new value."""

    var: Var
    value: Expr


@dataclass(frozen=True, eq=False)
class For(Stmt):
    """``for var in range(start, stop, step)`` at runtime; ``unroll`` is the author's unroll factor (1 = none)."""

    var: Var
    start: Expr
    stop: Expr
    step: Expr
    body: tuple[Stmt, ...]
    unroll: int = 1
    blocks = ("body",)


@dataclass(frozen=True, eq=False)
class If(Stmt):
    """A branch on a runtime condition that every thread of the executing partition evaluates alike."""

    cond: Expr
    then: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...]
    blocks = ("then", "orelse")


@dataclass(frozen=True, eq=False)
class Instruction(Stmt):
    """Base of the instructions the language exposes (one subclass per instruction, defined with its family in
    ``warpspec.isa``)."""

    abstract = True
    threads: tuple[int, int]  # (begin, count) of the executing group; count 1 inside single_thread


@dataclass(frozen=True, eq=False)
class DefineTensor(Stmt):
    """Base of statements that define the register tensor ``decl`` from other values (loads, casts, arithmetic)."""

    abstract = True
    decl: TensorDecl


# --------------------------------------------------------------------------------------------------------- kernel


@dataclass(frozen=True)
class Param:
    """A runtime kernel parameter: a scalar or a pointer to global memory."""

    name: str
    type: Union[DType, PointerType]
    var: Var


@dataclass(frozen=True)
class Kernel:
    """One specialisation of a Script: all compile-time values fixed.

    ``grid`` holds 1–3 Exprs over the parameters; ``warps`` the block's warp count; ``cluster`` the cluster shape;
    ``constants`` the compile-time arguments and schedule it was built with (for names and cache keys).
    """

    name: str
    params: tuple[Param, ...]
    grid: tuple[Expr, ...]
    warps: int
    cluster: tuple[int, int, int]
    body: tuple[Stmt, ...]
    constants: tuple[tuple[str, object], ...]
    loc: Loc
    #: What the analysis passes found (``warpspec.passes.KernelFacts``): register layouts and the shared-memory
    #: plan, shared by both back ends. None until ``passes.analyse`` ran.
    facts: object = field(default=None, compare=False, repr=False)
    #: The line that set ``self.attrs.blocks``, which a launch's error about the grid names.
    grid_loc: Loc | None = field(default=None, compare=False, repr=False)

    @property
    def num_threads(self) -> int:
        return self.warps * 32


def walk(body) -> "itertools.chain[Stmt]":
    """Every statement of ``body``, depth first, parents before children."""
    for stmt in body:
        yield stmt
        for child in children(stmt):
            yield from walk(child)


def children(stmt: Stmt) -> tuple[tuple[Stmt, ...], ...]:
    """The nested statement lists of ``stmt``."""
    return tuple(getattr(stmt, name) for name in type(stmt).blocks)


def leaves(expr: Expr):
    """The leaf expressions (constants, variables, specials, element loads) of ``expr``."""
    if isinstance(expr, Binary):
        yield from leaves(expr.a)
        yield from leaves(expr.b)
    elif isinstance(expr, (Unary, Convert)):
        yield from leaves(expr.a)
    elif isinstance(expr, Select):
        for part in (expr.cond, expr.a, expr.b):
            yield from leaves(part)
    else:
        yield expr
