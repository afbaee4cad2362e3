"""Set-up shared by the example kernels' tests: the emulator on its deterministic schedule, and float16 GEMM
operands with their float32 reference."""

import numpy as np
import pytest

import warpspec
from warpspec.emulator.run import SEED_VARIABLE


@pytest.fixture(autouse=True)
def emulator(monkeypatch):
    """Run on the emulator with its deterministic schedule unless a test sets a seed (autouse in every module that
    imports it)."""
    monkeypatch.delenv(SEED_VARIABLE, raising=False)
    with warpspec.use_backend("emulator"):
        yield


def matmul_operands(m, n, k, seed=0):
    """A [m, k], B [n, k] in float16 and the float32 reference A @ B^T."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((n, k)).astype(np.float16)
    return a, b, a.astype(np.float32) @ b.astype(np.float32).T


def relative_error(c, reference) -> float:
    """The relative Frobenius error of output ``c`` against the float32 ``reference``."""
    return float(np.linalg.norm(c.astype(np.float32) - reference) / np.linalg.norm(reference))
