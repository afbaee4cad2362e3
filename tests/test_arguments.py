"""Launch arguments are checked before anything runs, and every error names the argument."""

import numpy as np
import pytest

import warpspec
from warpspec import ArgumentError

SCHEDULE = dict(num_stages=2, block_m=128, block_n=64, block_k=64)
#: A grid of no blocks, named with the line of the example that sets self.attrs.blocks.
GRID_AT_ZERO = (r"the kernel's grid is \[0, 1, 1\] \(self.attrs.blocks at \S+matmul_v3.py:39\): blocks.x must be "
                r"positive")


@pytest.fixture(autouse=True)
def emulator():
    with warpspec.use_backend("emulator"):
        yield


def _matmul():
    from matmul_v3 import MatmulWGMMAV3

    return MatmulWGMMAV3(**SCHEDULE)


def _arrays(m, n, k):
    return (np.zeros((m, k), np.float16), np.zeros((n, k), np.float16), np.zeros((m, n), np.float16))


def test_an_array_smaller_than_its_view_is_refused():
    a, b, c = _arrays(100, 64, 64)
    with pytest.raises(ArgumentError, match=r"argument 'a_ptr' holds 6400 elements but the kernel views it as ga "
                                            r"of shape \[128, 64\] \(line \d+\), which needs 8192"):
        _matmul()(128, 64, 64, a, b, c)


@pytest.mark.parametrize("m_size, message", [(2**31, "argument 'm_size': 2147483648 does not fit in int32"),
                                             (True, "argument 'm_size': expected a int32 integer, got True"),
                                             (1.5, "argument 'm_size': expected a int32 integer, got 1.5"),
                                             (0, GRID_AT_ZERO)])
def test_scalars_and_the_grid_are_checked(m_size, message):
    with pytest.raises(ArgumentError, match=message):
        _matmul()(m_size, 64, 64, *_arrays(128, 64, 64))


def test_numpy_integers_are_accepted():
    _matmul()(np.int64(128), 64, 64, *_arrays(128, 64, 64))


@pytest.mark.parametrize("m_size, message", [(2**31, "argument 'm_size': 2147483648 does not fit in int32"),
                                             (True, "argument 'm_size': expected a int32 integer, got True"),
                                             (0, GRID_AT_ZERO),
                                             (200, r"argument 'a_ptr' holds 8192 elements but the kernel views it "
                                                   r"as ga of shape \[200, 64\] \(line \d+\), which needs 12800")])
def test_the_cuda_back_end_refuses_scalars_grids_and_views_alike(monkeypatch, m_size, message):
    """The same arguments, refused the same way by a launch plan (on a fake GPU side), before and after a
    plan for good arguments exists."""
    from tests.cuda.test_launch_plan import FakeSide, array

    from warpspec.cuda import launch, plan
    from warpspec.cuda.compiler import CompiledModule

    monkeypatch.setattr(plan, "_default_side", FakeSide())
    monkeypatch.setattr(launch, "compile_cuda", lambda source, **options: CompiledModule(b"", "", "fake", False))
    kernel = _matmul()
    arrays = (array((128, 64)), array((64, 64), pointer=0x7F0000100000), array((128, 64), pointer=0x7F0000200000))
    with warpspec.use_backend("cuda"):
        for _ in range(2):
            with pytest.raises(ArgumentError, match=message):
                kernel(m_size, 64, 64, *arrays)
            kernel(128, 64, 64, *arrays)
