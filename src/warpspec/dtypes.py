"""Scalar data types of the kernel language and the pointer types written ``~float16``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    """A scalar type: its name in the language, its size, its numpy storage type and its CUDA C++ spelling.

    ``~dtype`` is the pointer type used in parameter annotations (``a_ptr: ~float16``).
    """

    name: str
    nbytes: int
    kind: str  # "float", "int", "uint", "bool"
    numpy_name: str
    c_name: str

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype that holds values of this type (fp8 types are held as their float32 values)."""
        return np.dtype(self.numpy_name)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_integer(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def nbits(self) -> int:
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


float16 = DType("float16", 2, "float", "float16", "__half")
bfloat16 = DType("bfloat16", 2, "float", "float32", "__nv_bfloat16")
float32 = DType("float32", 4, "float", "float32", "float")
float8_e4m3 = DType("float8_e4m3", 1, "float", "float32", "__nv_fp8_e4m3")
float8_e5m2 = DType("float8_e5m2", 1, "float", "float32", "__nv_fp8_e5m2")
int8 = DType("int8", 1, "int", "int8", "signed char")
int32 = DType("int32", 4, "int", "int32", "int")
int64 = DType("int64", 8, "int", "int64", "long long")
uint32 = DType("uint32", 4, "uint", "uint32", "unsigned int")
boolean = DType("boolean", 1, "bool", "bool", "bool")

ALL_DTYPES = (float16, bfloat16, float32, float8_e4m3, float8_e5m2, int8, int32, int64, uint32, boolean)
BY_NAME = {d.name: d for d in ALL_DTYPES}


def round_to(dtype: DType, values: np.ndarray) -> np.ndarray:
    """Round ``values`` to what ``dtype`` can hold, returned in ``dtype.numpy`` storage.

    bfloat16 and fp8 have no numpy type; they are kept as float32 holding exactly representable values
    (round to nearest even on the bit pattern), which is what the GPU stores.
    """
    values = np.asarray(values)
    if dtype is bfloat16:
        bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
        rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
        nan = np.isnan(values)
        rounded = ((bits + rounding) & np.uint32(0xFFFF0000)).view(np.float32)
        return np.where(nan, np.float32(np.nan), rounded).astype(np.float32)
    if dtype in (float8_e4m3, float8_e5m2):
        return _round_fp8(np.asarray(values, dtype=np.float32), dtype)
    if dtype.is_integer or dtype is boolean:
        return np.asarray(values).astype(dtype.numpy)
    return np.asarray(values).astype(dtype.numpy)


def _round_fp8(values: np.ndarray, dtype: DType) -> np.ndarray:
    """Round float32 values to e4m3 (max 448, no infinities) or e5m2 (max 57344), saturating like cvt .satfinite."""
    mantissa_bits, min_exponent, max_value = (3, -6, 448.0) if dtype is float8_e4m3 else (2, -14, 57344.0)
    magnitude = np.abs(values)
    exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
    exponent = np.maximum(exponent, min_exponent)
    step = np.exp2(exponent - mantissa_bits)
    rounded = np.round(magnitude / step) * step  # numpy rounds half to even
    rounded = np.minimum(rounded, max_value)
    return np.where(np.isnan(values), np.nan, np.sign(values) * rounded).astype(np.float32)
