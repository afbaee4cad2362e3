"""Tensors and the memory operations on them: global views, shared and register tensors, loads and stores.

``self.global_view``, ``self.shared_tensor``, ``self.register_tensor``, ``self.load_global``, ``self.load_scalar``,
``self.store_global``, ``self.load_shared``, ``self.store_shared`` and element writes (``phases[stage] ^= 1``), their
IR statements and their emulation. Which thread holds which element of a register tensor is decided by the layout pass
(``warpspec.passes.layouts``) for both back ends; the CUDA emission is ``warpspec.cuda.sm90.memory``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from warpspec import dtypes
from warpspec.dtypes import DType, float32, int32, int64, uint32
from warpspec.errors import BoundsError
from warpspec.isa.base import LanguageObject, check_reduction, language_call, offsets_of, static_tensor_type
from warpspec.isa.contracts import EmulationMachine, EmulationTask, Steps
from warpspec.isa.elementwise import flush_subnormals
from warpspec.isa.registry import LAYOUT_RULE, WRITES_GLOBAL, declare, declare_timeline, emulates
from warpspec.isa.timeline_facts import NOT_SHOWN, STATEMENT, TimingCost
from warpspec.isa.values import TensorValue, describe
from warpspec.ir import nodes as ir
from warpspec.ir.evaluate import check_element_index, wrap
from warpspec.layout.registers import LayoutRule

# ------------------------------------------------------------------------------------------------------- IR


@dataclass(frozen=True, eq=False)
class GlobalView(ir.Stmt):
    """View a global pointer as a row-major (or explicitly strided) tensor of a runtime shape."""

    decl: ir.TensorDecl
    pointer: ir.Var
    strides: tuple[ir.Expr, ...]
    scratch: bool = False  # a workspace: elements the launch leaves unwritten are no finding

    def text(self, f) -> str:
        scratch = ", scratch=True" if self.scratch else ""
        return (f"{self.decl.name} = global_view({self.pointer.name}, {self.decl.dtype.name}, "
                f"shape={f(self.decl.shape)}, strides={f(self.strides)}{scratch})")


@dataclass(frozen=True, eq=False)
class AllocShared(ir.Stmt):
    """Reserve a shared-memory tensor for the whole block; ``swizzle`` (bytes) overrides the layout's choice."""

    decl: ir.TensorDecl
    swizzle: int | None = None

    def text(self, f) -> str:
        return f"{self.decl.name} = shared_tensor({self.decl.dtype.name}, {list(self.decl.shape)})"


@dataclass(frozen=True, eq=False)
class AllocRegister(ir.Stmt):
    """Declare a register tensor, filled with ``init`` (``None``: undefined contents)."""

    decl: ir.TensorDecl
    init: ir.Expr | None

    def text(self, f) -> str:
        init = "" if self.init is None else f", init={f(self.init)}"
        return f"{self.decl.name} = register_tensor({self.decl.dtype.name}, {list(self.decl.shape)}{init})"


@dataclass(frozen=True, eq=False)
class StoreElement(ir.Stmt):
    """Write one element of a register tensor."""

    tensor: ir.TensorRef
    indices: tuple[ir.Expr, ...]
    value: ir.Expr

    def text(self, f) -> str:
        return f"{f(self.tensor)}[{', '.join(f(i) for i in self.indices)}] = {f(self.value)}"


@dataclass(frozen=True, eq=False)
class LoadGlobal(ir.DefineTensor):
    """Load the tile of ``decl``'s shape at ``offsets`` of global view ``view``; outside the view, and at or past
    view row ``row_end`` when given, reads zero without touching memory."""

    view: ir.TensorRef
    offsets: tuple[ir.Expr, ...]
    row_end: ir.Expr | None = None

    def text(self, f) -> str:
        end = "" if self.row_end is None else f", row_end={f(self.row_end)}"
        return (f"{self.decl.name} = load_global({f(self.view)}, offsets={f(self.offsets)}, "
                f"shape={list(self.decl.shape)}{end})")


