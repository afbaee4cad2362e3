"""Register-tensor math, step by step on both back ends: the unary functions (exp2, exp, tanh, log2, sqrt) and
numpy broadcasting of row vectors [1, N] and column vectors [M, 1] against 2-D tiles (accumulator fragments and
blocked tiles), with the layouts the vectors get and the mistakes refused at the kernel line.

Tolerances: the emulator computes in float32 with numpy, so against float64 numpy it is off by float32's
rounding (a few ulps, 2**-22 relative here); ``exp`` of x also carries the rounding of x itself through
exp's slope (|x|·2**-24 relative, x < 4 here). The GPU's approximations (docs/language.md) bound the GPU test."""

from pathlib import Path

import numpy as np
import pytest

from tests.kernels import math_kernels as mk
import warpspec
from warpspec import CompileError
from warpspec.cuda import sass
from warpspec.cuda.codegen import generate
from warpspec.cuda.launch import compile_kernel
from warpspec.layout.fragments import AccumulatorLayout
from warpspec.layout.registers import Accumulator, Slice
from warpspec.runtime import kernel_for

FUNCTIONS = ["exp2", "exp", "tanh", "log2", "sqrt"]
#: The PTX each function becomes.
PTX = {"exp2": "ex2.approx.ftz.f32", "exp": "ex2.approx.ftz.f32", "tanh": "tanh.approx.f32",
       "log2": "lg2.approx.ftz.f32", "sqrt": "sqrt.rn.f32"}
#: GPU bounds (relative, absolute) for inputs in [0.25, 4): the documented maximum errors (docs/language.md:
#: exp2 2 ulp, exp 2 + floor(1.173·4) = 6 ulp, tanh 2**-11, log2 2**-22 absolute near 1) with room to spare.
GPU_TOLERANCE = {"exp2": (2e-6, 0), "exp": (4e-6, 0), "tanh": (1e-3, 1e-6), "log2": (1e-6, 1e-6),
                 "sqrt": (0, 0)}


def _inputs(m=40):
    """Positive normal float32 values in [0.25, 4) (log2 and sqrt need positive inputs; subnormals, which the
    .ftz instructions flush, are tests/cuda/test_codegen_audit.py's)."""
    return np.random.default_rng(0).uniform(0.25, 4, (m, 64)).astype(np.float32)


@pytest.mark.parametrize("function", FUNCTIONS)
def test_unary_functions_on_the_emulator_against_numpy(function):
    x = _inputs()
    x[0, :4] = [-1.5, 0.0, 1.0, 3.0] if function not in ("log2", "sqrt") else [1.0, 2.0, 0.5, 4.0]
    out = np.full_like(x, np.nan)
    with warpspec.use_backend("emulator"):
        mk.Unary(function)(40, x, out)
    reference = getattr(np, function)(x.astype(np.float64))
    np.testing.assert_allclose(out, reference, rtol=2**-22 if function != "exp" else 4 * 2**-24 * 4, atol=0)


@pytest.mark.parametrize("function", FUNCTIONS)
def test_unary_functions_become_their_ptx_and_compile(function):
    built = compile_kernel(kernel_for(mk.Unary(function), {}))
    assert PTX[function] in built.generated.source
    counts = sass.count_instructions(sass.disassemble(built.module.cubin), ["MUFU", "LDL", "STL"])
    assert counts["MUFU"] >= 8 and counts["LDL"] == 0 and counts["STL"] == 0  # 8 elements per thread


