"""``load_global``'s vector loads: a thread's run of consecutive columns (a blocked chunk) is one load of up to 16
bytes where the view's rows are contiguous, the addresses aligned and the tile inside the view, and element by element
where not. Either way the values are the emulator's: elements outside the view read as
zero. On the CPU each test checks the emulator against numpy, the generated source and the SASS (``LDG.E.128``); the
GPU twins compare the GPU with the emulator at aligned, misaligned, clipped and negative offsets and an odd pitch."""

import numpy as np
import pytest

from tests.support.arrays import to_numpy, to_torch
import warpspec
from warpspec import bfloat16, float32, int32
from warpspec.cuda.launch import compile_kernel
from warpspec.cuda.sass import count_instructions, disassemble
from warpspec.runtime import kernel_for

TILE = (8, 64)


class _TileCopy(warpspec.Script):
    """Load the [8, 64] tile at (row, col) of a [rows, cols] view with rows ``pitch`` elements apart, and store it
    whole into ``dst``."""

    dtype = float32

    def copy(self, src_ptr, dst_ptr, rows, cols, pitch, row, col):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        src = self.global_view(src_ptr, dtype=self.dtype, shape=[rows, cols], strides=[pitch, 1])
        dst = self.global_view(dst_ptr, dtype=self.dtype, shape=list(TILE))
        self.store_global(dst, self.load_global(src, offsets=[row, col], shape=list(TILE)), offsets=[0, 0])


class Float32Copy(_TileCopy):
    dtype = float32

    def __call__(self, src_ptr: ~float32, dst_ptr: ~float32, rows: int32, cols: int32, pitch: int32, row: int32,
                 col: int32):
        self.copy(src_ptr, dst_ptr, rows, cols, pitch, row, col)


class BFloat16Copy(_TileCopy):
    dtype = bfloat16

    def __call__(self, src_ptr: ~bfloat16, dst_ptr: ~bfloat16, rows: int32, cols: int32, pitch: int32, row: int32,
                 col: int32):
        self.copy(src_ptr, dst_ptr, rows, cols, pitch, row, col)


class Int32Copy(_TileCopy):
    dtype = int32

    def __call__(self, src_ptr: ~int32, dst_ptr: ~int32, rows: int32, cols: int32, pitch: int32, row: int32,
                 col: int32):
        self.copy(src_ptr, dst_ptr, rows, cols, pitch, row, col)


KERNELS = [Float32Copy, BFloat16Copy, Int32Copy]