@dataclass(frozen=True, eq=False)
class LoadScalar(ir.Instruction):
    """Read element ``indices`` of global view ``view`` into runtime scalar ``var``, the same value in every
    executing thread."""

    var: ir.Var
    view: ir.TensorRef
    indices: tuple[ir.Expr, ...]

    def text(self, f) -> str:
        return f"{self.var.name} = load_scalar({f(self.view)}, [{', '.join(f(i) for i in self.indices)}])"


#: The element types a scalar load gives: the runtime scalar types both back ends hold in a register.
SCALAR_LOAD_TYPES = (int32, uint32, int64, float32)


@dataclass(frozen=True, eq=False)
class LoadShared(ir.DefineTensor):
    """Read shared tensor ``src`` into registers."""

    src: ir.TensorRef

    def text(self, f) -> str:
        return f"{self.decl.name} = load_shared({f(self.src)})"


#: The reductions ``store_global(..., reduce=...)`` takes, each with the element types it combines (PTX's
#: ``red.global`` has more; a float32 add is what accumulating a GEMM's partial tiles needs).
GLOBAL_REDUCTIONS = {"add": ("float32",)}


@dataclass(frozen=True, eq=False)
class StoreGlobal(ir.Instruction):
    """Write register tensor ``src`` into global view ``dst`` at ``offsets``; elements outside the view, rows at or
    past ``row_end`` and columns at or past ``col_end`` when given, are skipped."""

    dst: ir.TensorRef
    src: ir.TensorRef
    offsets: tuple[ir.Expr, ...]
    row_end: ir.Expr | None = None
    col_end: ir.Expr | None = None
    reduce: str | None = None  # "add": each element added atomically into what the view holds

    def text(self, f) -> str:
        row_end = "" if self.row_end is None else f", row_end={f(self.row_end)}"
        col_end = "" if self.col_end is None else f", col_end={f(self.col_end)}"
        reduce = "" if self.reduce is None else f", reduce={self.reduce!r}"
        return f"store_global({f(self.dst)}, {f(self.src)}, offsets={f(self.offsets)}{row_end}{col_end}{reduce})"


@dataclass(frozen=True, eq=False)
class StoreShared(ir.Instruction):
    """Write register tensor ``src`` (its columns ``[column, column + dst columns)``) into shared tensor ``dst``
    with ordinary stores."""

    dst: ir.TensorRef
    src: ir.TensorRef
    column: int = 0


# ------------------------------------------------------------------------------------------------ language


