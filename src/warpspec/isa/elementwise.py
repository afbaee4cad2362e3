"""Elementwise operations on register tensors: ``self.cast``, the arithmetic operators (``acc * 2``,
``a + b``, ``-x``, ``min``/``max``), the unary functions ``self.exp2/exp/tanh/log2/sqrt``, and masks: the
comparisons (``cols < n_size``), ``&``/``|`` of masks, ``self.where`` and ``self.row_index/col_index``.

Their IR statements and their emulation. Each is executed by the threads holding the tensor, element by element
in the tensor's register layout. Binary operators broadcast as numpy does between a 2-D tensor [M, N] and a row
vector [1, N] or a column vector [M, 1]: the layout pass gives the vector the matching slice of the 2-D tensor's
layout (each thread holds the columns, or rows, it holds of the tile). The CUDA emission is
``warpspec.cuda.sm90.elementwise`` (``cvt.rn`` conversions, float arithmetic in f32, ``ex2.approx``,
``tanh.approx``, ``lg2.approx``, ``sqrt.rn``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from warpspec import dtypes
from warpspec.dtypes import DType, boolean, int32
from warpspec.isa.base import LanguageObject, language_call
from warpspec.isa.contracts import BuildContext, EmulationMachine, EmulationTask
from warpspec.isa.registry import LAYOUT_RULE, declare_timeline, emulates, fact
from warpspec.isa.timeline_facts import NOT_SHOWN, STATEMENT, TimingCost
from warpspec.isa.values import TensorValue, describe
from warpspec.ir import nodes as ir
from warpspec.layout.registers import LayoutRule

#: Operators on register tensors (both back ends implement exactly these), with their numpy function.
TENSOR_OPERATORS = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "min": np.minimum,
                    "max": np.maximum}

#: Comparisons on register tensors (``col < n_size``), giving boolean tensors for ``self.where``.
COMPARISONS = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal,
               "!=": np.not_equal}

#: Logical operators on boolean tensors (combining masks: ``causal & inside``).
LOGICAL = {"&": np.logical_and, "|": np.logical_or}

#: Unary functions on float register tensors (``self.exp2(x)``, ...), computed in float32, with their numpy
#: function; ``neg`` is unary minus. The GPU's approximations and their error bounds are in docs/language.md.
UNARY_FUNCTIONS = {"neg": np.negative, "exp2": np.exp2, "exp": np.exp, "tanh": np.tanh, "log2": np.log2,
                   "sqrt": np.sqrt}

#: The functions whose instruction flushes subnormal float32 inputs and results to zero of the same sign (``.ftz``
#: of ``ex2.approx.ftz.f32`` and ``lg2.approx.ftz.f32``): log2 of a subnormal is -inf, exp2(-130) is 0.
FLUSH_TO_ZERO = ("exp2", "exp", "log2")


def flush_subnormals(values: np.ndarray) -> np.ndarray:
    """float32 ``values`` with subnormals replaced by a zero of their sign, as ``.ftz`` instructions read and
    write them."""
    return np.where(np.abs(values) < np.finfo(np.float32).tiny, np.copysign(np.float32(0), values), values)

# ------------------------------------------------------------------------------------------------------- IR


@dataclass(frozen=True, eq=False)
class Cast(ir.DefineTensor):
    """``decl`` = ``src`` converted elementwise to ``decl``'s type, rounding to nearest even."""

    src: ir.TensorRef

    def text(self, f) -> str:
        return f"{self.decl.name} = cast({f(self.src)}, {self.decl.dtype.name})"


@dataclass(frozen=True, eq=False)
class Arithmetic(ir.DefineTensor):
    """``decl`` = ``op`` applied elementwise: two operands (TensorRefs or scalar Exprs, at least one a tensor) for
    a binary operator, one tensor for a unary function (``op`` a key of ``UNARY_FUNCTIONS``, "neg" for unary
    minus). A tensor operand of shape [1, N] or [M, 1] against a [M, N] ``decl`` is broadcast."""

    op: str
    operands: tuple

    def text(self, f) -> str:
        return f"{self.decl.name}: {self.decl.dtype.name} = {self.op}({', '.join(f(o) for o in self.operands)})"


@dataclass(frozen=True, eq=False)
class TileIndex(ir.DefineTensor):
    """``decl`` (int32, ``like``'s shape and layout) = each element's row (``axis`` 0) or column (``axis`` 1)
    within the tile."""

    like: ir.TensorRef
    axis: int

    def text(self, f) -> str:
        return f"{self.decl.name} = {('row', 'col')[self.axis]}_index({f(self.like)})"


# ------------------------------------------------------------------------------------------------ language


