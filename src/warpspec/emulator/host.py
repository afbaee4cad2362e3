"""The emulator's side of array arguments: a flat numpy array a kernel reads and writes, and the write-back
into the caller's array (numpy arrays are updated in place, CPU torch tensors copied back)."""

from __future__ import annotations

import numpy as np

from warpspec import dtypes
from warpspec.dtypes import DType
from warpspec.errors import ArgumentError

_TORCH_NAMES = {
    "float16": "float16", "bfloat16": "bfloat16", "float32": "float32", "float8_e4m3fn": "float8_e4m3",
    "float8_e5m2": "float8_e5m2", "int8": "int8", "int32": "int32", "int64": "int64", "uint32": "uint32",
    "bool": "boolean",
}



class HostArray:
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
