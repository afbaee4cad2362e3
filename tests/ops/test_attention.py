"""warpspec.ops.attention and its kernel on the emulator: against a numpy softmax at small ragged shapes (both
causal modes, grouped-query heads, fp16 and bf16, every head dim), rows that see no key, every ArgumentError,
the planted bugs of tests/kernels/attention_bug_kernels.py with their exact errors and lines, and the NVRTC build
of each head dim's shipped schedule (no spills, no serialized WGMMA)."""

import importlib
import runpy
import sys
from io import StringIO
from pathlib import Path

from tests.kernels import attention_bug_kernels as bk
from tests.support.example_checks import emulator  # noqa: F401  (autouse: the emulator, its deterministic schedule)
import ml_dtypes
import numpy as np
import pytest
from attention_fwd import reference

from warpspec import ArgumentError, BarrierError, RaceError
from warpspec.dtypes import bfloat16, float16
from warpspec.emulator.run import SEED_VARIABLE
from warpspec.ops import attention
from warpspec.ops import attention_kernel as ak
from warpspec.ops.attention import (DEFAULT_SCHEDULES, THREE_CONSUMER_SCHEDULES, arguments, launch, script_for,
                                    tune_attention, uses_persistent, validate)
from warpspec.ops.attention_persistent_kernel import AttentionPersistent, tile_walk
from warpspec.ops.kernels import NUM_SMS

ops_attention = importlib.import_module("warpspec.ops.attention")  # the module (``ops.attention`` is the function)
KERNEL_FILE = ak.__file__
EXAMPLE_FILE = str(Path(__file__).resolve().parents[2] / "examples" / "attention_fwd.py")
#: fp16/bf16 inputs and output, P rounded to the input type before PV: bf16 keeps 8 bits.
TOLERANCE = {np.float16: 2e-3, ml_dtypes.bfloat16: 2e-2}