class Elementwise(LanguageObject):
    """``self.cast``; the arithmetic operators reach ``binary``/``negate`` through the front end."""

    @language_call
    def cast(self, tensor, dtype) -> TensorValue:
        """Convert register tensor ``tensor`` elementwise to the floating-point ``dtype`` (round to nearest even;
        float8 saturates to its largest finite value). Executed by the threads holding it; PTX ``cvt.rn`` (float8:
        ``cvt.rn.satfinite.e4m3x2.f32`` / ``e5m2x2``)."""
        b = self.b
        tensor = b.to_tensor(tensor, "cast tensor", (ir.REGISTER,))
        if not isinstance(dtype, DType):
            raise b.error(f"cast dtype must be a dtype, got {describe(dtype)}")
        if not dtype.is_float or not tensor.dtype.is_float:
            raise b.error(f"cast converts between floating-point types; {tensor.name} is {tensor.dtype.name} and the "
                          f"target is {dtype.name}")
        decl = b.new_register_tensor(f"{tensor.name}_{dtype.name}", dtype, tensor.shape)
        b.emit(Cast(b.loc, decl, tensor.ref))
        return TensorValue(ir.TensorRef(decl))

    @language_call
    def exp2(self, x) -> TensorValue:
        """2**x elementwise of float register tensor ``x``, computed in float32 and rounded to ``x``'s type; a
        subnormal float32 result is 0 (``.ftz``). Executed by the threads holding ``x``; PTX
        ``ex2.approx.ftz.f32``."""
        return unary(self.b, "exp2", x)

    @language_call
    def exp(self, x) -> TensorValue:
        """e**x elementwise of float register tensor ``x`` (float32, rounded to ``x``'s type); a subnormal float32
        result is 0 (``.ftz``). Executed by the threads holding ``x``; PTX ``mul.f32`` by log2(e), then
        ``ex2.approx.ftz.f32``."""
        return unary(self.b, "exp", x)

    @language_call
    def tanh(self, x) -> TensorValue:
        """tanh(x) elementwise of float register tensor ``x`` (float32, rounded to ``x``'s type). Executed by the
        threads holding ``x``; PTX ``tanh.approx.f32``."""
        return unary(self.b, "tanh", x)

    @language_call
    def log2(self, x) -> TensorValue:
        """log2(x) elementwise of float register tensor ``x`` (float32, rounded to ``x``'s type); a subnormal
        float32 ``x`` is read as a zero of its sign (``.ftz``), so its log2 is -inf. Executed by the threads holding
        ``x``; PTX ``lg2.approx.ftz.f32``."""
        return unary(self.b, "log2", x)

    @language_call
    def sqrt(self, x) -> TensorValue:
        """sqrt(x) elementwise of float register tensor ``x`` (float32, correctly rounded, then rounded to ``x``'s
        type). Executed by the threads holding ``x``; PTX ``sqrt.rn.f32``."""
        return unary(self.b, "sqrt", x)


    @language_call
    def row_index(self, x) -> TensorValue:
        """An int32 tensor of ``x``'s shape and register layout holding each element's row within the tile (add
        the tile's offset for the row in the matrix: causal masks). Executed by the threads holding ``x``; no
        instruction beyond integer arithmetic on the thread index."""
        return _tile_index(self.b, 0, x)

    @language_call
    def col_index(self, x) -> TensorValue:
        """An int32 tensor of ``x``'s shape and register layout holding each element's column within the tile
        (``self.col_index(s) + offset_n < n_size`` masks a ragged tail). Executed by the threads holding ``x``."""
        return _tile_index(self.b, 1, x)

    @language_call
    def where(self, cond, x, y) -> TensorValue:
        """``x`` where boolean tensor ``cond`` holds, else ``y``, elementwise; ``x``/``y`` are register tensors
        of one dtype or scalars (``float("-inf")``), at least one a tensor; any of the three may be a broadcast
        row or column vector of the others' 2-D shape. Executed by the threads holding them; ``selp``."""
        b = self.b
        cond = b.to_tensor(cond, "self.where cond", (ir.REGISTER,))
        if cond.dtype != boolean:
            raise b.error(f"self.where cond must be a boolean tensor (a comparison such as col < n_size); "
                          f"{cond.name} is {cond.dtype.name}")
        values = [v for v in (x, y) if isinstance(v, TensorValue)]
        if not values:
            raise b.error("self.where needs x or y to be a register tensor; both are scalars")
        _check_operands(b, "self.where", values)
        first = values[0]
        if first.dtype == boolean:
            raise b.error(f"self.where chooses between numbers; {first.name} is a boolean tensor")
        shape = broadcast_shape(b, [cond] + values,
                                f"self.where({', '.join(_shaped(v) for v in (cond, x, y))})")
        operands = (cond.ref,) + tuple(v.ref if isinstance(v, TensorValue) else
                                       _scalar_operand(b, v, first, "self.where") for v in (x, y))
        decl = b.new_register_tensor("where", first.dtype, shape)
        b.emit(Arithmetic(b.loc, decl, "where", operands))
        return TensorValue(ir.TensorRef(decl))


