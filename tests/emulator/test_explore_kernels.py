"""``prove`` on the library's and the tutorial's kernels: the tutorial's V4, stream-K's hand-off and the attention
kernel are proved at their smallest shapes (class counts and seconds printed, each within 60 s), and every planted
bug of tests/kernels and of the flag and stream-K tests is found by the search with the error class and line of
the plain run; and a bug that only a rare interleaving shows is missed by 20 seeds and found by the search."""

import numpy as np
import pytest

import warpspec
from tests.emulator import test_global_races as global_races
from tests.emulator.test_explore import ir_of, matmul_args
from tests.emulator.test_planted_bugs import KERNEL_BUGS
from tests.isa import test_flag, test_flag_ordering
from tests.kernels import attention_bug_kernels, flag_ordering_kernels, rare_interleaving_kernels, v6_bug_kernels
from tests.ops import test_attention, test_stream_k
from tests import test_matmul_v6
from matmul_v4 import MatmulWGMMAV4
from warpspec.dtypes import float16
from warpspec.emulator import prove
from warpspec.emulator import run as emulator_run
from warpspec.emulator.explore import Budget
from warpspec.emulator.run import SEED_VARIABLE
from warpspec.errors import BarrierError, KernelError
from warpspec.ops import attention_kernel, kernels

#: The most a proof here may take on a 2-core CPU (the issue's bound).
PROOF_SECONDS = 60


@pytest.fixture(autouse=True)
def deterministic_emulator(monkeypatch):
    monkeypatch.delenv(SEED_VARIABLE, raising=False)
    with warpspec.use_backend("emulator"):
        yield


def assert_proved(result, what: str) -> None:
    print(result.text(what))
    assert result.proved and result.exhaustive and result.runs > 1, result.text(what)
    assert result.seconds < PROOF_SECONDS, result.text(what)


def test_the_tutorials_v4_is_proved():
    """Two consumer warpgroups and a producer warp over ``Pipeline``: 2 stages, 2 K-tiles."""
    args = matmul_args(128, 64, 32)
    assert_proved(prove(*ir_of(MatmulWGMMAV4(num_stages=2, block_m=128, block_n=64, block_k=16), *args)),
                  "V4 2 stages, 2 K-tiles")
    a, b, c = args[3:]
    reference = a.astype(np.float32) @ b.astype(np.float32).T
    assert np.abs(c - reference).max() < 2e-2


#: The smallest stream-K split: 3 tiles of 64 x 64 over 2 blocks, each tile 2 K-tiles (the split threshold lowered
#: to 2 K-tiles): each block finishes a whole tile, and the third is split, the first block's partial sum handed to
#: the second through the workspace and a flag.
SPLIT_K_TILES, STREAM_K_SHAPE, STREAM_K_BLOCKS = 2, (192, 64, 128), 2


@pytest.fixture
def smallest_split(monkeypatch):
    """Stream-K kernels built now split tiles of ``SPLIT_K_TILES`` K-tiles (other kernels do not read it)."""
    monkeypatch.setattr(kernels, "MIN_SPLIT_K_TILES", SPLIT_K_TILES)


def stream_k_operands(kernel_class):
    """(script, its launch arguments, a, w, out, workspace) of the smallest split."""
    m, n, k = STREAM_K_SHAPE
    a, w = test_stream_k.operands(m, n, k, np.float16)
    out = np.full((m, n), np.nan, np.float16)
    problem = test_stream_k.ops_matmul.validate(a, w.T, None, None, out, None)
    workspace = (np.zeros(test_stream_k.ops_matmul.workspace_sizes(m, n, STREAM_K_BLOCKS)[0], np.float32),
                 np.zeros(STREAM_K_BLOCKS, np.int32))
    layout = test_stream_k.ops_matmul.Layout.of(a, w.T, out, problem)
    script = test_stream_k.stream_k(kernel_class, 64, 64, stages=2)
    return script, layout.arguments(a, w.T, out, None, None, workspace, STREAM_K_BLOCKS), a, w, out, workspace


@pytest.mark.slow  # 40-60 s on a 2-core CPU; CI runs it (``-m "not slow"`` leaves it out)
def test_stream_k_hand_off_is_proved(smallest_split):
    """Every interleaving of each block's roles, blocks in launch order (as flags require)."""
    script, arguments, a, w, out, (partials, flags) = stream_k_operands(kernels.Gemm)
    assert_proved(prove(*ir_of(script, *arguments)), "stream-K 3 tiles over 2 blocks, the third split")
    test_stream_k.assert_close(out, test_stream_k.reference(a, w.T), np.float16)
    assert partials.any() and flags.tolist() == [0, 0]  # the hand-off happened, and its flags were given back


def test_the_attention_kernel_is_proved():
    """One block of 128 query rows (two consumer warpgroups taking turns) over one 64-key tile."""
    q, k, v = test_attention.operands(1, 1, 1, 64, 64, 64, np.float16)
    out = np.zeros_like(q)
    script = attention_kernel.Attention(float16, head_dim=64, causal=False, block_n=64, num_stages=2, unroll=1)
    lse = test_attention.lse_of(q)
    assert_proved(prove(*ir_of(script, 64, 64, 1, 1, 1, 64 ** -0.5 * attention_kernel.LOG2_E, q, k, v, out, lse)),
                  "attention 64x64, head_dim 64")
    assert np.abs(out.astype(np.float32) - test_attention.expected(q, k, v, False)).max() < 2e-3