def operands(batch, heads, kv_heads, seq_q, seq_k, head_dim, dtype, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((batch, heads, seq_q, head_dim)).astype(dtype)
    k = rng.standard_normal((batch, kv_heads, seq_k, head_dim)).astype(dtype)
    v = rng.standard_normal((batch, kv_heads, seq_k, head_dim)).astype(dtype)
    return q, k, v


def expected(q, k, v, causal, scale=None):
    """The numpy reference of examples/attention_fwd.py over [B·H, S, D] views (it scales by D^-0.5: a custom
    scale is folded into q beforehand, in float32)."""
    batch, heads, seq_q, head_dim = q.shape
    q32 = q.astype(np.float32) * (1.0 if scale is None else scale * head_dim ** 0.5)
    flat = reference(q32.reshape(batch * heads, seq_q, head_dim), k.reshape(-1, *k.shape[2:]),
                     v.reshape(-1, *v.shape[2:]), causal)
    return flat.reshape(q.shape)


def lse_of(q):
    """The kernel's log-sum-exp output for q [B, H, S_q, D]: float32 [B, H, S_q]."""
    return np.empty(q.shape[:3], np.float32)


def line_of(path: str, text: str) -> int:
    """The 1-based line of ``path`` holding ``text`` (exactly one must)."""
    found = [n for n, line in enumerate(Path(path).read_text().splitlines(), 1) if text in line]
    assert len(found) == 1, (text, found)
    return found[0]


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq_q, seq_k", [(200, 150), (70, 300), (1, 33)])
def test_matches_numpy_at_ragged_grouped_query_shapes(dtype, causal, seq_q, seq_k):
    """Two batches of 4 query heads over 2 K/V heads, lengths no multiple of any tile; S_q > S_k leaves causal
    rows with no key (zeros), S_q < S_k shifts the diagonal (bottom-right alignment)."""
    q, k, v = operands(2, 4, 2, seq_q, seq_k, 64, dtype)
    out = attention(q, k, v, causal=causal)
    assert out.dtype == q.dtype and out.shape == q.shape
    error = np.abs(out.astype(np.float32) - expected(q, k, v, causal)).max()
    assert error < TOLERANCE[dtype]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("scale", [-0.2, 0.0, -0.0], ids=["negative", "zero", "negative-zero"])
def test_a_negative_or_zero_scale_is_taken_as_torch_takes_it(scale, causal):
    """Any finite scale, as SDPA takes it: the logits' maximum is not the raw logits' maximum times a negative
    scale, so the call runs on -q (0 · q for zero); zero makes every key a row sees equally likely."""
    q, k, v = operands(1, 4, 2, 40, 72, 64, np.float16)
    out = attention(q, k, v, causal=causal, scale=scale)
    assert np.abs(out.astype(np.float32) - expected(q, k, v, causal, scale)).max() < TOLERANCE[np.float16]
    if scale == 0 and not causal:  # each row is the mean of V's rows of its K/V head
        mean = v.astype(np.float32).mean(axis=2, keepdims=True).repeat(2, axis=1)
        assert np.abs(out.astype(np.float32) - mean).max() < TOLERANCE[np.float16]


def test_validate_refuses_a_scale_the_entry_points_fold_first():
    """validate, under the entry points, refuses what they fold first: its message names the fold."""
    q, k, v = operands(1, 2, 2, 8, 8, 64, np.float16)
    with pytest.raises(ArgumentError, match="scale must be positive here, got -1.0: fold its sign into q first"):
        validate(q, k, v, False, -1.0)


def test_operands_that_are_not_contiguous_are_read_from_copies():
    """A [B, S, H, D] projection's transpose, a strided head dim and the sequence's last rows, as SDPA takes them:
    each is copied to a contiguous array first, and the result is the contiguous operands' result."""
    q, k, v = operands(1, 4, 2, 24, 40, 64, np.float16)
    q_view = np.ascontiguousarray(q.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)  # [B, S, H, D] storage
    k_view = np.repeat(k, 2, axis=3)[..., ::2]  # every other element of a wider head dim
    v_view = np.concatenate([np.zeros_like(v), v], axis=2)[:, :, 40:]  # the last 40 rows of a longer sequence
    assert not any(x.flags.c_contiguous for x in (q_view, k_view, v_view))
    out = attention(q_view, k_view, v_view, causal=True)
    assert np.array_equal(out, attention(q, k, v, causal=True))
    assert np.abs(out.astype(np.float32) - expected(q, k, v, True)).max() < TOLERANCE[np.float16]


@pytest.mark.parametrize("head_dim, block_n, num_stages, unroll", [(128, 128, 2, 2), (128, 64, 3, 1), (256, 80, 2, 1),
                                                                   (64, 96, 2, 1), (64, 128, 3, 3)])
def test_head_dims_and_tiles_narrower_than_the_head(head_dim, block_n, num_stages, unroll):
    """Every head dim, and K/V tiles of another width than D: the [64, 1] row statistics of the [64, block_n]
    scores also scale the [64, D] output (the layout pass takes the two row slices as one)."""
    q, k, v = operands(1, 2, 1, 150, 170, head_dim, np.float16, seed=1)
    problem = validate(q, k, v, True, None)
    out = np.full_like(q, np.nan)
    launch(q, k, v, out, lse_of(q), problem, {"block_n": block_n, "num_stages": num_stages, "unroll": unroll},
           persistent=False)
    assert np.abs(out.astype(np.float32) - expected(q, k, v, True)).max() < 2e-3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_interleavings(seed, monkeypatch):
    """Under the emulator's random schedules (the partitions interleaved differently per seed), no race, barrier
    misuse or deadlock, and the same result."""
    monkeypatch.setenv(SEED_VARIABLE, str(seed))
    q, k, v = operands(1, 2, 1, 150, 330, 64, np.float16, seed=3)
    problem = validate(q, k, v, True, None)
    out = np.full_like(q, np.nan)
    launch(q, k, v, out, lse_of(q), problem, {"block_n": 64, "num_stages": 2, "unroll": 1}, persistent=False)
    assert np.abs(out.astype(np.float32) - expected(q, k, v, True)).max() < 2e-3


def test_rows_that_see_no_key_are_zero_and_scale_is_applied():
    """Causal with S_q = 3 S_k: the first 2 S_k query rows see no key and are exactly 0 (FlashAttention's
    convention; SDPA with a bottom-right causal mask gives NaN there). A custom scale multiplies the logits."""
    q, k, v = operands(1, 1, 1, 90, 30, 64, np.float16, seed=2)
    out = attention(q, k, v, causal=True, scale=0.3)
    assert not np.isnan(out).any()
    assert np.all(out[0, 0, :60] == 0)
    assert np.abs(out.astype(np.float32) - expected(q, k, v, True, scale=0.3)).max() < 2e-3


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("jump", [3.0, 30.0], ids=["within-slack", "past-slack"])
def test_a_running_maximum_that_jumps_is_rescaled_exactly(jump, causal):
    """Keys whose scores grow by ``jump`` (in log2 units, as the kernel scales them) from one 64-key tile to the
    next: within ``RESCALE_SLACK`` a row keeps its running maximum (P grows to 2**jump; O is not rescaled), past it
    the maximum moves and O is rescaled; both match the numpy softmax, and the log-sum-exp is the reference's."""
    head_dim, seq = 64, 256
    q = np.zeros((1, 1, 96, head_dim), np.float16)
    q[..., 0] = 1.0
    k = np.zeros((1, 1, seq, head_dim), np.float16)
    # score of key j = k[j, 0] · D^-0.5; in log2 units times log2(e): tile t's keys at t · jump, plus a little noise
    rng = np.random.default_rng(1)
    tiles = np.arange(seq) // 64
    k[0, 0, :, 0] = ((tiles * jump + rng.uniform(0, 1, seq)) / ak.LOG2_E * head_dim ** 0.5).astype(np.float16)
    v = rng.standard_normal((1, 1, seq, head_dim)).astype(np.float16)
    out, lse = attention(q, k, v, causal=causal, return_lse=True)
    assert 3.0 < ak.RESCALE_SLACK < 30.0  # the two cases stay on either side of the slack
    assert np.abs(out.astype(np.float32) - expected(q, k, v, causal)).max() < TOLERANCE[np.float16]
    scores = (q.astype(np.float32)[0, 0] @ k.astype(np.float32)[0, 0].T) * head_dim ** -0.5
    if causal:  # bottom-right aligned: row i sees keys up to i + seq - 96
        scores = np.where(np.arange(seq)[None, :] <= np.arange(96)[:, None] + seq - 96, scores, -np.inf)
    top = scores.max(axis=1, keepdims=True)
    reference_lse = (top + np.log(np.exp(scores - top).sum(axis=1, keepdims=True)))[:, 0]
    assert np.allclose(lse[0, 0], reference_lse, rtol=1e-5, atol=1e-3)


def test_an_empty_query_launches_nothing(monkeypatch):
    module = sys.modules["warpspec.ops.attention"]  # ``warpspec.ops.attention`` names the function
    monkeypatch.setattr(module, "script_for", lambda *args: pytest.fail("an empty query launched a kernel"))
    q, k, v = operands(1, 2, 2, 0, 16, 64, np.float16)
    assert attention(q, k, v).shape == (1, 2, 0, 64)


@pytest.mark.parametrize("batch, seq_q", [(0, 16), (0, 1), (2, 0)])
def test_an_empty_batch_or_query_is_an_empty_result_on_every_path(monkeypatch, batch, seq_q):
    """An empty batch took the decode kernel's size rule at one query row (a ZeroDivisionError from the split
    count) and the forward's at more; now neither path is asked, as for S_q = 0. torch tensors differentiate to
    empty (or zero) gradients."""
    module = sys.modules["warpspec.ops.attention"]
    monkeypatch.setattr(module, "script_for", lambda *args: pytest.fail("an empty problem launched a kernel"))
    monkeypatch.setattr(module, "launch_decode", lambda *args: pytest.fail("an empty problem launched a kernel"))
    q, k, v = operands(batch, 2, 2, seq_q, 16, 64, np.float16)
    out, lse = attention(q, k, v, return_lse=True)
    assert out.shape == q.shape and lse.shape == q.shape[:3]
    torch = pytest.importorskip("torch")
    tq, tk, tv = (torch.from_numpy(x).requires_grad_() for x in (q, k, v))
    tout = attention(tq, tk, tv)
    tout.float().sum().backward()
    assert tout.shape == tq.shape and tq.grad.shape == tq.shape
    assert tk.grad.shape == tk.shape and not tk.grad.float().abs().sum()


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", sorted(DEFAULT_SCHEDULES))
def test_the_schedule_is_the_head_dims_default_unless_pinned(head_dim, causal):
    """Off the GPU there are no stored winners: each head dim runs its shipped default (D 128 without a mask its
    three warpgroups' 80-key tiles); a given schedule wins."""
    q, k, v = operands(1, 2, 2, 16, 16, head_dim, np.float16)
    problem = validate(q, k, v, causal, None)
    args = arguments(q, k, v, np.empty_like(q), lse_of(q), problem, persistent=False)
    shipped = THREE_CONSUMER_SCHEDULES[128] if (head_dim, causal) == (128, False) else DEFAULT_SCHEDULES[head_dim]
    assert script_for(problem, args, persistent=False).schedule() == shipped
    pinned = {"block_n": 64, "num_stages": 2, "unroll": 1}
    assert script_for(problem, args, pinned, persistent=False).schedule() == pinned


@pytest.mark.parametrize("head_dim, seq, causal, persistent, schedule, consumers", [
    (64, 16, False, True, (128, 2), 3), (64, 512, True, True, (128, 2), 2), (64, 1024, True, True, (128, 2), 2),
    (64, 1025, True, True, (96, 2), 3), (64, 2048, True, True, (96, 2), 3), (64, 8192, True, True, (96, 2), 3),
    (64, 8193, True, False, (128, 2), 3), (64, 2049, False, False, (128, 2), 3), (128, 512, True, True, (64, 3), 2),
    (128, 513, True, True, (128, 2), 2), (128, 8192, True, True, (128, 2), 2), (128, 8193, True, False, (128, 2), 2),
    (128, 2048, False, True, (128, 2), 2), (128, 2049, False, False, (80, 2), 3), (256, 512, False, False, (80, 2), 2),
    (256, 512, True, False, (80, 2), 2)])
def test_short_sequences_at_head_dims_64_and_128_run_the_persistent_kernel(head_dim, seq, causal, persistent,
                                                                           schedule, consumers):
    """The size rule (``PERSISTENT_ROWS``): without a mask up to 2048 query rows at D 64 and 128, causal up to 8192
    (three consumer warpgroups at D 64 past 1024 rows), the persistent kernel at its shipped schedule for the head
    dim, causality and length (three consumer warpgroups at D 64 without a mask), its walk and grid bound (the
    emulator's SM count) appended to the arguments; else the one-tile kernel at the head dim's default (three
    consumer warpgroups at D 64, and at D 128 without a mask in 80-key tiles)."""
    q = np.zeros((1, 2, seq, head_dim), np.float16)
    k = v = np.zeros((1, 2, 16, head_dim), np.float16)
    problem = validate(q, k, v, causal, None)
    assert uses_persistent(problem) is persistent
    args = arguments(q, k, v, np.empty_like(q), lse_of(q), problem)
    script = script_for(problem, args)
    assert isinstance(script, AttentionPersistent) is persistent
    assert script.consumers == consumers
    if persistent:
        assert args[-1] == NUM_SMS
        assert args[-2] is tile_walk(seq, 16, 2, 64 * consumers, causal, NUM_SMS)
        assert script.schedule() == {"block_n": schedule[0], "num_stages": schedule[1]}
    else:
        assert len(args) == 11 and script.schedule() == {"block_n": schedule[0], "num_stages": schedule[1], "unroll": 1}


def test_tune_attention_refuses_other_dtypes():
    with pytest.raises(ArgumentError, match="dtype must be 'float16' or 'bfloat16', got 'float32'"):
        tune_attention([(1, 1, 1, 128, 128, 64)], "float32")


def _cases():
    q, k, v = operands(1, 4, 2, 16, 16, 64, np.float16)
    bf = k.astype(ml_dtypes.bfloat16)
    q96 = np.zeros((1, 4, 16, 96), np.float16)
    return {
        "rank": ((q[0], k, v), {}, "q must be 4-D [batch, heads, seq, head_dim], got shape (4, 16, 64)"),
        "head-dim": ((q96, q96[:, :2], q96[:, :2]), {},
                     "head_dim (q.shape[3]) is 96; ops.attention supports 64, 128, 256"),
        "dtype": ((q.astype(np.float32), k, v), {}, "q has dtype float32; ops.attention takes float16 or bfloat16"),
        "mixed-dtype": ((q, bf, v), {}, "k has dtype bfloat16 but q has float16"),
        "heads": ((q, k[:, :1].repeat(3, 1), v[:, :1].repeat(3, 1)), {},
                  "q has 4 heads and k 3: the query heads must be a multiple of the key/value heads"),
        "v-shape": ((q, k, v[:, :, :8]), {}, "v must have k's shape (1, 2, 16, 64), got (1, 2, 8, 64)"),
        "batch": ((q, k.repeat(2, 0), v.repeat(2, 0)), {}, "k has batch 2 but q has 1"),
        "no-keys": ((q, k[:, :, :0], v[:, :, :0]), {}, "k and v have no keys"),
        "scale": ((q, k, v), {"scale": "big"}, "scale must be a finite number (None: head_dim ** -0.5), got 'big'"),
        "infinite-scale": ((q, k, v), {"scale": float("-inf")}, "scale must be a finite number"),
        "causal": ((q, k, v), {"causal": 1}, "causal must be True or False, got 1"),
        "kind": ((q.tolist(), k, v), {}, "q must be a numpy array or a torch tensor, got list"),
    }


@pytest.mark.parametrize("case", list(_cases()))
def test_argument_errors(case):
    args, kwargs, message = _cases()[case]
    with pytest.raises(ArgumentError) as raised:
        attention(*args, **kwargs)
    assert message in str(raised.value)


def test_a_seen_description_is_looked_up_and_a_changed_argument_is_checked_again():
    """The second call of a description finds its ``Call`` (no checks again); arguments equal to the seen ones as
    Python compares them but of another type (True == 1) miss the cache and meet their checks."""
    q, k, v = operands(1, 4, 2, 16, 16, 64, np.float16)
    attention(q, k, v, causal=False, scale=1)
    assert ops_attention.call_for(q, k, v, False, 1) is ops_attention.call_for(q.copy(), k, v, False, 1)
    with pytest.raises(ArgumentError, match="scale must be a finite number .*, got True"):
        attention(q, k, v, causal=False, scale=True)
    with pytest.raises(ArgumentError, match="causal must be True or False, got 0"):
        attention(q, k, v, causal=0, scale=1)
    assert ops_attention.call_for(q, k, v, False, 1).problem.scale == 1.0


def test_the_kernel_refuses_an_unsupported_head_dim():
    """The kernel class used directly (as examples/attention_fwd.py does), not through ops.attention's checks."""
    q = np.zeros((1, 1, 16, 96), np.float16)
    for schedule in ({"block_n": 64, "num_stages": 2, "unroll": 1}, {}):  # pinned, and autotuned
        with pytest.raises(ArgumentError, match=r"head_dim must be one of \(64, 128, 256\), got 96"):
            ak.Attention(float16, head_dim=96, causal=False, **schedule)(16, 16, 1, 1, 1, 1.0, q, q, q,
                                                                         np.zeros_like(q), lse_of(q))


def _run_bug(cls, consumers=2):
    q, k, v = operands(1, 1, 1, 200, 300, 64, np.float16)
    out = np.zeros_like(q)
    kernel = cls(float16, head_dim=64, causal=False, block_n=64, num_stages=2, unroll=1, consumers=consumers)
    kernel(200, 300, 1, 1, 1, 64 ** -0.5 * ak.LOG2_E, q, k, v, out, lse_of(q))


def _innermost(error) -> str:
    """The innermost ``file:line`` of an error's location chain (``kernel.py:40 -> helper at file:line``)."""
    return error.location.rsplit(" at ", 1)[-1]


def test_planted_bug_v_stage_released_before_pv_completes():
    """The producer's next TMA load overwrites the V stage the PV WGMMA still reads: a RaceError at the load."""
    with pytest.raises(RaceError) as raised:
        _run_bug(bk.ReleasesVBeforePV)
    assert "tma.global_to_shared writes sv[0] while an asynchronous read of it (a wgmma or a TMA store) is still " \
           "in flight" in str(raised.value)
    load = line_of(KERNEL_FILE, "self.tma.global_to_shared(src=gx, dst=sx[pipe.producer_stage]")
    assert _innermost(raised.value) == f"{KERNEL_FILE}:{load}"
    # The report shows a consumer warpgroup still at the late wait.
    assert f"ReleasesVBeforePV.retire_pv at {bk.__file__}:{bk.marker_line('late-wait')} in wgmma.wait_group(0)" in \
        raised.value.tasks


@pytest.mark.parametrize("consumers", [2, 3])
def test_planted_bug_warpgroups_without_the_turn_barrier(consumers):
    """Without waiting for its turn, a warpgroup hands the turn over twice before the next one waited once: a
    BarrierError at the hand-over (two warpgroups taking turns, or three in a ring)."""
    with pytest.raises(BarrierError) as raised:
        _run_bug(bk.IssuesOutOfTurn, consumers)
    assert "starts phase 1 before any thread waited on the completion of phase 0" in str(raised.value)
    assert f"arrive on turns[" in str(raised.value)
    handover = line_of(KERNEL_FILE, "self.mbarrier.arrive(turns[(wg + 1) % self.consumers])  # queued")
    assert _innermost(raised.value) == f"{KERNEL_FILE}:{handover}"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim, seq_q, seq_k, block_n, num_stages", [
    (64, 200, 150, 128, 3), (64, 70, 300, 64, 2), (64, 400, 330, 96, 2), (128, 250, 190, 80, 2),
    (128, 70, 200, 64, 3)])
