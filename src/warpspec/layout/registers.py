"""Register layouts: which thread holds which element of a register tensor, and in which register.

- ``Accumulator``: WGMMA D fragments (m64nNk16 per warpgroup, repeated over the tile).
- ``AFragment``: WGMMA A-from-registers fragments (m64k16 per warpgroup and k-step).
- ``Blocked``: the row-major elements dealt to the threads of a group in 16-byte chunks (loads and stores).
- ``Replicated``: every thread holds the whole (small) tensor, e.g. a ring's phase array.
- ``Slice``: a row vector [1, N] or column vector [M, 1] broadcast against a 2-D layout: each thread holds the
  columns (rows) it holds of the 2-D tensor (a bias added to an accumulator, a row maximum subtracted from it).

Each layout says which threads hold it (``owners``) and, for register ``i`` of a thread, which element (row, col)
it holds, written as expressions over ``g_`` (warpgroup of the thread within its group), ``w_`` (warp within the
warpgroup), ``lane_`` and ``t_`` (thread within the group), the names the CUDA back end's ``thread_prelude``
declares. Tensors of 16-bit types are stored as packed pairs in
32-bit words, the form WGMMA reads and writes. Which tensor gets which layout is inferred from a kernel's uses by
``warpspec.passes.layouts``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from warpspec.ir import nodes as ir
from warpspec.layout.fragments import AccumulatorLayout


@dataclass(frozen=True)
class Accumulator:
    """WGMMA accumulator fragments over the warpgroups of threads ``[begin, begin + count)``."""

    layout: AccumulatorLayout
    begin: int

    @property
    def owners(self) -> tuple[int, int]:
        return (self.begin, self.layout.threads)

    @property
    def registers(self) -> int:
        return self.layout.registers_per_thread()

    def coords(self, i: int) -> tuple[str, str]:
        acc = self.layout
        half_n = acc.instr_n // 2
        block, ii = divmod(i, half_n)
        mb, ni = divmod(block, acc.n_instructions)
        row = f"g_ * {acc.m // acc.warpgroups} + {mb * 64 + 8 * ((ii >> 1) & 1)} + 16 * w_ + (lane_ >> 2)"
        col = f"{ni * acc.instr_n + 8 * (ii >> 2) + (ii & 1)} + 2 * (lane_ & 3)"
        return row, col

    def valid(self, i: int) -> str | None:
        return None


@dataclass(frozen=True)
class AFragment:
    """WGMMA A fragments of a [m, k] 16-bit tile over ``warpgroups`` warpgroups from ``begin``: per warpgroup
    m/warpgroups/64 row blocks × k/16 steps × 8 elements, element e of a block packing pair e // 2."""

    m: int
    k: int
    warpgroups: int
    begin: int
    warpgroup_threads: int = 128

    @property
    def owners(self) -> tuple[int, int]:
        return (self.begin, self.warpgroups * self.warpgroup_threads)

    @property
    def k_steps(self) -> int:
        return self.k // 16

    @property
    def m_blocks(self) -> int:
        return self.m // self.warpgroups // 64

    @property
    def registers(self) -> int:
        return self.m_blocks * self.k_steps * 8

    def coords(self, i: int) -> tuple[str, str]:
        block, e = divmod(i, 8)
        mb, ks = divmod(block, self.k_steps)
        j, half = divmod(e, 2)
        row = f"g_ * {self.m // self.warpgroups} + {mb * 64 + 8 * (j & 1)} + 16 * w_ + (lane_ >> 2)"
        col = f"{ks * 16 + 8 * (j >> 1) + half} + 2 * (lane_ & 3)"
        return row, col

    def valid(self, i: int) -> str | None:
        return None


