"""Register layouts of the CUDA back end: which thread holds which element of a register tensor, in which
register, and how layouts are inferred from a kernel's uses.

- ``Accumulator``: WGMMA D fragments (m64nNk16 per warpgroup, repeated over the tile).
- ``AFragment``: WGMMA A-from-registers fragments (m64k16 per warpgroup and k-step).
- ``Blocked``: the row-major elements dealt to the threads of a group in 16-byte chunks (loads and stores).
- ``Replicated``: every thread holds the whole (small) tensor, e.g. a ring's phase array.

Each layout says, for register ``i`` of the executing thread, which element (row, col) it holds, as C++ over the
names ``g_`` (warpgroup of the thread within its group), ``w_`` (warp within the warpgroup), ``lane_`` and ``t_``
(thread within the group) that ``thread_prelude`` defines. Tensors of 16-bit types are stored as packed pairs in
32-bit words, the form WGMMA reads and writes.
"""

from __future__ import annotations

from dataclasses import dataclass

from warpspec.errors import CompileError
from warpspec.ir import nodes as ir
from warpspec.layout import AccumulatorLayout

WARPGROUP = 128
#: Largest register tensor every thread may hold whole, in elements.
MAX_REPLICATED = 256
ELEMENTWISE = ("cast", "binary", "unary")


@dataclass(frozen=True)
class Accumulator:
    """WGMMA accumulator fragments over the warpgroups of threads ``[begin, begin + count)``."""

    layout: AccumulatorLayout
    begin: int

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
    def size(self) -> int:
        return _size(self.shape)

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

    @property
    def registers(self) -> int:
        return _size(self.shape)

    def coords(self, i: int) -> tuple[str, str]:
        if len(self.shape) == 1:
            return "0", str(i)
        return str(i // self.shape[-1]), str(i % self.shape[-1])

    def valid(self, i: int) -> str | None:
        return None


def thread_prelude(begin: int) -> str:
    """C++ declaring the per-thread names the layouts' coordinates use, for a group starting at ``begin``."""
    return (f"const int t_ = static_cast<int>(threadIdx.x) - {begin}; const int g_ = t_ >> 7, w_ = (t_ >> 5) & 3, "
            f"lane_ = t_ & 31; (void)g_; (void)w_; (void)lane_;")


def layout_begin(layout) -> int:
    return getattr(layout, "begin", 0)


def infer_layouts(kernel: ir.Kernel) -> dict[int, object]:
    """The layout of every register tensor of ``kernel`` (by decl uid), from its uses: WGMMA operands fix
    fragment layouts, elementwise operations share their operands' layout in both directions, loads not otherwise
    constrained get a Blocked layout over their thread group, and small remaining tensors are replicated."""
    layouts: dict[int, object] = {}
    groups: dict[int, tuple[int, int]] = {}  # decl uid -> group that defines it
    statements: list[tuple[ir.Stmt, tuple[int, int]]] = []

    def visit(body, group):
        for stmt in body:
            statements.append((stmt, group))
            if isinstance(stmt, ir.ThreadGroup):
                visit(stmt.body, (stmt.begin, stmt.count))
            else:
                for child in ir.children(stmt):
                    visit(child, group)

    visit(kernel.body, (0, kernel.num_threads))

    def assign(decl: ir.TensorDecl, layout, stmt: ir.Stmt) -> bool:
        previous = layouts.get(decl.uid)
        if previous is None:
            layouts[decl.uid] = layout
            return True
        if previous != layout:
            raise CompileError(f"register tensor {decl.name} would need two layouts ({_describe(previous)} and "
                               f"{_describe(layout)}); convert through shared memory (store_shared, sync, "
                               f"load_shared)", str(stmt.loc))
        return False

    for stmt, group in statements:
        if isinstance(stmt, (ir.ComputeTensor, ir.AllocRegister)):
            groups[stmt.decl.uid] = group
        if isinstance(stmt, ir.WgmmaMma):
            m, n = stmt.d.shape
            warpgroups = stmt.threads[1] // WARPGROUP
            assign(stmt.d.decl, Accumulator(AccumulatorLayout(m, n, warpgroups=warpgroups), stmt.threads[0]), stmt)
            if stmt.a.kind == ir.REGISTER:
                assign(stmt.a.decl, AFragment(m, stmt.a.shape[1], warpgroups, stmt.threads[0]), stmt)

    def propagate():
        changed = True
        while changed:
            changed = False
            for stmt, _ in statements:
                if not (isinstance(stmt, ir.ComputeTensor) and stmt.op in ELEMENTWISE):
                    continue
                tensors = [stmt.decl] + [o.decl for o in stmt.operands if isinstance(o, ir.TensorRef)]
                known = [layouts[d.uid] for d in tensors if d.uid in layouts]
                if known:
                    for decl in tensors:
                        changed |= assign(decl, known[0], stmt)

    propagate()
    for stmt, group in statements:
        if isinstance(stmt, ir.ComputeTensor) and stmt.op in ("load_global", "load_shared") \
                and stmt.decl.uid not in layouts:
            shape = stmt.decl.shape
            if len(shape) > 2:
                raise CompileError(f"{stmt.op} into registers takes 1-D or 2-D tiles on the CUDA back end",
                                   str(stmt.loc))
            elem = stmt.decl.dtype.nbytes
            vector = max(1, 16 // elem)
            while shape[-1] % vector:
                vector //= 2
            layouts[stmt.decl.uid] = Blocked(tuple(shape), group[0], group[1], vector)
    propagate()
    for stmt, group in statements:
        if isinstance(stmt, (ir.AllocRegister, ir.ComputeTensor)) and stmt.decl.uid not in layouts:
            size = _size(stmt.decl.shape)
            if size > MAX_REPLICATED:
                raise CompileError(f"register tensor {stmt.decl.name} ({size} elements) is not a wgmma operand, "
                                   f"not loaded, and too large to replicate in every thread (at most "
                                   f"{MAX_REPLICATED} elements)", str(stmt.loc))
            layouts[stmt.decl.uid] = Replicated(tuple(stmt.decl.shape))
    return layouts


def packed(decl: ir.TensorDecl) -> bool:
    """16-bit register tensors live as pairs packed in 32-bit words."""
    return decl.dtype.nbytes == 2


def _describe(layout) -> str:
    return {Accumulator: "wgmma accumulator fragments", AFragment: "wgmma A fragments",
            Blocked: "blocked over a thread group", Replicated: "replicated"}[type(layout)]


def _size(shape) -> int:
    size = 1
    for extent in shape:
        size *= extent
    return size