class Memory(LanguageObject):
    """Tensor declarations and memory operations reached on ``self``."""

    @language_call
    def global_view(self, ptr, dtype, shape, strides=None, scratch=False) -> TensorValue:
        """View global memory at pointer parameter ``ptr`` as a tensor of ``dtype`` and ``shape`` (runtime
        sizes allowed), row-major unless ``strides`` (in elements) are given. ``scratch=True`` marks a workspace
        the kernel writes only in part (a stream-K GEMM's partial tiles): the emulator's check that every written
        view was written whole skips it. Executed by no thread: emits no instruction; TMA uses it through a tensor
        map built on the host at launch."""
        b = self.b
        pointee = b.pointer_dtype(ptr)
        if not isinstance(ptr, ir.Var) or pointee is None:
            raise b.error(f"global_view needs a pointer parameter (annotated ~dtype), got {describe(ptr)}")
        if not isinstance(dtype, DType):
            raise b.error(f"global_view dtype must be a dtype such as float16, got {describe(dtype)}")
        if dtype != pointee:
            raise b.error(f"global_view of {ptr.name} ({pointee!r} pointer) with dtype {dtype.name}")
        shape = list(shape) if isinstance(shape, (list, tuple)) else [shape]
        if not 1 <= len(shape) <= 5:
            raise b.error(f"global_view shape needs 1 to 5 dimensions, got {len(shape)}")
        sizes = tuple(b.to_integer(s, int32, "global_view shape") for s in shape)
        if strides is None:
            strides = []
            running: int | ir.Expr = 1
            for size in reversed(shape):  # row-major; folds to constants where the sizes are
                strides.append(running)
                # a runtime extent makes every outer stride runtime ([1, n_size]: n_size, then n_size * 1)
                runtime = isinstance(size, ir.Expr) or isinstance(running, ir.Expr)
                running = b.scalar_binary("*", running, size) if runtime else running * size
            strides = strides[::-1]
        strides = list(strides) if isinstance(strides, (list, tuple)) else [strides]
        if len(strides) != len(sizes):
            raise b.error(f"global_view strides has {len(strides)} entries for {len(sizes)} dimensions")
        strides_exprs = tuple(b.to_integer(s, int32, "global_view strides") for s in strides)
        sizes = tuple(self._host_computed(e, "shape") for e in sizes)
        strides_exprs = tuple(self._host_computed(e, "strides") for e in strides_exprs)
        if not isinstance(scratch, bool):
            raise b.error(f"global_view scratch must be True or False, got {describe(scratch)}")
        decl = ir.TensorDecl(b.target_name(ptr.name), ir.GLOBAL, dtype, sizes, b.loc)
        b.emit(GlobalView(b.loc, decl, ptr, strides_exprs, scratch))
        return TensorValue(ir.TensorRef(decl))

    def _host_computed(self, expr: ir.Expr, what: str) -> ir.Expr:
        """A view's size or stride as the host computes it before the launch (over the kernel's parameters): both
        back ends check that every view fits its array before any block runs, and the GPU's tensor maps are
        encoded there."""
        value = self.b.host_value(expr)
        if isinstance(value, str):
            raise self.b.error(f"global_view {what} may only use kernel parameters and compile-time values (views are "
                               f"checked against their arrays, and TMA's tensor maps encoded, on the host before any "
                               f"block runs), but this one depends on {value}")
        return value

    @language_call
    def shared_tensor(self, dtype, shape, swizzle=None) -> TensorValue:
        """Reserve a shared-memory tensor of compile-time ``shape`` for the whole block (index its leading
        dimension to pick a pipeline stage: ``sa[stage]``). Executed by no thread: emits no instruction. Each tile
        is laid out as TMA writes it, with the widest swizzle the tile's inner extent allows, or ``swizzle`` (128,
        64, 32 or 0 bytes) when given, and aligned to the swizzle pattern (up to 1024 bytes); the block's tiles and
        barriers must fit the target's shared memory (227 KB on Hopper), checked at this line."""
        b = self.b
        if b.depth:
            raise b.error("shared_tensor cannot be allocated inside a runtime loop or branch")
        dtype, shape = static_tensor_type(b, dtype, shape, "shared_tensor")
        if swizzle is not None and b.to_int(swizzle, "shared_tensor swizzle") not in (0, 32, 64, 128):
            raise b.error(f"shared_tensor swizzle must be 0, 32, 64 or 128 bytes, got {swizzle}")
        decl = ir.TensorDecl(b.target_name("shared"), ir.SHARED, dtype, shape, b.loc)
        b.emit(AllocShared(b.loc, decl, swizzle))
        return TensorValue(ir.TensorRef(decl))

    @language_call
    def register_tensor(self, dtype, shape, init=None) -> TensorValue:
        """A tensor held in the registers of the executing threads, filled with ``init`` (None: undefined). Its
        distribution over threads is chosen from its uses (WGMMA accumulator fragments; blocked over the threads
        when a large tile is only stored, such as a zero tile for an output; or a copy per thread for small arrays
        such as phases). No instruction beyond register moves."""
        b = self.b
        dtype, shape = static_tensor_type(b, dtype, shape, "register_tensor")
        init_expr = None if init is None else b.scalar_for(init, dtype, "register_tensor init")
        decl = ir.TensorDecl(b.target_name("regs"), ir.REGISTER, dtype, shape, b.loc)
        b.emit(AllocRegister(b.loc, decl, init_expr))
        return TensorValue(ir.TensorRef(decl))

    @language_call
    def load_global(self, view, offsets, shape, row_end=None) -> TensorValue:
        """Load the tile of ``shape`` at ``offsets`` from global view ``view`` into registers of the executing
        threads; elements outside the view read as zero, and so, with ``row_end`` (a runtime or compile-time
        int32), do those of view rows (the first dimension) at or past ``row_end``, whose memory is not read: a
        tile of which only the first rows hold data (a partial sum of a group's few rows) costs those rows'
        traffic alone, and rows nobody wrote are never read. Executed by the executing threads; ``ld.global``
        (vectorised where aligned and the whole tile lies before ``row_end``), each load predicated on its row
        otherwise."""
        b = self.b
        view = b.to_tensor(view, "load_global view", (ir.GLOBAL,))
        dtype, shape = static_tensor_type(b, view.dtype, shape, "load_global")
        offs = offsets_of(b, offsets, view, "load_global")
        if len(shape) != len(view.shape):
            raise b.error(f"load_global shape {list(shape)} must have the rank of {view.name} ({len(view.shape)})")
        end = None if row_end is None else b.to_index(row_end, "load_global row_end")
        decl = b.new_register_tensor(f"{view.name}_tile", dtype, shape)
        b.emit(LoadGlobal(b.loc, decl, view.ref, offs, end))
        return TensorValue(ir.TensorRef(decl))

    @language_call
    def load_scalar(self, view, indices) -> ir.Var:
        """Read one element of global view ``view``, at ``indices`` (one runtime or compile-time index per
        dimension), as a runtime scalar of the view's dtype (int32, uint32, int64 or float32): metadata such as
        ``cu_seqlens[b]`` or ``block_table[b, page]`` that decides a block's work. Executed by every thread of the
        executing group (each loads the same address, so the value is uniform across the group and may steer its
        branches and loops); ``ld.global`` of the element, a weak load: the value must not be written during the
        launch by another block (the emulator reports a race), as for ``load_global``; a value another block
        publishes is read after ``flag.wait``. An index outside the view is a ``BoundsError`` on the emulator and
        unchecked on the GPU."""
        b = self.b
        view = b.to_tensor(view, "load_scalar view", (ir.GLOBAL,))
        if view.dtype not in SCALAR_LOAD_TYPES:
            raise b.error(f"load_scalar reads {', '.join(t.name for t in SCALAR_LOAD_TYPES)} views; {view.name} "
                          f"holds {view.dtype.name}")
        indices = list(indices) if isinstance(indices, (list, tuple)) else [indices]
        if len(indices) != len(view.shape):
            raise b.error(f"load_scalar needs one index per dimension of {view.name} ({len(view.shape)}), got "
                          f"{len(indices)}")
        exprs = tuple(b.to_index(i, "load_scalar index") for i in indices)
        var = ir.Var(b.target_name(f"{view.name}_value"), view.dtype)
        b.emit(LoadScalar(b.loc, b.threads(), var, view.ref, exprs))
        return var

    @language_call
    def store_global(self, view, tensor, offsets, row_end=None, col_end=None, reduce=None) -> None:
        """Store register tensor ``tensor`` into global view ``view`` at ``offsets``; elements that fall outside the
        view are not written (ragged edges), nor, with ``row_end`` (a runtime or compile-time int32), those of
        view rows (the first dimension) at or past ``row_end``: a tile that ends inside a packed sequence's rows
        leaves the next sequence's alone; ``col_end`` bounds a 2-D view's columns alike (a transposed tile, whose
        columns are the sequence's rows). Executed by the threads holding the tensor (all of them: the layout
        pass refuses a store by a subset); ``st.global``.

        ``reduce="add"`` (float32 tensors): add each element into what the view holds instead, atomically, so that
        several blocks may add into the same elements in any order (a plain access of them by another block is
        still a race); nothing waits for the adds, which are done when the kernel ends. Subnormal addends, held
        values and sums count as zeros of their sign (the instruction's ``.ftz``). ``red.global.add.f32``,
        or for a WGMMA accumulator's column pairs ``red.global.add.v2.f32`` (8 bytes a thread and instruction)
        where the view's columns are contiguous and the pair 8-byte aligned."""
        b = self.b
        view = b.to_tensor(view, "store_global view", (ir.GLOBAL,))
        tensor = b.to_tensor(tensor, "store_global tensor", (ir.REGISTER,))
        check_reduction(b, "store_global", reduce, GLOBAL_REDUCTIONS, tensor)
        if tensor.dtype != view.dtype:
            raise b.error(f"store_global: {tensor.name} is {tensor.dtype.name} but {view.name} holds "
                          f"{view.dtype.name}; cast it first")
        if len(tensor.shape) != len(view.shape):
            raise b.error(f"store_global: {tensor.name} has rank {len(tensor.shape)}, {view.name} has rank "
                          f"{len(view.shape)}")
        offs = offsets_of(b, offsets, view, "store_global")
        end = None if row_end is None else b.to_index(row_end, "store_global row_end")
        if col_end is not None and len(view.shape) != 2:
            raise b.error(f"store_global col_end bounds the columns of a 2-D view; {view.name} has rank "
                          f"{len(view.shape)}")
        cols = None if col_end is None else b.to_index(col_end, "store_global col_end")
        b.emit(StoreGlobal(b.loc, b.threads(), view.ref, tensor.ref, offs, end, cols, reduce))

    @language_call
    def store_shared(self, dst, src, column=0) -> None:
        """Write register tensor ``src`` into shared tensor ``dst`` with ordinary stores (``st.shared``), executed
        by the threads holding ``src``. Before a TMA store or WGMMA reads ``dst``, call ``fence_proxy_async()`` and
        synchronise the writers. With ``column`` (a compile-time int), ``dst`` may be narrower than ``src``: it
        receives ``src``'s columns ``[column, column + dst columns)``, so a wide tile can be stored through a
        smaller buffer in column chunks. ``dst`` may be a transposed view (``tile.transpose()``): element (r, c) of
        ``src`` then lands at (c, r) of the tile, one store per element (a row's neighbours are a column apart
        there), which turns a column-major accumulator (a [D, keys] gradient) into the row-major tile a TMA store
        takes."""
        b = self.b
        dst = b.to_tensor(dst, "store_shared dst", (ir.SHARED,))
        src = b.to_tensor(src, "store_shared src", (ir.REGISTER,))
        first = b.to_int(column, "store_shared column")
        if len(dst.shape) != 2:
            raise b.error(f"store_shared takes a 2-D shared tile; {dst.name} has shape {list(dst.shape)}")
        if len(src.shape) != 2 or dst.shape[0] != src.shape[0] or dst.dtype != src.dtype:
            raise b.error(f"store_shared: {src.name} {src.dtype.name}{list(src.shape)} does not match "
                          f"{dst.name} {dst.dtype.name}{list(dst.shape)}")
        if not 0 <= first <= first + dst.shape[1] <= src.shape[1]:
            if first == 0:
                raise b.error(f"store_shared: {src.name} {src.dtype.name}{list(src.shape)} does not match "
                              f"{dst.name} {dst.dtype.name}{list(dst.shape)}")
            raise b.error(f"store_shared: {dst.name} holds {dst.shape[1]} columns, so column={first} takes columns "
                          f"[{first}, {first + dst.shape[1]}) of {src.name}, which has {src.shape[1]}")
        b.emit(StoreShared(b.loc, b.threads(), dst.ref, src.ref, first))

    @language_call
    def load_shared(self, src) -> TensorValue:
        """Read shared tensor ``src`` into registers of the executing threads (``ld.shared``: one per element, or
        where the registers are 16-bit WGMMA fragments, e.g. a register A operand, one 32-bit load per column pair)."""
        b = self.b
        src = b.to_tensor(src, "load_shared src", (ir.SHARED,))
        if src.ref.transposed:
            raise b.error("load_shared of a transposed view is not supported")
        if len(src.shape) != 2:
            raise b.error(f"load_shared takes a 2-D shared tile; {src.name} has shape {list(src.shape)}")
        decl = b.new_register_tensor(f"{src.name}_regs", src.dtype, src.shape)
        b.emit(LoadShared(b.loc, decl, src.ref))
        return TensorValue(ir.TensorRef(decl))


