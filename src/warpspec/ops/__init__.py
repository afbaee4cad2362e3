"""Library operations built on warpspec kernels: ``matmul`` (a @ b with a fused epilogue, differentiable for torch
tensors) and ``tune_matmul`` (tune its kernel ahead of time for a list of shapes), described in docs/ops.md,
``Linear`` (``torch.nn.Linear`` on ``matmul``, trainable: loaded at its first use, as it needs PyTorch),
``grouped_matmul`` (a GEMM per group of rows, for mixture-of-experts layers); ``attention`` (the attention forward
pass, differentiable for torch tensors), ``attention_backward`` (its gradients), ``attention_paged`` (a paged KV
cache) and ``attention_varlen`` (packed sequences of different lengths), described in docs/attention.md.

``import warpspec.ops`` needs no PyTorch; torch tensors passed to ``matmul`` go through the custom op
``warpspec::matmul``, registered at the first such call.
"""

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
