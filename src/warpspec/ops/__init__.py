"""Library operations built on warpspec kernels: ``matmul`` (a @ b with a fused epilogue) and ``tune_matmul``
(tune its kernel ahead of time for a list of shapes), described in docs/ops.md, and ``attention`` (the attention
forward pass, differentiable for torch tensors) and ``attention_backward`` (its gradients), ``attention_paged`` (a paged KV cache) and ``attention_varlen`` (packed
sequences of different lengths), docs/attention.md.

``import warpspec.ops`` needs no PyTorch; torch tensors passed to ``matmul`` go through the custom op
``warpspec::matmul``, registered at the first such call.
"""

from warpspec.ops.attention import attention
from warpspec.ops.attention_backward import attention_backward
from warpspec.ops.attention_paged import attention_paged
from warpspec.ops.attention_varlen import attention_varlen
from warpspec.ops.matmul import matmul, tune_matmul

__all__ = ["attention", "attention_backward", "attention_paged", "attention_varlen", "matmul", "tune_matmul"]
