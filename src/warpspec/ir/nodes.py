"""The IR: typed, immutable statements and expressions that both back ends read.

A kernel is a tree of statements. Runtime scalars are ``Var``s; tensors are declared once (``TensorDecl``) and used
through ``TensorRef``s that may index leading dimensions (``sa[stage]``) and transpose the last two. Everything the
front end could compute in Python is already a constant here. Every statement carries the ``Loc`` of the kernel
source line it came from, so both back ends can name it in errors.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Union

from warpspec.dtypes import DType, PointerType, int32

_uids = itertools.count()


def fresh_uid() -> int:
    """A process-unique integer, so two variables that share a user name stay distinct."""
    return next(_uids)


@dataclass(frozen=True)
class Loc:
    """A kernel source position: file path and 1-based line."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


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


#: Binary operators. Integer ``//`` and ``%`` truncate toward zero like C; ``cdiv`` is ceiling division.
BINARY_OPS = ("+", "-", "*", "/", "//", "%", "&", "|", "^", "<<", ">>", "min", "max", "cdiv",
              "<", "<=", ">", ">=", "==", "!=", "and", "or")
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
    """A statement; ``loc`` is the kernel source line it came from."""

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
class GlobalView(Stmt):
    """View a global pointer as a row-major (or explicitly strided) tensor of a runtime shape."""

    decl: TensorDecl
    pointer: Var
    strides: tuple[Expr, ...]


@dataclass(frozen=True, eq=False)
class AllocShared(Stmt):
    """Reserve a shared-memory tensor for the whole block; ``swizzle`` (bytes) overrides the layout's choice."""

    decl: TensorDecl
    swizzle: int | None = None


@dataclass(frozen=True, eq=False)
class AllocBarriers(Stmt):
    """Create ``len(counts)`` mbarriers, barrier i expecting ``counts[i]`` arrivals per phase, visible to every
    thread of the block afterwards."""

    decl: TensorDecl
    counts: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class AllocRegister(Stmt):
    """Declare a register tensor, filled with ``init`` (``None``: undefined contents)."""

    decl: TensorDecl
    init: Expr | None


@dataclass(frozen=True, eq=False)
class StoreElement(Stmt):
    """Write one element of a register tensor."""

    tensor: TensorRef
    indices: tuple[Expr, ...]
    value: Expr


#: Tensor operations that define a new register tensor (``ComputeTensor.op``).
TENSOR_OPS = ("cast", "binary", "unary", "load_global", "load_shared", "copy")


@dataclass(frozen=True, eq=False)
class ComputeTensor(Stmt):
    """Define the register tensor ``decl`` from other tensors.

    ``op``: ``cast`` (operands: src), ``binary`` (attr: operator; operands: two TensorRefs or Exprs, at least one a
    tensor), ``unary`` (attr: operator; operands: src), ``load_global`` (operands: view, then offsets as Exprs),
    ``load_shared`` (operands: src).
    """

    decl: TensorDecl
    op: str
    operands: tuple
    attr: str | None = None


@dataclass(frozen=True, eq=False)
class For(Stmt):
    """``for var in range(start, stop, step)`` at runtime; ``unroll`` is the author's unroll factor (1 = none)."""

    var: Var
    start: Expr
    stop: Expr
    step: Expr
    body: tuple[Stmt, ...]
    unroll: int = 1


@dataclass(frozen=True, eq=False)
class If(Stmt):
    """A branch on a runtime condition that every thread of the executing partition evaluates alike."""

    cond: Expr
    then: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...]


@dataclass(frozen=True, eq=False)
class ThreadGroup(Stmt):
    """Run ``body`` on threads ``[begin, begin + count)`` of the block only."""

    begin: int
    count: int
    body: tuple[Stmt, ...]
    max_registers: int | None = None


@dataclass(frozen=True, eq=False)
class SingleThread(Stmt):
    """Run ``body`` on one elected thread (the first) of the enclosing group ``[begin, begin + count)``."""

    begin: int
    count: int
    body: tuple[Stmt, ...]


@dataclass(frozen=True, eq=False)
class Sync(Stmt):
    """Barrier over threads ``[begin, begin + count)``: the block (``bar.sync 0``) or a thread group (named)."""

    begin: int
    count: int


@dataclass(frozen=True, eq=False)
class Instruction(Stmt):
    """A Hopper instruction the language exposes; one subclass per instruction."""

    threads: tuple[int, int]  # (begin, count) of the executing group; count 1 inside single_thread


@dataclass(frozen=True, eq=False)
class MbarrierArrive(Instruction):
    """Each executing thread arrives once on ``barrier``."""

    barrier: TensorRef


@dataclass(frozen=True, eq=False)
class MbarrierArriveExpectTx(Instruction):
    """Each executing thread raises ``barrier``'s transaction count by ``nbytes``, then arrives once."""

    barrier: TensorRef
    nbytes: Expr


@dataclass(frozen=True, eq=False)
class MbarrierWait(Instruction):
    """Block until the phase of ``barrier`` with parity ``phase`` has completed."""

    barrier: TensorRef
    phase: Expr


@dataclass(frozen=True, eq=False)
class TmaLoad(Instruction):
    """Copy the box of global view ``src`` at ``offsets`` into shared tensor ``dst``, completing its bytes on
    ``barrier``. Elements outside the view read as zero."""

    src: TensorRef
    dst: TensorRef
    offsets: tuple[Expr, ...]
    barrier: TensorRef


@dataclass(frozen=True, eq=False)
class TmaStore(Instruction):
    """Copy shared tensor ``src`` into global view ``dst`` at ``offsets``; elements outside the view are dropped."""

    src: TensorRef
    dst: TensorRef
    offsets: tuple[Expr, ...]


@dataclass(frozen=True, eq=False)
class TmaCommit(Instruction):
    """Close the executing thread's uncommitted TMA stores into one bulk group."""


@dataclass(frozen=True, eq=False)
class TmaWait(Instruction):
    """Wait until at most ``n`` of the executing thread's bulk groups are pending."""

    n: int


@dataclass(frozen=True, eq=False)
class FenceProxyAsync(Instruction):
    """Order the executing threads' ordinary shared-memory writes before later async-proxy reads (TMA, WGMMA)."""


@dataclass(frozen=True, eq=False)
class WgmmaFence(Instruction):
    """Order register accesses before the following ``wgmma.mma_async``."""


@dataclass(frozen=True, eq=False)
class WgmmaMma(Instruction):
    """``d += a @ b`` asynchronously: a [M, K] (shared or register), b [K, N] shared, d [M, N] register."""

    a: TensorRef
    b: TensorRef
    d: TensorRef


@dataclass(frozen=True, eq=False)
class WgmmaCommit(Instruction):
    """Close the warpgroup's uncommitted mma_async into one group."""


@dataclass(frozen=True, eq=False)
class WgmmaWait(Instruction):
    """Wait until at most ``n`` of the warpgroup's wgmma groups are pending."""

    n: int


@dataclass(frozen=True, eq=False)
class StoreGlobal(Instruction):
    """Write register tensor ``src`` into global view ``dst`` at ``offsets``; elements outside the view are
    skipped."""

    dst: TensorRef
    src: TensorRef
    offsets: tuple[Expr, ...]


@dataclass(frozen=True, eq=False)
class StoreShared(Instruction):
    """Write register tensor ``src`` into shared tensor ``dst`` with ordinary stores."""

    dst: TensorRef
    src: TensorRef


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
    if isinstance(stmt, If):
        return (stmt.then, stmt.orelse)
    if isinstance(stmt, (For, ThreadGroup, SingleThread)):
        return (stmt.body,)
    return ()