# ---------------------------------------------------------------------------------------------- planted bugs


def v6(bug, schedule, num_sms):
    def launch():
        operands = test_matmul_v6.matmul_operands(test_matmul_v6.M, test_matmul_v6.N, test_matmul_v6.K)
        test_matmul_v6.run(bug(**schedule), operands, num_sms)
    return launch


def flag_bug(planted):
    def launch():
        x, ws, flags, out = test_flag.operands()
        kernel = test_flag.fk.RunningSum(**planted)
        kernel(test_flag.BLOCKS, x, ws, flags, out)
        kernel(test_flag.BLOCKS, x, ws, flags, out)  # a mistake that shows only in the next launch (flags left set)
    return launch


def hand_off_bug(**planted):
    return lambda: flag_ordering_kernels.HandOff(**planted)(test_flag_ordering.BLOCKS, **test_flag_ordering.operands(
        np.random.default_rng(0)))


def stream_k_bug(cls):
    def launch():
        script, arguments, *_ = stream_k_operands(cls)
        script(*arguments)
        script(*arguments)  # a mistake that shows only in the next launch (flags left set)
    return launch


def read_back(kernel):
    return lambda: kernel(global_races.half_rows(64), np.zeros((64, 64), np.float16), np.zeros((64, 64), np.float16))


PLANTED = (
    [pytest.param(p.values[0], id=f"buggy-{p.id}") for p in KERNEL_BUGS]
    + [pytest.param(v6(getattr(v6_bug_kernels, name), getattr(test_matmul_v6, schedule), sms), id=f"v6-{name}")
       for name, schedule, sms in [("SchedulerRepeatsTiles", "COOPERATIVE", 3),
                                   ("EpilogueReusesBuffer", "COOPERATIVE", 2),
                                   ("ChunkWaitTooLoose", "CHUNKED", 2), ("EpilogueWithoutFence", "COOPERATIVE", 2),
                                   ("EpilogueWithoutSync", "COOPERATIVE", 2), ("ReleaseBeforeWait", "PINGPONG", 2),
                                   ("ReleaseOnceForBothWarpgroups", "COOPERATIVE", 2),
                                   ("PingPongWithoutOrder", "PINGPONG", 1)]]
    + [pytest.param(lambda cls=cls: test_attention._run_bug(getattr(attention_bug_kernels, cls)), id=f"attention-{cls}")
       for cls in ("ReleasesVBeforePV", "IssuesOutOfTurn")]
    + [pytest.param(p.values[0], id=f"global-{p.id}") for p in global_races.CROSS_BLOCK]
    + [pytest.param(read_back(p.values[0]), id=f"read-back-{p.id}") for p in global_races.READ_BACK]
    + [pytest.param(flag_bug(p.values[0]), id=f"flag-{p.id}") for p in test_flag.PLANTED]
    + [pytest.param(hand_off_bug(sync_after_wait=False), id="hand-off-no-sync-after-wait"),
       pytest.param(hand_off_bug(sync_before_signal=False), id="hand-off-no-sync-before-signal")]
    + [pytest.param(stream_k_bug(p.values[0]), id=f"stream-k-{p.id}") for p in test_stream_k.PLANTED]
)


def proving(kernel, arguments) -> None:
    """``call_on_emulator`` replaced by the search, the counterexample raised. The blocks before the failing one
    are searched for 10 runs each (a proof of them is not the point here)."""
    result = prove(kernel, arguments, Budget(runs=10, seconds=PROOF_SECONDS))
    if result.error is not None:
        raise result.error


@pytest.mark.parametrize("launch", PLANTED)
def test_every_planted_bug_is_found_by_the_search_as_by_the_plain_run(launch, monkeypatch, smallest_split):
    with pytest.raises(KernelError) as plain:
        launch()
    monkeypatch.setattr(emulator_run, "call_on_emulator", proving)
    with pytest.raises(KernelError) as searched:
        launch()
    assert type(searched.value) is type(plain.value)
    assert searched.value.location == plain.value.location


# ------------------------------------------------------------------------------------- a rare interleaving

RARE_SEEDS = 20


def rare_bug_operands():
    """Three 64 x 64 tiles: the consumer can finish two of them while the monitor still tallies the one before."""
    source = np.random.default_rng(0).standard_normal((64, 192)).astype(np.float16)
    return 64, 192, source, np.zeros_like(source)


def test_a_bug_that_needs_a_rare_interleaving_is_missed_by_the_seeds_and_found_by_prove(monkeypatch):
    for seed in [None] + list(range(RARE_SEEDS)):
        if seed is None:
            monkeypatch.delenv(SEED_VARIABLE, raising=False)
        else:
            monkeypatch.setenv(SEED_VARIABLE, str(seed))
        m, n, source, copied = rare_bug_operands()
        rare_interleaving_kernels.CopyWithLaggingMonitor()(m, n, source, copied)  # no error in any of them
        np.testing.assert_array_equal(copied, source)
    monkeypatch.delenv(SEED_VARIABLE)
    result = prove(*ir_of(rare_interleaving_kernels.CopyWithLaggingMonitor(), *rare_bug_operands()))
    print(result.text("CopyWithLaggingMonitor, 3 tiles"))
    assert type(result.error) is BarrierError
    assert result.error.location == (f"{rare_interleaving_kernels.__file__}:"
                                     f"{rare_interleaving_kernels.marker_line('progress-arrive')}")
    assert "arrive on progress[0] starts phase 2 before any thread waited on the completion of phase 1" in \
        str(result.error)