def _tile_index(b: BuildContext, axis: int, x) -> TensorValue:
    what = f"self.{('row', 'col')[axis]}_index"
    x = b.to_tensor(x, f"{what} x", (ir.REGISTER,))
    if len(x.shape) != 2:
        raise b.error(f"{what} takes a 2-D tensor; {x.name} has shape {list(x.shape)}")
    decl = b.new_register_tensor(("rows", "cols")[axis], int32, x.shape)
    b.emit(TileIndex(b.loc, decl, x.ref, axis))
    return TensorValue(ir.TensorRef(decl))


def _shaped(value) -> str:
    return f"{value.name}{list(value.shape)}" if isinstance(value, TensorValue) else describe(value)


def _check_operands(b: BuildContext, what: str, tensors) -> None:
    """Register tensors of one dtype, or a CompileError naming ``what``."""
    for t in tensors:
        if t.kind != ir.REGISTER:
            raise b.error(f"{what} needs register tensors; {t.name} is a {t.kind} tensor (load it first)")
    if len(tensors) == 2 and tensors[0].dtype != tensors[1].dtype:
        x, y = tensors
        raise b.error(f"dtypes differ: {x.name} is {x.dtype.name}, {y.name} is {y.dtype.name}; cast one")


def unary(b: BuildContext, function: str, x) -> TensorValue:
    """``function(x)`` of a float register tensor, emitted at the build context's line."""
    x = b.to_tensor(x, f"self.{function} x", (ir.REGISTER,))
    if not x.dtype.is_float:
        raise b.error(f"self.{function} takes a floating-point tensor; {x.name} is {x.dtype.name}")
    decl = b.new_register_tensor(function, x.dtype, x.shape)
    b.emit(Arithmetic(b.loc, decl, function, (x.ref,)))
    return TensorValue(ir.TensorRef(decl))


def binary(b: BuildContext, symbol: str, x, y) -> TensorValue:
    """``x symbol y`` where at least one side is a register tensor and the other a tensor of the same shape, a
    broadcast vector ([1, N] or [M, 1] against [M, N], either side) or a scalar; emitted at the build context's line."""
    if symbol not in TENSOR_OPERATORS and symbol not in COMPARISONS and symbol not in LOGICAL:
        raise b.error(f"operator {symbol!r} is not supported on tensors; use one of "
                      f"{', '.join([*TENSOR_OPERATORS, *COMPARISONS, *LOGICAL])}")
    tensors = [v for v in (x, y) if isinstance(v, TensorValue)]
    _check_operands(b, "arithmetic", tensors)
    shape = broadcast_shape(b, tensors, f"{_shaped(x)} {symbol} {_shaped(y)}")
    first = tensors[0]
    if (first.dtype == boolean) != (symbol in LOGICAL):
        raise b.error(f"{symbol!r} combines boolean tensors (masks) only; {first.name} is {first.dtype.name}"
                      if symbol in LOGICAL else
                      f"{first.name} is a boolean tensor (a comparison's result): use it as self.where's condition "
                      f"or combine it with & and |, not {symbol!r}")
    if symbol == "/" and not first.dtype.is_float:
        raise b.error(f"'/' on {first.dtype.name} tensors is not supported: tensor division is floating-point")
    operands = tuple(v.ref if isinstance(v, TensorValue) else _scalar_operand(b, v, first, symbol) for v in (x, y))
    dtype = boolean if symbol in COMPARISONS else first.dtype
    decl = b.new_register_tensor("mask" if symbol in COMPARISONS else "tmp", dtype, shape)
    b.emit(Arithmetic(b.loc, decl, symbol, operands))
    return TensorValue(ir.TensorRef(decl))


def broadcast_shape(b: BuildContext, tensors, text: str) -> tuple:
    """The result shape of an elementwise operation on ``tensors`` (spelled ``text`` in errors): their common
    shape, or the 2-D [M, N] one's when each other is of that shape, a row vector [1, N] or a column vector
    [M, 1]; a CompileError naming them otherwise."""
    full = max((t.shape for t in tensors), key=lambda shape: np.prod(shape, dtype=np.int64))
    for t in tensors:
        if t.shape != full and not (len(full) == 2 == len(t.shape) and 1 not in full
                                    and t.shape in ((1, full[1]), (full[0], 1))):
            raise b.error(f"shapes do not broadcast: {text}; a 2-D tensor [M, N] combines with a tensor of its "
                          f"shape, a row vector [1, N] or a column vector [M, 1]")
    return full


