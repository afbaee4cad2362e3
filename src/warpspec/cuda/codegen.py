"""IR → CUDA C++ with inline PTX, compiled header-less by NVRTC: the generator every target's emitters share.

The generator walks the kernel and calls the emitter registered for each statement type and the target
(``warpspec.isa.registry``; sm_90a's are in ``warpspec.cuda.sm90``, one module per instruction family), and takes
what else is the target's (the prelude, special registers, tensor-map planning) from its ``CudaTarget``
(``warpspec.cuda.targets``), found by the kernel's target name: it names no target itself. It owns
what all emitters need: C++ names, scalar expressions with constant folding, register arrays in the layouts the
layout pass chose (``kernel.facts``), shared-memory and barrier addresses from the shared-memory plan, and the
tensor maps the host encodes. Scalars are C++ locals; register tensors are per-thread arrays; shared tensors live
in one dynamic shared-memory buffer aligned to 1024 bytes.

``generate`` first runs ``warpspec.passes.unroll`` (a loop with ``unroll=k`` becomes ``k`` guarded copies of its
body per trip) and ``warpspec.passes.constants`` (variables known in each copy, such as the ring's stage index,
become constants), then emits the result as it is: register arrays are indexed with constants wherever the
index is known, and a runtime index into a register array becomes a select chain, never local memory.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

import numpy as np

from warpspec.cuda.cxx import C_TYPES, thread_prelude
from warpspec.cuda.targets import cuda_target
from warpspec.dtypes import DType, boolean, float32, int32, int64, uint32
from warpspec.errors import CompileError
from warpspec.isa import registry
from warpspec.isa.memory import GlobalView
from warpspec.ir import nodes as ir
from warpspec.ir.visit import ExprVisitor
from warpspec.passes.constants import UNKNOWN, fold, propagate
from warpspec.layout.registers import Replicated, layout_begin, packed
from warpspec.passes.unroll import unroll


@dataclass
class GeneratedKernel:
    """What the host needs to launch the generated code."""

    name: str
    source: str
    threads: int
    shared_bytes: int
    tensor_maps: list  # the target's tensor-map uses (``CudaTarget.plan_tensor_maps``), by parameter index
    kernel: ir.Kernel
    block_group: int = 0  # > 0: launched as a 1-D grid with grid_x, grid_y appended to the parameters
    #: Debug builds: what each bounded wait's site number stands for (``DebugSite``); empty in plain builds.
    debug_sites: tuple = ()


@dataclass(frozen=True)
class DebugSite:
    """A bounded wait of a debug build: the barrier array (or flag view), the kernel line, the threads that wait
    there, and what waits: ``"mbarrier"`` (``mbarrier.wait``) or ``"flag"`` (``flag.wait``)."""

    barrier: str
    loc: str
    threads: tuple[int, int]
    kind: str = "mbarrier"


# ------------------------------------------------------------------------------------------------ generator


class CodeGenerator:
    """Generates the CUDA C++ of one kernel."""

    def __init__(self, kernel: ir.Kernel, min_blocks: int = 1, block_group: int = 0, quad_stores: bool = True,
                 debug: bool = False):
        self.kernel = kernel
        self.debug = debug  # bounded barrier waits that report where they gave up (warpspec.debug)
        self.debug_sites: list[DebugSite] = []
        # 16-byte global stores of 16-bit accumulator tiles: the four lanes of a quad exchange pairs so each lane
        # holds 8 consecutive columns (full 32-byte sectors) instead of storing 4 bytes at a time.
        self.quad_stores = quad_stores
        self.min_blocks = min_blocks  # blocks per SM ptxas must leave room for (caps registers per thread)
        # Launch order: with a group G > 0 a 2-D grid is launched as 1-D and each block recovers its (x, y) so that
        # consecutive blocks walk G values of y for every x: blocks resident together share their A and B tiles
        # in L2. Which blocks exist is unchanged, only the order the hardware starts them in.
        self.block_group = block_group if len(kernel.grid) == 2 and kernel.cluster == (1, 1, 1) else 0
        self.lines: list[str] = []
        self.indent = 1
        self.names: dict[int, str] = {}
        self.used_names: set[str] = set()
        facts = kernel.facts
        self.target = facts.target
        self.cuda_target = cuda_target(self.target.name)  # the prelude, special registers, tensor maps
        self.reg_layouts: dict[int, object] = facts.layouts
        self.shared = facts.shared.tiles  # shared decl uid -> passes.shared_memory.SharedPlacement
        self.barrier_offsets: dict[int, int] = facts.shared.barrier_offsets
        self.barrier_counts: dict[int, tuple[int, ...]] = facts.shared.barrier_counts
        self.shared_bytes = facts.shared.total_bytes
        self.maps: dict = {}  # the target's tensor-map uses by key (planned in generate)
        self.named_barriers: dict[tuple[int, int], int] = {}
        self.views: dict[int, GlobalView] = {s.decl.uid: s for s in ir.walk(kernel.body) if isinstance(s, GlobalView)}
        self.groups: list[tuple[int, int]] = []
        self.last_line = None
        self.declared: set[int] = set()  # register tensors whose arrays are declared
        self.single_depth = 0  # > 0 inside single_thread: instructions already run on one thread
        self.current_loc: ir.Loc | None = None
        self.expressions = _CExpressions(self)

    # ------------------------------------------------------------------------------------------- entry point

    def generate(self) -> GeneratedKernel:
        """The kernel's C++ source and what the host needs to launch it."""
        k = self.kernel
        self.maps = self.cuda_target.plan_tensor_maps(self)
        self.emit_body(k.body)
        body = self.lines
        name = _identifier(k.name)
        params = []
        for p in k.params:
            if isinstance(p.type, DType):
                params.append(f"{C_TYPES[p.type.name]} {self.name_of(p.var)}")
            else:
                params.append(f"u64 {self.name_of(p.var)}")
        for use in sorted(self.maps.values(), key=lambda u: u.index):
            params.append(f"const __grid_constant__ {self.cuda_target.tensor_map_type} map{use.index}")
        block_index = []
        if self.block_group:
            params += ["int grid_x", "int grid_y"]
            g = self.block_group
            block_index = [
                f"  // Grouped launch order ({g} values of y per x), see CodeGenerator.block_group.",
                f"  const int per_group_ = {g} * grid_x, first_y_ = (static_cast<int>(blockIdx.x) / per_group_) * {g};",
                f"  const int group_h_ = grid_y - first_y_ < {g} ? grid_y - first_y_ : {g};",
                "  const int in_group_ = static_cast<int>(blockIdx.x) % per_group_;",
                "  const int block_x = in_group_ / group_h_, block_y = first_y_ + in_group_ % group_h_;"]
        prelude = self.cuda_target.prelude + (self.cuda_target.debug_prelude if self.debug else "")
        head = [prelude, f'extern "C" __global__ void __launch_bounds__({k.num_threads}, {self.min_blocks})',
                f"{name}({', '.join(params)}) {{",
                "  extern __shared__ __align__(1024) unsigned char smem_raw[];",
                "  // Round the dynamic buffer up to 1024 B: swizzled TMA tiles need their pattern's alignment.",
                "  const unsigned smem = (smem_u32(smem_raw) + 1023u) & ~1023u;",
                "  unsigned char *const smem_ptr = smem_raw + (smem - smem_u32(smem_raw));",
                "  (void)smem_ptr;",
                "  const int warp = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 32, 0);",
                "  (void)warp;"] + block_index
        source = "\n".join(head + body + ["}", ""])
        return GeneratedKernel(name, source, k.num_threads, self.shared_bytes + self.target.shared_alignment,
                               sorted(self.maps.values(), key=lambda u: u.index), k, self.block_group,
                               tuple(self.debug_sites))

    def debug_site(self, stmt, name: str | None = None, kind: str = "mbarrier") -> int:
        """The site number of wait ``stmt`` in a debug build (its entry in ``debug_sites``): an mbarrier wait, or
        with ``kind="flag"`` a flag wait on the view ``name``."""
        name = stmt.barrier.decl.name if name is None else name
        self.debug_sites.append(DebugSite(name, str(stmt.loc), tuple(stmt.threads), kind))
        return len(self.debug_sites) - 1

    # -------------------------------------------------------------------------------------------- planning

    def error(self, message: str, loc: ir.Loc | None = None) -> CompileError:
        """A CompileError at ``loc``, by default the statement being generated."""
        loc = loc or self.current_loc
        return CompileError(message, str(loc) if loc else None)

    # ------------------------------------------------------------------------------------------- emitting

    def line(self, text: str) -> None:
        self.lines.append("  " * self.indent + text)

    def name_of(self, var) -> str:
        uid = var.uid
        if uid not in self.names:
            base = _identifier(var.name)
            name = base
            while name in self.used_names or name in _RESERVED:
                name = f"{base}_{len(self.used_names)}"
            self.used_names.add(name)
            self.names[uid] = name
        return self.names[uid]

    def emit_block(self, body) -> None:
        """Emit ``body`` inside a C++ block: arrays declared there are out of scope afterwards."""
        saved = set(self.declared)
        self.emit_body(body)
        self.declared = saved

    def emit_body(self, body) -> None:
        """Emit each statement with the emitter registered for its type and this target."""
        for stmt in body:
            self.current_loc = stmt.loc
            if stmt.loc.line != self.last_line:
                self.line(f"// {stmt.loc}")
                self.last_line = stmt.loc.line
            registry.emitter(type(stmt), self.target.name)(self, stmt)

    # ------------------------------------------------------------------------------------------ expressions

    def cexpr(self, e: ir.Expr) -> str:
        """``e`` as a C++ expression."""
        value = fold(e)  # constants the passes left as expressions (and those emitters build) become literals
        if value is not UNKNOWN:
            return _literal(value, e.dtype)
        return self.expressions.visit(e)

    def register_element(self, ref: ir.TensorRef, indices) -> str:
        decl = ref.decl
        if not isinstance(self.reg_layouts.get(decl.uid), Replicated):
            raise self.error(f"elements of {decl.name} are spread over threads; read them with tensor operations, "
                             f"not by index")
        flat = self.row_major(tuple(ref.index) + tuple(indices), decl.shape)
        if isinstance(flat, int):
            return self.element(decl, flat)
        size = math.prod(decl.shape)
        # A runtime index would move the array to local memory: select among constant indices instead.
        text = self.element(decl, size - 1)
        for i in range(size - 2, -1, -1):
            text = f"({flat} == {i} ? {self.element(decl, i)} : {text})"
        return text

    def element(self, decl: ir.TensorDecl, i) -> str:
        """C++ reading element register ``i`` (an int or a C++ int expression) of a register tensor: its value,
        or for 16-bit types its bit pattern."""
        name = self.tensor_name(decl)
        if packed(decl):
            return f"static_cast<unsigned short>({name}[({i}) >> 1] >> (16 * (({i}) & 1)))"
        return f"{name}[{i}]"

    def set_element(self, decl: ir.TensorDecl, i, value: str) -> str:
        """A C++ statement writing ``value`` (bits for 16-bit types) into element register ``i``."""
        name = self.tensor_name(decl)
        if packed(decl):
            word = f"{name}[({i}) >> 1]"
            return (f"{word} = ({word} & ((({i}) & 1) ? 0x0000FFFFu : 0xFFFF0000u)) | "
                    f"(static_cast<unsigned>({value}) << (16 * (({i}) & 1)));")
        return f"{name}[{i}] = {value};"

    def declare_registers(self, decl: ir.TensorDecl) -> None:
        """Declare the per-thread array of a register tensor (once)."""
        if decl.uid in self.declared:
            return
        count = self.reg_layouts[decl.uid].registers
        name = self.tensor_name(decl)
        if packed(decl):
            self.line(f"unsigned {name}[{(count + 1) // 2}];  // {decl.name}: {decl.dtype.name} pairs")
        else:
            self.line(f"{C_TYPES[decl.dtype.name]} {name}[{count}];  // {decl.name}")
        self.declared.add(decl.uid)

    def row_major(self, indices, shape):
        """The row-major position of ``indices`` in ``shape``: an int when every index is known, else a C++
        expression."""
        values = [fold(i) for i in indices]
        if all(v is not UNKNOWN for v in values):
            flat = 0
            for v, extent in zip(values, shape):
                flat = flat * extent + v
            return flat
        text = "0"
        for i, extent in zip(indices, shape):
            text = f"({text} * {extent} + {self.cexpr(i)})"
        return text

    def tensor_name(self, decl: ir.TensorDecl) -> str:
        return self.name_of(decl)

    # --------------------------------------------------------------------------------------------- scalars

    def emit_declare(self, s: ir.Declare) -> None:
        self.line(f"{scalar_ctype(s.var.type)} {self.name_of(s.var)} = {self.cexpr(s.value)};")

    def emit_assign(self, s: ir.Assign) -> None:
        self.line(f"{self.name_of(s.var)} = {self.cexpr(s.value)};")

    # ------------------------------------------------------------------------------------------ structure

    def emit_if(self, s: ir.If) -> None:
        self.line(f"if ({self.cexpr(s.cond)}) {{")
        self.indent += 1
        self.emit_block(s.then)
        self.indent -= 1
        if s.orelse:
            self.line("} else {")
            self.indent += 1
            self.emit_block(s.orelse)
            self.indent -= 1
        self.line("}")

    def emit_for(self, s: ir.For) -> None:
        # Unrolled loops arrive as guarded copies (passes.unroll): the loop itself stays rolled.
        # stop and step are evaluated once, when the loop starts, as the emulator does.
        var, ctype = self.name_of(s.var), scalar_ctype(s.var.type)
        stop, step = (self.name_of(ir.Var(name, s.var.type)) for name in ("loop_stop", "loop_step"))
        self.line("#pragma unroll 1")
        self.line(f"for ({ctype} {var} = {self.cexpr(s.start)}, {stop} = {self.cexpr(s.stop)}, "
                  f"{step} = {self.cexpr(s.step)}; {var} < {stop}; {var} += {step}) {{")
        self.indent += 1
        self.emit_block(s.body)
        self.indent -= 1
        self.line("}")

    def to_storage(self, f32_expr: str, dtype: DType) -> str:
        """C++ converting a float to what a ``dtype`` register holds (round to nearest even; float8 saturates)."""
        if dtype.name == "float16":
            return f"f32_to_f16({f32_expr})"
        if dtype.name == "bfloat16":
            return f"f32_to_bf16({f32_expr})"
        if dtype.name in ("float8_e4m3", "float8_e5m2"):
            return f"f32_to_{dtype.name[7:]}({f32_expr})"
        if dtype is float32:
            return f32_expr
        return f"static_cast<{C_TYPES[dtype.name]}>({f32_expr})"

    def to_f32(self, expr: str, dtype: DType) -> str:
        """C++ converting a value of ``dtype`` (its bit pattern for 16- and 8-bit floats) to float."""
        if dtype.name == "float16":
            return f"f16_to_f32({expr})"
        if dtype.name == "bfloat16":
            return f"bf16_to_f32({expr})"
        if dtype.name in ("float8_e4m3", "float8_e5m2"):
            return f"{dtype.name[7:]}_to_f32({expr})"
        return f"static_cast<float>({expr})"

    def element_loop(self, layout, body) -> None:
        """Emit ``body(i, row, col, valid)`` for every element register of ``layout`` (unrolled here, so
        coordinates are constants plus per-thread terms)."""
        self.line("{")
        self.indent += 1
        self.line(thread_prelude(layout_begin(layout)))
        for i in range(layout.registers):
            row, col = layout.coords(i)
            body(i, row, col, layout.valid(i))
        self.indent -= 1
        self.line("}")

    # ------------------------------------------------------------------------------------------ barriers

    def barrier_address(self, ref: ir.TensorRef) -> str:
        offset = self.barrier_offsets[ref.decl.uid]
        index = fold(ref.index[0])
        if index is not UNKNOWN:
            if not 0 <= index < len(self.barrier_counts[ref.decl.uid]):
                raise self.error(f"barrier index {index} is out of bounds for {ref.decl.name}")
            return f"(smem + {offset + 8 * index}u)"
        return f"(smem + {offset}u + 8u * static_cast<unsigned>({self.cexpr(ref.index[0])}))"

    # ------------------------------------------------------------------------------------------- shared, TMA

    def tile_address(self, ref: ir.TensorRef, loc) -> str:
        """Shared address of the tile a ref selects (its leading indices pick among the tiles)."""
        placement = self.shared[ref.decl.uid]
        lead = placement.lead_shape
        index = tuple(ref.index)
        if any(extent != 1 for extent in lead[len(index):]):
            raise self.error(f"{ref.decl.name} must be indexed down to one 2-D tile here", loc)
        index += (ir.Const(0, int32),) * (len(lead) - len(index))  # dimensions of extent 1 left unindexed
        flat = self.row_major(index, lead)
        if isinstance(flat, int):
            return f"(smem + {placement.offset + flat * placement.tile_stride}u)"
        return f"(smem + {placement.offset}u + static_cast<unsigned>({flat}) * {placement.tile_stride}u)"


