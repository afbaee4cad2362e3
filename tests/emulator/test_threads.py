"""The emulator's matrix products run on one BLAS thread (a threaded BLAS made runs ten times slower on a busy
machine), and the caller's thread setting is back afterwards."""

import sys
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_info

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

from matmul_v3 import MatmulWGMMAV3  # noqa: E402
from warpspec.emulator.run import emulate_kernel  # noqa: E402
from warpspec.frontend.kernel import bind_arguments  # noqa: E402
from warpspec.runtime import kernel_for  # noqa: E402


def blas_threads() -> list[int]:
    return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]


def test_blocks_run_on_one_blas_thread():
    if not blas_threads():
        pytest.skip("numpy reports no BLAS library")
    before = blas_threads()
    seen = []
    script = MatmulWGMMAV3(num_stages=2, block_m=128, block_n=64, block_k=16)
    a, b = np.ones((130, 32), np.float16), np.ones((70, 32), np.float16)
    c = np.zeros((130, 70), np.float16)
    runtime, compile_time = bind_arguments(MatmulWGMMAV3, (130, 70, 32, a, b, c), {})
    emulate_kernel(kernel_for(script, compile_time), runtime, progress=lambda *_: seen.append(blas_threads()))
    assert len(seen) == 4 and all(threads == [1] * len(before) for threads in seen)
    assert blas_threads() == before
    np.testing.assert_array_equal(c, np.full((130, 70), 32, np.float16))
