"""sm_90a emission of the memory family (``warpspec.isa.memory``): view sizes and strides, register arrays,
element loads and stores in each register layout, scalar loads from global memory, shared-memory addresses with the
TMA swizzle, and global stores (accumulator tiles through ``epilogue``)."""

from __future__ import annotations

import math

from warpspec.cuda.contracts import CodeGenerator
from warpspec.cuda.cxx import C_TYPES, thread_prelude
from warpspec.cuda.sm90 import epilogue
from warpspec.dtypes import float32
from warpspec.isa.memory import (AllocRegister, AllocShared, GlobalView, LoadGlobal, LoadScalar, LoadShared,
                                 StoreElement, StoreGlobal, StoreShared)
from warpspec.ir import nodes as ir
from warpspec.layout.registers import AFragment, Accumulator, Blocked, Replicated, layout_begin, packed
from warpspec.isa.registry import emits
from warpspec.target import SM90A

TARGET = SM90A.name


@emits(GlobalView, TARGET)
def _emit_GlobalView(gen: CodeGenerator, s: GlobalView) -> None:
    name = gen.tensor_name(s.decl)
    gen.line(f"const u64 {name}_base = {gen.name_of(s.pointer)};")
    for axis, (size, stride) in enumerate(zip(s.decl.shape, s.strides)):
        gen.line(f"const int {name}_size{axis} = {gen.cexpr(size)};")
        gen.line(f"const long long {name}_stride{axis} = {gen.cexpr(stride)};")
        gen.line(f"(void){name}_size{axis}; (void){name}_stride{axis};")


@emits(AllocShared, TARGET)
def _emit_AllocShared(gen: CodeGenerator, s: AllocShared) -> None:
    placement = gen.shared[s.decl.uid]
    gen.line(f"// {s.decl.name}: {s.decl.dtype.name}{list(s.decl.shape)} at shared +{placement.offset}, "
              f"{placement.tile.swizzle_bytes}B swizzle, {placement.tile_stride} B per tile")


@emits(AllocRegister, TARGET)
def _emit_AllocRegister(gen: CodeGenerator, s: AllocRegister) -> None:
    decl = s.decl
    gen.declare_registers(decl)
    if s.init is None:
        return
    count = gen.reg_layouts[decl.uid].registers
    name = gen.tensor_name(decl)
    if decl.dtype.is_float:
        value = gen.to_storage(gen.cexpr(ir.Convert(s.init, float32)), decl.dtype)
    else:
        value = gen.cexpr(ir.Convert(s.init, decl.dtype))
    gen.line("#pragma unroll")
    if packed(decl):
        gen.line(f"for (int i = 0; i < {(count + 1) // 2}; ++i) "
                  f"{name}[i] = static_cast<unsigned>({value}) * 0x10001u;")
    else:
        gen.line(f"for (int i = 0; i < {count}; ++i) {name}[i] = {value};")


@emits(StoreElement, TARGET)
def _emit_StoreElement(gen: CodeGenerator, s: StoreElement) -> None:
    decl = s.tensor.decl
    if not isinstance(gen.reg_layouts.get(decl.uid), Replicated):
        raise gen.error(f"elements of {decl.name} are spread over threads; they cannot be assigned one by one",
                         s.loc)
    value = gen.cexpr(s.value)
    if decl.dtype.is_float and decl.dtype is not float32:
        value = gen.to_storage(f"static_cast<float>({value})", decl.dtype)
    flat = gen.row_major(tuple(s.tensor.index) + tuple(s.indices), decl.shape)
    if isinstance(flat, int):
        gen.line(gen.set_element(decl, flat, value))
        return
    gen.line("{")
    gen.line(f"  const auto value_ = {value};")
    gen.line(f"  const int index_ = {flat};")
    gen.line("  #pragma unroll")
    gen.line(f"  for (int i = 0; i < {math.prod(decl.shape)}; ++i) if (i == index_) {{ "
              f"{gen.set_element(decl, 'i', 'value_')} }}")
    gen.line("}")


