"""Checks of a launch's runtime arguments that every back end applies alike: scalar values, the grid, the global
views that must fit inside their arrays, multi-dimensional arrays that must have their view's shape, flag arrays
that must not share memory with data, and views that TMA copies through, which a tensor map must be able to
describe."""

from __future__ import annotations

import numbers
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from warpspec.dtypes import DType
from warpspec.errors import ArgumentError
from warpspec.ir import nodes as ir
from warpspec.isa.flag import FlagAdd, FlagSignal, FlagWait
from warpspec.isa.memory import GlobalView
from warpspec.isa.tma import TmaLoad, TmaStore
from warpspec.ir.evaluate import ExprCompiler, wrap


def scalar_value(param: ir.Param, value):
    """``value`` as the Python number a scalar parameter holds; ArgumentError naming it when it does not fit."""
    dtype = param.type
    if dtype.is_float:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise ArgumentError(f"argument {param.name!r}: expected a {dtype.name} number, got {value!r}")
        return float(value)
    if dtype.kind == "bool":
        if not isinstance(value, (bool, numbers.Integral)) or value not in (0, 1):
            raise ArgumentError(f"argument {param.name!r}: expected a boolean, got {value!r}")
        return bool(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentError(f"argument {param.name!r}: expected a {dtype.name} integer, got {value!r}")
    value = int(value)
    if wrap(value, dtype) != value:
        raise ArgumentError(f"argument {param.name!r}: {value} does not fit in {dtype.name}")
    return value


def launch_grid(kernel: ir.Kernel, env: dict) -> tuple[int, int, int]:
    """The grid for these arguments (``env``: parameter Var uid → value), checked positive, in range and a
    multiple of the cluster shape."""
    exprs = ExprCompiler({})
    sizes = [exprs(e)(env) for e in kernel.grid] + [1] * (3 - len(kernel.grid))
    where = f" (self.attrs.blocks at {kernel.grid_loc})" if kernel.grid_loc else ""
    for axis, size in zip("xyz", sizes):
        if size <= 0 or size >= 2**31:
            problem = "must be positive" if size <= 0 else "is too large"
            raise ArgumentError(f"the kernel's grid is {sizes}{where}: blocks.{axis} {problem} for these arguments")
    for axis, (size, cluster) in enumerate(zip(sizes, kernel.cluster)):
        if size % cluster:
            raise ArgumentError(f"grid {sizes}{where} is not a multiple of the cluster shape {list(kernel.cluster)} "
                                f"in dimension {'xyz'[axis]}")
    return tuple(sizes)


def view_shapes(kernel: ir.Kernel, env: dict):
    """``(statement, shape, strides)`` of every global view for these arguments (views use only the kernel's
    parameters: the front end refuses any other value there)."""
    exprs = ExprCompiler({})
    for stmt in ir.walk(kernel.body):
        if isinstance(stmt, GlobalView):
            yield stmt, tuple(exprs(e)(env) for e in stmt.decl.shape), tuple(exprs(e)(env) for e in stmt.strides)


def elements_needed(shape, strides) -> int:
    """How many elements from the start of an array a view of ``shape`` and ``strides`` reaches (0 if empty)."""
    if 0 in shape:
        return 0
    return sum((extent - 1) * stride for extent, stride in zip(shape, strides)) + 1


def check_view(name: str, stmt: GlobalView, shape, strides, available: int) -> None:
    """ArgumentError naming argument ``name`` unless the view fits in the ``available`` elements of its array."""
    if any(extent < 0 for extent in shape):
        raise ArgumentError(f"argument {name!r}: view {stmt.decl.name} has negative shape {list(shape)}")
    needed = elements_needed(shape, strides)
    if needed > available:
        raise ArgumentError(f"argument {name!r} holds {available} elements but the kernel views it as "
                            f"{stmt.decl.name} of shape {list(shape)} (line {stmt.loc.line}), which needs {needed}")


def first_views(views) -> dict[int, tuple[GlobalView, tuple, tuple]]:
    """Pointer parameter Var uid -> ``(statement, shape, strides)`` of the kernel's first global view of it, from
    the ``(statement, shape, strides)`` triples ``view_shapes`` gives."""
    first: dict[int, tuple[GlobalView, tuple, tuple]] = {}
    for stmt, shape, strides in views:
        first.setdefault(stmt.pointer.uid, (stmt, shape, strides))
    return first


def stored_shape(shape, strides) -> tuple[int, ...] | None:
    """The shape of the row-major array whose memory a view of ``shape`` and element ``strides`` covers exactly
    (its axes in the order of decreasing stride: a view [S, B] with strides [1, S] covers a [B, S] array), or None
    when the view has gaps or overlaps (a padded pitch)."""
    order = sorted(range(len(shape)), key=lambda axis: -int(strides[axis]))
    stride = 1
    for axis in reversed(order):
        if int(shape[axis]) > 1 and int(strides[axis]) != stride:
            return None
        stride *= int(shape[axis])
    return tuple(int(shape[axis]) for axis in order)


def check_array_shape(name: str, stmt: GlobalView, shape, array_shape, strides) -> None:
    """ArgumentError naming argument ``name`` and both shapes when its array has two or more dimensions, as many
    as the kernel's first view of it (``stmt``, of ``shape`` and element ``strides``), and a shape other than
    that of the memory the view covers (``stored_shape``: the view's own for a row-major view, [B, S] for a view
    [S, B] with strides [1, S]; the view's own where it has gaps, as a padded pitch has):
    elements are addressed through the view alone, so such an array (B as [K, N] where the kernel views [N, K])
    would be read as if reshaped, a wrong result with no error. Only the size of the other arrays is checked
    (``check_view``): a one-dimensional array is a flat buffer, and an array of another rank is a deliberate
    reshape (ops.attention's [batch, heads, seq, d] tensors viewed as [batch * heads, seq, d])."""
    array_shape = tuple(int(extent) for extent in array_shape)
    expected = stored_shape(shape, strides) or tuple(int(extent) for extent in shape)
    if len(array_shape) < 2 or len(array_shape) != len(shape) or array_shape == expected:
        return
    if _without_ones(array_shape) == _without_ones(expected):
        return  # axes of one element order nothing: [S, 1, D] is the memory of [1, S, D] ([D, H·D, 1] with H = 1)
    layout = "" if expected == tuple(shape) else f", the memory of a row-major {list(expected)} array"
    raise ArgumentError(f"argument {name!r} has shape {list(array_shape)}, but the kernel views it as "
                        f"{stmt.decl.name} of shape {list(shape)}{layout} (line {stmt.loc.line}); pass an array of "
                        f"that shape (a transpose is not a reshape), or a flat one-dimensional buffer")


def _without_ones(shape) -> tuple[int, ...]:
    return tuple(extent for extent in shape if extent != 1)


def flag_pointers(kernel: ir.Kernel) -> tuple[str, ...]:
    """The pointer parameters, in parameter order, whose global views ``flag.signal`` or ``flag.wait`` use: the
    kernel's flag arrays. A launch must start with them at the values the kernel's protocol expects (zero for the
    kernels warpspec ships, which give every flag back its value), so inputs made up for a check are zeros there."""
    views = {stmt.decl.uid: stmt.pointer.uid for stmt in ir.walk(kernel.body) if isinstance(stmt, GlobalView)}
    used = {views[stmt.flags.decl.uid] for stmt in ir.walk(kernel.body)
            if isinstance(stmt, (FlagSignal, FlagAdd, FlagWait))}
    return tuple(param.name for param in kernel.params if param.var.uid in used)


def check_flags_apart(kernel: ir.Kernel, spans: dict) -> None:
    """ArgumentError naming both arguments when a flag array shares memory with another pointer argument of the
    launch (``spans``: parameter name -> ``(first byte, end byte)`` of its array): a flag overwritten by the data,
    or data overwritten by a flag, is a wrong result no ordering can prevent. Two arguments may share a flag array.
    """
    flags = flag_pointers(kernel)
    for flag in flags:
        low, high = spans[flag]
        for name, (start, end) in spans.items():
            if name not in flags and start < high and low < end and high > low and end > start:
                raise ArgumentError(f"argument {flag!r} holds the flags of flag.signal/flag.wait, and its array "
                                    f"shares memory with argument {name!r}: the flags and the data would overwrite "
                                    f"each other; pass a separate int32 array for {flag!r}")


# ----------------------------------------------------------------------------------------- tensor maps

# TMA copies bits, so 8-bit floats travel as UINT8 (as in CUTLASS's to_CUtensorMapDataType) and int8 too.
TENSOR_MAP_DTYPES = {
    "float16": "FLOAT16", "bfloat16": "BFLOAT16", "float32": "FLOAT32", "int32": "INT32", "uint32": "UINT32",
    "int64": "INT64", "int8": "UINT8", "float8_e4m3": "UINT8", "float8_e5m2": "UINT8",
}
SWIZZLES = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}
L2_PROMOTIONS = {0: "NONE", 64: "L2_64B", 128: "L2_128B", 256: "L2_256B"}