# ----------------------------------------------------------------------------------------------- emulation


@emulates(GlobalView)
def _global_view(machine: EmulationMachine, task: EmulationTask, s: GlobalView) -> None:
    shape = tuple(machine.ev(task, e) for e in s.decl.shape)
    strides = tuple(machine.ev(task, e) for e in s.strides)
    task.env[s.decl.uid] = (s.pointer.uid, shape, strides)


@emulates(AllocShared)
def _alloc_shared(machine: EmulationMachine, task: EmulationTask, s: AllocShared) -> None:
    machine.create_shared(s.decl)


@emulates(AllocRegister)
def _alloc_register(machine: EmulationMachine, task: EmulationTask, s: AllocRegister) -> None:
    dtype = s.decl.dtype
    fill = (np.nan if dtype.is_float else 0) if s.init is None else machine.ev(task, s.init)
    data = dtypes.round_to(dtype, np.full(s.decl.shape, fill, dtype=np.float32)) if dtype.is_float else \
        np.full(s.decl.shape, fill, dtype=dtype.numpy)
    machine.touch_accumulator(task, s.decl, "register_tensor")
    task.env[s.decl.uid] = data


@emulates(StoreElement)
def _store_element(machine: EmulationMachine, task: EmulationTask, s: StoreElement) -> None:
    decl = s.tensor.decl
    machine.touch_accumulator(task, decl, "an element write")
    idx = tuple(machine.ev(task, e) for e in s.tensor.index + s.indices)
    check_element_index(decl, idx)
    value = wrap(machine.ev(task, s.value), decl.dtype)
    task.env[decl.uid][idx] = dtypes.round_to(decl.dtype, np.float32(value)) if decl.dtype.is_float else value


