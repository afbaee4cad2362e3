"""``warpspec check --exhaustive [--budget N] [--witness DIR]``: the verdict lines (proved, a counterexample, a
search the budget cut short), their exit codes, and the witness folders written for a proof's counterexample and
for a plain run's failure."""

import json
import re

import pytest

from tests.cli.test_check import BUGGY, ROOT, V3, check
from tests.kernels import buggy_kernels
from warpspec.cli.failures import EXIT_FAILURE, EXIT_NOT_EXHAUSTIVE, EXIT_OK
from warpspec.emulator.run import SEED_VARIABLE

V3_PINNED = ["m_size=128", "n_size=64", "k_size=96", "--schedule", "block_k=32,num_stages=2,block_m=128,block_n=64"]
V3_LABEL = "num_stages=2 block_m=128 block_n=64 block_k=32"
BUG_SIZES = ["m_size=128", "n_size=64", "k_size=256"]


@pytest.fixture(autouse=True)
def no_seed(monkeypatch):
    monkeypatch.delenv(SEED_VARIABLE, raising=False)


def assert_witness(folder, error_class: str):
    """The three witness files, the trace naming both partitions and the summary the error."""
    trace = json.loads((folder / "trace.json").read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert {"threads 0-127", "threads 128-159"} <= names
    assert (folder / "timeline.png").stat().st_size > 10000
    assert f"counterexample: {error_class}" in (folder / "summary.txt").read_text()


def test_v3_is_proved_with_its_class_count(capsys):
    code, lines, err = check(capsys, V3, *V3_PINNED, "--exhaustive")
    assert code == EXIT_OK, err
    matched = re.fullmatch(rf"proved  {V3_LABEL}  \((\d+) interleaving classes, \d+\.\d\d s; (\d+) runs\)", lines[0])
    assert matched and (int(matched[1]), int(matched[2])) == (1, 18)
    assert lines[1:] == ["1 proved, 0 unproved, 0 failed, 0 skipped"]


def test_a_budget_of_one_run_says_the_search_was_not_exhaustive(capsys):
    code, lines, _ = check(capsys, V3, *V3_PINNED, "--exhaustive", "--budget", "1")
    assert code == EXIT_NOT_EXHAUSTIVE
    assert re.fullmatch(rf"unproved  {V3_LABEL}  \(not exhaustive: the budget ran out after 1 interleaving classes, "
                        r"\d+\.\d\d s; 1 runs; no counterexample in those\)", lines[0])
    assert lines[1] == "0 proved, 1 unproved, 0 failed, 0 skipped"


def test_a_counterexample_fails_with_its_witness(capsys, tmp_path):
    code, lines, _ = check(capsys, f"{BUGGY}:ConsumerNeverReleases", *BUG_SIZES, "--exhaustive", "--witness",
                           str(tmp_path))
    assert code == EXIT_FAILURE
    wait = buggy_kernels.marker_line("v3-consume")
    assert lines[0].startswith("FAIL  ConsumerNeverReleases  counterexample after ")
    assert f"DeadlockError: {BUGGY}:{wait} -> ConsumerNeverReleases.consume at {BUGGY}:" in lines[0]
    output = "\n".join(lines)
    assert "first failure: ConsumerNeverReleases (the exhaustive search):" in output
    assert "choices that reproduce it in block (0, 0, 0): t0 t1" in output
    assert f"witness: {tmp_path}/timeline.png, trace.json, summary.txt" in output
    assert_witness(tmp_path, "DeadlockError")


def test_a_failing_run_without_exhaustive_writes_its_witness(capsys, tmp_path):
    code, lines, _ = check(capsys, f"{BUGGY}:ReleaseBeforeWgmmaWait", *BUG_SIZES, "--seeds", "2", "--witness",
                           str(tmp_path))
    assert code == EXIT_FAILURE
    output = "\n".join(lines)
    assert "first failure: ReleaseBeforeWgmmaWait (the deterministic run):" in output
    assert f"witness: {tmp_path}/timeline.png, trace.json, summary.txt" in output
    assert_witness(tmp_path, "RaceError")


def test_a_passing_run_writes_no_witness(capsys, tmp_path):
    folder = tmp_path / "witness"
    code, _, _ = check(capsys, V3, *V3_PINNED, "--seeds", "1", "--witness", str(folder))
    assert code == EXIT_OK and not folder.exists()


def test_a_rare_interleaving_passes_20_seeds_and_fails_the_proof(capsys):
    target = f"{ROOT / 'tests' / 'kernels' / 'rare_interleaving_kernels.py'}:CopyWithLaggingMonitor"
    code, lines, _ = check(capsys, target, "m_size=64", "n_size=192", "--seeds", "20")
    assert code == EXIT_OK and lines[0].startswith("ok    CopyWithLaggingMonitor  (") and "1+20 runs" in lines[0]
    code, lines, _ = check(capsys, target, "m_size=64", "n_size=192", "--exhaustive")
    assert code == EXIT_FAILURE
    assert lines[0].startswith("FAIL  CopyWithLaggingMonitor  counterexample after ")
    assert "BarrierError: " in lines[0] and "arrive on progress[0] starts phase 2" in lines[0]
