"""warpspec.ops.attention_backward and ops.attention's log-sum-exp on the emulator: gradients against a float32 torch
reference at small ragged shapes (both causal modes, grouped-query heads, D 64 and 128, fp16 and bf16; the default
path accumulating dQ with reduce-adds and the deterministic one), rows that see no key, random interleavings of the
kernels' partitions, every ArgumentError, planted bugs, and the NVRTC build of each path's backward kernels of each
head dim (no spills, no stack, no ptxas advisory)."""

import ml_dtypes
import numpy as np
import pytest

from tests.ops import test_attention
from tests.support.example_checks import emulator  # noqa: F401  (autouse: the emulator, its deterministic schedule)
from warpspec import ArgumentError
from warpspec.emulator.run import SEED_VARIABLE
from warpspec.ops import attention, attention_backward
from warpspec.ops.attention_backward import DEFAULT_BACKWARD_SCHEDULES, backward_kernels, validate_backward

torch = pytest.importorskip("torch")

#: Max abs error over max |reference gradient|: fp16 operands and P, dS rounded to the input type before their
#: GEMMs (bf16 keeps 8 bits); measured 3e-4 to 1e-3 for fp16.
GRADIENT_TOLERANCE = {np.float16: 4e-3, ml_dtypes.bfloat16: 3e-2}


def operands(batch, heads, kv_heads, seq_q, seq_k, head_dim, dtype, seed=0):
    """The forward's operands (``test_attention.operands``) and a dO of O's shape, from a seed of its own."""
    q, k, v = test_attention.operands(batch, heads, kv_heads, seq_q, seq_k, head_dim, dtype, seed)
    dout = np.random.default_rng(seed + 1).standard_normal(q.shape).astype(dtype)
    return q, k, v, dout


def reference(q, k, v, dout, causal, scale=None):
    """(out, lse, dq, dk, dv) in float32 by torch autograd: K/V heads repeated for the group (so dK/dV sum over it),
    causal aligned at the bottom right, rows that see no key 0 (and their lse -inf)."""
    tensors = [torch.tensor(x.astype(np.float32), requires_grad=True) for x in (q, k, v)]
    q32, k32, v32 = tensors
    group = q.shape[1] // k.shape[1]
    logits = q32 @ k32.repeat_interleave(group, 1).transpose(-1, -2) * (q.shape[-1] ** -0.5 if scale is None
                                                                          else scale)
    if causal:
        seq_q, seq_k = q.shape[2], k.shape[2]
        visible = torch.arange(seq_k)[None, :] <= torch.arange(seq_q)[:, None] + seq_k - seq_q
        logits = logits.masked_fill(~visible, float("-inf"))
    out = torch.softmax(logits, -1).nan_to_num(0.0) @ v32.repeat_interleave(group, 1)
    out.backward(torch.tensor(dout.astype(np.float32)))
    lse = torch.logsumexp(logits, -1)
    return (out.detach().numpy(), lse.detach().numpy(), *(t.grad.numpy() for t in tensors))


def relative_error(got, expected):
    return np.abs(got.astype(np.float32) - expected).max() / np.abs(expected).max()


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq_q, seq_k", [(150, 190), (190, 64), (64, 130)])
def test_gradients_match_torch_at_ragged_grouped_query_shapes(dtype, causal, seq_q, seq_k):
    """Two batches of 4 query heads over 2 K/V heads, D 64; lengths no multiple of a tile; S_q > S_k leaves causal
    rows without keys (their gradients 0)."""
    q, k, v, dout = operands(2, 4, 2, seq_q, seq_k, 64, dtype)
    out, lse = attention(q, k, v, causal=causal, return_lse=True)
    dq, dk, dv = attention_backward(q, k, v, out, dout, lse, causal=causal)
    _, _, *expected = reference(q, k, v, dout, causal)
    assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)
    assert dq.dtype == dk.dtype == dv.dtype == q.dtype
    for got, want in zip((dq, dk, dv), expected):
        assert relative_error(got, want) < GRADIENT_TOLERANCE[dtype]


