"""Comparing a kernel's outputs with a reference function's: what ``warpspec check --reference`` and
``check_against_reference`` do after each emulator run.

The emulator finds hazards (deadlocks, races, barrier misuse, out-of-bounds indices), not wrong arithmetic: a
kernel that multiplies the wrong operands runs without an error. A reference is a Python function written against
numpy that computes what the kernel should: it is called with the kernel's arguments by parameter name, scalars as
given and each pointer as a copy of its array before the run, shaped as the pointer's first global view, and writes
the expected values into the output arrays in place, as the kernel does. The outputs (the pointers the kernel
stores to, and any array the reference wrote) are then compared element by element with a tolerance for their
dtype.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from warpspec.arguments import first_views, flag_pointers, view_shapes
from warpspec.dtypes import PointerType
from warpspec.emulator.host import written_pointers
from warpspec.errors import ArgumentError, OutputMismatchError
from warpspec.ir import nodes as ir

#: (rtol, atol) by output dtype: an element passes when ``|kernel - reference| <= atol + rtol * |reference|``.
#: A kernel accumulates in another order than numpy and rounds into its output dtype, so the narrower the dtype,
#: the looser the tolerance: about two units in the last place of the output's precision.
TOLERANCES = {
    "float32": (1e-4, 1e-4),
    "float16": (4e-3, 4e-3),
    "bfloat16": (2e-2, 2e-2),
    "float8_e4m3": (1.25e-1, 1.25e-1),
    "float8_e5m2": (2.5e-1, 2.5e-1),
}
EXACT = (0.0, 0.0)  # integers and booleans


def tolerance(dtype_name: str, rtol: float | None = None, atol: float | None = None) -> tuple[float, float]:
    """The (rtol, atol) outputs of ``dtype_name`` are compared with: the dtype's defaults (``TOLERANCES``; exact
    for integers), each replaced by ``rtol`` or ``atol`` when given."""
    default_rtol, default_atol = TOLERANCES.get(dtype_name, EXACT)
    return (default_rtol if rtol is None else rtol), (default_atol if atol is None else atol)


class Mismatch(NamedTuple):
    """An output whose worst element is outside the tolerance."""

    output: str  # the pointer parameter's name
    index: tuple[int, ...]  # the worst element's index in the output's first view
    actual: float
    expected: float
    rtol: float
    atol: float
    count: int  # elements outside the tolerance
    total: int

    def message(self) -> str:
        """``c_ptr[3, 17]: the kernel wrote 1.5, the reference 66.25 (error 64.75; rtol 0.004, atol 0.004); 4410
        of 8192 elements differ``."""
        index = ", ".join(str(i) for i in self.index)
        return (f"output {self.output}[{index}]: the kernel wrote {self.actual:g}, the reference {self.expected:g} "
                f"(error {abs(self.actual - self.expected):g}; rtol {self.rtol:g}, atol {self.atol:g}); "
                f"{self.count} of {self.total} elements differ")


def views_by_name(kernel: ir.Kernel, arguments: dict) -> dict[str, tuple[tuple, tuple]]:
    """``name -> (shape, strides in elements)`` of each pointer parameter's first global view for these runtime
    ``arguments`` (pointers without a view are left out)."""
    pointers = {p.var.uid: p.name for p in kernel.params if isinstance(p.type, PointerType)}
    env = {p.var.uid: 0 if p.var.uid in pointers else arguments[p.name] for p in kernel.params}
    first = first_views(view_shapes(kernel, env))
    return {pointers[uid]: (shape, strides) for uid, (_, shape, strides) in first.items()}


def _viewed(flat: np.ndarray, shape: tuple, strides: tuple) -> np.ndarray:
    """``flat`` (1-D, C-contiguous) seen through a view of ``shape`` and element ``strides``."""
    return np.lib.stride_tricks.as_strided(flat, shape, tuple(s * flat.itemsize for s in strides))


def reference_inputs(kernel: ir.Kernel, arguments: dict, flats: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The reference's pointer arguments: a copy of each array (``flats``: parameter name -> the flat array the
    kernel gets) shaped as its first global view (flat when it has none)."""
    views = views_by_name(kernel, arguments)
    inputs = {}
    for name, flat in flats.items():
        copy = np.array(flat, copy=True).reshape(-1)
        inputs[name] = _viewed(copy, *views[name]) if name in views else copy
    return inputs