@emulates(LoadGlobal)
def _load_global(machine: EmulationMachine, task: EmulationTask, s: LoadGlobal) -> None:
    offsets = [machine.ev(task, o) for o in s.offsets]
    rows = None
    if s.row_end is not None:  # the tile rows before row_end: none when the tile starts past it
        rows = (0, max(min(s.decl.shape[0], machine.ev(task, s.row_end) - offsets[0]), 0))
    machine.define_register(task, s.decl, machine.read_global_tile(task, s.view, offsets, s.decl.shape, "load_global",
                                                                   rows))


@emulates(LoadScalar)
def _load_scalar(machine: EmulationMachine, task: EmulationTask, s: LoadScalar) -> None:
    indices = [machine.ev(task, i) for i in s.indices]
    shape = task.env[s.view.decl.uid][1]
    for axis, (index, extent) in enumerate(zip(indices, shape)):
        if not 0 <= index < extent:
            raise BoundsError(f"load_scalar: index {indices} is outside {s.view.decl.name} {list(shape)} "
                              f"(dimension {axis})")
    value = machine.read_global_tile(task, s.view, indices, (1,) * len(indices), "load_scalar")
    task.env[s.var.uid] = wrap(value.item(), s.var.type)


@emulates(LoadShared)
def _load_shared(machine: EmulationMachine, task: EmulationTask, s: LoadShared) -> None:
    region = machine.region(task, s.src)
    region.check_readable(task, "load_shared", async_proxy=False)
    region.record_read(task)
    machine.define_register(task, s.decl, region.view("data").copy())