@pytest.mark.parametrize("transposed", [False, True], ids=["key-halves", "transposed"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq_q, seq_k", [(300, 190), (100, 330), (1, 3), (200, 40)])
def test_the_fused_kernel_against_torch_at_ragged_grouped_shapes(causal, seq_q, seq_k, transposed):
    """``BackwardFused`` (the accumulating path at D 64), called with ``Dot`` and ``ConvertDQ`` as the path calls
    them, against torch: 2 batches of 4 query heads over 2 K/V heads, several 128-row query tiles a block, lengths no
    multiple of a tile (so a block's last keys are the next head's: its dK and dV stop at the head's last key, a row
    bound, or a column bound when ``transposed``), one row, and causal rows that see no key (S_q > S_k: their
    gradients 0)."""
    from warpspec.dtypes import float16
    from warpspec.ops.attention_backward_kernel import BackwardFused, ConvertDQ, Dot
    from warpspec.ops.attention_kernel import LOG2_E

    q, k, v, dout = operands(2, 4, 2, seq_q, seq_k, 64, np.float16)
    out, lse = attention(q, k, v, causal=causal, return_lse=True)
    scale = 64 ** -0.5
    dd, dk, dv = np.empty(lse.shape, np.float32), np.empty_like(k), np.empty_like(v)
    dq_accum, dq = np.zeros(q.shape, np.float32), np.empty_like(q)
    Dot(float16, head_dim=64)(seq_q, 8, out, dout, dd)
    BackwardFused(float16, head_dim=64, causal=causal, num_stages=2, transposed=transposed)(
        seq_q, seq_k, 8, 4, 2, scale, scale * LOG2_E, q, k, v, dout, (lse * np.float32(LOG2_E)).astype(np.float32),
        dd, dk, dv, dq_accum)
    ConvertDQ(float16, head_dim=64)(8 * seq_q, scale, dq_accum, dq)
    _, _, *expected = reference(q, k, v, dout, causal)
    for got, want in zip((dq, dk, dv), expected):
        assert relative_error(got, want) < GRADIENT_TOLERANCE[np.float16]


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("seq_q", [1, 100, 130])
def test_the_accumulating_path_s_dot_zeroes_the_dq_accumulator(head_dim, seq_q):
    """``DotZeroingDQ`` (the accumulating path's first kernel) writes D = rowsum(dO ∘ O) and zeroes every row of a
    NaN-filled float32 accumulator of 3 heads, S_q no multiple of its 64 rows (a head's last block stops at its
    head's last row: its zeros do not reach the next head's rows, which another block writes)."""
    from warpspec.dtypes import float16
    from warpspec.ops.attention_backward_kernel import DotZeroingDQ

    rng = np.random.default_rng(4)
    out, dout = (rng.standard_normal((1, 3, seq_q, head_dim)).astype(np.float16) for _ in range(2))
    dd = np.full((1, 3, seq_q), np.nan, np.float32)
    dq_accum = np.full((1, 3, seq_q, head_dim), np.nan, np.float32)
    DotZeroingDQ(float16, head_dim=head_dim)(seq_q, 3, out, dout, dd, dq_accum)
    assert not dq_accum.any() and not np.isnan(dq_accum).any()
    np.testing.assert_allclose(dd, (out.astype(np.float32) * dout.astype(np.float32)).sum(-1), rtol=1e-5,
                               atol=1e-4)


def test_the_dq_accumulator_s_zeros_leave_as_16_byte_stores():
    """The zero tile [64, D] of ``DotZeroingDQ`` is blocked over the warpgroup (nothing else places it): D / 8
    16-byte stores a thread on the aligned path (8 at D 64, 16 at D 128), with no spills."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import count_instructions, disassemble, parse_ptxas_log
    from warpspec.dtypes import bfloat16
    from warpspec.ops.attention_backward_kernel import DotZeroingDQ
    from warpspec.runtime import kernel_for

    for head_dim in (64, 128):
        built = compile_kernel(kernel_for(DotZeroingDQ(bfloat16, head_dim=head_dim), {}))
        (report,) = parse_ptxas_log(built.module.log).values()
        assert (report.spill_store_bytes, report.stack_bytes, report.advisories) == (0, 0, ())
        assert count_instructions(disassemble(built.module.cubin), ["STG.E.128"])["STG.E.128"] == head_dim // 8


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_head_dim_128_and_a_custom_scale(causal):
    q, k, v, dout = operands(1, 2, 1, 100, 130, 128, np.float16, seed=1)
    out, lse = attention(q, k, v, causal=causal, scale=0.2, return_lse=True)
    grads = attention_backward(q, k, v, out, dout, lse, causal=causal, scale=0.2)
    _, _, *expected = reference(q, k, v, dout, causal, scale=0.2)
    for got, want in zip(grads, expected):
        assert relative_error(got, want) < GRADIENT_TOLERANCE[np.float16]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("deterministic", [True, False], ids=["deterministic", "accumulating"])
def test_a_negative_scale_s_gradients_match_torch(deterministic, causal):
    """The forward runs -q at the scale's magnitude; the backward's dQ is the negated gradient of that q."""
    q, k, v, dout = operands(1, 4, 2, 70, 90, 64, np.float16, seed=2)
    out, lse = attention(q, k, v, causal=causal, scale=-0.15, return_lse=True)
    grads = attention_backward(q, k, v, out, dout, lse, causal=causal, scale=-0.15, deterministic=deterministic)
    _, want_lse, *expected = reference(q, k, v, dout, causal, scale=-0.15)
    assert np.abs(lse - want_lse).max() < 1e-2
    for got, want in zip(grads, expected):
        assert relative_error(got, want) < GRADIENT_TOLERANCE[np.float16]


def test_a_zero_scale_gives_q_and_k_no_gradient():
    """Zero scale: every key equally likely, so only V has a gradient; dQ and dK are exactly zero."""
    q, k, v, dout = operands(1, 4, 2, 48, 64, 64, np.float16, seed=3)
    out, lse = attention(q, k, v, scale=0.0, return_lse=True)
    dq, dk, dv = attention_backward(q, k, v, out, dout, lse, scale=0.0)
    _, want_lse, _, _, want_dv = reference(q, k, v, dout, False, scale=0.0)
    assert np.abs(lse - want_lse).max() < 1e-3  # log(64) in every row
    assert not dq.any() and not dk.any()
    assert relative_error(dv, want_dv) < GRADIENT_TOLERANCE[np.float16]


def test_lse_is_the_log_sum_exp_and_inf_where_a_row_sees_no_key():
    """Causal with S_q = 3 S_k: the first 2 S_k rows see no key; their lse is +inf (the backward's P is 0 there)."""
    q, k, v, dout = operands(1, 2, 2, 90, 30, 64, np.float16, seed=2)
    out, lse = attention(q, k, v, causal=True, return_lse=True)
    expected_out, expected_lse, *_ = reference(q, k, v, dout, True)
    assert lse.dtype == np.float32 and lse.shape == (1, 2, 90)
    assert np.all(lse[:, :, :60] == np.inf)
    assert np.abs(lse[:, :, 60:] - expected_lse[:, :, 60:]).max() < 1e-5 * np.abs(expected_lse[:, :, 60:]).max()
    assert np.array_equal(out, attention(q, k, v, causal=True))


@pytest.mark.parametrize("deterministic", [False, True], ids=["accumulating", "deterministic"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_both_dq_paths_match_torch(deterministic, head_dim, causal):
    """Grouped-query heads (group 2) at S_q 70 and S_k 130: the accumulating path's reduce-adds from the three key
    blocks into each query tile, and the deterministic path's dQ kernel."""
    q, k, v, dout = operands(1, 4, 2, 70, 130, head_dim, np.float16, seed=4)
    out, lse = attention(q, k, v, causal=causal, return_lse=True)
    grads = attention_backward(q, k, v, out, dout, lse, causal=causal, deterministic=deterministic)
    _, _, *expected = reference(q, k, v, dout, causal)
    for got, want in zip(grads, expected):
        assert got.dtype == q.dtype
        assert relative_error(got, want) < GRADIENT_TOLERANCE[np.float16]


@pytest.mark.parametrize("deterministic", [False, True], ids=["accumulating", "deterministic"])
@pytest.mark.parametrize("seed", [0, 1])
def test_random_interleavings(seed, deterministic, monkeypatch):
    """Each path's kernels under the emulator's random schedules: no race, barrier misuse or deadlock, the same
    gradients."""
    q, k, v, dout = operands(1, 2, 1, 140, 150, 64, np.float16, seed=3)
    out, lse = attention(q, k, v, causal=True, return_lse=True)
    monkeypatch.setenv(SEED_VARIABLE, str(seed))
    grads = attention_backward(q, k, v, out, dout, lse, causal=True, deterministic=deterministic)
    _, _, *expected = reference(q, k, v, dout, True)
    for got, want in zip(grads, expected):
        assert relative_error(got, want) < GRADIENT_TOLERANCE[np.float16]


def test_operands_that_are_not_contiguous_are_read_from_copies():
    """A dO with a strided head dim and a q stored [B, S, H, D] give the gradients of their contiguous copies."""
    q, k, v, dout = operands(1, 4, 2, 24, 40, 64, np.float16)
    out, lse = attention(q, k, v, causal=True, return_lse=True)
    q_view = np.ascontiguousarray(q.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    dout_view = np.repeat(dout, 2, axis=3)[..., ::2]
    got = attention_backward(q_view, k, v, out, dout_view, lse, causal=True)
    for strided, dense in zip(got, attention_backward(q, k, v, out, dout, lse, causal=True)):
        assert np.array_equal(strided, dense)


def test_an_empty_query_gives_zero_key_gradients():
    q, k, v, dout = operands(1, 2, 2, 0, 16, 64, np.float16)
    dq, dk, dv = attention_backward(q, k, v, q, dout, np.zeros((1, 2, 0), np.float32))
    assert dq.shape == (1, 2, 0, 64) and not dk.any() and not dv.any()


def _cases():
    q, k, v, dout = operands(1, 4, 2, 16, 16, 64, np.float16)
    lse = np.zeros((1, 4, 16), np.float32)
    q256 = np.zeros((1, 4, 16, 256), np.float16)
    return {
        "head-dim": ((q256, q256[:, :2], q256[:, :2], q256, q256, lse), {},
                     "head_dim (q.shape[3]) is 256; attention_backward supports 64, 128"),
        "out-shape": ((q, k, v, q[:, :, :8], dout, lse), {}, "out must have q's shape (1, 4, 16, 64), got (1, 4, 8, 64)"),
        "dout-dtype": ((q, k, v, q, dout.astype(ml_dtypes.bfloat16), lse), {},
                       "dout has dtype bfloat16 but q has float16"),
        "lse-shape": ((q, k, v, q, dout, lse[..., :4]), {}, "lse must have shape (1, 4, 16) ([batch, heads, seq_q])"),
        "lse-dtype": ((q, k, v, q, dout, lse.astype(np.float16)), {}, "lse must be a contiguous float32 array"),
        "kind": ((q, k, v, q, dout.tolist(), lse), {}, "dout must be a numpy array or a torch tensor, got list"),
        "causal": ((q, k, v, q, dout, lse), {"causal": "yes"}, "causal must be True or False, got 'yes'"),
        "deterministic": ((q, k, v, q, dout, lse), {"deterministic": 1}, "deterministic must be True or False, got 1"),
    }


@pytest.mark.parametrize("case", list(_cases()))
def test_argument_errors(case, monkeypatch):
    """Each before anything is allocated or launched."""
    module = __import__("warpspec.ops.attention_backward", fromlist=["launch_backward"])
    monkeypatch.setattr(module, "launch_backward", lambda *args: pytest.fail("launched"))
    args, kwargs, message = _cases()[case]
    with pytest.raises(ArgumentError) as raised:
        attention_backward(*args, **kwargs)
    assert message in str(raised.value)


def test_return_lse_must_be_a_bool():
    q, k, v, _ = operands(1, 1, 1, 8, 8, 64, np.float16)
    with pytest.raises(ArgumentError, match="return_lse must be True or False, got 1"):
        attention(q, k, v, return_lse=1)


@pytest.mark.parametrize("deterministic", [False, True], ids=["accumulating", "deterministic"])
@pytest.mark.parametrize("head_dim", sorted(DEFAULT_BACKWARD_SCHEDULES))
def test_nvrtc_builds_the_backward_kernels_without_spills(head_dim, deterministic):
    """NVRTC compiles each path's kernels of the shipped schedule (causal: the masked variant) with no spills, no
    stack and no ptxas advisory, their GEMMs as HGMMA (the dQ conversion has none), the accumulating path's dQ
    shares as TMA reduce-adds (UTMAREDG)."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import count_instructions, disassemble, parse_ptxas_log
    from warpspec.runtime import kernel_for

    q, k, v, dout = operands(1, 1, 1, 8, 8, head_dim, ml_dtypes.bfloat16)
    problem = validate_backward(q, k, v, q, dout, np.zeros((1, 1, 8), np.float32), True, None)
    for kernel in backward_kernels(problem, deterministic):
        name = type(kernel).__name__
        built = compile_kernel(kernel_for(kernel, {}))
        (report,) = parse_ptxas_log(built.module.log).values()
        assert (report.spill_store_bytes, report.spill_load_bytes, report.stack_bytes, report.advisories) == \
            (0, 0, 0, ()), name
        counts = count_instructions(disassemble(built.module.cubin), ["HGMMA", "LDL", "STL", "UTMAREDG"])
        assert (counts["HGMMA"] > 0) == (name != "ConvertDQ") and counts["LDL"] == counts["STL"] == 0, name
        assert (counts["UTMAREDG"] > 0) == (name in ("BackwardKVDQ", "BackwardFused")), name


@pytest.mark.parametrize("head_dim, num_stages", [(128, 2), (64, 3)])
def test_the_dkdv_kernel_loads_a_tile_s_lse_and_d_before_its_first_exponential(head_dim, num_stages):
    """In the SASS from the first WGMMA to the first exponential, both of the tile's per-column vectors are
    loaded: lse and D, block_m / 4 = 16 float32 loads each per thread (its columns in WGMMA's accumulator layout).
    D used to be loaded after dV's issue, and its round trip stalled dSᵀ (16 loads here)."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import disassemble
    from warpspec.dtypes import bfloat16
    from warpspec.ops.attention_backward_kernel import BackwardKV
    from warpspec.runtime import kernel_for

    kernel = BackwardKV(bfloat16, head_dim=head_dim, causal=False, block_m=64, num_stages=num_stages)
    sass = disassemble(compile_kernel(kernel_for(kernel, {})).module.cubin).splitlines()
    first_wgmma = next(i for i, line in enumerate(sass) if "HGMMA" in line)
    first_exponential = next(i for i, line in enumerate(sass) if "MUFU.EX2" in line and i > first_wgmma)
    assert sum("LDG.E " in line for line in sass[first_wgmma:first_exponential]) == 2 * 64 // 4


@pytest.mark.parametrize("transposed", [False, True], ids=["key-halves", "transposed"])
@pytest.mark.parametrize("causal", [False, True])
def test_the_fused_kernel_loads_a_tile_s_lse_and_d_while_s_and_dp_run(causal, transposed):
    """``BackwardFused``'s lse and D are columns (a value per query row: 2 float32 loads a thread each). In the SASS
    lse's loads come between the tile's first WGMMAs and the wait for S, and D's before the wait for dP. Loaded
    after those waits, as before, each round trip stalled the tile."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import disassemble
    from warpspec.dtypes import bfloat16
    from warpspec.ops.attention_backward_kernel import BackwardFused
    from warpspec.runtime import kernel_for

    kernel = BackwardFused(bfloat16, head_dim=64, causal=causal, num_stages=2, transposed=transposed)
    sass = disassemble(compile_kernel(kernel_for(kernel, {})).module.cubin).splitlines()
    first_wgmma = next(i for i, line in enumerate(sass) if "HGMMA" in line)
    waits = [i for i, line in enumerate(sass) if "WARPGROUP.DEPBAR" in line and i > first_wgmma]
    loads = [sum("LDG.E " in line for line in sass[first_wgmma:wait]) for wait in waits[:2]]
    assert loads == [2, 4]


@pytest.mark.parametrize("causal", [False, True])
def test_the_transposed_fused_kernel_issues_its_dv_and_dk_as_n128_steps_without_spills(causal):
    """With ``transposed``, dVᵀ and dKᵀ of all 128 keys are one warpgroup's m64n128k16 steps each (8 a tile, 16 in
    all) where each warpgroup's dV and dK of its key half were m64n64k16 steps (32 in all): the SASS holds 48
    HGMMAs instead of 64 (S, dP and the dQ share unchanged: 32), with no spills, no stack and no advisory. dVᵀ and
    dKᵀ then leave as two TMA stores each (their key halves, through the ring) and no global store from registers,
    where the row-major accumulators are stored from registers (16-bit STGs)."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import count_instructions, disassemble, parse_ptxas_log
    from warpspec.dtypes import bfloat16
    from warpspec.ops.attention_backward_kernel import BackwardFused
    from warpspec.runtime import kernel_for

    counts = {}
    for transposed in (False, True):
        kernel = BackwardFused(bfloat16, head_dim=64, causal=causal, num_stages=2, transposed=transposed)
        built = compile_kernel(kernel_for(kernel, {}))
        (report,) = parse_ptxas_log(built.module.log).values()
        assert (report.spill_store_bytes, report.spill_load_bytes, report.stack_bytes, report.advisories) == \
            (0, 0, 0, ())
        counts[transposed] = count_instructions(disassemble(built.module.cubin), ["HGMMA", "STG", "UTMASTG"])
    assert counts[False]["HGMMA"] == 64 and counts[False]["STG"] > 0 and counts[False]["UTMASTG"] == 0
    assert counts[True] == {"HGMMA": 48, "STG": 0, "UTMASTG": 4}


def test_the_fused_kernel_s_transposed_flag_is_a_bool():
    from warpspec.dtypes import bfloat16
    from warpspec.ops.attention_backward_kernel import BackwardFused

    with pytest.raises(ArgumentError, match="BackwardFused transposed must be True or False, got 1"):
        BackwardFused(bfloat16, head_dim=64, causal=False, num_stages=2, transposed=1)


def test_planted_bug_q_stage_released_before_the_dk_wgmma_completes():
    """The dK/dV kernel hands a (Q, dO) stage back before dK += dSᵀ·Q has read it: a RaceError at the producer's
    TMA load that overwrites it."""
    from pathlib import Path

    from tests.kernels import attention_bug_kernels as bk
    from warpspec import RaceError
    from warpspec.dtypes import float16
    from warpspec.ops import attention_backward_kernel as bwk

    q, k, v, dout = operands(1, 1, 1, 300, 100, 64, np.float16)
    lse, dd = np.zeros((1, 1, 300), np.float32), np.zeros((1, 1, 300), np.float32)
    kernel = bk.ReleasesQBeforeDK(float16, head_dim=64, causal=False, block_m=64, num_stages=3)
    with pytest.raises(RaceError) as raised:
        kernel(300, 100, 1, 1, 1, 0.125, 0.18, q, k, v, dout, lse, dd, np.zeros_like(k), np.zeros_like(v))
    assert "tma.global_to_shared writes sq[0] while an asynchronous read of it (a wgmma or a TMA store) is still " \
           "in flight" in str(raised.value)
    (load,) = [n for n, line in enumerate(Path(bwk.__file__).read_text().splitlines(), 1)
               if "self.tma.global_to_shared(src=gq, dst=sq[stage], offsets" in line]
    assert raised.value.location.rsplit(" at ", 1)[-1] == f"{bwk.__file__}:{load}"
    assert f"ReleasesQBeforeDK.retire_previous at {bk.__file__}:{bk.marker_line('late-dk-wait')} in " \
           f"wgmma.wait_group(" in raised.value.tasks


def test_planted_bug_dq_staging_overwritten_before_the_reduce_add_read_it():
    """The accumulating dK/dV kernel stores a tile's dQ half into its staging buffer without waiting for the
    previous tile's reduce-add to have read it: a RaceError at that store."""
    from tests.kernels import attention_bug_kernels as bk
    from warpspec import RaceError
    from warpspec.dtypes import float16

    q, k, v, dout = operands(1, 1, 1, 200, 100, 64, np.float16)
    lse, dd = np.zeros((1, 1, 200), np.float32), np.zeros((1, 1, 200), np.float32)
    kernel = bk.OverwritesDQStaging(float16, head_dim=64, causal=False, block_m=64, num_stages=2)
    with pytest.raises(RaceError) as raised:
        kernel(200, 100, 1, 1, 1, 0.125, 0.18, q, k, v, dout, lse, dd, np.zeros_like(k), np.zeros_like(v),
               np.zeros(q.shape, np.float32))
    assert "store_shared writes staging" in str(raised.value)
    assert "while an asynchronous read of it (a wgmma or a TMA store) is still in flight" in str(raised.value)
    assert raised.value.location.rsplit(" at ", 1)[-1] == f"{bk.__file__}:{bk.marker_line('early-staging')}"


@pytest.mark.parametrize("kernel_class, marker, message", [
    ("StoresPBeforeItIsRead", "early-p", "store_shared touches probs[0, 1], which threads 0-127 read without a "
                                         "barrier wait or sync ordering it before this access"),
    ("IssuesDVBeforeBothPs", "early-dv", "wgmma.mma operand a reads probs[0, 1], which holds elements that no "
                                         "completed write has filled"),
], ids=["p-before-read", "dv-before-both-ps"])
def test_planted_bugs_in_the_fused_kernel_s_hand_off(kernel_class, marker, message):
    """The fused kernel's warpgroups hand P over through shared memory: a store over it before both warpgroups' dV
    read the previous tile's, or a dV WGMMA issued before the other warpgroup stored its half, is a RaceError at
    that line."""
    from tests.kernels import attention_bug_kernels as bk
    from warpspec import RaceError
    from warpspec.dtypes import float16

    q, k, v, dout = operands(1, 1, 1, 300, 130, 64, np.float16)
    lse, dd = np.zeros((1, 1, 300), np.float32), np.zeros((1, 1, 300), np.float32)
    kernel = getattr(bk, kernel_class)(float16, head_dim=64, causal=False, num_stages=2)
    with pytest.raises(RaceError) as raised:
        kernel(300, 130, 1, 1, 1, 0.125, 0.18, q, k, v, dout, lse, dd, np.zeros_like(k), np.zeros_like(v),
               np.zeros(q.shape, np.float32))
    assert message in str(raised.value)
    assert raised.value.location.rsplit(" at ", 1)[-1] == f"{bk.__file__}:{bk.marker_line(marker)}"


@pytest.mark.parametrize("seed, message", [
    (None, "store_shared touches sdo[0, 1, 0], which threads 128-255 read without a barrier wait or sync ordering it "
           "before this access"),
    ("0", "store_shared writes sdo[0, 1, 0] while an asynchronous read of it"),
], ids=["default-schedule", "seed-0"])
def test_planted_bug_gradients_written_over_the_ring_before_the_last_gemms_read_it(seed, message, monkeypatch):
    """The fused kernel's warpgroups store their dVᵀ and dKᵀ through the (Q, dO) ring's first stage once both
    warpgroups' last GEMMs are done; writing it without that wait, while the other warpgroup's last dP (the tile in
    stage 0: three tiles in two stages) may still read dO there, is a RaceError at that store, whichever schedule
    ran: the emulator's default one retires that dP (and then warpgroup 0's dV over the same tile) before the store,
    which the store is not ordered after; seed 0's store comes while the dP is in flight."""
    import inspect

    from tests.kernels import attention_bug_kernels as bk
    from warpspec import RaceError
    from warpspec.dtypes import float16
    from warpspec.ops.attention_backward_kernel import BackwardFused

    q, k, v, dout = operands(1, 1, 1, 300, 130, 64, np.float16)
    lse, dd = np.zeros((1, 1, 300), np.float32), np.zeros((1, 1, 300), np.float32)
    kernel = bk.StoresGradientsOverTheRingEarly(float16, head_dim=64, causal=False, num_stages=2, transposed=True)
    if seed is not None:
        monkeypatch.setenv(SEED_VARIABLE, seed)
    with pytest.raises(RaceError) as raised:
        kernel(300, 130, 1, 1, 1, 0.125, 0.18, q, k, v, dout, lse, dd, np.zeros_like(k), np.zeros_like(v),
               np.zeros(q.shape, np.float32))
    assert message in str(raised.value)
    lines, first = inspect.getsourcelines(BackwardFused.ring_stores)
    (store,) = [first + n for n, line in enumerate(lines) if "self.store_shared(" in line]
    assert raised.value.location.rsplit(" at ", 1)[-1] == f"{inspect.getsourcefile(BackwardFused)}:{store}"
    assert f"StoresGradientsOverTheRingEarly.store_keys_major at {bk.__file__}:{bk.marker_line('early-ring')}" \
        in raised.value.location
