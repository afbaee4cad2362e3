"""Masks from runtime indices on both back ends: row_index/col_index, the comparisons < <= > >= == != on register
tensors (against tensors, scalars and runtime scalars), & and | of masks, and self.where with scalar branches;
enough for causal attention and ragged tails. Comparisons and selections are exact, so the emulator's values are
compared exactly."""

import operator

import numpy as np
import pytest

from tests.kernels import math_kernels as mk
import warpspec
from warpspec.cuda import sass
from warpspec.cuda.launch import compile_kernel
from warpspec.runtime import kernel_for
from tests.isa.test_elementwise import assert_misuse_refused
from tests.isa.test_reduction import _attention_inputs, _attention_reference

OPERATORS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
             "!=": operator.ne}
SCHEDULE = dict(num_stages=2, block_m=128, block_n=64, block_k=64)


def _masks_reference(x, n_valid):
    rows, cols = np.indices(x.shape)
    masked = np.where((cols <= rows) & (cols < n_valid), x, -np.inf)
    return np.where(x > 0.5, 0.5, masked).astype(np.float32), (rows * 100 + cols).astype(np.int32)


def test_indices_masks_and_where_on_the_emulator():
    x = np.random.default_rng(0).standard_normal((40, 64)).astype(np.float32)
    out, index = np.full_like(x, np.nan), np.zeros(x.shape, dtype=np.int32)
    with warpspec.use_backend("emulator"):
        mk.Masks()(40, 50, x, out, index)
    expected_out, expected_index = _masks_reference(x, 50)
    np.testing.assert_array_equal(out, expected_out)
    np.testing.assert_array_equal(index, expected_index)


def _compare_inputs():
    rng = np.random.default_rng(1)
    # quarters in [-0.5, 0.5]: many equal pairs, and 0.25 itself, so == and != are exercised
    return tuple(rng.integers(-2, 3, (16, 64)).astype(np.float32) / 4 for _ in range(2))


@pytest.mark.parametrize("op", list(OPERATORS))
def test_each_comparison_on_the_emulator(op):
    x, y = _compare_inputs()
    out = np.full((32, 64), np.nan, dtype=np.float32)
    with warpspec.use_backend("emulator"):
        mk.Compare(op)(x, y, out)
    np.testing.assert_array_equal(out[:16], OPERATORS[op](x, y).astype(np.float32))
    np.testing.assert_array_equal(out[16:], OPERATORS[op](x, 0.25).astype(np.float32))


@pytest.mark.parametrize("op", list(OPERATORS))
def test_each_comparison_compiles(op):
    built = compile_kernel(kernel_for(mk.Compare(op), {}))
    counts = sass.count_instructions(sass.disassemble(built.module.cubin), ["LDL", "STL"])
    assert counts["LDL"] == 0 and counts["STL"] == 0


def test_masks_compile():
    built = compile_kernel(kernel_for(mk.Masks(), {}))
    assert "__uint_as_float(0xff800000u)" in built.generated.source  # -inf
    counts = sass.count_instructions(sass.disassemble(built.module.cubin), ["LDL", "STL"])
    assert counts["LDL"] == 0 and counts["STL"] == 0


def test_accumulator_indices_and_a_triangular_mask_on_the_emulator():
    m, n, k = 200, 136, 64
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((n, k)).astype(np.float16)
    c, index = np.full((m, n), np.nan, dtype=np.float32), np.zeros((m, n), dtype=np.int32)
    with warpspec.use_backend("emulator"):
        mk.AccumulatorIndices(**SCHEDULE)(m, n, k, a, b, c, index)
    rows, cols = np.indices((m, n))
    np.testing.assert_array_equal(index, rows * 1000 + cols)
    product = a.astype(np.float32) @ b.astype(np.float32).T
    assert np.isneginf(c[cols > rows]).all()
    np.testing.assert_allclose(c[cols <= rows], product[cols <= rows], rtol=1e-5, atol=1e-5)


def test_accumulator_indices_compile():
    built = compile_kernel(kernel_for(mk.AccumulatorIndices(**SCHEDULE), {}))
    counts = sass.count_instructions(sass.disassemble(built.module.cubin), ["HGMMA", "LDL", "STL"])
    assert counts["HGMMA"] > 0 and counts["LDL"] == 0 and counts["STL"] == 0
    # The int32 index tile is stored in pairs of its own bits: through __float_as_uint each int was converted to
    # float first, and the GPU wrote 1065353216 (1.0f) for index 1.
    index_block = built.generated.source.split("reinterpret_cast<unsigned char *>(gi_base);")[1].split("base_ =")[0]
    index_stores = [line for line in index_block.splitlines() if "reinterpret_cast<u64 *>" in line]
    assert index_stores and all("__float_as_uint" not in line for line in index_stores)
    assert all("static_cast<u64>(static_cast<unsigned>(" in line for line in index_stores)


