"""Row reductions (reduce_max, reduce_sum) of WGMMA accumulators and 16-bit casts of accumulators fed to the next
mma from registers, on both back ends: FlashAttention's inner loop (tests/kernels/math_kernels.py, ``Attention``).

Tolerances: reduce_max is exact on both back ends; reduce_sum adds 64 float32 values in another order on each
(numpy pairwise on the emulator, in-thread then butterfly on the GPU), so against float64 it is within
64·2**-24 of the sum of magnitudes. Attention rounds the probabilities to float16 (2**-11 relative) before the
second mma and its output to float16."""

import numpy as np
import pytest

from tests.kernels import math_kernels as mk
import warpspec
from warpspec import CompileError
from warpspec.cuda import sass
from warpspec.cuda.launch import compile_kernel
from warpspec.layout.fragments import AccumulatorLayout
from warpspec.layout.registers import Accumulator, AFragment, same_registers
from warpspec.runtime import kernel_for
from tests.isa.test_elementwise import _eval, assert_misuse_refused

SCHEDULE = dict(num_stages=2, block_m=128, block_n=64, block_k=64)


def _gemm_inputs(m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((n, k)).astype(np.float16)


def _row_statistics(a, b, block_n):
    """Per block of columns: float64 row maxima and sums of A·Bᵀ, and the sums of magnitudes (error scale)."""
    product = a.astype(np.float64) @ b.astype(np.float64).T
    blocks = -(-product.shape[1] // block_n)
    padded = np.zeros((product.shape[0], blocks * block_n))  # columns past n are read as zero by the TMA loads
    padded[:, :product.shape[1]] = product
    tiles = padded.reshape(product.shape[0], blocks, block_n)
    return tiles.max(axis=2), tiles.sum(axis=2), np.abs(tiles).sum(axis=2)


@pytest.mark.parametrize("cls", [mk.RowStatistics, mk.TwoWarpgroupRowStatistics], ids=lambda c: c.__name__)
def test_row_statistics_on_the_emulator_against_numpy(cls):
    m, n, k = 200, 136, 128
    a, b = _gemm_inputs(m, n, k)
    maxima = np.full((m, 3), np.nan, dtype=np.float32)
    sums = np.full((m, 3), np.nan, dtype=np.float32)
    with warpspec.use_backend("emulator"):
        cls(**SCHEDULE)(m, n, k, a, b, maxima, sums)
    expected_max, expected_sum, magnitude = _row_statistics(a, b, 64)
    # the products of float16 values accumulate in float32 over k = 128, then the reduction adds 64 of them
    np.testing.assert_allclose(maxima, expected_max, rtol=0, atol=2e-5 * np.abs(expected_max).max())
    assert np.all(np.abs(sums - expected_sum) <= 2 * 64 * 2**-24 * magnitude + 2e-5 * magnitude)


def _with_nan_column(b, column):
    """``b`` with its row ``column`` NaN: column ``column`` of A·Bᵀ is NaN in every row, the other columns finite."""
    b = b.copy()
    b[column] = np.nan
    return b


NAN_COLUMN = 70  # in the second block of 64 columns


def _expected_with_nan_column(a, b):
    """The row maxima of each 64-column block, NaN in the block holding ``NAN_COLUMN`` (numpy's max)."""
    expected_max, _, _ = _row_statistics(a, np.nan_to_num(b), 64)
    expected_max[:, NAN_COLUMN // 64] = np.nan
    return expected_max


def test_a_nan_in_a_row_makes_its_maximum_nan_on_the_emulator():
    m, n, k = 200, 136, 128
    a, b = _gemm_inputs(m, n, k)
    b = _with_nan_column(b, NAN_COLUMN)
    maxima = np.zeros((m, 3), dtype=np.float32)
    sums = np.zeros((m, 3), dtype=np.float32)
    with warpspec.use_backend("emulator"):
        mk.RowStatistics(**SCHEDULE)(m, n, k, a, b, maxima, sums)
    expected = _expected_with_nan_column(a, b)
    np.testing.assert_allclose(maxima, expected, rtol=0, atol=2e-5 * np.nanmax(np.abs(expected)))
    assert np.isnan(maxima[:, 1]).all() and not np.isnan(maxima[:, [0, 2]]).any()


def test_the_row_maximum_compiles_to_a_nan_propagating_max():
    """``max.f32`` (fmaxf) returns the other operand of a NaN, so a NaN column would vanish from its row's maximum
    on the GPU alone; ``max.NaN.f32`` keeps it, as numpy's max does."""
    source = compile_kernel(kernel_for(mk.RowStatistics(**SCHEDULE), {})).generated.source
    body = source.split("extern \"C\"", 1)[1]
    assert "max_nan(" in body and "fmaxf" not in body
    assert "max.NaN.f32" in source


def test_row_statistics_compile_to_quad_shuffles():
    """One warpgroup, 128 rows: a thread holds 4 rows, each reduced in the thread and across its quad with two
    butterfly shuffles, for the maximum and the sum: 16 SHFL.BFLY."""
    built = compile_kernel(kernel_for(mk.RowStatistics(**SCHEDULE), {}))
    assert built.generated.source.count("shfl.sync.bfly.b32") == 2 * 4 * 2
    text = sass.disassemble(built.module.cubin)
    counts = sass.count_instructions(text, ["SHFL.BFLY", "LDL", "STL"])
    assert counts["SHFL.BFLY"] == 16 and counts["LDL"] == 0 and counts["STL"] == 0


def _attention_reference(q, k, v, causal=False):
    """softmax(Q·Kᵀ / sqrt(d)) · V in float64; ``causal``: key j counts for query i when j <= i."""
    s = q.astype(np.float64) @ k.astype(np.float64).T / np.sqrt(q.shape[1])
    if causal:
        s = np.where(np.arange(k.shape[0])[None, :] <= np.arange(q.shape[0])[:, None], s, -np.inf)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64)


def _attention_inputs(seq_q=100, seq_kv=192, d=64, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(np.float16) for shape in ((seq_q, d), (seq_kv, d), (seq_kv, d)))


def test_attention_on_the_emulator_against_numpy():
    """100 query rows (the second block's last rows are past the end: loaded as zero, not stored), three K/V
    tiles: the running maximum is rescaled twice."""
    q, k, v = _attention_inputs()
    out = np.full(q.shape, np.nan, dtype=np.float16)
    with warpspec.use_backend("emulator"):
        mk.Attention()(100, 192, q, k, v, out)
    # P is rounded to float16 (2**-11 relative) before P·V; the output too
    np.testing.assert_allclose(out.astype(np.float64), _attention_reference(q, k, v), rtol=0, atol=2e-3)


def test_attention_feeds_the_probabilities_from_registers_and_compiles():
    """The cast accumulator is the second mma's A operand from registers (the RS form), converted in place: the
    code has no local memory, and the four shuffles per row statistic and unrolled copy."""
    built = compile_kernel(kernel_for(mk.Attention(), {}))
    source = built.generated.source
    mma = "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1"
    assert source.count(mma) == 2 * 2 * 4  # two unrolled copies x (QK^T, PV) x 4 k-steps
    assert '"r"(p16[' in source
    # init=float("-inf") as its f32 bits
    assert "row_max[i] = static_cast<float>(__uint_as_float(0xff800000u));" in source
    counts = sass.count_instructions(sass.disassemble(built.module.cubin), ["HGMMA", "SHFL.BFLY", "LDL", "STL"])
    assert counts["HGMMA"] == 16 and counts["LDL"] == 0 and counts["STL"] == 0
    assert counts["SHFL.BFLY"] >= 2 * 2 * 2 * 2  # (max, sum) x 2 rows x 2 masks x 2 copies
    report = next(iter(sass.parse_ptxas_log(built.module.log).values()))
    assert report.spill_store_bytes == 0


@pytest.mark.parametrize("m, n, warpgroups", [(64, 64, 1), (128, 256, 2), (256, 48, 2), (128, 128, 1)])
def test_a_cast_accumulator_is_the_a_fragment_register_for_register(m, n, warpgroups):
    """PTX ISA 9.7.15.5.1: register i of the m64nNk16 f32 accumulator and register i of the k16 A fragments of the
    [M, K = N] tile hold the same element, so the cast needs no data movement."""
    acc = Accumulator(AccumulatorLayout(m, n, warpgroups=warpgroups), 0)
    a = AFragment(m, n, warpgroups, 0)
    assert same_registers(acc, a) and same_registers(a, acc) and acc.registers == a.registers
    for t in range(0, 128 * warpgroups, 5):
        for i in range(acc.registers):
            assert [_eval(c, t) for c in acc.coords(i)] == [_eval(c, t) for c in a.coords(i)]


def test_other_fragment_pairs_do_not_coincide():
    acc = Accumulator(AccumulatorLayout(64, 64), 0)
    assert not same_registers(acc, AFragment(64, 32, 1, 0))  # K != N
    assert not same_registers(acc, AFragment(64, 64, 1, 128))  # other threads
    assert not same_registers(Accumulator(AccumulatorLayout(64, 64), 128), AFragment(64, 64, 1, 0))


MISUSES = [
    ("reduce-axis-0", "self.reduce_sum reduces along rows only (axis=1, the columns of each row, held by one quad "
                      "of lanes); axis=0 is not supported"),
    ("reduce-blocked", "reduce_max of tile needs wgmma accumulator fragments (each row held by the four lanes of "
                       "a quad), but tile is blocked over a thread group"),
    ("reduce-int", "self.reduce_max takes a float32 tensor (an accumulator); regs is int32"),
    ("reduce-1d", "self.reduce_sum takes a 2-D tensor; regs has shape [4]"),
    ("reduce-single-thread", "self.reduce_max inside single_thread: the threads holding tile exchange values "
                             "with shfl.sync, so all of them must execute it"),
]


@pytest.mark.parametrize("case, message", MISUSES, ids=[c for c, _ in MISUSES])
def test_misuse_is_refused_at_the_kernel_line(case, message):
    assert_misuse_refused(case, message)


def test_a_reduction_by_some_of_the_threads_holding_the_accumulator_is_refused():
    with pytest.raises(CompileError) as caught:
        kernel_for(mk.ReducedByOneOfTwoWarpgroups(**SCHEDULE), {})
    assert ("reduce_max of acc is executed by threads [0, 128), but acc is held by threads [0, 256): every one of "
            "those threads must execute it") in str(caught.value)
    assert caught.value.location == f"{mk.__file__}:{mk.marker_line('reduce-by-half')}"


@pytest.mark.gpu
def test_gpu_attention_against_numpy():
    torch = pytest.importorskip("torch")
    q, k, v = _attention_inputs()
    out = torch.full(q.shape, float("nan"), device="cuda", dtype=torch.float16)
    with warpspec.use_backend("cuda"):
        mk.Attention()(100, 192, *(torch.from_numpy(x).cuda() for x in (q, k, v)), out)
    torch.cuda.synchronize()
    # ex2.approx adds 2**-22 relative to each probability: far below the float16 rounding of P
    np.testing.assert_allclose(out.cpu().double().numpy(), _attention_reference(q, k, v), rtol=0, atol=2e-3)


@pytest.mark.gpu
def test_gpu_a_nan_in_a_row_makes_its_maximum_nan():
    torch = pytest.importorskip("torch")
    m, n, k = 200, 136, 128
    a, b = _gemm_inputs(m, n, k)
    b = _with_nan_column(b, NAN_COLUMN)
    maxima = torch.zeros((m, 3), device="cuda")
    sums = torch.zeros((m, 3), device="cuda")
    with warpspec.use_backend("cuda"):
        mk.RowStatistics(**SCHEDULE)(m, n, k, torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), maxima, sums)
    torch.cuda.synchronize()
    expected = _expected_with_nan_column(a, b)
    np.testing.assert_allclose(maxima.cpu().numpy(), expected, rtol=0, atol=2e-5 * np.nanmax(np.abs(expected)))


@pytest.mark.gpu
def test_gpu_row_statistics_against_numpy():
    torch = pytest.importorskip("torch")
    m, n, k = 200, 136, 128
    a, b = _gemm_inputs(m, n, k)
    maxima = torch.full((m, 3), float("nan"), device="cuda")
    sums = torch.full((m, 3), float("nan"), device="cuda")
    with warpspec.use_backend("cuda"):
        mk.RowStatistics(**SCHEDULE)(m, n, k, torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), maxima, sums)
    torch.cuda.synchronize()
    expected_max, expected_sum, magnitude = _row_statistics(a, b, 64)
    np.testing.assert_allclose(maxima.cpu().numpy(), expected_max, rtol=0, atol=2e-5 * np.abs(expected_max).max())
    assert np.all(np.abs(sums.cpu().numpy() - expected_sum) <= 2 * 64 * 2**-24 * magnitude + 2e-5 * magnitude)