def _global_address(gen: CodeGenerator, view: str, rank: int, offsets, row: str, col: str,
                    rows_end: str | None = None, cols_end: str | None = None):
    """(in-bounds condition, element offset) of tile element (row, col) of a view at ``offsets``; ``rows_end``,
    ``cols_end``: the first view row, column not to touch, when it is not the view's size."""
    rows_end = rows_end or f"{view}_size0"
    if rank == 1:
        c = f"({offsets[0]} + {col})"
        return f"({c} >= 0 && {c} < {rows_end})", f"static_cast<long long>({c}) * {view}_stride0"
    cols_end = cols_end or f"{view}_size1"
    r, c = f"({offsets[0]} + {row})", f"({offsets[1]} + {col})"
    return (f"({r} >= 0 && {r} < {rows_end} && {c} >= 0 && {c} < {cols_end})",
            f"static_cast<long long>({r}) * {view}_stride0 + static_cast<long long>({c}) * {view}_stride1")


def _run_length(layout, shape) -> int:
    """How many of a thread's registers of ``layout`` (over a 2-D ``shape``) in a row hold consecutive columns of one
    row, the first at a column that is a multiple of that length: a blocked layout's chunk, when no chunk crosses a
    row; otherwise 1. (An accumulator's column pairs stay 1: a second path of 8-byte loads beside the
    element-by-element one made ptxas spill the stream-K consumer, which adds a partial tile to its accumulator.)"""
    if len(shape) == 2 and isinstance(layout, Blocked) and layout.vector > 1 and shape[1] % layout.vector == 0:
        return layout.vector
    return 1


def _vector_bytes(run: int, nbytes: int) -> int:
    """The bytes one vector load of a run takes (0: the run loads element by element): 8 or 16 for 4-byte
    elements, 4, 8 or 16 for 16-bit ones (two to a register), the run split into pieces of at most 16 bytes."""
    if nbytes not in (2, 4) or run * nbytes < (4 if nbytes == 2 else 8):
        return 0
    return min(16, run * nbytes)


#: The C++ type of one vector access of 4, 8 or 16 bytes.
_VECTOR_WORDS = {4: "unsigned", 8: "uint2", 16: "uint4"}


def _vectors_or_elements(gen: CodeGenerator, layout, test: str, per_vector: int, vector, element) -> None:
    """A blocked tile's global access, chosen once for the block: under ``test`` (``_vector_path``) ``vector(piece,
    row, col, valid)`` for each run of ``per_vector`` registers (a blocked chunk lies wholly inside the tile or
    wholly past it, ``valid`` saying which), otherwise ``element(i, row, col, valid)`` for every register."""
    gen.line("{")
    gen.indent += 1
    gen.line(thread_prelude(layout_begin(layout)))
    gen.line(f"if ({test}) {{")
    gen.indent += 1
    for piece in range(0, layout.registers, per_vector):
        row, col = layout.coords(piece)
        vector(piece, row, col, layout.valid(piece))
    gen.indent -= 1
    gen.line("} else {")
    gen.indent += 1
    for i in range(layout.registers):
        row, col = layout.coords(i)
        element(i, row, col, layout.valid(i))
    gen.indent -= 1
    gen.line("}")
    gen.indent -= 1
    gen.line("}")


def _vector_path(view: str, offsets, shape, nbytes: int, width: int, rows_end: str | None = None,
                 cols_end: str | None = None) -> str:
    """The block-uniform C++ condition under which a tile of ``shape`` at ``offsets`` moves by vectors of ``width``
    bytes: the view's rows contiguous, its base, row pitch and column offset aligned to the vector (a run starts at
    a column that is a multiple of its length, so these decide every run's alignment), and the whole tile inside
    the view (rows below ``rows_end``, columns below ``cols_end`` when given). One test for the block, so no access
    waits on a branch of its own."""
    rows, cols = shape
    rows_end = rows_end or f"{view}_size0"
    cols_end = cols_end or f"{view}_size1"
    return (f"({view}_stride1 == 1) && (({view}_base & {width - 1}) == 0) && ((({view}_stride0 * {nbytes}) & "
            f"{width - 1}) == 0) && ((({offsets[1]}) * {nbytes} & {width - 1}) == 0) && ({offsets[0]}) >= 0 && "
            f"({offsets[0]}) + {rows} <= {rows_end} && ({offsets[1]}) >= 0 && ({offsets[1]}) + {cols} <= "
            f"{cols_end}")