@pytest.mark.parametrize("causal", [False, True], ids=["ragged", "causal"])
def test_masked_attention_on_the_emulator_against_numpy(causal):
    """seq_kv = 150: the third K/V tile has 22 keys, the rest masked by col_index < seq_kv (the TMA loads read
    zeros there, which would otherwise count as logits of 0)."""
    q, k, v = _attention_inputs(seq_q=130, seq_kv=150)
    out = np.full(q.shape, np.nan, dtype=np.float16)
    with warpspec.use_backend("emulator"):
        mk.Attention(causal=causal)(130, 150, q, k, v, out)
    # probabilities rounded to float16 before P·V, the output too (as tests/isa/test_reduction.py)
    np.testing.assert_allclose(out.astype(np.float64), _attention_reference(q, k, v, causal), rtol=0, atol=2e-3)


def test_causal_attention_compiles_without_local_memory():
    built = compile_kernel(kernel_for(mk.Attention(causal=True), {}))
    counts = sass.count_instructions(sass.disassemble(built.module.cubin), ["HGMMA", "LDL", "STL"])
    assert counts["HGMMA"] == 16 and counts["LDL"] == 0 and counts["STL"] == 0


MISUSES = [
    ("where-float-cond", "self.where cond must be a boolean tensor (a comparison such as col < n_size); tile is "
                         "float32"),
    ("where-scalars", "self.where needs x or y to be a register tensor; both are scalars"),
    ("where-dtypes", "dtypes differ: tile is float32, tile_float16 is float16; cast one"),
    ("chained", "tensors compare with one of < <= > >= == != at a time (combine masks with & and |)"),
    ("mask-arithmetic", "mask is a boolean tensor (a comparison's result): use it as self.where's condition or "
                        "combine it with & and |, not '+'"),
    ("and-floats", "'&' combines boolean tensors (masks) only; tile is float32"),
    ("int-vs-float", "the scalar operand of '<' on int32 tensor cols must be an integer, got 2.5"),
    ("index-1d", "self.row_index takes a 2-D tensor; ints has shape [4]"),
]


@pytest.mark.parametrize("case, message", MISUSES, ids=[c for c, _ in MISUSES])
def test_misuse_is_refused_at_the_kernel_line(case, message):
    assert_misuse_refused(case, message)


@pytest.mark.gpu
def test_gpu_masks_and_indices():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((40, 64)).astype(np.float32)
    out = torch.full((40, 64), float("nan"), device="cuda")
    index = torch.zeros((40, 64), device="cuda", dtype=torch.int32)
    with warpspec.use_backend("cuda"):
        mk.Masks()(40, 50, torch.from_numpy(x).cuda(), out, index)
    torch.cuda.synchronize()
    expected_out, expected_index = _masks_reference(x, 50)
    np.testing.assert_array_equal(out.cpu().numpy(), expected_out)
    np.testing.assert_array_equal(index.cpu().numpy(), expected_index)


@pytest.mark.gpu
def test_gpu_accumulator_indices():
    """The accumulator's row and column formulas on the GPU: every element's index, and the triangle."""
    torch = pytest.importorskip("torch")
    m, n, k = 200, 136, 64
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((n, k)).astype(np.float16)
    c = torch.full((m, n), float("nan"), device="cuda")
    index = torch.zeros((m, n), device="cuda", dtype=torch.int32)
    with warpspec.use_backend("cuda"):
        mk.AccumulatorIndices(**SCHEDULE)(m, n, k, torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), c, index)
    torch.cuda.synchronize()
    rows, cols = np.indices((m, n))
    np.testing.assert_array_equal(index.cpu().numpy(), rows * 1000 + cols)
    assert np.isneginf(c.cpu().numpy()[cols > rows]).all()


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["ragged", "causal"])
def test_gpu_masked_attention_against_numpy(causal):
    torch = pytest.importorskip("torch")
    q, k, v = _attention_inputs(seq_q=130, seq_kv=150)
    out = torch.full(q.shape, float("nan"), device="cuda", dtype=torch.float16)
    with warpspec.use_backend("cuda"):
        mk.Attention(causal=causal)(130, 150, *(torch.from_numpy(t).cuda() for t in (q, k, v)), out)
    torch.cuda.synchronize()
    np.testing.assert_allclose(out.cpu().double().numpy(), _attention_reference(q, k, v, causal), rtol=0,
                               atol=2e-3)
