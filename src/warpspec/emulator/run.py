"""Running a kernel on the emulator: argument checks, the grid, and one ``BlockMachine`` per block."""

from __future__ import annotations

import os
import random

import numpy as np

from warpspec import dtypes
from warpspec.dtypes import DType, PointerType
from warpspec.emulator.exprs import ExprCompiler, wrap
from warpspec.emulator.machine import BlockMachine
from warpspec.errors import ArgumentError
from warpspec.ir import nodes as ir

SEED_VARIABLE = "WARPSPEC_EMULATOR_SEED"

_TORCH_NAMES = {
    "float16": "float16", "bfloat16": "bfloat16", "float32": "float32", "float8_e4m3fn": "float8_e4m3",
    "float8_e5m2": "float8_e5m2", "int8": "int8", "int32": "int32", "int64": "int64", "uint32": "uint32",
    "bool": "boolean",
}


def emulator_seed() -> int | None:
    """The seed from WARPSPEC_EMULATOR_SEED, read at each launch (None: the deterministic as-late-as-possible
    order)."""
    text = os.environ.get(SEED_VARIABLE, "").strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise ArgumentError(f"{SEED_VARIABLE} must be an integer, got {text!r}") from None


class _HostArray:
    """A kernel's view of one array argument: a flat numpy array it reads and writes, and how to write back."""

    def __init__(self, name: str, value, dtype: DType):
        self.name, self.value, self.dtype = name, value, dtype
        self.torch_tensor = None
        if type(value).__module__.startswith("torch"):
            self._from_torch(value)
        elif isinstance(value, np.ndarray):
            self._from_numpy(value)
        else:
            raise ArgumentError(f"argument {name!r}: expected a numpy array or a torch CPU tensor of "
                                f"{dtype.name}, got {type(value).__name__}")

    def _from_numpy(self, array: np.ndarray) -> None:
        if array.dtype != self.dtype.numpy:
            hint = " (bfloat16 and fp8 data are passed as float32 arrays holding representable values)" \
                if self.dtype.numpy_name == "float32" and self.dtype.name != "float32" else ""
            raise ArgumentError(f"argument {self.name!r}: expected dtype {self.dtype.numpy} for a ~{self.dtype.name} "
                                f"parameter, got {array.dtype}{hint}")
        if not array.flags.c_contiguous:
            raise ArgumentError(f"argument {self.name!r}: the array must be C-contiguous (use np.ascontiguousarray)")
        self.flat = array.reshape(-1)
        if self.dtype.numpy_name == "float32" and self.dtype.name != "float32":
            rounded = dtypes.round_to(self.dtype, self.flat)
            if not np.array_equal(rounded, self.flat, equal_nan=True):
                raise ArgumentError(f"argument {self.name!r}: values are not representable in {self.dtype.name}; "
                                    f"round them first (warpspec.dtypes.round_to)")

    def _from_torch(self, tensor) -> None:
        if tensor.device.type != "cpu":
            raise ArgumentError(f"argument {self.name!r}: the emulator runs on the CPU; got a tensor on "
                                f"{tensor.device} (use the cuda back end, or .cpu())")
        name = _TORCH_NAMES.get(str(tensor.dtype).replace("torch.", ""))
        if name != self.dtype.name:
            raise ArgumentError(f"argument {self.name!r}: expected a {self.dtype.name} tensor, got {tensor.dtype}")
        if not tensor.is_contiguous():
            raise ArgumentError(f"argument {self.name!r}: the tensor must be contiguous (use .contiguous())")
        self.torch_tensor = tensor
        self.flat = tensor.detach().reshape(-1).float().numpy().astype(self.dtype.numpy) \
            if self.dtype.numpy_name == "float32" else tensor.detach().reshape(-1).numpy().copy()

    def write_back(self) -> None:
        if self.torch_tensor is not None:
            import torch

            self.torch_tensor.copy_(torch.from_numpy(self.flat).reshape(self.torch_tensor.shape))


