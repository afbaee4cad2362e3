"""Library operations built on warpspec kernels: ``matmul`` (a @ b with a fused epilogue) and ``tune_matmul``
(tune its kernel ahead of time for a list of shapes), described in docs/ops.md, and ``attention`` (the attention
forward pass, differentiable for torch tensors) and ``attention_backward`` (its gradients), docs/attention.md.

``import warpspec.ops`` needs no PyTorch; torch tensors passed to ``matmul`` go through the custom op
``warpspec::matmul``, registered at the first such call.
"""

from warpspec.ops.attention import attention
from warpspec.ops.attention_backward import attention_backward
from warpspec.ops.matmul import matmul, tune_matmul

__all__ = ["attention", "attention_backward", "matmul", "tune_matmul"]