class _CExpressions(ExprVisitor):
    """Expressions as C++ for ``gen``: every operand goes back through ``gen.cexpr``, which folds it first."""

    def __init__(self, gen: "CodeGenerator"):
        self.gen = gen

    def const(self, e):
        return _literal(e.value, e.type)

    def var(self, e):
        return self.gen.name_of(e)

    def special(self, e):
        if e.name in self.gen.cuda_target.special_registers:
            return self.gen.cuda_target.special_registers[e.name]
        base, axis = e.name.split(".")
        if self.gen.block_group and axis in "xy":
            return f"block_{axis}" if base == "blockIdx" else f"grid_{axis}"
        return f"static_cast<int>({base}.{axis})"

    def binary(self, e):
        a, b = self.gen.cexpr(e.a), self.gen.cexpr(e.b)
        if e.op in ("min", "max"):
            # The evaluator's Python min(a, b) is a unless b < a (max: unless b > a): a NaN on either side, and a tie
            # of zeros of opposite signs, give the operand the emulator gives.
            return f"({b} {'<' if e.op == 'min' else '>'} {a} ? {b} : {a})"
        if e.op == "cdiv":
            # The evaluator's exact ceiling, which (a + b - 1) / b missed: it overflowed near the type's maximum and
            # rounded negative quotients the wrong way. By a positive constant (tile counts), the truncated quotient
            # of a <= 0 is its ceiling already; elsewhere it takes one more when inexact with a positive quotient.
            divisor = fold(e.b)
            if divisor is not UNKNOWN and divisor > 0:
                return f"({a} > 0 ? ({a} - 1) / {b} + 1 : {a} / {b})"
            inexact = f"{a} % {b} != 0"
            if e.dtype.kind != "uint":
                inexact = f"{inexact} && ({a} < 0) == ({b} < 0)"
            return f"({a} / {b} + ({inexact}))"
        helper = _wrapping_helper(e)
        if helper:
            return f"{helper}({a}, {b})"
        op = {"//": "/", "and": "&&", "or": "||"}.get(e.op, e.op)
        return f"({a} {op} {b})"

    def unary(self, e):
        if e.op == "-" and e.dtype.kind == "int":
            return f"neg_wrap({self.gen.cexpr(e.a)})"  # -INT_MIN is undefined in C++ and wraps on the emulator
        return f"({'!' if e.op == 'not' else e.op}{self.gen.cexpr(e.a)})"

    def select(self, e):
        return f"({self.gen.cexpr(e.cond)} ? {self.gen.cexpr(e.a)} : {self.gen.cexpr(e.b)})"

    def convert(self, e):
        return f"static_cast<{scalar_ctype(e.type)}>({self.gen.cexpr(e.a)})"

    def load(self, e):
        element = self.gen.register_element(e.tensor, e.indices)
        dtype = e.tensor.decl.dtype
        return self.gen.to_f32(element, dtype) if narrow_float(dtype) else element

    def other(self, e):
        raise self.gen.error(f"cannot generate code for {type(e).__name__}")


