"""``warpspec.ops.Linear``: ``torch.nn.Linear`` whose product is ``ops.matmul`` (the bias and an activation fused
into the kernel), differentiable through ``warpspec::matmul_grad``. Needs PyTorch; ``warpspec.ops`` loads this
module at the first use of ``ops.Linear``."""

from __future__ import annotations

import torch

from warpspec.errors import ArgumentError
from warpspec.ops.kernels import ACTIVATIONS
from warpspec.ops.matmul import matmul


class Linear(torch.nn.Linear):
    """``y = activation(x @ weight.T + bias)`` for ``x`` [..., in_features] with ``ops.matmul``: the weight is
    [out_features, in_features] and initialised as ``torch.nn.Linear``'s (so its state dict loads into one), the
    product reads it K-major (``weight.T``) without a copy, and leading dimensions of ``x`` are flattened into the
    rows. ``activation``: None, ``"relu"``, ``"gelu"`` (tanh approximation) or ``"silu"``. float16 and bfloat16
    parameters (``dtype=``); in_features a multiple of 8, the weight's rows then having TMA's 16-byte pitch."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, activation: str | None = None,
                 device=None, dtype=None):
        if activation not in ACTIVATIONS:
            raise ArgumentError(f"activation must be one of None, 'relu', 'gelu', 'silu'; got {activation!r}")
        for name, value in (("in_features", in_features), ("out_features", out_features)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ArgumentError(f"{name} must be a non-negative int, got {value!r}")
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The layer on ``x`` [..., in_features]."""
        rows = x.reshape(-1, x.shape[-1])
        y = matmul(rows, self.weight.T, bias=self.bias, activation=self.activation)
        return y.reshape(*x.shape[:-1], y.shape[-1])

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, activation={self.activation}"
