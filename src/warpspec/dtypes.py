"""Scalar data types of the kernel language and the pointer types written ``~float16``.

Every dtype has a real numpy type: bfloat16 and the two fp8 kinds are ml_dtypes' ``bfloat16``, ``float8_e4m3fn``
and ``float8_e5m2`` (the types JAX uses), so arrays of them hold the bits the GPU holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class DType:
    """A scalar type: its name in the language, its size, its numpy type and its CUDA C++ spelling.

    ``~dtype`` is the pointer type used in parameter annotations (``a_ptr: ~float16``).
    """

    name: str
    nbytes: int
    kind: str  # "float", "int", "uint", "bool"
    numpy_type: type
    c_name: str

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype of arrays of this type (an ml_dtypes type for bfloat16 and fp8)."""
        return np.dtype(self.numpy_type)

    @property
    def is_float(self) -> bool:
        """True for the floating-point types."""
        return self.kind == "float"

    @property
    def is_integer(self) -> bool:
        """True for the signed and unsigned integer types (not boolean)."""
        return self.kind in ("int", "uint")

    @property
    def nbits(self) -> int:
        """The size in bits."""
        return self.nbytes * 8

    def __invert__(self) -> "PointerType":
        return PointerType(self)

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class PointerType:
    """A pointer to global memory holding elements of ``dtype``; written ``~dtype`` in annotations."""

    dtype: DType

    def __repr__(self) -> str:
        return f"~{self.dtype.name}"


float16 = DType("float16", 2, "float", np.float16, "__half")
bfloat16 = DType("bfloat16", 2, "float", ml_dtypes.bfloat16, "__nv_bfloat16")
float32 = DType("float32", 4, "float", np.float32, "float")
float8_e4m3 = DType("float8_e4m3", 1, "float", ml_dtypes.float8_e4m3fn, "__nv_fp8_e4m3")
float8_e5m2 = DType("float8_e5m2", 1, "float", ml_dtypes.float8_e5m2, "__nv_fp8_e5m2")
int8 = DType("int8", 1, "int", np.int8, "signed char")
int32 = DType("int32", 4, "int", np.int32, "int")
int64 = DType("int64", 8, "int", np.int64, "long long")
uint32 = DType("uint32", 4, "uint", np.uint32, "unsigned int")
boolean = DType("boolean", 1, "bool", np.bool_, "bool")

ALL_DTYPES = (float16, bfloat16, float32, float8_e4m3, float8_e5m2, int8, int32, int64, uint32, boolean)
BY_NAME = {d.name: d for d in ALL_DTYPES}

# Largest finite values; cvt.rn.satfinite turns anything beyond them, infinities included, into them.
_FP8_MAX = {float8_e4m3: 448.0, float8_e5m2: 57344.0}
# The NaN that NVIDIA's conversions from float32 produce for any NaN input (cuda_bf16.hpp / cuda_fp8.hpp), for the
# dtypes whose numpy type is an ml_dtypes one.
_CANONICAL_NAN = {bfloat16: 0x7FFF, float8_e4m3: 0x7F, float8_e5m2: 0x7F}


def round_to(dtype: DType, values) -> np.ndarray:
    """``values`` rounded to ``dtype``: an array of ``dtype.numpy``, as the CUDA back end converts from float32.

    Floating-point types round to nearest even. bfloat16 and fp8 go through float32 first, as on the GPU, and NaN
    becomes the canonical NaN of NVIDIA's conversions (bfloat16 0x7FFF, fp8 0x7F). fp8 follows
    ``cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32``: values beyond the largest finite one, infinities included, saturate to
    it (±448 for e4m3, ±57344 for e5m2). Integer and boolean types convert as numpy's ``astype`` does.
    """
    values = np.asarray(values)
    if dtype not in _CANONICAL_NAN:
        return values.astype(dtype.numpy)
    wide = values.astype(np.float32)
    if dtype in _FP8_MAX:
        # ml_dtypes turns out-of-range values into NaN (e4m3fn has no infinity) or infinity (e5m2): clip first.
        np.clip(wide, -_FP8_MAX[dtype], _FP8_MAX[dtype], out=wide)
    with np.errstate(invalid="ignore"):  # signalling NaNs raise the flag; they become the canonical NaN below
        out = wide.astype(dtype.numpy)
    out.view(f"u{dtype.nbytes}")[np.isnan(wide)] = _CANONICAL_NAN[dtype]
    return out


# torch dtype names (without "torch.") of the dtypes torch has.
_TORCH_NAMES = {"float16": float16, "bfloat16": bfloat16, "float32": float32, "float8_e4m3fn": float8_e4m3,
                "float8_e5m2": float8_e5m2, "int8": int8, "int32": int32, "int64": int64, "uint32": uint32,
                "bool": boolean}
_BY_NUMPY = {d.numpy: d for d in ALL_DTYPES}
# dtypes torch.from_numpy / Tensor.numpy cannot exchange: their storage crosses as same-sized integers, bit for bit.
_TORCH_RAW = {bfloat16: ("bfloat16", "int16"), float8_e4m3: ("float8_e4m3fn", "uint8"),
              float8_e5m2: ("float8_e5m2", "uint8")}


def of_torch(torch_dtype) -> DType | None:
    """The warpspec dtype of a torch dtype, or None if warpspec has none."""
    return _TORCH_NAMES.get(str(torch_dtype).removeprefix("torch."))


def torch_to_numpy(tensor) -> np.ndarray:
    """A numpy array sharing the memory of CPU torch ``tensor``, of the dtype's numpy type (for bfloat16 and fp8 the
    stored bits reinterpreted as the ml_dtypes type, with no conversion through float)."""
    import torch

    tensor = tensor.detach()
    dtype = of_torch(tensor.dtype)
    if dtype in _TORCH_RAW:
        return tensor.view(getattr(torch, _TORCH_RAW[dtype][1])).numpy().view(dtype.numpy)
    return tensor.numpy()


def numpy_to_torch(array: np.ndarray):
    """A CPU torch tensor sharing the memory of numpy ``array``: the inverse of :func:`torch_to_numpy`."""
    import torch

    dtype = _BY_NUMPY.get(array.dtype)
    if dtype in _TORCH_RAW:
        torch_name, raw = _TORCH_RAW[dtype]
        return torch.from_numpy(array.view(raw)).view(getattr(torch, torch_name))
    return torch.from_numpy(array)