@dataclass(frozen=True)
class TiledTensorMapSpec:
    """The checked, normalised arguments of a tiled tensor map (all arrays innermost dimension first)."""

    dtype: DType
    global_address: int
    global_shape: tuple[int, ...]
    global_strides_bytes: tuple[int, ...]
    box: tuple[int, ...]
    swizzle_bytes: int
    l2_promotion: int


def _index(value: Any, label: str) -> int:
    if isinstance(value, bool):
        raise ArgumentError(f"tensor map: {label} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ArgumentError(f"tensor map: {label} must be an integer, got {value!r}") from None


def check_tensor_map_global(
    dtype: DType,
    global_address: int,
    global_shape: Sequence[int],
    global_strides_bytes: Sequence[int],
) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """Check the global half of a tiled tensor map (what the array and its view decide: dtype, base address, shape
    and byte strides, innermost dimension first) against the driver's rules (cuda.h cuTensorMapEncodeTiled);
    return ``(address, shape, strides)`` normalised. Raises ``ArgumentError`` naming the first wrong value."""
    if not isinstance(dtype, DType) or dtype.name not in TENSOR_MAP_DTYPES:
        raise ArgumentError(f"tensor map: dtype {dtype!r} cannot be loaded by TMA; expected one of "
                            f"{', '.join(TENSOR_MAP_DTYPES)}")
    address = _index(global_address, "global_address")
    if address <= 0 or address % 16:
        raise ArgumentError(f"tensor map: global_address {address:#x} must be a non-null device address aligned "
                            f"to 16 bytes (it is {address % 16} bytes past a 16-byte boundary)")
    shape = tuple(_index(value, f"global_shape[{i}]") for i, value in enumerate(global_shape))
    rank = len(shape)
    if not 1 <= rank <= 5:
        raise ArgumentError(f"tensor map: global_shape has {rank} dimensions; TMA supports 1 to 5")
    for i, extent in enumerate(shape):
        if not 1 <= extent <= 2**32:
            raise ArgumentError(f"tensor map: global_shape[{i}] = {extent} must be in [1, 2^32]")
    strides = tuple(_index(value, f"global_strides_bytes[{i}]") for i, value in enumerate(global_strides_bytes))
    if len(strides) != rank - 1:
        raise ArgumentError(
            f"tensor map: global_strides_bytes has {len(strides)} values for a rank-{rank} tensor; expected "
            f"{rank - 1} (byte strides of dimensions 1..{rank - 1}; dimension 0 is contiguous)")
    for i, stride in enumerate(strides):
        if stride <= 0 or stride % 16 or stride >= 2**40:
            raise ArgumentError(f"tensor map: global_strides_bytes[{i}] = {stride} (stride of dimension {i + 1}) "
                                f"must be a positive multiple of 16 below 2^40")
    return address, shape, strides


def check_tiled_tensor_map(
    dtype: DType,
    global_address: int,
    global_shape: Sequence[int],
    global_strides_bytes: Sequence[int],
    box: Sequence[int],
    swizzle_bytes: int = 0,
    l2_promotion: int = 128,
) -> TiledTensorMapSpec:
    """Check the arguments of ``cuda.driver.encode_tiled_tensor_map`` against the driver's rules (cuda.h
    cuTensorMapEncodeTiled) without calling it, and return them normalised: the global half
    (``check_tensor_map_global``), then the box, swizzle and L2 promotion the kernel's build chose.

    Raises ``ArgumentError`` naming the first wrong value and what is expected. Pure: needs no GPU.
    """
    address, shape, strides = check_tensor_map_global(dtype, global_address, global_shape, global_strides_bytes)
    rank = len(shape)
    box_dims = tuple(_index(value, f"box[{i}]") for i, value in enumerate(box))
    if len(box_dims) != rank:
        raise ArgumentError(f"tensor map: box has {len(box_dims)} values for a rank-{rank} tensor; expected {rank}")
    for i, extent in enumerate(box_dims):
        if not 1 <= extent <= 256:
            raise ArgumentError(f"tensor map: box[{i}] = {extent} must be in [1, 256]")
    swizzle = _index(swizzle_bytes, "swizzle_bytes")
    if swizzle not in SWIZZLES:
        raise ArgumentError(f"tensor map: swizzle_bytes = {swizzle} must be one of 0, 32, 64, 128")
    row_bytes = box_dims[0] * dtype.nbytes
    if row_bytes % 16:
        raise ArgumentError(f"tensor map: box[0] * {dtype.nbytes} bytes ({dtype.name}) = {row_bytes} bytes must be a "
                            f"multiple of 16; use box[0] a multiple of {16 // dtype.nbytes}")
    if swizzle and row_bytes > swizzle:
        raise ArgumentError(
            f"tensor map: box[0] * {dtype.nbytes} bytes = {row_bytes} bytes exceeds the {swizzle}-byte swizzle span; "
            f"use box[0] <= {swizzle // dtype.nbytes} (load the tile as several boxes) or a wider swizzle")
    promotion = _index(l2_promotion, "l2_promotion")
    if promotion not in L2_PROMOTIONS:
        raise ArgumentError(f"tensor map: l2_promotion = {promotion} must be one of 0, 64, 128, 256 (bytes)")
    return TiledTensorMapSpec(dtype, address, shape, strides, box_dims, swizzle, promotion)


def tma_views(kernel: ir.Kernel) -> set[int]:
    """Uids of the global views that a TMA copy of ``kernel`` moves through (each one a tensor map at launch)."""
    return {(stmt.src if isinstance(stmt, TmaLoad) else stmt.dst).decl.uid
            for stmt in ir.walk(kernel.body) if isinstance(stmt, (TmaLoad, TmaStore))}


def check_tma_view(name: str, view: str, dtype: DType, address: int, shape, strides) -> None:
    """ArgumentError naming argument ``name`` unless its view ``view`` (of element ``shape`` and ``strides``,
    outermost first, at address ``address``: the GPU's, or the emulator's host array) can be described by a tensor
    map: innermost dimension contiguous, every other stride a multiple of 16 bytes, base 16-byte aligned.
    Both back ends call it for every view a TMA copy moves through, so a view the GPU cannot copy is refused on
    the emulator too."""
    if strides[-1] != 1:
        raise ArgumentError(f"argument {name!r}: TMA needs the innermost dimension of {view} to be contiguous "
                            f"(stride 1), got stride {strides[-1]}")
    try:
        check_tensor_map_global(dtype, address, tuple(reversed(shape)),
                                tuple(s * dtype.nbytes for s in reversed(strides[:-1])))
    except ArgumentError as error:
        raise ArgumentError(f"argument {name!r} (view {view}): {error}") from None
