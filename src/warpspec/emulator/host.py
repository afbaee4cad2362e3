"""The emulator's side of array arguments: a flat numpy array a kernel reads and writes, and the write-back
into the caller's array (numpy arrays are updated in place, CPU torch tensors copied back)."""

from __future__ import annotations

import numpy as np

from warpspec import dtypes
from warpspec.errors import ArgumentError
from warpspec.ir import nodes as ir
from warpspec.isa import registry
from warpspec.isa.memory import GlobalView

# ndarray subclasses whose indexing is a plain array's (np.matrix keeps two dimensions, masked arrays skip
# masked elements: flattening and indexing either would not address the memory the kernel means).
_PLAIN_ARRAYS = (np.ndarray, np.memmap)
# How to make an array of the dtypes numpy has no type of its own for ({} is the argument). fp8 goes through
# round_to because astype turns out-of-range values into NaN where the GPU saturates.
_CONVERSION = {
    "bfloat16": "{}.astype(ml_dtypes.bfloat16)",
    "float8_e4m3": "warpspec.dtypes.round_to(warpspec.float8_e4m3, {})",
    "float8_e5m2": "warpspec.dtypes.round_to(warpspec.float8_e5m2, {})",
}


def check_plain_array(name: str, array: np.ndarray) -> None:
    """ArgumentError naming argument ``name`` when numpy array ``array`` is an ndarray subclass whose indexing is not
    a plain array's (``_PLAIN_ARRAYS``): the kernel would not address the memory its author means."""
    if type(array) not in _PLAIN_ARRAYS:
        raise ArgumentError(f"argument {name!r}: got a {type(array).__module__}.{type(array).__name__}, an ndarray "
                            f"subclass that indexes differently from a plain array; pass np.asarray({name}) instead")


def written_pointers(kernel: ir.Kernel) -> set[int]:
    """Uids of the pointer parameters whose memory ``kernel`` writes: views a statement declaring
    ``registry.WRITES_GLOBAL`` writes (stores, TMA stores, flag signals)."""
    pointer_of = {}
    targets = []
    for stmt in ir.walk(kernel.body):
        if isinstance(stmt, GlobalView):
            pointer_of[stmt.decl.uid] = stmt.pointer.uid
        else:
            written = registry.fact_of(registry.WRITES_GLOBAL, type(stmt))
            if written is not None:
                targets.append(written(stmt).decl.uid)
    return {pointer_of[uid] for uid in targets}


class HostArray:
    """A kernel's view of one array argument: a flat numpy array over the argument's own memory (a numpy array's,
    or a CPU torch tensor's), which the kernel reads and writes in place.

    Built before the run for pointer parameter ``param`` of ``kernel``; every check that can fail raises
    ArgumentError naming the argument.
    """

    def __init__(self, kernel: ir.Kernel, param: ir.Param, value):
        self.name, self.dtype = param.name, param.type.dtype
        self.written = param.var.uid in written_pointers(kernel)
        if type(value).__module__.startswith("torch"):
            self._from_torch(value)
        elif isinstance(value, np.ndarray):
            self._from_numpy(value)
        else:
            raise ArgumentError(f"argument {self.name!r}: expected a numpy array or a torch CPU tensor of "
                                f"{self.dtype.name}, got {type(value).__name__}")

    def _from_numpy(self, array: np.ndarray) -> None:
        check_plain_array(self.name, array)
        if array.dtype != self.dtype.numpy:
            conversion = _CONVERSION.get(self.dtype.name)
            hint = f"; convert it with {conversion.format(self.name)}" if conversion else ""
            raise ArgumentError(f"argument {self.name!r}: expected dtype {self.dtype.numpy} for a ~{self.dtype.name} "
                                f"parameter, got {array.dtype}{hint}")
        if not array.flags.c_contiguous:
            raise ArgumentError(f"argument {self.name!r}: the array must be C-contiguous (use np.ascontiguousarray)")
        if self.written and not array.flags.writeable:
            raise ArgumentError(f"argument {self.name!r}: the kernel writes this array, but it is read-only "
                                f"(pass a writeable copy, e.g. {self.name}.copy())")
        self.flat = array.reshape(-1)

    def _from_torch(self, tensor) -> None:
        if tensor.device.type != "cpu":
            raise ArgumentError(f"argument {self.name!r}: the emulator runs on the CPU; got a tensor on "
                                f"{tensor.device} (use the cuda back end, or .cpu())")
        if dtypes.of_torch(tensor.dtype) is not self.dtype:
            raise ArgumentError(f"argument {self.name!r}: expected a {self.dtype.name} tensor, got {tensor.dtype}")
        if not tensor.is_contiguous():
            raise ArgumentError(f"argument {self.name!r}: the tensor must be contiguous (use .contiguous())")
        # The tensor's own memory, as for numpy arrays: one tensor passed for two parameters (or two views of one
        # storage) is one memory, which the emulator's global-memory race checks must see.
        self.flat = dtypes.torch_to_numpy(tensor.reshape(-1))