@emulates(StoreShared)
def _store_shared(machine: EmulationMachine, task: EmulationTask, s: StoreShared) -> Steps | None:
    region = machine.region(task, s.dst)
    src = machine.register(task, s.src, "store_shared")
    rows = machine.row_share(task, s.threads, src.shape[0])
    # Only this partition's rows: the other warpgroups of a group write theirs, and may still be reading or
    # writing the rest of the tile.
    # Through a transposed view the partition's rows of src are columns of the tile, its columns the tile's rows.
    transposed = s.dst.transposed
    part = region.columns(rows) if transposed else region.part(rows)
    part.check_writable(task, "store_shared")
    width = region.view("data").shape[0 if transposed else 1]
    values = src[rows[0]:rows[1], s.column:s.column + width]
    part.view("data")[...] = values.T if transposed else values
    part.record_write(task.index, task.clock[task.index], unfenced=True)
    return machine.preempt()


@emulates(StoreGlobal)
def _store_global(machine: EmulationMachine, task: EmulationTask, s: StoreGlobal) -> None:
    src = machine.register(task, s.src, "store_global")
    offsets = [machine.ev(task, o) for o in s.offsets]
    first, last = machine.row_share(task, s.threads, src.shape[0])
    if s.row_end is not None:  # the tile rows before row_end: none when the tile starts past it
        last = max(min(last, machine.ev(task, s.row_end) - offsets[0]), first)
    cols = None
    if s.col_end is not None:  # the tile columns before col_end, alike
        cols = (0, max(min(src.shape[1], machine.ev(task, s.col_end) - offsets[1]), 0))
    if s.reduce:
        target = machine.global_tile(task, s.dst, offsets, src.shape, f"store_global(reduce={s.reduce!r})",
                                     (first, last), cols)
        # red.global.add.f32 flushes subnormal inputs and results to zero (.ftz in its SASS, REDG...FTZ).
        machine.global_memory.reduce_add(task, target, flush_subnormals(src.astype(np.float32)),
                                         combine=lambda held, added: flush_subnormals(flush_subnormals(held) + added))
        return
    machine.write_global_tile(task, s.dst, offsets, src, "store_global", rows=(first, last), cols=cols)


