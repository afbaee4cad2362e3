"""Python-API errors read at the user's frames: a front-end CompileError's traceback is cut to them, Ctrl-C in an
emulator run stays a KeyboardInterrupt and says which kernel, schedule and block it stopped in, and environment
variables that cannot work are warpspec errors naming them."""

import errno
import sys
import traceback

import numpy as np
import pytest

import warpspec
import warpspec.emulator.machine
from warpspec import float32, int32
from warpspec.errors import ArgumentError, CompileError

from tests.kernels import reference_kernels as kernels_reference


class RecursiveHelper(warpspec.Script):
    def helper(self, n):
        return self.helper(n)  # marker: recursion

    def __call__(self, n: int32, out: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        self.helper(n)


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(open(__file__), 1) if f"# marker: {marker}" in text)


def test_front_end_compile_error_traceback_is_cut_to_the_users_frames():
    with warpspec.use_backend("emulator"), pytest.raises(CompileError) as raised:
        RecursiveHelper()(4, np.zeros(4, np.float32))  # marker: call
    text = "".join(traceback.format_exception(raised.value))
    assert len(text.splitlines()) < 30, text
    assert f'File "{__file__}", line {_line("call")}' in text
    assert f"{__file__}:{_line('recursion')}: RecursiveHelper.helper() calls itself" in text
    assert "frontend" not in text and raised.value.__cause__ is None and raised.value.__suppress_context__


def _gemm_call():
    a = np.zeros((64, 128), np.float16)
    b = np.zeros((128, 128), np.float16)
    return 64, 128, 128, a, b, np.zeros((64, 128), np.float16)


def test_ctrl_c_names_kernel_schedule_and_block(monkeypatch):
    runs = []

    def interrupted_run(machine):
        runs.append(machine)
        if len(runs) == 2:  # in the second block
            raise KeyboardInterrupt

    monkeypatch.setattr(warpspec.emulator.machine.BlockMachine, "run", interrupted_run)
    with warpspec.use_backend("emulator"), pytest.raises(KeyboardInterrupt) as raised:
        kernels_reference.Gemm()(*_gemm_call())
    assert type(raised.value) is KeyboardInterrupt
    notes = getattr(raised.value, "__notes__", None) or list(raised.value.args)
    assert notes == ["interrupted while emulating Gemm, block 2/2 (blockIdx.x=0, blockIdx.y=1, blockIdx.z=0)"]


def test_ctrl_c_names_the_tuned_schedule(monkeypatch):
    from matmul_v3 import MatmulWGMMAV3

    def interrupted_run(machine):
        raise KeyboardInterrupt

    monkeypatch.setattr(warpspec.emulator.machine.BlockMachine, "run", interrupted_run)
    script = MatmulWGMMAV3(num_stages=2, block_m=128, block_n=64, block_k=16)
    with warpspec.use_backend("emulator"), pytest.raises(KeyboardInterrupt) as raised:
        script(128, 64, 32, np.zeros((128, 32), np.float16), np.zeros((64, 32), np.float16),
               np.zeros((128, 64), np.float16))
    notes = getattr(raised.value, "__notes__", None) or list(raised.value.args)
    assert notes == ["interrupted while emulating MatmulWGMMAV3 (k_size=32 n_size=64 block_k=16 block_m=128 block_n=64 num_stages=2), "
                     "block 1/1 (blockIdx.x=0, blockIdx.y=0, blockIdx.z=0)"]


@pytest.mark.parametrize("failure", ["a file", "read-only"])
def test_profile_dir_that_cannot_be_written_names_the_variable(tmp_path, monkeypatch, failure):
    from warpspec.timeline import gpu
    import warpspec.timeline

    folder = tmp_path / "profiles"
    if failure == "a file":
        folder.write_text("not a folder\n")
    else:  # tests may run as root, to whom a read-only folder is writable: fail as the system would
        def read_only(*args, **kwargs):
            raise PermissionError(errno.EACCES, "Permission denied", str(folder))

        monkeypatch.setattr(warpspec.timeline, "write", read_only)
    with warpspec.use_backend("emulator"), gpu.ProfileSession(report=gpu.report_to(str(folder))), \
            pytest.raises(ArgumentError) as raised:
        kernels_reference.Gemm()(*_gemm_call())
    reason = "Not a directory" if failure == "a file" else "Permission denied"
    assert str(raised.value).startswith(f"WARPSPEC_PROFILE_DIR={folder}: could not write the timeline of Gemm "
                                        f"into {folder}/Gemm-1: {reason}")


def test_cuda_backend_without_a_driver_is_one_error(monkeypatch):
    from warpspec.cuda import driver

    if driver.has_hopper_gpu():
        pytest.skip("a GPU is present")
    torch = pytest.importorskip("torch")

    def no_driver():
        raise driver.CudaError("the CUDA driver library could not be loaded (is an NVIDIA driver installed?): "
                               "not found")

    monkeypatch.setattr(driver, "_initialise", no_driver)
    monkeypatch.setenv("WARPSPEC_BACKEND", "cuda")

    class GpuArray:  # passes the argument checks as GPU memory would, so that the launch reaches the driver
        def __init__(self, shape):
            self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f2", "data": (2**20, False),
                                             "version": 3, "strides": None}

    with pytest.raises(warpspec.errors.WarpspecError) as raised:
        kernels_reference.Gemm()(64, 128, 128, GpuArray((64, 128)), GpuArray((128, 128)), GpuArray((64, 128)))
    text = "".join(traceback.format_exception(raised.value))
    assert "WARPSPEC_BACKEND=cuda selects it" in str(raised.value), text
    assert len(text.splitlines()) < 10, text
