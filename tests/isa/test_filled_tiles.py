"""A register tile filled by ``register_tensor(init=...)`` and stored with ``store_global`` (a zero tile written into
an output, say) is blocked over the threads that define it, as a load is, when it is too large for every thread to
hold whole: each thread stores its own runs of columns, as vectors where aligned. Before, such a tile was a compile
error ("too large to replicate"). A large tile that is neither loaded, stored nor a WGMMA operand still is one, at
its line; so is a store by threads other than those holding the tile. The GPU twin compares with the emulator."""

import numpy as np
import pytest

from tests.support.arrays import to_numpy, to_torch
from tests.support.markers import markers_of
import warpspec
from warpspec import CompileError, bfloat16, float32, int32
from warpspec.cuda.launch import compile_kernel
from warpspec.cuda.sass import count_instructions, disassemble
from warpspec.runtime import kernel_for

FILL = 1.5  # not zero, so an element a store missed shows beside one it wrote


class _Fill(warpspec.Script):
    """One warpgroup writes a [64, 64] tile of ``FILL`` at row ``row`` of a [rows, 64] view, rows from
    ``row_end`` on left alone."""

    dtype = float32

    def fill(self, dst_ptr, rows, row, row_end):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        dst = self.global_view(dst_ptr, dtype=self.dtype, shape=[rows, 64])
        tile = self.register_tensor(dtype=self.dtype, shape=[64, 64], init=FILL)
        self.store_global(dst, tile, offsets=[row, 0], row_end=row_end)


class Float32Fill(_Fill):
    dtype = float32

    def __call__(self, dst_ptr: ~float32, rows: int32, row: int32, row_end: int32):
        self.fill(dst_ptr, rows, row, row_end)


class BFloat16Fill(_Fill):
    dtype = bfloat16

    def __call__(self, dst_ptr: ~bfloat16, rows: int32, row: int32, row_end: int32):
        self.fill(dst_ptr, rows, row, row_end)


class Misuse(warpspec.Script):
    """A large filled tile of the block's 256 threads that is never stored, or stored by one of its warpgroups."""

    def __init__(self, mistake):
        super().__init__()
        self.mistake = mistake

    def __call__(self, dst_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 8
        dst = self.global_view(dst_ptr, dtype=float32, shape=[64, 64])
        tile = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)  # <<< never-stored
        if self.mistake == "never-stored":
            tile[0, 0] = 1.0
        if self.mistake == "one-warpgroup":
            with self.thread_group(thread_begin=0, num_threads=128):
                self.store_global(dst, tile, offsets=[0, 0])  # <<< one-warpgroup


KERNELS = [Float32Fill, BFloat16Fill]
#: (rows, row, row_end): inside the view; its last rows clipped by the view; by row_end; before its first row.
CASES = [(128, 32, 128), (80, 32, 80), (128, 32, 70), (64, -8, 64)]


def _run(kernel_class, backend, case, device=None):
    rows, row, row_end = case
    numpy_dtype = kernel_class.dtype.numpy
    dst = np.full((rows, 64), -7, numpy_dtype)
    expected = dst.copy()
    expected[max(row, 0):max(min(row + 64, row_end, rows), 0)] = FILL
    if device is not None:
        pytest.importorskip("torch")
        tensor = to_torch(dst, device)
        with warpspec.use_backend(backend):
            kernel_class()(tensor, rows, row, row_end)
        return to_numpy(tensor), expected
    with warpspec.use_backend(backend):
        kernel_class()(dst, rows, row, row_end)
    return dst, expected


@pytest.mark.filterwarnings("ignore::warpspec.UnwrittenOutputWarning")  # the view's other rows, by design
@pytest.mark.parametrize("kernel_class", KERNELS)
@pytest.mark.parametrize("case", CASES)
def test_the_emulator_writes_the_filled_tile(kernel_class, case):
    got, expected = _run(kernel_class, "emulator", case)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("kernel_class", KERNELS)
def test_the_filled_tile_is_stored_as_vectors_without_local_memory(kernel_class):
    """Blocked over 128 threads, each holds 32 elements in runs of 16 bytes: 8 vector stores of float32, 4 of
    bfloat16, behind the alignment and bounds test, and nothing in local memory."""
    built = compile_kernel(kernel_for(kernel_class(), {}))
    counts = count_instructions(disassemble(built.module.cubin), ["STG.E.128", "STL", "LDL"])
    assert counts == {"STG.E.128": 8 if kernel_class is Float32Fill else 4, "STL": 0, "LDL": 0}


@pytest.mark.parametrize("mistake, fragment", [
    ("never-stored", "register tensor tile (4096 elements) is not a wgmma operand, not loaded or stored, and too "
                     "large to replicate"),
    ("one-warpgroup", "store_global of tile is executed by threads [0, 128), but tile is held as"),
])
def test_a_tile_that_cannot_be_blocked_or_is_stored_by_other_threads_is_a_compile_error(mistake, fragment):
    with warpspec.use_backend("emulator"), pytest.raises(CompileError) as caught:
        Misuse(mistake)(np.zeros((64, 64), np.float32))
    assert caught.value.location == f"{__file__}:{markers_of(__file__)(mistake)}"
    assert fragment in str(caught.value)


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore::warpspec.UnwrittenOutputWarning")
@pytest.mark.parametrize("kernel_class", KERNELS)
@pytest.mark.parametrize("case", CASES)
def test_gpu_writes_what_the_emulator_writes(kernel_class, case):
    got, expected = _run(kernel_class, "cuda", case, device="cuda")
    np.testing.assert_array_equal(got, expected)
