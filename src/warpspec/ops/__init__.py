"""Library operations built on warpspec kernels: ``matmul`` (a @ b with a fused epilogue, differentiable for torch
tensors) and ``tune_matmul`` (tune its kernel ahead of time for a list of shapes), described in docs/ops.md,
``Linear`` (``torch.nn.Linear`` on ``matmul``, trainable: loaded at its first use, as it needs PyTorch),
``grouped_matmul`` (a GEMM per group of rows, for mixture-of-experts layers); ``attention`` (the attention forward
pass, differentiable for torch tensors), ``attention_backward`` (its gradients), ``attention_paged`` (a paged KV
cache) and ``attention_varlen`` (packed sequences of different lengths), described in docs/attention.md.

``import warpspec.ops`` needs no PyTorch; torch tensors go through the custom ops (``warpspec::matmul``, ...),
registered with PyTorch when this package is imported after torch, or as soon as torch is imported after it, so
that torch.compile finds them from the first call it traces.
"""

import importlib
import sys

from warpspec.imports import after_import
from warpspec.ops.attention import attention
from warpspec.ops.attention_backward import attention_backward
from warpspec.ops.attention_paged import attention_paged
from warpspec.ops.attention_varlen import attention_varlen
from warpspec.ops.grouped import grouped_matmul
from warpspec.ops.matmul import matmul, tune_matmul

__all__ = ["Linear", "attention", "attention_backward", "attention_paged", "attention_varlen", "grouped_matmul",
           "matmul", "tune_matmul"]


def __getattr__(name: str):
    """``Linear``, imported at its first use: it subclasses ``torch.nn.Linear``, and ``import warpspec.ops`` needs
    no PyTorch."""
    if name == "Linear":
        from warpspec.ops.linear import Linear

        return Linear
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _register_with_torch() -> None:
    """Register every op's custom op with PyTorch (a registration cannot be traced by torch.compile), and the
    differentiable matmul's (``warpspec.ops.matmul_grad``)."""
    for module, register in (("attention", "_torch_op"), ("attention_backward", "torch_backward_op"),
                             ("attention_paged", "_torch_op"), ("attention_varlen", "_torch_op"),
                             ("grouped", "_torch_op"), ("matmul", "_torch_op")):
        getattr(sys.modules[f"warpspec.ops.{module}"], register)()
    importlib.import_module("warpspec.ops.matmul_grad")


after_import("torch", _register_with_torch)
