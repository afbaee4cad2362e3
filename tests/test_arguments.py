"""Launch arguments are checked before anything runs, and every error names the argument."""

import numpy as np
import pytest

import warpspec
from warpspec import ArgumentError

SCHEDULE = dict(num_stages=2, block_m=128, block_n=64, block_k=64)


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
                                             (0, r"the kernel's grid is \[0, 1, 1\]: blocks.x must be positive")])
def test_scalars_and_the_grid_are_checked(m_size, message):
    with pytest.raises(ArgumentError, match=message):
        _matmul()(m_size, 64, 64, *_arrays(128, 64, 64))


def test_numpy_integers_are_accepted():
    _matmul()(np.int64(128), 64, 64, *_arrays(128, 64, 64))
