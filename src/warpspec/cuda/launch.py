"""Running a kernel on the GPU: generate and compile it once, check the arguments, encode tensor maps, launch."""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass

from warpspec.cuda.codegen import GeneratedKernel, generate
from warpspec.cuda.compiler import CompiledModule, compile_cuda
from warpspec.dtypes import PointerType
from warpspec.arguments import check_view, elements_needed, launch_grid, scalar_value, view_shapes
from warpspec.errors import ArgumentError, CompileError
from warpspec.ir import nodes as ir

_CTYPES = {"int32": ctypes.c_int32, "uint32": ctypes.c_uint32, "int64": ctypes.c_int64, "float32": ctypes.c_float,
           "boolean": ctypes.c_bool}


@dataclass
class BuiltKernel:
    """A kernel's generated source and cubin (and, once launched, its loaded function)."""

    generated: GeneratedKernel
    module: CompiledModule
    function: object = None


_built: dict[int, tuple[ir.Kernel, BuiltKernel]] = {}


def build(kernel: ir.Kernel, options: tuple[str, ...] = (), compiler: str | None = None, min_blocks: int = 1,
          block_group: int = 0, quad_stores: bool = True) -> BuiltKernel:
    """Generate CUDA C++ for ``kernel`` and compile it for sm_90a (cached in memory and on disk) with
    ``compiler``: ``nvrtc`` (default) or ``nvcc``, by default from WARPSPEC_COMPILER."""
    compiler = compiler or os.environ.get("WARPSPEC_COMPILER", "nvrtc")
    default = not options and compiler == "nvrtc" and min_blocks == 1 and block_group == 0 and quad_stores
    key = id(kernel)
    entry = _built.get(key)
    if entry is not None and entry[0] is kernel and default:
        return entry[1]
    generated = generate(kernel, min_blocks, block_group, quad_stores)
    module = compile_cuda(generated.source, options=options, compiler=compiler)
    built = BuiltKernel(generated, module)
    if default:
        _built[key] = (kernel, built)  # the kernel is kept alive with its entry, so its id stays unique
    return built


def host_values(kernel: ir.Kernel, arguments: dict) -> tuple[dict, dict]:
    """Check the runtime arguments: (environment of scalar values for host expressions, device arrays by param)."""
    from warpspec.cuda.driver import default_device, as_device_array

    env, arrays = {}, {}
    device = None
    for param in kernel.params:
        value = arguments[param.name]
        if isinstance(param.type, PointerType):
            array = as_device_array(value, param.name)
            if array.dtype_name != param.type.dtype.name:
                raise ArgumentError(f"argument {param.name!r}: expected {param.type.dtype.name} elements for a "
                                    f"{param.type!r} parameter, got {array.dtype_name}")
            device = default_device() if device is None else device
            if array.device_index != device:
                raise ArgumentError(f"argument {param.name!r} is on GPU {array.device_index}, but the kernel "
                                    f"launches on GPU {device} (the current device)")
            arrays[param.name] = array
            env[param.var.uid] = array.pointer
        else:
            env[param.var.uid] = scalar_value(param, value)
    return env, arrays


def _view_geometry(kernel: ir.Kernel, env: dict, arrays: dict) -> dict[int, tuple[tuple, tuple]]:
    """Shape and strides (elements) of every global view, checked against the arrays they view."""
    names = {p.var.uid: p.name for p in kernel.params}
    geometry = {}
    for stmt, shape, strides in view_shapes(kernel, env):
        if shape is None:
            raise CompileError(f"the shape of global view {stmt.decl.name} must depend only on kernel parameters "
                               f"for the CUDA back end", str(stmt.loc))
        array = arrays[names[stmt.pointer.uid]]
        span = elements_needed(array.shape, array.strides_elements) if array.shape else 1
        check_view(names[stmt.pointer.uid], stmt, shape, strides, span)
        geometry[stmt.decl.uid] = (shape, strides)
    return geometry


def _tensor_maps(built: BuiltKernel, geometry: dict, arrays: dict, l2_promotion: int) -> list:
    from warpspec.cuda.driver import encode_tiled_tensor_map

    maps = []
    for use in built.generated.tensor_maps:
        shape, strides = geometry[use.view.uid]
        array = arrays[use.pointer]
        elem = use.view.dtype.nbytes
        if strides[-1] != 1:
            raise ArgumentError(f"argument {use.pointer!r}: TMA needs the innermost dimension of {use.view.name} "
                                f"to be contiguous (stride 1), got stride {strides[-1]}")
        try:
            maps.append(encode_tiled_tensor_map(
                use.view.dtype, array.pointer, tuple(reversed(shape)),
                tuple(s * elem for s in reversed(strides[:-1])),
                (use.tile.box_cols, use.tile.box_rows) + (1,) * (len(shape) - 2), use.tile.swizzle_bytes,
                l2_promotion))
        except ArgumentError as error:
            raise ArgumentError(f"argument {use.pointer!r} (view {use.view.name}): {error}") from None
    return maps


def run_kernel(kernel: ir.Kernel, arguments: dict, stream: int | None = None, built: BuiltKernel | None = None,
               l2_promotion: int = 128) -> None:
    """Launch ``kernel`` on the current GPU with runtime ``arguments`` (by parameter name); ``built`` overrides
    the default build (e.g. other compile options)."""
    from warpspec.cuda.driver import launch, load_module

    env, arrays = host_values(kernel, arguments)
    built = built or build(kernel)
    geometry = _view_geometry(kernel, env, arrays)
    grid = list(launch_grid(kernel, env))
    maps = _tensor_maps(built, geometry, arrays, l2_promotion)
    params = []
    for param in kernel.params:
        if isinstance(param.type, PointerType):
            params.append(arrays[param.name].pointer)
        else:
            params.append(_CTYPES[param.type.name](env[param.var.uid]))
    params.extend(maps)
    if built.generated.block_group:
        params += [ctypes.c_int32(grid[0]), ctypes.c_int32(grid[1])]
        grid = [grid[0] * grid[1], 1, 1]
    if built.function is None:
        built.function = load_module(built.module.cubin).function(built.generated.name)
    cluster = kernel.cluster if kernel.cluster != (1, 1, 1) else None
    launch(built.function, tuple(grid), (kernel.num_threads, 1, 1), built.generated.shared_bytes, params,
           cluster=cluster, stream=stream)