# --------------------------------------------------------------------------------------------------- facts

# Register layouts: a load is blocked over its thread group unless a use fixes its layout, a register tensor is
# replicated, a stored tensor is stored by exactly its holders, an element write needs every element in every thread.
declare(LAYOUT_RULE, LoadGlobal, lambda s, target: LayoutRule(defines=s.decl, blocked=True, call="load_global"))
declare(LAYOUT_RULE, LoadShared, lambda s, target: LayoutRule(defines=s.decl, blocked=True, call="load_shared"))
declare(LAYOUT_RULE, AllocRegister, lambda s, target: LayoutRule(defines=s.decl))
declare(LAYOUT_RULE, StoreGlobal, lambda s, target: LayoutRule(stored=s.src.decl, call="store_global"))
declare(WRITES_GLOBAL, StoreGlobal, lambda s: s.dst)
declare(LAYOUT_RULE, StoreShared, lambda s, target: LayoutRule(stored=s.src.decl, call="store_shared"))
declare(LAYOUT_RULE, StoreElement, lambda s, target: LayoutRule(indexed=s.tensor.decl))


# ---------------------------------------------------------------------------------------------------------- timeline
# What each statement costs the CPU timing model and how timelines show it (``isa.timeline_facts``).
# Register tiles cost per element and thread; global accesses move the tile's bytes (a load waits for them).
declare_timeline(GlobalView, STATEMENT, NOT_SHOWN)
declare_timeline(AllocShared, STATEMENT, NOT_SHOWN)
declare_timeline(AllocRegister, STATEMENT, NOT_SHOWN)
declare_timeline(StoreElement, STATEMENT, NOT_SHOWN)
declare_timeline(LoadGlobal, TimingCost("global_load", lambda s: s.decl), NOT_SHOWN)
# One element's latency, as a one-element tile; not shown: a block reads its few metadata words once, up front.
declare_timeline(LoadScalar, TimingCost("global_load", lambda s: ir.TensorDecl(s.var.name, ir.REGISTER, s.var.type,
                                                                               (1,), s.loc)), NOT_SHOWN)
declare_timeline(StoreGlobal, TimingCost("global_store", lambda s: s.src.decl), NOT_SHOWN)
declare_timeline(LoadShared, TimingCost("registers", lambda s: s.decl.shape), NOT_SHOWN)
declare_timeline(StoreShared, TimingCost("registers", lambda s: s.src.shape), NOT_SHOWN)