def test_three_consumer_warpgroups_match_numpy(causal, head_dim, seq_q, seq_k, block_n, num_stages):
    """Three consumer warpgroups (192-row query tiles, the turn passed around a ring of three) at D 64 and at D 128
    in the tiles whose fragments fit 160 registers: grouped query heads, lengths no multiple of a tile, S_q > S_k
    and S_q < S_k."""
    q, k, v = operands(2, 4, 2, seq_q, seq_k, head_dim, np.float16, seed=1)
    problem = validate(q, k, v, causal, None)
    results = []
    for consumers in (3, 2):
        out, lse = np.full_like(q, np.nan), lse_of(q)
        kernel = ak.Attention(float16, head_dim=head_dim, causal=causal, block_n=block_n, num_stages=num_stages,
                              unroll=1, consumers=consumers)
        kernel(*arguments(q, k, v, out, lse, problem, persistent=False))
        results.append((out, lse))
    (out, lse), (two_out, two_lse) = results
    assert np.abs(out.astype(np.float32) - expected(q, k, v, causal)).max() < 2e-3
    assert np.array_equal(out, two_out) and np.array_equal(lse, two_lse)  # two warpgroups' rows, bit for bit


@pytest.mark.parametrize("seed", [0, 1])
def test_three_consumer_warpgroups_under_random_interleavings(seed, monkeypatch):
    monkeypatch.setenv(SEED_VARIABLE, str(seed))
    q, k, v = operands(1, 2, 1, 250, 330, 64, np.float16, seed=3)
    problem = validate(q, k, v, True, None)
    out = np.full_like(q, np.nan)
    kernel = ak.Attention(float16, head_dim=64, causal=True, block_n=64, num_stages=2, unroll=1, consumers=3)
    kernel(*arguments(q, k, v, out, lse_of(q), problem, persistent=False))
    assert np.abs(out.astype(np.float32) - expected(q, k, v, True)).max() < 2e-3


