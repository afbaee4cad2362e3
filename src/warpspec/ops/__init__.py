"""Library operations built on warpspec kernels: ``attention`` (FlashAttention-style forward)."""

from warpspec.ops.attention import attention

__all__ = ["attention"]