def _vector_address(view: str, offsets, row: str, col: str, nbytes: int, ctype: str) -> str:
    """A ``ctype`` pointer to tile element (row, col) of a view at ``offsets`` (no bounds test: see
    ``_vector_path``)."""
    return (f"reinterpret_cast<{ctype} *>(reinterpret_cast<{'const ' if ctype.startswith('const') else ''}"
            f"unsigned char *>({view}_base) + (static_cast<long long>({offsets[0]} + {row}) * {view}_stride0 + "
            f"static_cast<long long>({offsets[1]} + {col})) * {nbytes})")


@emits(LoadGlobal, TARGET)
def _emit_LoadGlobal(gen: CodeGenerator, s: LoadGlobal) -> None:
    """Each thread loads its registers. Where the view's rows are contiguous, its base, row pitch and column offset
    aligned to the vector, and the whole tile inside the view and before ``row_end`` (one test for the block, so no
    load waits on a branch of its own), a run of consecutive columns (a blocked chunk) is one vector load of up to
    16 bytes; otherwise every element is loaded alone, zero outside the view or at or past ``row_end`` (that
    element's load not made). The same values either way."""
    decl = s.decl
    layout = gen.reg_layouts[decl.uid]
    gen.declare_registers(decl)
    view = gen.tensor_name(s.view.decl)
    offsets = [gen.cexpr(o) for o in s.offsets]
    ctype = C_TYPES[decl.dtype.name]
    nbytes = decl.dtype.nbytes
    name = gen.tensor_name(decl)
    rows_end = _bound(gen, s.row_end, f"{view}_size0")

    def element(i, row, col, valid):
        inside, offset = _global_address(gen, view, len(decl.shape), offsets, row, col, rows_end)
        if valid:
            inside = f"{valid} && {inside}"
        value = (f"({inside} ? *reinterpret_cast<const {ctype} *>(reinterpret_cast<const unsigned char *>("
                 f"{view}_base) + ({offset}) * {nbytes}) : static_cast<{ctype}>(0))")
        gen.line(gen.set_element(decl, i, value))

    width = _vector_bytes(_run_length(layout, decl.shape), nbytes)
    if not width:
        gen.element_loop(layout, element)
        return
    word = _VECTOR_WORDS[width]
    parts = ["loaded_"] if width == 4 else ["loaded_.x", "loaded_.y", "loaded_.z", "loaded_.w"][:width // 4]
    as_value = "__uint_as_float" if decl.dtype is float32 else f"static_cast<{ctype}>"

    def vector(piece, row, col, valid):
        address = _vector_address(view, offsets, row, col, nbytes, f"const {word}")
        load = f"*{address}" if valid is None else f"({valid}) ? *{address} : {word}{{}}"
        gen.line(f"{{ const {word} loaded_ = {load};")
        if packed(decl):  # a run starts at an even register: its words are the tensor's words
            assigns = [f"{name}[{piece // 2 + k}] = {part};" for k, part in enumerate(parts)]
        else:
            assigns = [f"{name}[{piece + k}] = {as_value}({part});" for k, part in enumerate(parts)]
        gen.line("  " + " ".join(assigns) + " }")

    test = _vector_path(view, offsets, decl.shape, nbytes, width, rows_end)
    _vectors_or_elements(gen, layout, test, width // nbytes, vector, element)


@emits(LoadScalar, TARGET)
def _emit_LoadScalar(gen: CodeGenerator, s: LoadScalar) -> None:
    view = gen.tensor_name(s.view.decl)
    offset = " + ".join(f"static_cast<long long>({gen.cexpr(i)}) * {view}_stride{axis}"
                        for axis, i in enumerate(s.indices))
    ctype = C_TYPES[s.var.type.name]
    # An ordinary load (ld.global, weak): the metadata it reads is not written during the launch.
    gen.line(f"const {ctype} {gen.name_of(s.var)} = *reinterpret_cast<const {ctype} *>("
             f"reinterpret_cast<const unsigned char *>({view}_base) + ({offset}) * {s.var.type.nbytes});")


def shared_offset(gen: CodeGenerator, ref: ir.TensorRef, row: str, col: str) -> str:
    """C++ byte offset inside the tile of ``ref`` where element (row, col) lives (the TMA swizzle applied)."""
    tile = gen.shared[ref.decl.uid].tile
    mask = tile.span // 16 - 1
    inner = f"(({row}) * {tile.row_bytes} + (({col}) % {tile.box_cols}) * {tile.elem_bytes})"
    swizzled = f"({inner} ^ ((({inner} >> 7) & {mask}) << 4))" if mask else inner
    return f"((({col}) / {tile.box_cols}) * {tile.column_box_stride} + {swizzled})"


def shared_pointer(gen: CodeGenerator, ref: ir.TensorRef, ctype: str, row: str, col: str) -> str:
    base = gen.tile_address(ref, gen.current_loc)
    return (f"reinterpret_cast<{ctype} *>(smem_ptr + ({base} - smem) + "
            f"{shared_offset(gen, ref, row, col)})")


@emits(LoadShared, TARGET)
def _emit_LoadShared(gen: CodeGenerator, s: LoadShared) -> None:
    """One load per element, or into 16-bit WGMMA fragments (a register A operand read from a tile) one 32-bit load
    per column pair, straight into the pair's packed register: as in ``_emit_StoreShared``, a fragment's elements 2p
    and 2p + 1 are one row's adjacent columns c and c + 1 (c even), which the swizzle keeps in one 4-byte word."""
    decl, src = s.decl, s.src
    layout = gen.reg_layouts[decl.uid]
    gen.declare_registers(decl)
    ctype = C_TYPES[decl.dtype.name]
    if isinstance(layout, (Accumulator, AFragment)) and packed(decl):
        def pair(i, row, col, valid):
            if i % 2 == 0:
                value = f"*{shared_pointer(gen, src, 'const unsigned', row, col)}"
                if valid:
                    value = f"({valid} ? {value} : 0u)"
                gen.line(f"{gen.tensor_name(decl)}[{i // 2}] = {value};")

        gen.element_loop(layout, pair)
        return

    def body(i, row, col, valid):
        value = f"*{shared_pointer(gen, src, 'const ' + ctype, row, col)}"
        if valid:
            value = f"({valid} ? {value} : static_cast<{ctype}>(0))"
        gen.line(gen.set_element(decl, i, value))

    gen.element_loop(layout, body)


@emits(StoreShared, TARGET)
def _emit_StoreShared(gen: CodeGenerator, s: StoreShared) -> None:
    """One store per element, or for WGMMA fragments (accumulators and register A operands) one per column pair:
    a fragment's elements 2p and 2p + 1 are one row's columns c and c + 1 with c even, which the TMA swizzle keeps
    adjacent (it moves 16-byte chunks, and an aligned pair of 2- or 4-byte elements lies in one), so each pair is
    one 4- or 8-byte store (a packed 16-bit pair is already one 32-bit register) instead of two. A column window of
    even start and width takes both elements of a pair or neither. Into a transposed view, one store per element at
    the tile's (column, row)."""
    src, dst = s.src.decl, s.dst
    layout = gen.reg_layouts[src.uid]
    first, width = s.column, s.dst.shape[1]
    # Through a transposed view, src's element (row, col) is the tile's (col, row): no longer beside its pair.
    paired = (isinstance(layout, (Accumulator, AFragment)) and src.dtype.nbytes in (2, 4)
              and first % 2 == width % 2 == 0 and not dst.transposed)
    ctype = ("unsigned" if src.dtype.nbytes == 2 else "u64") if paired else C_TYPES[src.dtype.name]
    bits = (lambda e: f"__float_as_uint({e})") if src.dtype.is_float else (lambda e: f"static_cast<unsigned>({e})")

    def value(i):
        if not paired:
            return f"static_cast<{ctype}>({gen.element(src, i)})"
        if packed(src):
            return f"{gen.tensor_name(src)}[{i // 2}]"
        return (f"(static_cast<u64>({bits(gen.element(src, i))}) | "
                f"(static_cast<u64>({bits(gen.element(src, i + 1))}) << 32))")

    def body(i, row, col, valid):
        if paired and i % 2:
            return  # stored with element i - 1
        if (first, width) != (0, s.src.shape[1]):
            # A column window: the element's column is a constant plus a per-thread term the compiler bounds
            # (2 * (lane_ & 3) for fragments), so the condition folds and no predicate is left.
            valid = f"({col}) >= {first} && ({col}) < {first + width}" + (f" && {valid}" if valid else "")
            col = f"(({col}) - {first})"
        if dst.transposed:
            row, col = col, row
        store = f"*{shared_pointer(gen, dst, ctype, row, col)} = {value(i)};"
        gen.line(f"if ({valid}) {store}" if valid else store)

    gen.element_loop(layout, body)


@emits(StoreGlobal, TARGET)
def _emit_StoreGlobal(gen: CodeGenerator, s: StoreGlobal) -> None:
    layout = gen.reg_layouts[s.src.decl.uid]
    view = gen.tensor_name(s.dst.decl)
    offsets = [gen.cexpr(o) for o in s.offsets]
    nbytes = s.src.decl.dtype.nbytes
    rows_end = _bound(gen, s.row_end, f"{view}_size0")
    cols_end = _bound(gen, s.col_end, f"{view}_size1")
    if isinstance(layout, Accumulator) and len(offsets) == 2 and nbytes in (2, 4):
        if gen.quad_stores and nbytes == 2 and layout.layout.instr_n % 32 == 0:
            epilogue.store_quads(gen, s, layout, view, offsets[0], offsets[1], rows_end, cols_end)
        else:
            epilogue.store_pairs(gen, s, layout, view, offsets[0], offsets[1], rows_end, cols_end)
        return
    ctype = C_TYPES[s.src.decl.dtype.name]

    def body(i, row, col, valid):
        inside, offset = _global_address(gen, view, len(offsets), offsets, row, col, rows_end, cols_end)
        if valid:
            inside = f"{valid} && {inside}"
        address = f"reinterpret_cast<unsigned char *>({view}_base) + ({offset}) * {nbytes}"
        if s.reduce:  # float32 (the front end's rule): one red.global.add.f32 an element
            gen.line(f"if ({inside}) red_add_f32({address}, {gen.element(s.src.decl, i)});")
            return
        gen.line(f"if ({inside}) *reinterpret_cast<{ctype} *>({address}) = "
                  f"static_cast<{ctype}>({gen.element(s.src.decl, i)});")

    width = _vector_bytes(_run_length(layout, s.src.decl.shape), nbytes)
    if not width or s.reduce:
        gen.element_loop(layout, body)
        return
    _store_vectors(gen, s.src.decl, layout, view, offsets, width, rows_end, cols_end, body)


def _bound(gen: CodeGenerator, end: ir.Expr | None, size: str) -> str | None:
    """C++: the first row (column) a load or store leaves alone, ``end`` or the view's ``size`` if smaller; None
    without ``end``."""
    if end is None:
        return None
    value = gen.cexpr(end)
    return f"({value} < {size} ? {value} : {size})"


def _store_vectors(gen: CodeGenerator, decl: ir.TensorDecl, layout, view: str, offsets, width: int,
                   rows_end: str | None, cols_end: str | None, element) -> None:
    """Under ``_vector_path``'s test, store each run of ``decl``'s consecutive columns (a blocked chunk) as one
    vector of ``width`` bytes, the mirror of ``_emit_LoadGlobal``'s loads; otherwise (a tile crossing the view's
    edge, ``rows_end`` or ``cols_end``, or a misaligned view) every element alone through ``element``, each tested.
    The same bytes either way. (Stored element by element, a 16-bit tile took four times the store instructions, each
    writing a quarter of every 32-byte sector it touched.)"""
    nbytes = decl.dtype.nbytes
    name = gen.tensor_name(decl)
    word = _VECTOR_WORDS[width]
    bits = "__float_as_uint" if decl.dtype is float32 else "static_cast<unsigned>"

    def vector(piece, row, col, valid):
        if packed(decl):  # a run starts at an even register: the tensor's words are the vector's words
            words = [f"{name}[{piece // 2 + k}]" for k in range(width // 4)]
        else:
            words = [f"{bits}({name}[{piece + k}])" for k in range(width // 4)]
        value = words[0] if width == 4 else f"{word}{{{', '.join(words)}}}"
        store = f"*{_vector_address(view, offsets, row, col, nbytes, word)} = {value};"
        gen.line(f"if ({valid}) {store}" if valid is not None else store)

    _vectors_or_elements(gen, layout, _vector_path(view, offsets, decl.shape, nbytes, width, rows_end, cols_end),
                         width // nbytes, vector, element)