def test_the_consumer_count_is_checked():
    with pytest.raises(ArgumentError, match=r"consumers must be 2 or 3 \(consumer warpgroups of 64 query rows\), "
                                            r"got 4"):
        ak.Attention(float16, head_dim=64, causal=False, block_n=64, num_stages=2, unroll=1, consumers=4)
    with pytest.raises(ArgumentError, match=r"consumers=3 needs O, S and P in 128 of three consumer warpgroups' 160 "
                                            r"registers a thread \(head_dim/2 \+ 3 \* block_n/4\): head_dim 128 with "
                                            r"block_n 96 needs 136; head_dim 64 takes block_n up to 128, 128 up to 80"):
        ak.Attention(float16, head_dim=128, causal=False, block_n=96, num_stages=2, unroll=1, consumers=3)
    # Autotuned: the schedules whose fragments do not fit are left out; none fit D 256, whose first refusal is raised.
    q = np.zeros((1, 1, 16, 256), np.float16)
    with pytest.raises(ArgumentError, match="head_dim 256 with block_n 128 needs 224"):
        ak.Attention(float16, head_dim=256, causal=False, consumers=3)(16, 16, 1, 1, 1, 1.0, q, q, q, np.zeros_like(q),
                                                                         lse_of(q))
    tuned = ak.Attention(float16, head_dim=128, causal=False, consumers=3)
    assert [schedule["block_n"] for schedule, _ in tuned.constructible()] == [80, 64, 64, 48]


