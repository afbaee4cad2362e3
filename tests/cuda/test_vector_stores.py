"""``store_global``'s vector stores, the mirror of ``load_global``'s loads (tests/cuda/test_vector_loads.py): a
thread's run of consecutive columns (a blocked chunk) is one store of up to 16 bytes where the view's rows are
contiguous, the addresses aligned and the tile inside the view (and above ``row_end`` and left of ``col_end``), and
element by element where not. Either way the bytes are the emulator's: nothing outside the view or at or past
``row_end`` or ``col_end`` is written. On the
CPU each test checks the emulator against numpy, the generated source and the SASS (``STG.E.128``); the GPU twins
compare the GPU with the emulator at aligned, misaligned, clipped and negative offsets, an odd pitch and a row or
column end inside the tile."""

import numpy as np
import pytest

from tests.support.arrays import to_numpy, to_torch
import warpspec
from warpspec import bfloat16, float32, int32
from warpspec.cuda.launch import compile_kernel
from warpspec.cuda.sass import count_instructions, disassemble
from warpspec.runtime import kernel_for

TILE = (8, 64)


class _TilePlace(warpspec.Script):
    """Load the whole [8, 64] tile ``src`` and store it at (row, col) of a [rows, cols] view with rows ``pitch``
    elements apart, no row at or past ``row_end`` and no column at or past ``col_end`` written."""

    dtype = float32

    def place(self, src_ptr, dst_ptr, rows, cols, pitch, row, col, row_end, col_end):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        src = self.global_view(src_ptr, dtype=self.dtype, shape=list(TILE))
        dst = self.global_view(dst_ptr, dtype=self.dtype, shape=[rows, cols], strides=[pitch, 1])
        tile = self.load_global(src, offsets=[0, 0], shape=list(TILE))
        self.store_global(dst, tile, offsets=[row, col], row_end=row_end, col_end=col_end)


class Float32Place(_TilePlace):
    dtype = float32

    def __call__(self, src_ptr: ~float32, dst_ptr: ~float32, rows: int32, cols: int32, pitch: int32, row: int32,
                 col: int32, row_end: int32, col_end: int32):
        self.place(src_ptr, dst_ptr, rows, cols, pitch, row, col, row_end, col_end)


class BFloat16Place(_TilePlace):
    dtype = bfloat16

    def __call__(self, src_ptr: ~bfloat16, dst_ptr: ~bfloat16, rows: int32, cols: int32, pitch: int32, row: int32,
                 col: int32, row_end: int32, col_end: int32):
        self.place(src_ptr, dst_ptr, rows, cols, pitch, row, col, row_end, col_end)


class Int32Place(_TilePlace):
    dtype = int32

    def __call__(self, src_ptr: ~int32, dst_ptr: ~int32, rows: int32, cols: int32, pitch: int32, row: int32,
                 col: int32, row_end: int32, col_end: int32):
        self.place(src_ptr, dst_ptr, rows, cols, pitch, row, col, row_end, col_end)


KERNELS = [Float32Place, BFloat16Place, Int32Place]

#: (rows, cols, pitch, row, col, row_end, col_end): aligned inside; a column offset of 1 (misaligned); the right
#: edge inside a run; negative offsets; an odd pitch (rows misaligned); a row end inside the tile (the view reaches
#: past it); a column end inside the tile, inside a run and before the tile.
CASES = [(32, 128, 128, 3, 64, 32, 128), (32, 128, 128, 3, 1, 32, 128), (16, 100, 104, 2, 40, 16, 100),
         (16, 128, 128, -2, -4, 16, 128), (16, 128, 129, 1, 8, 16, 128), (32, 128, 128, 4, 0, 9, 128),
         (32, 128, 128, 4, 0, 32, 40), (32, 128, 128, 4, 8, 32, 43), (32, 128, 128, 4, 8, 32, -3)]


def _tile(numpy_dtype):
    """An [8, 64] tile of distinct non-zero values."""
    values = np.arange(TILE[0] * TILE[1], dtype=np.float64).reshape(TILE) % 251 + 1
    return values.astype(numpy_dtype)


def _expected(dst, tile, cols, row, col, row_end, col_end):
    """``dst`` ([rows, pitch], the view its first ``cols`` columns) with the tile written at (row, col) where inside
    the view, above ``row_end`` and left of ``col_end``."""
    out = dst.copy()
    for i in range(TILE[0]):
        for j in range(TILE[1]):
            r, c = row + i, col + j
            if 0 <= r < min(row_end, dst.shape[0]) and 0 <= c < min(cols, col_end):
                out[r, c] = tile[i, j]
    return out


def _run(kernel_class, backend, case, device=None):
    rows, cols, pitch, row, col, row_end, col_end = case
    numpy_dtype = kernel_class.dtype.numpy
    tile = _tile(numpy_dtype)
    dst = np.full((rows, pitch), -7, numpy_dtype)  # a value the tile does not hold: every stray write shows
    expected = _expected(dst, tile, cols, row, col, row_end, col_end)
    if device is not None:
        pytest.importorskip("torch")
        tile_t, dst_t = to_torch(tile, device), to_torch(dst.reshape(-1), device)
        with warpspec.use_backend(backend):
            kernel_class()(tile_t, dst_t, rows, cols, pitch, row, col, row_end, col_end)
        return to_numpy(dst_t).reshape(rows, pitch), expected
    flat = dst.reshape(-1)
    with warpspec.use_backend(backend):
        kernel_class()(tile, flat, rows, cols, pitch, row, col, row_end, col_end)
    return flat.reshape(rows, pitch), expected


@pytest.mark.filterwarnings("ignore::warpspec.UnwrittenOutputWarning")  # the view's rest, by design
@pytest.mark.parametrize("kernel_class", KERNELS)
@pytest.mark.parametrize("case", CASES)
def test_emulator_writes_the_tile_inside_the_view_only(kernel_class, case):
    got, expected = _run(kernel_class, "emulator", case)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("kernel_class", KERNELS)
def test_runs_of_columns_become_vector_stores(kernel_class):
    """The generated source stores each thread's chunk (4 elements of 4 bytes, 8 of 2) as one 16-byte vector behind
    the alignment and bounds check, which takes the row and column ends into account, with the element-by-element
    path beside it; ptxas keeps the 16-byte store."""
    built = compile_kernel(kernel_for(kernel_class(), {}))
    source = built.generated.source
    assert "if ((dst_stride1 == 1) && ((dst_base & 15) == 0)" in source
    assert "*reinterpret_cast<uint4 *>(" in source
    assert "+ 8 <= (row_end < dst_size0 ? row_end : dst_size0)" in source
    assert "+ 64 <= (col_end < dst_size1 ? col_end : dst_size1)" in source
    assert count_instructions(disassemble(built.module.cubin), ["STG.E.128"])["STG.E.128"] == 1


@pytest.mark.gpu
@pytest.mark.parametrize("kernel_class", KERNELS)
@pytest.mark.parametrize("case", CASES)
def test_gpu_writes_what_the_emulator_writes(kernel_class, case):
    got, expected = _run(kernel_class, "cuda", case, device="cuda")
    np.testing.assert_array_equal(got, expected)