def _matmul_inputs(m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((n, k)).astype(np.float16)
    scale = rng.standard_normal((m, 1)).astype(np.float32)
    bias = rng.standard_normal((1, n)).astype(np.float16)
    return a, b, scale, bias


SCHEDULE = dict(num_stages=2, block_m=128, block_n=64, block_k=64)


def test_bias_and_row_scale_broadcast_against_the_accumulator_on_the_emulator():
    """m, n not multiples of the block: the last blocks' vector loads reach past the views' ends and read zero
    there (their products are not stored), as the generated code's guarded loads do."""
    m, n, k = 200, 136, 192
    a, b, scale, bias = _matmul_inputs(m, n, k)
    c = np.full((m, n), np.nan, dtype=np.float16)
    with warpspec.use_backend("emulator"):
        mk.MatmulBiasEpilogue(**SCHEDULE)(m, n, k, a, b, scale, bias, c)
    reference = (a.astype(np.float64) @ b.astype(np.float64).T) * scale + bias.astype(np.float64)
    # float32 accumulation of 192 products, then one float16 rounding (2**-11 relative)
    np.testing.assert_allclose(c.astype(np.float64), reference, rtol=2**-10, atol=2e-3 * np.abs(reference).max())


def test_vectors_against_a_blocked_tile_on_the_emulator():
    x = np.random.default_rng(2).standard_normal((40, 64)).astype(np.float32)
    bias = np.random.default_rng(3).standard_normal((1, 64)).astype(np.float32)
    out = np.full_like(x, np.nan)
    with warpspec.use_backend("emulator"):
        mk.BlockedBias()(40, x, bias, out)
    np.testing.assert_array_equal(out, bias * 2 + x)


def _eval(expression: str, t: int):
    """A layout coordinate (C++ over g_, w_, lane_, valid Python too) for thread t of the group."""
    return eval(expression, {}, {"g_": t >> 7, "w_": (t >> 5) & 3, "lane_": t & 31, "t_": t})


@pytest.mark.parametrize("m, n, warpgroups", [(128, 64, 1), (128, 256, 2), (64, 24, 1)])
def test_accumulator_slices_hold_each_threads_columns_and_rows_once(m, n, warpgroups):
    acc = Accumulator(AccumulatorLayout(m, n, warpgroups=warpgroups), 0)
    columns, rows = Slice(acc, 0), Slice(acc, 1)
    assert columns.registers == n // 4 and rows.registers == 2 * m // warpgroups // 64
    for t in range(0, acc.owners[1], 7):
        row_of, col_of = zip(*(acc.layout.element_of(t, i) for i in range(acc.registers)))
        for i in range(acc.registers):
            assert _eval(columns.coords(columns.parent_register(i))[1], t) == col_of[i]
            assert _eval(rows.coords(rows.parent_register(i))[0], t) == row_of[i]
        assert sorted(_eval(columns.coords(j)[1], t) for j in range(columns.registers)) == sorted(set(col_of))
        assert sorted(_eval(rows.coords(j)[0], t) for j in range(rows.registers)) == sorted(set(row_of))


def test_the_bias_epilogue_loads_each_threads_columns_once_and_compiles():
    """128x64 tile, one warpgroup: a thread holds 16 of the 64 columns and 4 of the 128 rows, so the epilogue
    loads 16 bias and 4 scale values per thread, guarded by the views' sizes."""
    kernel = kernel_for(mk.MatmulBiasEpilogue(**SCHEDULE), {})
    source = generate(kernel).source
    assert "unsigned bias[8];" in source and "float scale[4];" in source
    assert "< biases_size1" in source  # the ragged tail reads zero
    built = compile_kernel(kernel)
    counts = sass.count_instructions(sass.disassemble(built.module.cubin), ["HGMMA", "LDG", "LDL", "STL"])
    assert counts["HGMMA"] > 0 and counts["LDL"] == 0 and counts["STL"] == 0
    assert counts["LDG"] == 16 + 4


def test_vectors_against_a_blocked_tile_compile():
    compile_kernel(kernel_for(mk.BlockedBias(), {}))


def test_a_row_vector_stored_by_two_warpgroups_of_two_partitions_is_written():
    """Each warpgroup holds the whole [1, N] vector: the emulator's row split of a tile among the partitions of
    its group (one slice of rows per warpgroup) must not give each of them zero rows."""
    v = np.arange(64, dtype=np.float32).reshape(1, 64)
    out, copy = np.full_like(v, np.nan), np.full_like(v, np.nan)
    with warpspec.use_backend("emulator"):
        mk.RowVectorOfTwoWarpgroups()(v, out, copy)
    np.testing.assert_array_equal(out, 2 * v)
    np.testing.assert_array_equal(copy, v)


def test_the_messages_docs_language_md_quotes_are_the_real_ones():
    """Register math's section quotes these messages (up to "..."); they are the ones the misuse tests see."""
    from tests.isa import test_reduction

    text = " ".join((Path(__file__).parents[2] / "docs" / "language.md").read_text().split())
    quoted = [MISUSES[0][1], MISUSES[2][1], MISUSES[-1][1].split("(")[0] + "(",
              test_reduction.MISUSES[0][1], test_reduction.MISUSES[1][1]]
    for message in quoted:
        assert f"`{message}" in text, message


MISUSES = [
    ("unary-int", "self.exp2 takes a floating-point tensor; ints is int32"),
    ("unary-scalar", "self.tanh x must be a tensor, got float 2.0"),
    ("no-broadcast", "shapes do not broadcast: tile[16, 64] + half[1, 32]"),
    ("one-d", "shapes do not broadcast: tile[16, 64] * flat_tile[64]"),
    ("outer", "shapes do not broadcast: column[16, 1] + row[1, 64]"),
    ("two-layouts", "register tensor row would need two layouts (the column slice of blocked over a thread "
                    "group and the column slice of blocked over a thread group)"),
]


def assert_misuse_refused(case: str, message: str) -> None:
    """Calling ``Misuse(case)`` on the emulator raises a CompileError holding ``message`` at the case's marker
    line (tests/kernels/math_kernels.py)."""
    x = np.zeros((16, 64), dtype=np.float32)
    with pytest.raises(CompileError) as caught, warpspec.use_backend("emulator"):
        mk.Misuse(case)(16, x, np.zeros((1, 64), dtype=np.float32), x.copy())
    assert message in str(caught.value)
    assert caught.value.location == f"{mk.__file__}:{mk.marker_line(case)}"


@pytest.mark.parametrize("case, message", MISUSES, ids=[c for c, _ in MISUSES])
def test_misuse_is_refused_at_the_kernel_line(case, message):
    assert_misuse_refused(case, message)


@pytest.mark.gpu
@pytest.mark.parametrize("function", FUNCTIONS)
def test_gpu_unary_functions_within_their_ptx_bounds(function):
    torch = pytest.importorskip("torch")
    x = _inputs()
    out = torch.full((40, 64), float("nan"), device="cuda")
    with warpspec.use_backend("cuda"):
        mk.Unary(function)(40, torch.from_numpy(x).cuda(), out)
    torch.cuda.synchronize()
    rtol, atol = GPU_TOLERANCE[function]
    reference = getattr(np, function)(x.astype(np.float64))
    if function == "sqrt":  # sqrt.rn is correctly rounded: exactly numpy's float32 sqrt
        np.testing.assert_array_equal(out.cpu().numpy(), np.sqrt(x))
    else:
        np.testing.assert_allclose(out.cpu().numpy(), reference, rtol=rtol, atol=atol)


@pytest.mark.gpu
def test_gpu_bias_epilogue_against_numpy():
    torch = pytest.importorskip("torch")
    m, n, k = 200, 136, 192
    a, b, scale, bias = _matmul_inputs(m, n, k)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    with warpspec.use_backend("cuda"):
        mk.MatmulBiasEpilogue(**SCHEDULE)(m, n, k, *(torch.from_numpy(v).cuda() for v in (a, b, scale, bias)), c)
    torch.cuda.synchronize()
    reference = (a.astype(np.float64) @ b.astype(np.float64).T) * scale + bias.astype(np.float64)
    np.testing.assert_allclose(c.cpu().double().numpy(), reference, rtol=2**-10,
                               atol=2e-3 * np.abs(reference).max())