def call_reference(reference: Callable, values: dict) -> None:
    """Call ``reference`` with the kernel's arguments ``values`` by parameter name: those it names (all of them
    when it takes ``**kwargs``). ArgumentError when it needs a parameter the kernel does not have or returns
    something instead of writing into its output arrays."""
    name = getattr(reference, "__qualname__", repr(reference))
    try:
        signature = inspect.signature(reference)
    except (TypeError, ValueError):
        signature = None
    passed = values
    if signature is not None:
        params = signature.parameters.values()
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            needed = [p.name for p in params if p.default is p.empty
                      and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in values]
            if needed:
                raise ArgumentError(f"reference {name} takes {', '.join(needed)}, which the kernel has no parameter "
                                    f"of; its parameters: {', '.join(values)}")
            passed = {key: value for key, value in values.items() if key in signature.parameters}
    result = reference(**passed)
    if result is not None:
        raise ArgumentError(f"reference {name} returned a {type(result).__name__}: it should write the expected "
                            f"values into its output arrays in place (e.g. c_ptr[...] = a_ptr @ b_ptr.T), as the "
                            f"kernel does, and return None")


def outputs(kernel: ir.Kernel, before: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> list[str]:
    """The pointer parameters to compare: those the kernel stores to, and any the reference changed (an output
    the kernel should have written but does not), in parameter order. Flag arrays are the kernel's protocol, not
    its result: they are not compared."""
    flags = set(flag_pointers(kernel))
    stored = {param.var.uid for param in kernel.params if param.name not in flags} & written_pointers(kernel)
    names = []
    for param in kernel.params:
        if param.name not in expected:
            continue
        changed = not np.array_equal(_as_float(expected[param.name]).reshape(-1),
                                     _as_float(_viewed_like(before[param.name], expected[param.name])).reshape(-1),
                                     equal_nan=True)
        if param.var.uid in stored or changed:
            names.append(param.name)
    return names


def _viewed_like(flat: np.ndarray, view: np.ndarray) -> np.ndarray:
    """``flat`` seen with the shape and strides of ``view`` (a ``reference_inputs`` array)."""
    flat = np.ascontiguousarray(flat).reshape(-1)
    return np.lib.stride_tricks.as_strided(flat, view.shape, tuple(s // view.itemsize * flat.itemsize
                                                                   for s in view.strides))


def _as_float(array: np.ndarray) -> np.ndarray:
    """``array`` in float64 (bfloat16 and fp8 through ml_dtypes), integers and booleans exactly."""
    if array.dtype.kind in "biu":
        return array.astype(np.int64 if array.dtype.kind != "u" else np.uint64)
    return np.asarray(array, dtype=np.float64)


def compare(name: str, dtype_name: str, actual_flat: np.ndarray, expected: np.ndarray, rtol: float | None = None,
            atol: float | None = None) -> Mismatch | None:
    """Compare output ``name`` (``actual_flat``: the kernel's flat array after the run) with the reference's
    ``expected`` (its view-shaped array) within ``tolerance(dtype_name, rtol, atol)``: None when every element
    passes, else the worst one. NaN matches NaN only; an infinity matches the same infinity only."""
    rtol, atol = tolerance(dtype_name, rtol, atol)
    actual = _as_float(_viewed_like(actual_flat, expected)).astype(np.float64)
    wanted = _as_float(expected).astype(np.float64)
    if actual.size == 0:
        return None
    with np.errstate(invalid="ignore", over="ignore"):
        error = np.abs(actual - wanted)
        excess = error - (atol + rtol * np.abs(wanted))
    same = (actual == wanted) | (np.isnan(actual) & np.isnan(wanted))
    excess = np.where(same, -np.inf, np.where(np.isnan(excess), np.inf, excess))
    bad = excess > 0
    if not bad.any():
        return None
    worst = np.unravel_index(int(np.argmax(excess)), excess.shape)
    return Mismatch(name, tuple(int(i) for i in worst), float(actual[worst]), float(wanted[worst]), rtol, atol,
                    int(bad.sum()), int(bad.size))


def expected_outputs(kernel: ir.Kernel, runtime: dict, compile_time: dict, flats: dict[str, np.ndarray],
                     reference: Callable) -> dict[str, np.ndarray]:
    """Run ``reference`` on copies of the kernel's arrays ``flats`` (taken now, before the kernel runs) and
    return them, view-shaped, holding what it wrote: ``compare``'s ``expected``."""
    inputs = reference_inputs(kernel, runtime, flats)
    scalars = {p.name: runtime[p.name] for p in kernel.params if p.name not in flats}
    call_reference(reference, {**scalars, **compile_time, **inputs})
    return inputs


def mismatches(kernel: ir.Kernel, before: dict[str, np.ndarray], after: dict[str, np.ndarray],
               expected: dict[str, np.ndarray], rtol: float | None = None,
               atol: float | None = None) -> list[Mismatch]:
    """Every output (``outputs``) of a run that differs from ``expected``: ``before`` and ``after`` are the
    kernel's flat arrays by parameter name before and after the run."""
    dtypes_by_name = {p.name: p.type.dtype.name for p in kernel.params if isinstance(p.type, PointerType)}
    found = []
    for name in outputs(kernel, before, expected):
        mismatch = compare(name, dtypes_by_name[name], after[name], expected[name], rtol, atol)
        if mismatch is not None:
            found.append(mismatch)
    return found


def check_against_reference(script, reference: Callable, /, *args, rtol: float | None = None,
                            atol: float | None = None, **kwargs) -> None:
    """Run ``script(*args, **kwargs)`` on the emulator (numpy arrays, written in place as a call writes them) and
    compare its outputs with what ``reference`` writes into copies of the arrays taken before the run (see the
    module's docstring for how it is called). Raises OutputMismatchError naming the first output that differs, its
    worst element and the error; a hazard found while running raises its KernelError as a call does.

    ``rtol``/``atol`` replace every output dtype's default tolerance (``TOLERANCES``). An autotuned Script is
    checked on its first schedule its constructor accepts; pin another with ``script.instantiate(schedule)``."""
    from warpspec.emulator.run import call_on_emulator
    from warpspec.frontend.kernel import bind_arguments, build_kernel

    if hasattr(script, "schedules"):  # an autotuned Script (warpspec.tune.tuned.TunedScript, a layer above)
        script = script.constructible()[0][1]
    runtime, compile_time = bind_arguments(type(script), args, kwargs)
    kernel = build_kernel(script, compile_time)
    arrays = {p.name: runtime[p.name] for p in kernel.params if isinstance(p.type, PointerType)}
    for name, array in arrays.items():
        if not isinstance(array, np.ndarray):
            raise ArgumentError(f"argument {name!r}: check_against_reference takes numpy arrays, got "
                                f"{type(array).__name__}")
    flats = {name: array.reshape(-1) for name, array in arrays.items()}
    before = {name: flat.copy() for name, flat in flats.items()}
    expected = expected_outputs(kernel, runtime, compile_time, before, reference)
    call_on_emulator(kernel, runtime)
    found = mismatches(kernel, before, flats, expected, rtol, atol)
    if found:
        raise OutputMismatchError("; ".join(m.message() for m in found))