def test_example_runs_as_a_script(monkeypatch):
    """``python examples/attention_fwd.py`` checks itself causal and not, then prints OK."""
    output = StringIO()
    monkeypatch.setattr(sys, "stdout", output)
    runpy.run_path(EXAMPLE_FILE, run_name="__main__")
    lines = output.getvalue().splitlines()
    assert [line.split(" max")[0] for line in lines[:2]] == ["emulator: causal=False", "emulator: causal=True"]
    assert lines[-1] == "OK"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim", sorted(DEFAULT_SCHEDULES))
def test_nvrtc_builds_the_shipped_schedules_without_spills(head_dim, causal):
    """NVRTC compiles each head dim's shipped schedule and consumer count, masked or not, with no spills, no stack
    and no ptxas advisory (a WGMMA pipeline serialized because registers are read under an mma would be one), and
    normalizes O with a reciprocal a row: no float32 division routine (its slow-path check FCHK), and at most 16
    MUFU.RCP in all (the row sums' reciprocals and the integer divisions of the tile's indices; the division routine
    put 128 there); each warp votes before O's in-place rescales (``VOTE.ANY``)."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import count_instructions, disassemble, parse_ptxas_log
    from warpspec.runtime import kernel_for

    problem = ops_attention.Problem(1, 1, 1, 4096, 4096, head_dim, bfloat16, causal, 1.0)
    kernel = ak.Attention(bfloat16, head_dim=head_dim, causal=causal,
                          **ops_attention.default_schedule(problem, persistent=False),
                          consumers=ops_attention.consumers_of(problem, persistent=False))
    built = compile_kernel(kernel_for(kernel, {}))
    (report,) = parse_ptxas_log(built.module.log).values()
    assert (report.spill_store_bytes, report.spill_load_bytes, report.stack_bytes, report.advisories) == (0, 0, 0, ())
    counts = count_instructions(disassemble(built.module.cubin),
                                ["HGMMA", "LDL", "STL", "FCHK", "MUFU.RCP", "VOTE.ANY"])
    assert counts["HGMMA"] > 0 and counts["LDL"] == counts["STL"] == 0
    assert counts["FCHK"] == 0 and counts["MUFU.RCP"] <= 16, counts
    # O's rescale in the loop and after it, each warpgroup's: skipped by a warp whose rows all keep their maximum
    assert counts["VOTE.ANY"] >= 2 * kernel.consumers, counts


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim, block_n", [(64, 128), (128, 80)])
def test_nvrtc_builds_three_consumer_warpgroups_without_spills(causal, head_dim, block_n):
    """Three consumer warpgroups (512 threads: 24 + 3 · 160 registers a lane after setmaxnreg) at the largest
    tiles ``fragment_registers`` admits build with no spills, no stack and no advisory, and raise the consumers'
    registers with setmaxnreg to 160."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import count_instructions, disassemble, parse_ptxas_log
    from warpspec.runtime import kernel_for

    kernel = ak.Attention(bfloat16, head_dim=head_dim, causal=causal, block_n=block_n, num_stages=3 if head_dim == 64
                          else 2, unroll=1, consumers=3)
    built = compile_kernel(kernel_for(kernel, {}))
    (report,) = parse_ptxas_log(built.module.log).values()
    assert (report.spill_store_bytes, report.spill_load_bytes, report.stack_bytes, report.advisories) == (0, 0, 0, ())
    assert "setmaxnreg.inc.sync.aligned.u32 160" in built.generated.source
    counts = count_instructions(disassemble(built.module.cubin), ["HGMMA", "LDL", "STL"])
    assert counts["HGMMA"] > 0 and counts["LDL"] == counts["STL"] == 0