#: The prelude's helpers that compute a signed operator as the emulator does where C++ leaves it undefined
#: (elementwise tensor arithmetic uses them too).
SIGNED_HELPERS = {"+": "add_wrap", "-": "sub_wrap", "*": "mul_wrap", "<<": "shl_wrap", ">>": "shr_wrap"}


def _wrapping_helper(e: ir.Binary) -> str | None:
    """The prelude helper that computes integer ``e`` as the emulator does (wrapping), or None where C++'s operator
    already does: unsigned arithmetic, a shift by a constant below the width (but not a signed ``<<``, undefined for
    a negative value in C++17)."""
    if not e.dtype.is_integer or e.op not in SIGNED_HELPERS:
        return None
    if e.op in ("<<", ">>"):
        amount = fold(e.b)
        in_range = amount is not UNKNOWN and 0 <= amount < e.dtype.nbits
        return None if in_range and (e.dtype.kind == "uint" or e.op == ">>") else SIGNED_HELPERS[e.op]
    return None if e.dtype.kind == "uint" else SIGNED_HELPERS[e.op]


def register_core_emitters(target: str) -> None:
    """Register the generator's own emitters of the core statements (scalars and control flow) for ``target``
    (called by each target's package)."""
    registry.emits(ir.Declare, target)(CodeGenerator.emit_declare)
    registry.emits(ir.Assign, target)(CodeGenerator.emit_assign)
    registry.emits(ir.If, target)(CodeGenerator.emit_if)
    registry.emits(ir.For, target)(CodeGenerator.emit_for)