def run_kernel(kernel: ir.Kernel, arguments: dict) -> None:
    """Run ``kernel`` with runtime ``arguments`` (by parameter name) on the emulator, block after block."""
    env, memory, hosts = {}, {}, []
    for param in kernel.params:
        value = arguments[param.name]
        if isinstance(param.type, PointerType):
            host = _HostArray(param.name, value, param.type.dtype)
            hosts.append(host)
            memory[param.var.uid] = host.flat
            env[param.var.uid] = 0
        else:
            env[param.var.uid] = _scalar(param, value)
    grid = _evaluate_grid(kernel, env)
    _check_views(kernel, env, memory, hosts)
    seed = emulator_seed()
    rng = random.Random(seed) if seed is not None else None
    for z in range(grid[2]):
        for y in range(grid[1]):
            for x in range(grid[0]):
                specials = {"blockIdx.x": x, "blockIdx.y": y, "blockIdx.z": z,
                            "gridDim.x": grid[0], "gridDim.y": grid[1], "gridDim.z": grid[2]}
                BlockMachine(kernel, memory, env, specials, rng).run()
    for host in hosts:
        host.write_back()


def _scalar(param: ir.Param, value):
    dtype = param.type
    if dtype.is_float:
        if not isinstance(value, (int, float, np.floating, np.integer)) or isinstance(value, bool):
            raise ArgumentError(f"argument {param.name!r}: expected a {dtype.name} number, got {value!r}")
        return float(value)
    if isinstance(value, (bool, np.bool_)) and dtype.kind != "bool":
        raise ArgumentError(f"argument {param.name!r}: expected an integer, got {value!r}")
    if not isinstance(value, (int, np.integer, bool, np.bool_)):
        raise ArgumentError(f"argument {param.name!r}: expected a {dtype.name} integer, got {value!r}")
    if wrap(value, dtype) != value:
        raise ArgumentError(f"argument {param.name!r}: {value} does not fit in {dtype.name}")
    return int(value) if dtype.kind != "bool" else bool(value)


def _evaluate_grid(kernel: ir.Kernel, env: dict) -> tuple[int, int, int]:
    exprs = ExprCompiler({})
    sizes = [exprs(e)(env) for e in kernel.grid] + [1] * (3 - len(kernel.grid))
    for axis, size in zip("xyz", sizes):
        if size <= 0:
            raise ArgumentError(f"the kernel's grid is {sizes}: blocks.{axis} must be positive for these arguments")
    for axis, (size, cluster) in enumerate(zip(sizes, kernel.cluster)):
        if size % cluster:
            raise ArgumentError(f"grid {sizes} is not a multiple of the cluster shape {list(kernel.cluster)} in "
                                f"dimension {'xyz'[axis]}")
    return tuple(sizes)


def _check_views(kernel: ir.Kernel, env: dict, memory: dict, hosts) -> None:
    """Every global view must lie inside its array: checked before the launch, naming the argument."""
    exprs = ExprCompiler({"blockIdx.x": 0, "blockIdx.y": 0, "blockIdx.z": 0})
    names = {p.var.uid: p.name for p in kernel.params}
    for stmt in ir.walk(kernel.body):
        if not isinstance(stmt, ir.GlobalView):
            continue
        try:
            shape = [exprs(e)(env) for e in stmt.decl.shape]
            strides = [exprs(e)(env) for e in stmt.strides]
        except KeyError:
            continue  # the view depends on values computed in the kernel; checked as it runs
        if any(s < 0 for s in shape):
            raise ArgumentError(f"argument {names[stmt.pointer.uid]!r}: view {stmt.decl.name} has negative shape "
                                f"{shape}")
        if 0 in shape:
            continue
        last = sum((extent - 1) * stride for extent, stride in zip(shape, strides))
        size = memory[stmt.pointer.uid].size
        if last >= size:
            raise ArgumentError(f"argument {names[stmt.pointer.uid]!r} holds {size} elements but the kernel views "
                                f"it as {stmt.decl.name} of shape {shape} (line {stmt.loc.line}), which needs "
                                f"{last + 1}")