@pytest.mark.parametrize("kernel_class, head_dim, schedule", [
    (ak.Attention, 256, {"block_n": 80, "num_stages": 2, "unroll": 1}),
    (ak.Attention, 128, {"block_n": 128, "num_stages": 3, "unroll": 1}),
    (AttentionPersistent, 128, {"block_n": 128, "num_stages": 3})], ids=["one-tile-d256", "one-tile-d128", "walk-d128"])
def test_the_tuner_admits_the_largest_tiles_that_nvrtc_builds_clean(kernel_class, head_dim, schedule):
    """The largest tiles of the forward kernels that ``tune_attention`` tunes, the register rule's hardest cases
    (O plus the widest S; the pruner once refused every one of them), pass the pruner and build with no spills, no
    stack and no ptxas advisory, masked: what the tuner admits it can time."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import parse_ptxas_log
    from warpspec.runtime import kernel_for
    from warpspec.tune.prune import prune

    kernel = kernel_class(bfloat16, head_dim=head_dim, causal=True, **schedule)
    verdict = prune(kernel, {})
    assert not verdict.pruned, verdict.reason
    (report,) = parse_ptxas_log(compile_kernel(kernel_for(kernel, {})).module.log).values()
    assert (report.spill_store_bytes, report.spill_load_bytes, report.stack_bytes, report.advisories) == (0, 0, 0, ())


def test_the_causal_persistent_kernel_refuses_the_three_warpgroup_tiles_that_spill():
    """Causal, with three consumer warpgroups, the persistent kernel spills at D 64's 128-key tiles and D 128's
    80-key ones, which the one-tile kernel builds clean: it refuses them at construction (so the tuner never builds
    them), and builds the tiles one size down clean."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import parse_ptxas_log
    from warpspec.runtime import kernel_for

    for head_dim, block_n in ((64, 128), (128, 80)):
        with pytest.raises(ArgumentError, match=f"the persistent causal kernel with consumers=3 needs O, S and P in "
                                                f"112 of its 160 registers a thread .* head_dim {head_dim} with "
                                                f"block_n {block_n} needs {head_dim // 2 + 3 * block_n // 4}"):
            AttentionPersistent(bfloat16, head_dim=head_dim, causal=True, block_n=block_n, num_stages=2, consumers=3)
        AttentionPersistent(bfloat16, head_dim=head_dim, causal=False, block_n=block_n, num_stages=2, consumers=3)
    tuned = AttentionPersistent(bfloat16, head_dim=64, causal=True, consumers=3)
    assert max(schedule["block_n"] for schedule, _ in tuned.constructible()) == 96
    kernel = AttentionPersistent(bfloat16, head_dim=64, causal=True, block_n=96, num_stages=2, consumers=3)
    (report,) = parse_ptxas_log(compile_kernel(kernel_for(kernel, {})).module.log).values()
    assert (report.spill_store_bytes, report.spill_load_bytes, report.stack_bytes, report.advisories) == (0, 0, 0, ())


def test_rows_past_int32_are_refused_and_elements_past_it_are_not():
    """validate counts rows (batch · heads · seq), which the kernels address with int32 coordinates, never
    elements (64-bit offsets): B 64 × 8 K/V heads × 131072 keys of D 128 (2**36 elements) is a problem, 2**31 key
    rows are an ArgumentError. (Meta tensors: nothing is allocated.)"""
    torch = pytest.importorskip("torch")
    q = torch.empty(64, 32, 1, 128, dtype=torch.bfloat16, device="meta")
    k = torch.empty(64, 8, 131072, 128, dtype=torch.bfloat16, device="meta")
    assert validate(q, k, k, True, None).seq_k == 131072
    q, k = (torch.empty(1, 1, seq, 64, dtype=torch.bfloat16, device="meta") for seq in (1, 2**31))
    with pytest.raises(ArgumentError, match=r"k and v: batch \* heads \* seq is 2147483648 rows of head_dim; the "
                                            r"kernels' int32 row coordinates reach 2\*\*31 - 1"):
        validate(q, k, k, True, None)
