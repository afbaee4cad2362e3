"""``warpspec.emulator.prove``: every interleaving class of a block's partitions and asynchronous operations. The
correct kernels are proved (the class counts printed); each planted bug is found with the error class and line of
the deterministic run; a counterexample is written as a timeline."""

import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
from tests.kernels import buggy_kernels as bk
from matmul_v3 import MatmulWGMMAV3
from tma_copy import TmaCopy
from warpspec.emulator import prove
from warpspec.emulator.explore import Budget, record_run
from warpspec.emulator.run import SEED_VARIABLE, emulate_kernel
from warpspec.errors import KernelError
from warpspec.frontend.kernel import bind_arguments
from warpspec.runtime import kernel_for
from warpspec.timeline.witness import write_witness


@pytest.fixture(autouse=True)
def deterministic(monkeypatch):
    monkeypatch.delenv(SEED_VARIABLE, raising=False)


def ir_of(script, *args):
    """(kernel IR, runtime arguments) of ``script(*args)``."""
    runtime, compile_time = bind_arguments(type(script), args, {})
    return kernel_for(script, compile_time), runtime


def matmul_args(m, n, k):
    rng = np.random.default_rng(0)
    return (m, n, k, rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((n, k)).astype(np.float16),
            np.zeros((m, n), np.float16))


def test_v3_two_stages_three_k_tiles_is_proved():
    args = matmul_args(128, 64, 96)
    result = prove(*ir_of(MatmulWGMMAV3(num_stages=2, block_m=128, block_n=64, block_k=32), *args))
    print(result.text("V3 2 stages, 3 K-tiles"))
    # One class: every pair of dependent steps of different roles is ordered by a barrier (reads of a global
    # buffer commute); the other runs end sleep-blocked.
    assert result.proved and result.exhaustive and (result.classes, result.runs) == (1, 18) and result.seconds < 60
    a, b, c = args[3:]
    reference = a.astype(np.float32) @ b.astype(np.float32).T
    assert np.linalg.norm(c - reference) / np.linalg.norm(reference) < 1e-2  # the run after the proof computes C


def test_the_double_buffered_copy_is_proved():
    source = np.random.default_rng(1).standard_normal((64, 192)).astype(np.float16)
    copied = np.zeros_like(source)
    result = prove(*ir_of(TmaCopy(tile_m=64, tile_n=64, num_buffers=2), 64, 192, source, copied))
    print(result.text("tma_copy 2 buffers, 3 tiles"))
    assert result.proved and result.classes > 1
    np.testing.assert_array_equal(copied, source)


def test_a_budget_says_the_search_was_not_exhaustive():
    result = prove(*ir_of(MatmulWGMMAV3(num_stages=2, block_m=128, block_n=64, block_k=32), *matmul_args(128, 64, 96)),
                   Budget(runs=3))
    assert not result.proved and not result.exhaustive and result.runs == 3
    assert "not exhaustive" in result.text()


V3_BUGS = ["ConsumerStartsAtPhaseOne", "ConsumerNeverReleases", "ReleaseBeforeWgmmaWait", "ConsumerSkipsFullWait",
           "EmptyCountTooSmall", "ExpectTxByTheWholeWarp", "ExpectTooManyBytes", "StageNeverWraps", "PhasesOneShort"]
COPY_BUGS = ["CopyReleaseBeforeStoreWait", "CopyReleaseWithExpectTx"]


def planted(name):
    cls = getattr(bk, name)
    if name in COPY_BUGS:
        source = np.random.default_rng(0).standard_normal((64, 256)).astype(np.float16)
        return ir_of(cls(), 64, 256, source, np.zeros_like(source))
    return ir_of(cls(), *matmul_args(128, 64, 256))


@pytest.mark.parametrize("name", V3_BUGS + COPY_BUGS)
def test_every_planted_bug_is_found_with_its_class_and_line(name):
    kernel, runtime = planted(name)
    with pytest.raises(KernelError) as deterministic:
        emulate_kernel(kernel, dict(runtime))
    result = prove(*planted(name))
    assert not result.proved and result.error is not None
    assert type(result.error) is type(deterministic.value)
    assert result.error.location == deterministic.value.location


def test_a_counterexample_is_a_timeline_and_a_verdict(tmp_path):
    result = prove(*planted("ConsumerNeverReleases"), Budget(runs=1000))
    line = result.text("num_stages=2")
    assert not result.proved and line.startswith("FAIL  num_stages=2  counterexample") and "DeadlockError" in line
    write_witness(result, tmp_path)
    trace = json.loads((tmp_path / "trace.json").read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert {"threads 0-127", "threads 128-159", "mbarrier consumer_barriers[0]"} <= names
    assert (tmp_path / "timeline.png").stat().st_size > 10000
    assert "counterexample: DeadlockError" in (tmp_path / "summary.txt").read_text()


@pytest.mark.parametrize("seed", [None, 3])
def test_a_recorded_run_is_the_plain_run_decision_for_decision(seed, monkeypatch, tmp_path):
    """``record_run`` (what ``warpspec check --witness`` records after a failing run) makes the run's own chooser's
    decisions: the seeded or deterministic run fails there with the same error, every partition where it was."""
    if seed is not None:
        monkeypatch.setenv(SEED_VARIABLE, str(seed))
    kernel, runtime = planted("ReleaseBeforeWgmmaWait")
    with pytest.raises(KernelError) as plain:
        emulate_kernel(kernel, dict(runtime))
    recorded = record_run(*planted("ReleaseBeforeWgmmaWait"))
    assert type(recorded.error) is type(plain.value) and str(recorded.error) == str(plain.value)
    assert recorded.error.tasks == plain.value.tasks and recorded.block == (0, 0, 0) and recorded.steps
    write_witness(recorded, tmp_path)
    assert "counterexample: RaceError" in (tmp_path / "summary.txt").read_text()


def test_a_passing_run_records_nothing():
    assert record_run(*ir_of(TmaCopy(tile_m=64, tile_n=64, num_buffers=2), 64, 128,
                             *[np.zeros((64, 128), np.float16)] * 2)) is None
