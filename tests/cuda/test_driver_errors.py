"""A failed CUDA driver call is a warpspec error (``CudaError``) and still a RuntimeError."""

from __future__ import annotations

import pytest
from cuda.bindings import driver as cu

from warpspec import WarpspecError
from warpspec.cuda.driver import CudaError, check


def test_a_failed_driver_call_is_a_warpspec_error_naming_the_call():
    with pytest.raises(WarpspecError) as caught:
        check((cu.CUresult.CUDA_ERROR_NO_DEVICE,), "cuDeviceGet")
    assert type(caught.value) is CudaError and isinstance(caught.value, RuntimeError)
    assert str(caught.value).startswith("cuDeviceGet: CUDA_ERROR_NO_DEVICE")
    assert caught.value.code == cu.CUresult.CUDA_ERROR_NO_DEVICE
