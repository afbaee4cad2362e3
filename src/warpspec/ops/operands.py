"""What the library ops (``ops.matmul``, ``ops.attention``) ask of their array operands, whether numpy arrays or
torch tensors: which of the two an operand is, its warpspec dtype, and that the operands of one call agree in kind
and device. torch stays optional: it is looked up in ``sys.modules``, never imported."""

from __future__ import annotations

import sys

import numpy as np

from warpspec import dtypes
from warpspec.dtypes import DType
from warpspec.emulator.host import check_plain_array
from warpspec.errors import ArgumentError


def kind_of(value, name: str) -> str:
    """``"numpy"`` or ``"torch"``; an ``ArgumentError`` naming ``name`` for anything else (an ndarray subclass such
    as np.matrix included: named here, not as the kernel parameter it would reach)."""
    if isinstance(value, np.ndarray):
        check_plain_array(name, value)
        return "numpy"
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return "torch"
    raise ArgumentError(f"{name} must be a numpy array or a torch tensor, got {type(value).__name__}")


def _describe_kind(value) -> str:
    return "a numpy array" if isinstance(value, np.ndarray) else "a torch tensor"


def same_kind(first_name: str, first, **others) -> str:
    """The kind of ``first`` (``kind_of``), after checking that every operand of ``others`` (by name) has it."""
    kind = kind_of(first, first_name)
    for name, value in others.items():
        if kind_of(value, name) != kind:
            raise ArgumentError(f"{name} is {_describe_kind(value)} but {first_name} is {_describe_kind(first)}: "
                                f"pass numpy arrays or torch tensors, not a mix")
    return kind


def same_device(first_name: str, first, **others) -> None:
    """An ``ArgumentError`` when a tensor of ``others`` (by name; other values are passed over) is on another
    device than torch tensor ``first``."""
    torch = sys.modules["torch"]
    for name, value in others.items():
        if isinstance(value, torch.Tensor) and value.device != first.device:
            raise ArgumentError(f"{name} is on {value.device} but {first_name} is on {first.device}: every tensor "
                                f"of one call must be on the same device")


def dtype_of(value) -> DType | None:
    """The warpspec dtype of a numpy array or torch tensor, or None when warpspec has none."""
    if isinstance(value, np.ndarray):
        return next((d for d in dtypes.ALL_DTYPES if d.numpy == value.dtype), None)
    return dtypes.of_torch(value.dtype)
