"""``ops.matmul``'s operand layouts on the emulator against numpy: A and B each row- or column-major (16-bit), row
pitches TMA cannot describe staged through an aligned copy, row-sliced views, leading dimensions of A and batched
operands; float8's K-major rule. The float32 output makes the comparison exact but for the summation order."""

import importlib
import re

import ml_dtypes
import numpy as np
import pytest

from warpspec import ArgumentError, ops

from tests.ops.test_matmul import tile_walk  # noqa: F401  (the fixture)

ops_matmul = importlib.import_module("warpspec.ops.matmul")
BF16, E4M3 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn
#: The float32 result of rounded inputs, summed in another order: a few float32 units of the sum's magnitude.
TOLERANCE = 1e-5


def rounded(shape, dtype, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def as_layout(matrix, layout):
    """``matrix`` [R, C] stored row-major, or column-major (the transposed view of a row-major [C, R] array)."""
    return np.ascontiguousarray(matrix) if layout == "row" else np.ascontiguousarray(matrix.T).T


def assert_product(c, a, b, bias=None):
    expected = a.astype(np.float32) @ b.astype(np.float32)
    if bias is not None:
        expected = expected + bias.astype(np.float32)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(c.astype(np.float32), expected, rtol=0, atol=TOLERANCE * scale * 8)


@pytest.mark.parametrize("dtype", [np.float16, BF16])
@pytest.mark.parametrize("a_layout", ["row", "column"])
@pytest.mark.parametrize("b_layout", ["row", "column"])
@pytest.mark.parametrize("m, n, k", [(96, 80, 64), (72, 40, 48), (128, 128, 128)])
def test_every_layout_of_a_and_b(dtype, a_layout, b_layout, m, n, k):
    a = as_layout(rounded((m, k), dtype, 0), a_layout)
    b = as_layout(rounded((k, n), dtype, 1), b_layout)
    assert ops_matmul.validate(a, b, None, None, None, np.float32).a_k_major == (a_layout == "row")
    assert_product(ops.matmul(a, b, out_dtype=np.float32), a, b)


def test_a_column_major_a_with_every_schedule_shape_and_the_epilogue(tile_walk):
    """Column-major A through tiles of 64 and 128 rows (one and two consumer warpgroups), persistent or not."""
    a = as_layout(rounded((200, 64), np.float16, 2), "column")
    w = rounded((136, 64), np.float16, 3)
    bias = rounded((136,), np.float32, 4)
    problem = ops_matmul.validate(a, w.T, bias, None, None, np.float32)
    tuned = ops_matmul.tuned_script(problem)
    for schedule in ({"num_stages": 2, "block_m": 64, "block_n": 64, "persistent": False, "stream_k": False},
                     {"num_stages": 3, "block_m": 128, "block_n": 128, "persistent": True, "stream_k": False}):
        out = np.full((200, 136), np.nan, np.float32)
        script = tuned.instantiate(schedule)
        script(*ops_matmul.arguments(a, w.T, out, bias, None, problem))
        assert_product(out, a, w.T, bias)


@pytest.mark.parametrize("m, n, k", [(50, 76, 60), (33, 5, 7), (1, 3, 9)])
@pytest.mark.parametrize("a_layout", ["row", "column"])
@pytest.mark.parametrize("b_layout", ["row", "column"])
def test_pitches_tma_cannot_describe_are_staged(m, n, k, a_layout, b_layout):
    """K, N or M not a multiple of 8: the operand whose pitch is not 16 bytes is copied into padded rows first."""
    a = as_layout(rounded((m, k), np.float16, 5), a_layout)
    b = as_layout(rounded((k, n), np.float16, 6), b_layout)
    found = ops_matmul.signature(a, b, None, None, None, np.float32)
    # One row (M = 1) is row-major whatever its strides, and has no pitch.
    expect_a = m > 1 and (k if a_layout == "row" else m) % 8 != 0 and (m if a_layout == "row" else k) > 1
    expect_b = (n if b_layout == "row" else k) % 8 != 0 and (k if b_layout == "row" else n) > 1
    assert found.staging == (expect_a, expect_b)
    assert_product(ops.matmul(a, b, out_dtype=np.float32), a, b)


def test_staged_copies_keep_their_layout_and_pad_to_sixteen_bytes():
    value = as_layout(rounded((50, 60), np.float16, 7), "column")
    copy = ops_matmul.staged_copy(value, transposed=True)
    assert copy.strides == (2, 112) and np.array_equal(copy, value)  # 50 rows padded to 56 elements


def test_row_sliced_views_need_no_copy():
    whole_a = rounded((160, 64), BF16, 8)
    whole_w = rounded((96, 64), BF16, 9)
    a, w = whole_a[16:112], whole_w[8:88]
    assert ops_matmul.signature(a, w.T, None, None, None, np.float32).staging == (False, False)
    assert_product(ops.matmul(a, w.T, out_dtype=np.float32), a, w.T)


def test_leading_dimensions_of_a_are_flattened():
    a = rounded((2, 3, 40, 64), np.float16, 10)
    w = rounded((48, 64), np.float16, 11)
    c = ops.matmul(a, w.T, out_dtype=np.float32)
    assert c.shape == (2, 3, 40, 48)
    assert_product(c.reshape(-1, 48), a.reshape(-1, 64), w.T)
    out = np.empty((2, 3, 40, 48), np.float32)
    assert ops.matmul(a, w.T, out=out) is out and np.array_equal(out, c)
    with pytest.raises(ArgumentError, match="out must have shape"):
        ops.matmul(a, w.T, out=np.empty((6, 40, 48), np.float32))
    with pytest.raises(ArgumentError, match="out: its leading dimensions cannot be flattened without a copy"):
        ops.matmul(a, w.T, out=np.empty((3, 2, 40, 48), np.float32).transpose(1, 0, 2, 3))


@pytest.mark.parametrize("b_layout", ["row", "column"])
def test_batched_operands(b_layout):
    a = rounded((3, 72, 64), BF16, 12)
    b = np.stack([as_layout(rounded((64, 40), BF16, 13 + i), b_layout) for i in range(3)])
    bias = rounded((40,), np.float32, 16)
    c = ops.matmul(a, b, bias=bias, out_dtype=np.float32)
    assert c.shape == (3, 72, 40)
    for index in range(3):
        assert_product(c[index], a[index], b[index], bias)
    out = np.empty((3, 72, 40), np.float32)
    assert ops.matmul(a, b, bias=bias, out=out) is out and np.array_equal(out, c)
    with pytest.raises(ArgumentError, match="batched ops.matmul takes a"):
        ops.matmul(a, b[:2])


def test_float8_stays_k_major():
    a = rounded((64, 64), E4M3, 17)
    w = rounded((64, 64), E4M3, 18)
    with pytest.raises(ArgumentError, match="float8 a must be row-major"):
        ops.matmul(np.ascontiguousarray(a.T).T, w.T, scale_a=1.0, scale_b=1.0)
    with pytest.raises(ArgumentError, match="float8 b must be the transposed view"):
        ops.matmul(a, np.ascontiguousarray(w.T), scale_a=1.0, scale_b=1.0)


@pytest.mark.parametrize("dtype, out_dtype, b_k_major, persistent, split, stages, tile", [
    ("float16", "float16", True, True, True, 3, (128, 256)),
    ("bfloat16", "bfloat16", False, True, False, 4, (128, 128)),
    ("bfloat16", "float32", True, False, False, 2, (64, 128)),
    ("float16", "float16", False, True, True, 3, (256, 128))],
    ids=["f16-k-major-b-stream-k", "bf16-n-major-b-persistent", "bf16-f32-out-one-tile", "f16-256-rows"])
def test_nvrtc_builds_a_column_major_a_without_spills(dtype, out_dtype, b_k_major, persistent, split, stages, tile):
    """The M-major A builds (WGMMA's transposed A descriptor) compile for sm_90a with no spills, no stack, no
    ptxas advisory (serialized WGMMAs) and their WGMMAs: 4 per K-step and 64-row block of a warpgroup, unrolled
    once per stage, each with its imm-trans-a operand set."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import count_instructions, disassemble, parse_ptxas_log
    from warpspec.dtypes import BY_NAME
    from warpspec.ops.kernels import Gemm
    from warpspec.runtime import kernel_for

    kernel = Gemm(BY_NAME[dtype], BY_NAME[out_dtype], b_k_major=b_k_major, has_bias=True, activation="silu",
                  persistent=persistent, stream_k=split, num_stages=stages, block_m=tile[0], block_n=tile[1],
                  a_k_major=False)
    built = compile_kernel(kernel_for(kernel, {}))
    (report,) = parse_ptxas_log(built.module.log).values()
    assert (report.spill_store_bytes, report.spill_load_bytes, report.stack_bytes, report.advisories) == (0, 0, 0, ())
    count = count_instructions(disassemble(built.module.cubin), ["HGMMA"])["HGMMA"]
    row_blocks = tile[0] // (64 if tile[0] == 64 else 128)  # 64-row blocks per consumer warpgroup
    assert count == 4 * stages * row_blocks * (2 if split else 1), count
    immediates = re.findall(r"wgmma\.mma_async[^;]*?, p, 1, 1, (\d), (\d);", built.generated.source)
    assert immediates and {trans_a for trans_a, _ in immediates} == {"1"}
    assert {trans_b for _, trans_b in immediates} == {"0" if b_k_major else "1"}
