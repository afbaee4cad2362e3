"""Inputs for a kernel the command line runs: an array per pointer parameter, as large as the kernel's global
views of it need (random, zeros for flag arrays), and the memory limit they are checked against first."""

from __future__ import annotations

import numpy as np

from warpspec import dtypes
from warpspec.cli.failures import UsageError
from warpspec.cli.sizes import bytes_text
from warpspec.errors import ArgumentError

#: The default of ``warpspec check --max-memory``: the random inputs' total size in bytes.
DEFAULT_MAX_MEMORY = 4 * 2**30


def bound_kernel(script, params, scalars: dict):
    """``(kernel IR, runtime arguments by name)`` of ``script`` for the scalar arguments ``scalars``, pointers
    given as None. Raises CompileError when the kernel does not compile for them, UsageError when it cannot take
    them."""
    from warpspec.frontend.kernel import bind_arguments
    from warpspec.runtime import kernel_for

    pointers = [p.name for p in params if p.pointer]
    try:
        runtime, compile_time = bind_arguments(type(script), (), {**scalars, **dict.fromkeys(pointers)})
    except ArgumentError as error:
        raise UsageError(str(error)) from None
    return kernel_for(script, compile_time), runtime


def pointer_sizes(script, params, scalars: dict) -> dict[str, int]:
    """How many elements each pointer parameter's array needs: as many as the kernel's global views of it reach.
    Builds the kernel IR for these arguments: raises CompileError when it does not compile."""
    from warpspec.arguments import elements_needed, view_shapes
    from warpspec.frontend.kernel import script_parameters

    pointers = {p.name: p.annotation.dtype for p in script_parameters(script) if p.pointer}
    kernel, runtime = bound_kernel(script, params, scalars)
    env = {param.var.uid: 0 if param.name in pointers else runtime[param.name] for param in kernel.params}
    # Views are sized as the launch checks them.
    sizes = dict.fromkeys(pointers, 1)
    names = {p.var.uid: p.name for p in kernel.params}
    for stmt, shape, strides in view_shapes(kernel, env):
        name = names[stmt.pointer.uid]
        sizes[name] = max(sizes[name], elements_needed(shape, strides))
    return sizes


def pointer_arrays(script, params, scalars: dict) -> dict:
    """An array per pointer parameter, as large as the kernel's global views of it need, of the pointee's numpy
    type (ml_dtypes for bfloat16 and fp8, rounded as the GPU rounds): random values, except zeros for the
    kernel's flag arrays (``warpspec.arguments.flag_pointers``), which a launch must begin with at the values its
    protocol expects, so that a correct hand-off passes and a wrong one fails for its own reason. Builds the kernel
    IR for these arguments: raises CompileError when it does not compile."""
    from warpspec.arguments import flag_pointers
    from warpspec.frontend.kernel import script_parameters

    pointers = {p.name: p.annotation.dtype for p in script_parameters(script) if p.pointer}
    sizes = pointer_sizes(script, params, scalars)
    flags = flag_pointers(bound_kernel(script, params, scalars)[0])
    rng = np.random.default_rng(0)
    return {name: np.zeros(sizes[name], dtype.numpy) if name in flags
            else dtypes.round_to(dtype, rng.standard_normal(sizes[name])) for name, dtype in pointers.items()}


def check_input_memory(script, params, sizes: dict[str, int], max_memory: int) -> None:
    """UsageError naming the pointer arguments and their sizes when the random arrays of ``sizes`` (elements by
    parameter name, as ``pointer_sizes`` gives them) would take more than ``max_memory`` bytes in all."""
    from warpspec.frontend.kernel import script_parameters

    dtypes_by_name = {p.name: p.annotation.dtype for p in script_parameters(script) if p.pointer}
    needed = {name: count * dtypes_by_name[name].numpy.itemsize for name, count in sizes.items()}
    if sum(needed.values()) <= max_memory:
        return
    arrays = ", ".join(f"{name} {sizes[name]} {dtypes_by_name[name].name} elements ({bytes_text(needed[name])})"
                       for name in sorted(needed, key=needed.get, reverse=True))
    raise UsageError(f"the random inputs of {type(script).__name__} for these arguments need "
                     f"{bytes_text(sum(needed.values()))}, more than --max-memory {bytes_text(max_memory)}: "
                     f"{arrays}; give smaller sizes or a larger --max-memory")
