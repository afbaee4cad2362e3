"""Running a kernel on the emulator: argument checks, the grid, and one ``BlockMachine`` per block."""

from __future__ import annotations

import os
import random

import numpy as np

from warpspec import dtypes
from warpspec.arguments import check_view, launch_grid, scalar_value, view_shapes
from warpspec.dtypes import DType, PointerType
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
            env[param.var.uid] = scalar_value(param, value)
    grid = launch_grid(kernel, env)
    names = {p.var.uid: p.name for p in kernel.params}
    for stmt, shape, strides in view_shapes(kernel, env):
        if shape is not None:  # views over values the kernel computes are checked as it runs
            check_view(names[stmt.pointer.uid], stmt, shape, strides, memory[stmt.pointer.uid].size)
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