@dataclass(frozen=True)
class Blocked:
    """The row-major elements of ``shape`` dealt to threads ``[begin, begin + count)`` in chunks of ``vector``
    consecutive elements: thread t holds chunks t, t + count, t + 2·count, ..."""

    shape: tuple[int, ...]
    begin: int
    count: int
    vector: int

    @property
    def owners(self) -> tuple[int, int]:
        return (self.begin, self.count)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def registers(self) -> int:
        chunks = -(-self.size // (self.vector * self.count))
        return chunks * self.vector

    def _flat(self, i: int) -> str:
        chunk, e = divmod(i, self.vector)
        return f"(({chunk * self.count} + t_) * {self.vector} + {e})"

    def coords(self, i: int) -> tuple[str, str]:
        flat = self._flat(i)
        if len(self.shape) == 1:
            return "0", flat
        cols = self.shape[-1]
        return f"({flat} / {cols})", f"({flat} % {cols})"

    def valid(self, i: int) -> str | None:
        if self.registers * self.count == self.size:
            return None
        return f"({self._flat(i)} < {self.size})"


@dataclass(frozen=True)
class Replicated:
    """Every thread holds all ``size`` elements, register i = flat element i."""

    shape: tuple[int, ...]
    owners = None  # every thread that runs the defining statement holds all of it

    @property
    def registers(self) -> int:
        return math.prod(self.shape)

    def coords(self, i: int) -> tuple[str, str]:
        if len(self.shape) == 1:
            return "0", str(i)
        return str(i // self.shape[-1]), str(i % self.shape[-1])

    def valid(self, i: int) -> str | None:
        return None


@dataclass(frozen=True)
class Slice:
    """The vector a 2-D ``parent`` layout broadcasts along ``axis`` (0: a row vector [1, N], one value per column;
    1: a column vector [M, 1], one value per row): each thread holds the columns (rows) it holds of the parent.
    Against accumulator fragments a thread holds each of its distinct columns (rows) once: n/4 columns, or 2 rows
    per m64 block; a column vector against a blocked layout whose chunks each lie in one row, one register per
    chunk; against other layouts one register per parent register (the parent's column or row)."""

    parent: object
    axis: int

    @property
    def owners(self) -> tuple[int, int]:
        return self.parent.owners

    @property
    def begin(self) -> int:
        return layout_begin(self.parent)

    @property
    def per_chunk(self) -> int:
        """Parent registers per register of a column vector against a blocked layout whose chunks lie in one row
        each (its ``vector``: one row value serves the chunk's elements), else 1."""
        parent = self.parent
        if (self.axis == 1 and isinstance(parent, Blocked) and len(parent.shape) == 2 and parent.vector > 1
                and parent.shape[-1] % parent.vector == 0):
            return parent.vector
        return 1

    @property
    def registers(self) -> int:
        if isinstance(self.parent, Accumulator):
            acc = self.parent.layout
            return acc.n // 4 if self.axis == 0 else acc.m_blocks * 2
        return self.parent.registers // self.per_chunk

    def coords(self, i: int) -> tuple[str, str]:
        if isinstance(self.parent, Accumulator):
            acc = self.parent.layout
            if self.axis == 0:
                ni, r = divmod(i, acc.instr_n // 4)
                return "0", f"{ni * acc.instr_n + 8 * (r >> 1) + (r & 1)} + 2 * (lane_ & 3)"
            mb, h = divmod(i, 2)
            return f"g_ * {acc.m // acc.warpgroups} + {mb * 64 + 8 * h} + 16 * w_ + (lane_ >> 2)", "0"
        row, col = self.parent.coords(i * self.per_chunk)
        return ("0", col) if self.axis == 0 else (row, "0")

    def valid(self, i: int) -> str | None:
        return None if isinstance(self.parent, Accumulator) else self.parent.valid(i * self.per_chunk)

    def parent_register(self, i: int) -> int:
        """The register of this vector that parent register ``i``'s element is combined with."""
        if not isinstance(self.parent, Accumulator):
            return i // self.per_chunk
        acc = self.parent.layout
        block, ii = divmod(i, acc.instr_n // 2)
        mb, ni = divmod(block, acc.n_instructions)
        if self.axis == 0:
            return ni * (acc.instr_n // 4) + (ii >> 2) * 2 + (ii & 1)
        return mb * 2 + ((ii >> 1) & 1)


def slice_of(parent, axis: int, shape) -> object:
    """The layout of a vector of ``shape`` broadcast along ``axis`` against a tensor in ``parent``: a ``Slice``,
    or ``Replicated`` when every thread holds the whole parent."""
    return Replicated(tuple(shape)) if isinstance(parent, Replicated) else Slice(parent, axis)


def broadcast_register(parent, vector, axis: int, i: int) -> int:
    """The register of a broadcast vector (layout ``vector``, its ``slice_of`` ``parent``) combined with parent
    register ``i``."""
    if isinstance(vector, Replicated):
        row, col = parent.coords(i)
        return int(col) if axis == 0 else int(row)
    return vector.parent_register(i)


def same_registers(a, b) -> bool:
    """Whether layouts ``a`` and ``b`` put every element in the same register of the same thread, so that one
    tensor may be read in the other's layout: equal layouts, or the accumulator of an [M, N] tile and the A
    fragments of the [M, K = N] tile over the same warpgroups. For m64nNk16 the two fragment figures coincide (PTX
    ISA 9.7.15.5.1: register i of the accumulator holds the element that A element register i holds, k-step by
    k-step), which is what lets a softmax's probabilities, cast to 16 bits, feed the next mma from registers."""
    if a == b:
        return True
    if _row_vectors_alike(a, b):
        return True
    if isinstance(b, Accumulator):
        a, b = b, a
    if not (isinstance(a, Accumulator) and isinstance(b, AFragment)):
        return False
    acc = a.layout
    return ((acc.m, acc.n, acc.warpgroups, a.begin) == (b.m, b.k, b.warpgroups, b.begin)
            and acc.instr_n % 16 == 0 and b.warpgroup_threads == 128)


def _row_vectors_alike(a, b) -> bool:
    """Whether ``a`` and ``b`` are column vectors ([M, 1], one value per row) of accumulators that differ only in
    N: a thread holds the same rows of every m64 block whatever the width, so a running row maximum of an
    attention's [64, block_n] scores also scales its [64, head_dim] output."""
    if not (isinstance(a, Slice) and isinstance(b, Slice) and a.axis == b.axis == 1):
        return False
    if not (isinstance(a.parent, Accumulator) and isinstance(b.parent, Accumulator)):
        return False
    pa, pb = a.parent.layout, b.parent.layout
    return (pa.m, pa.warpgroups, a.parent.begin) == (pb.m, pb.warpgroups, b.parent.begin)


def layout_begin(layout) -> int:
    """The first thread of the group a layout is spread over (0 for replicated tensors)."""
    return getattr(layout, "begin", 0)


def packed(decl: ir.TensorDecl) -> bool:
    """16-bit register tensors live as pairs packed in 32-bit words."""
    return decl.dtype.nbytes == 2


def describe_layout(layout) -> str:
    """How an error message names ``layout``."""
    return {Accumulator: "wgmma accumulator fragments", AFragment: "wgmma A fragments",
            Blocked: "blocked over a thread group", Replicated: "replicated"}.get(type(layout)) or \
        f"the {'column' if layout.axis == 0 else 'row'} slice of {describe_layout(layout.parent)}"



@dataclass(frozen=True)
class LayoutRule:
    """What one statement says about register-tensor layouts, declared by its family (``registry.LAYOUT_RULE``)
    and combined over a kernel by ``warpspec.passes.layouts``.

    ``fixed``: (decl, layout) pairs the instruction imposes (WGMMA operands). ``alike``: tensors that share one
    layout (an elementwise result and its same-shaped operands); ``broadcast``: (decl, axis) vectors broadcast
    against them. ``derived``: (decl, source decl, function of the source's layout) for a result whose layout
    follows from an operand's (a row reduction). ``defines``: the tensor the statement defines, replicated when
    nothing else fixes its layout; ``blocked``: first try a Blocked layout over the executing thread group (a
    load). ``stored``: a register tensor the statement stores, which exactly the threads holding it must execute;
    ``indexed``: one it writes by element index. ``call``: the language call, for messages."""

    fixed: tuple = ()
    alike: tuple = ()
    broadcast: tuple = ()
    derived: tuple | None = None
    defines: ir.TensorDecl | None = None
    blocked: bool = False
    stored: ir.TensorDecl | None = None
    indexed: ir.TensorDecl | None = None
    call: str = ""
