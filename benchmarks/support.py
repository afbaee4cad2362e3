"""What the matmul benchmarks share: the house protocol's operands (docs/performance.md: C = A·Bᵀ, A [M, K] and
B [N, K] row-major fp16 from ``torch.randn``), the fp32 reference, the relative error and the ``do_bench`` median.

The benchmarks are scripts run from the repository root, so ``sys.path[0]`` is benchmarks/ and they import this as
``support``; each imports it after parsing its arguments, as it does torch, so ``--help`` works without a GPU.
"""

from __future__ import annotations

import torch
import triton


def operands(size: int):
    """A and B [size, size] from ``torch.randn`` and an uninitialised C [size, size], fp16 on the GPU."""
    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    c = torch.empty(size, size, device="cuda", dtype=torch.float16)
    return a, b, c


def reference(a, b):
    """A·Bᵀ accumulated in fp32."""
    return a.float() @ b.float().T


def relative_error(c, expected) -> float:
    """The relative Frobenius error of ``c`` against the fp32 ``expected``."""
    return ((c.float() - expected).norm() / expected.norm()).item()


def bench(fn, warmup: int, rep: int) -> float:
    """``triton.testing.do_bench``'s median time of ``fn`` in ms, ``warmup`` and ``rep`` ms of budget."""
    return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")