def broadcast_axis(vector_shape, full_shape) -> int | None:
    """The axis a tensor operand of ``vector_shape`` is broadcast along against ``full_shape`` (0 for a row vector
    [1, N], 1 for a column vector [M, 1]), or None when the shapes are equal."""
    if tuple(vector_shape) == tuple(full_shape):
        return None
    return 0 if vector_shape[0] == 1 else 1


def _scalar_operand(b: BuildContext, value, tensor: TensorValue, symbol: str):
    """The scalar side of ``tensor symbol value`` in the tensor's type: into an integer tensor only an integer,
    never a truncated float."""
    if tensor.dtype.is_integer:
        return b.to_integer(value, tensor.dtype, f"the scalar operand of {symbol!r} on {tensor.dtype.name} tensor "
                                                 f"{tensor.name}")
    return b.to_expr(value, tensor.dtype, f"the scalar operand of {symbol!r} on {tensor.name}")


def negate(b: BuildContext, x: TensorValue) -> TensorValue:
    """``-x`` of a register tensor, emitted at the build context's line."""
    if x.kind != ir.REGISTER:
        raise b.error(f"arithmetic needs register tensors; {x.name} is a {x.kind} tensor")
    decl = b.new_register_tensor("tmp", x.dtype, x.shape)
    b.emit(Arithmetic(b.loc, decl, "neg", (x.ref,)))
    return TensorValue(ir.TensorRef(decl))


# ----------------------------------------------------------------------------------------------- emulation


@emulates(Cast)
def _cast(machine: EmulationMachine, task: EmulationTask, s: Cast) -> None:
    src = machine.register(task, s.src, "cast")
    machine.define_register(task, s.decl, dtypes.round_to(s.decl.dtype, src.astype(np.float32)))


@emulates(Arithmetic)
def _arithmetic(machine: EmulationMachine, task: EmulationTask, s: Arithmetic) -> None:
    values = [np.asarray(machine.register(task, o, s.op) if isinstance(o, ir.TensorRef) else machine.ev(task, o))
              for o in s.operands]
    # floats in f32, as the GPU code computes them (a comparison too); conditions and integers as they are
    values = [v.astype(np.float32) if (o.decl.dtype if isinstance(o, ir.TensorRef) else o.dtype).is_float else v
              for o, v in zip(s.operands, values)]
    with np.errstate(all="ignore"):  # inf and nan results are values here, as on the GPU
        if s.op == "where":
            result = np.where(*values)
        elif s.op in FLUSH_TO_ZERO:
            result = flush_subnormals(UNARY_FUNCTIONS[s.op](flush_subnormals(values[0])))
        elif len(values) == 1:
            result = UNARY_FUNCTIONS[s.op](values[0])
        else:  # numpy broadcasts a [1, N] or [M, 1] operand as the layout pass distributes it
            result = {**TENSOR_OPERATORS, **COMPARISONS, **LOGICAL}[s.op](values[0], values[1])
    machine.define_register(task, s.decl, dtypes.round_to(s.decl.dtype, result))


@emulates(TileIndex)
def _tile_index_values(machine: EmulationMachine, task: EmulationTask, s: TileIndex) -> None:
    machine.define_register(task, s.decl, np.indices(s.decl.shape, dtype=np.int32)[s.axis])


# --------------------------------------------------------------------------------------------------- facts

@fact(LAYOUT_RULE, Cast)
@fact(LAYOUT_RULE, Arithmetic)
def _elementwise_layouts(stmt: Cast | Arithmetic, target) -> LayoutRule:
    """The result shares its layout with its same-shaped tensor operands; smaller ones are broadcast vectors."""
    refs = [o for o in ((stmt.src,) if isinstance(stmt, Cast) else stmt.operands) if isinstance(o, ir.TensorRef)]
    shape = stmt.decl.shape
    return LayoutRule(alike=(stmt.decl,) + tuple(o.decl for o in refs if o.decl.shape == shape),
                      broadcast=tuple((o.decl, broadcast_axis(o.decl.shape, shape)) for o in refs
                                      if o.decl.shape != shape),
                      defines=stmt.decl)


@fact(LAYOUT_RULE, TileIndex)
def _tile_index_layout(stmt: TileIndex, target) -> LayoutRule:
    """The indices are laid out as the tensor they index."""
    return LayoutRule(alike=(stmt.decl, stmt.like.decl), defines=stmt.decl)


# ---------------------------------------------------------------------------------------------------------- timeline
# What each statement costs the CPU timing model and how timelines show it (``isa.timeline_facts``).
declare_timeline(Cast, TimingCost("registers", lambda s: s.decl.shape), NOT_SHOWN)
declare_timeline(Arithmetic, TimingCost("registers", lambda s: s.decl.shape), NOT_SHOWN)
declare_timeline(TileIndex, STATEMENT, NOT_SHOWN)