def narrow_float(dtype: DType) -> bool:
    """Whether ``dtype`` is a float narrower than 32 bits (16- and 8-bit floats), whose register tensors hold bits."""
    return dtype.is_float and dtype.nbytes < 4


def scalar_ctype(dtype: DType) -> str:
    """The C++ type of a runtime scalar of ``dtype``. A scalar of a 16- or 8-bit float is a ``float`` holding its
    value, as the emulator holds it (a Python float, rounded to float32 where a tensor operation uses it): the
    scalar expressions of the C++ are values, never a narrow float's bits, which only register tensors and memory
    hold."""
    return "float" if narrow_float(dtype) else C_TYPES[dtype.name]


def _literal(value, dtype: DType) -> str:
    if dtype.is_float:
        value = float(value)
        if value != value or value in (math.inf, -math.inf):  # no C++ literal spells these: their f32 bits
            return f"__uint_as_float({ {math.inf: 0x7F800000, -math.inf: 0xFF800000}.get(value, 0x7FC00000):#x}u)"
        return f"{np.float32(value)!s}f"  # the shortest digits of the float32 the emulator holds
    if dtype is boolean:
        return "true" if value else "false"
    if dtype is uint32:
        return f"{int(value)}u"
    # The smallest value is spelled as a difference: a literal is a negated positive number, and 2**31 (2**63) is
    # no int (long long), so -9223372036854775808ll would be an unsigned long long.
    if dtype is int64:
        return "(-9223372036854775807ll - 1)" if int(value) == -2**63 else f"{int(value)}ll"
    if dtype is int32 and int(value) == -2**31:
        return "(-2147483647 - 1)"
    return str(int(value))