class ColumnScale(warpspec.Script):
    """out = (x + s) · s for an [8, 64] tile x and a column vector s [8, 1] broadcast along its rows: the column
    vector of a blocked tile holds one register per chunk (a chunk lies in one row), each combined with the chunk's
    4 elements. (An addition of a product would be one FFMA on the GPU, rounded once: docs/cuda.md.)"""

    def __call__(self, x_ptr: ~float32, s_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        x = self.load_global(self.global_view(x_ptr, dtype=float32, shape=list(TILE)), offsets=[0, 0],
                             shape=list(TILE))
        s = self.load_global(self.global_view(s_ptr, dtype=float32, shape=[TILE[0], 1]), offsets=[0, 0],
                             shape=[TILE[0], 1])
        self.store_global(self.global_view(out_ptr, dtype=float32, shape=list(TILE)), (x + s) * s, offsets=[0, 0])


def _column_scale(backend, device=None):
    x = np.arange(TILE[0] * TILE[1], dtype=np.float32).reshape(TILE) / 7
    s = np.arange(1, TILE[0] + 1, dtype=np.float32).reshape(TILE[0], 1) * 3
    out = np.zeros(TILE, np.float32)
    if device is not None:
        torch = pytest.importorskip("torch")
        xs, ss, outs = (torch.from_numpy(a).to(device) for a in (x, s, out))
        with warpspec.use_backend(backend):
            ColumnScale()(xs, ss, outs)
        torch.cuda.synchronize()
        return outs.cpu().numpy(), (x + s) * s
    with warpspec.use_backend(backend):
        ColumnScale()(x, s, out)
    return out, (x + s) * s

#: (rows, cols, pitch, row, col): aligned inside; a column offset of 1 (misaligned); the right edge inside a run;
#: negative offsets; an odd pitch (rows misaligned).
CASES = [(32, 128, 128, 3, 64), (32, 128, 128, 3, 1), (16, 100, 104, 2, 40), (16, 128, 128, -2, -4),
         (16, 128, 129, 1, 8)]


def _source(rows, pitch, numpy_dtype):
    """A [rows, pitch] array of distinct values (the view's [rows, cols] part of it is what the kernel reads; the
    kernel takes it flat, as a buffer with a row pitch)."""
    values = np.arange(rows * pitch, dtype=np.float64).reshape(rows, pitch) % 997 - 498
    return values.astype(numpy_dtype)


def _expected(src, cols, row, col):
    """The tile at (row, col) of ``src``'s first ``cols`` columns, zero outside."""
    out = np.zeros(TILE, src.dtype)
    for i in range(TILE[0]):
        for j in range(TILE[1]):
            r, c = row + i, col + j
            if 0 <= r < src.shape[0] and 0 <= c < cols:
                out[i, j] = src[r, c]
    return out


def _run(kernel_class, backend, case, device=None):
    rows, cols, pitch, row, col = case
    numpy_dtype = kernel_class.dtype.numpy
    src = _source(rows, pitch, numpy_dtype)
    dst = np.zeros(TILE, numpy_dtype)
    expected = _expected(src, cols, row, col)
    if device is not None:
        pytest.importorskip("torch")
        src_t, dst_t = to_torch(src.reshape(-1), device), to_torch(dst, device)
        with warpspec.use_backend(backend):
            kernel_class()(src_t, dst_t, rows, cols, pitch, row, col)
        return to_numpy(dst_t), expected
    with warpspec.use_backend(backend):
        kernel_class()(src.reshape(-1), dst, rows, cols, pitch, row, col)
    return dst, expected


@pytest.mark.parametrize("kernel_class", KERNELS)
@pytest.mark.parametrize("case", CASES)
def test_emulator_reads_the_tile_and_zeros_outside(kernel_class, case):
    got, expected = _run(kernel_class, "emulator", case)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("kernel_class", KERNELS)
def test_runs_of_columns_become_vector_loads(kernel_class):
    """The generated source loads each thread's chunk (4 elements of 4 bytes, 8 of 2) as one 16-byte vector behind
    the alignment check, with the element-by-element path beside it, and ptxas keeps the 16-byte load."""
    built = compile_kernel(kernel_for(kernel_class(), {}))
    source = built.generated.source
    assert "if ((src_stride1 == 1) && ((src_base & 15) == 0)" in source
    assert "const uint4 loaded_" in source
    assert count_instructions(disassemble(built.module.cubin), ["LDG.E.128"])["LDG.E.128"] == 1


def test_a_column_vector_of_a_blocked_tile_holds_one_register_per_chunk():
    got, expected = _column_scale("emulator")
    np.testing.assert_array_equal(got, expected)
    source = compile_kernel(kernel_for(ColumnScale(), {})).generated.source
    assert "float s[1];" in source and "float x[4];" in source


@pytest.mark.gpu
def test_gpu_broadcasts_a_column_vector_of_a_blocked_tile_as_the_emulator_does():
    got, expected = _column_scale("cuda", device="cuda")
    np.testing.assert_array_equal(got, expected)


@pytest.mark.gpu
@pytest.mark.parametrize("kernel_class", KERNELS)
@pytest.mark.parametrize("case", CASES)
def test_gpu_reads_what_the_emulator_reads(kernel_class, case):
    got, expected = _run(kernel_class, "cuda", case, device="cuda")
    np.testing.assert_array_equal(got, expected)