def _identifier(name: str) -> str:
    text = re.sub(r"\W", "_", str(name))
    return text if text and not text[0].isdigit() else "v_" + text


_RESERVED = {"smem", "smem_raw", "smem_ptr", "warp", "i", "t_", "int", "float", "unsigned", "long", "char", "bool",
             "short", "void", "for", "if", "else", "while", "return", "const", "static", "auto", "register",
             "u64", "TmaMap", "map0", "map1", "map2", "map3", "map4", "map5", "map6", "map7", "default", "case",
             "switch", "new", "delete", "this", "class", "struct", "union", "template", "typename", "signed",
             "threadIdx", "blockIdx", "gridDim", "blockDim"}


def generate(kernel: ir.Kernel, min_blocks: int = 1, block_group: int = 0, quad_stores: bool = True,
             debug: bool = False) -> GeneratedKernel:
    """The CUDA C++ source and launch facts of ``kernel``; ``min_blocks`` is the ``__launch_bounds__`` minimum of
    resident blocks per SM, which caps registers per thread at 65536 / (threads * min_blocks); ``block_group``
    chooses the grouped launch order of 2-D grids (0: the plain order). The code is generated from ``kernel`` after
    the unroll and constant-propagation passes; the result names ``kernel`` itself. ``debug`` bounds every barrier
    wait (``warpspec.debug``)."""
    lowered = propagate(unroll(kernel))
    return replace(CodeGenerator(lowered, min_blocks, block_group, quad_stores, debug).generate(), kernel=kernel)
