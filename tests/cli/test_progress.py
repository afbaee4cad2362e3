"""Progress of long runs: ``emulate_kernel``'s per-block hook and what ``warpspec check`` shows with it on stderr."""

import io
import re
from pathlib import Path

import numpy as np
import pytest

from warpspec import dtypes
from warpspec.cli import main
from warpspec.cli.progress import RunProgress
from warpspec.emulator.run import SEED_VARIABLE, emulate_kernel
from warpspec.runtime import kernel_for

ROOT = Path(__file__).parents[2]
COPY = f"{ROOT / 'examples' / 'tma_copy.py'}:TmaCopy"
COPY_FOUR_BLOCKS = [COPY, "m_size=200", "n_size=64"]  # tile_m=64: blocks [4]


@pytest.fixture(autouse=True)
def no_seed(monkeypatch):
    monkeypatch.delenv(SEED_VARIABLE, raising=False)


class Terminal(io.StringIO):
    """stdout and stderr of a terminal: one screen, both TTYs."""

    def isatty(self) -> bool:
        return True


def test_emulate_kernel_reports_each_block_in_launch_order():
    from matmul_v3 import MatmulWGMMAV3

    script = MatmulWGMMAV3(num_stages=2, block_m=128, block_n=64, block_k=32)
    kernel = kernel_for(script, {"n_size": 70, "k_size": 96})
    rng = np.random.default_rng(1)
    arrays = {name: dtypes.round_to(dtypes.float16, rng.standard_normal(size))
              for name, size in [("a_ptr", 130 * 96), ("b_ptr", 70 * 96), ("c_ptr", 130 * 70)]}
    calls = []
    emulate_kernel(kernel, {"m_size": 130, **arrays}, lambda *call: calls.append(call))
    # blocks [cdiv(130, 128), cdiv(70, 64)] = [2, 2], x fastest
    assert calls == [(0, 4, (0, 0, 0)), (1, 4, (1, 0, 0)), (2, 4, (0, 1, 0)), (3, 4, (1, 1, 0))]
    a, b = arrays["a_ptr"].reshape(130, 96), arrays["b_ptr"].reshape(70, 96)
    expected = a.astype(np.float32) @ b.astype(np.float32).T
    np.testing.assert_allclose(arrays["c_ptr"].reshape(130, 70), expected, rtol=2e-3, atol=2e-2)


def test_progress_option_shows_each_block_of_a_long_run(capsys, monkeypatch):
    # Every run counts as long and every block is shown: the throttle is what the other constants test.
    monkeypatch.setattr(RunProgress, "DELAY", 0.0)
    monkeypatch.setattr(RunProgress, "LOG_INTERVAL", 0.0)
    assert main(["check", *COPY_FOUR_BLOCKS, "--seeds", "1", "--progress"]) == 0
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"tile_m=64 tile_n=64, {run}: block {i}/4"
                                         for run in ["the deterministic run", "WARPSPEC_EMULATOR_SEED=0"]
                                         for i in range(1, 5)]
    lines = captured.out.splitlines()
    assert lines[0].startswith("ok    tile_m=64 tile_n=64  (") and lines[1] == "1 ok (no hazard found, outputs not compared), 0 failed, 0 skipped"


def test_no_progress_without_the_option_or_a_terminal(capsys, monkeypatch):
    monkeypatch.setattr(RunProgress, "DELAY", 0.0)
    monkeypatch.setattr(RunProgress, "LOG_INTERVAL", 0.0)
    assert main(["check", *COPY_FOUR_BLOCKS]) == 0
    assert capsys.readouterr().err == ""


def test_short_runs_show_no_progress(capsys):
    assert main(["check", *COPY_FOUR_BLOCKS, "--progress"]) == 0  # well under RunProgress.DELAY
    assert capsys.readouterr().err == ""


def test_progress_on_a_terminal_is_erased_before_each_verdict(monkeypatch):
    monkeypatch.setattr(RunProgress, "DELAY", 0.0)
    monkeypatch.setattr(RunProgress, "TERMINAL_INTERVAL", 0.0)
    screen = Terminal()
    monkeypatch.setattr("sys.stdout", screen)
    monkeypatch.setattr("sys.stderr", screen)
    assert main(["check", *COPY_FOUR_BLOCKS, "--all-schedules"]) == 0  # a terminal: no --progress needed
    text = screen.getvalue()
    first = "tile_m=64 tile_n=64, the deterministic run: block 1/4"
    assert text.startswith(f"\r{first}\r{first.replace('1/4', '2/4')}")
    # The line is rewritten in place, then blanked before the verdict, which starts on a clean line.
    assert re.search(rf"block 4/4\r {{{len(first)}}}\rok    tile_m=64 tile_n=64  \(", text)
    tail = text[text.rindex("\r") + 1:]
    assert tail.splitlines()[-1] == "3 ok (no hazard found, outputs not compared), 0 failed, 0 skipped"


def test_progress_is_throttled():
    progress = RunProgress(show=True)
    progress.terminal = False
    progress.start("s", "the deterministic run")
    progress.started -= RunProgress.DELAY  # a second into the run
    stream = io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stderr", stream)
        for index in range(1000):
            progress(index, 1000, (index, 0, 0))
    assert stream.getvalue() == "s, the deterministic run: block 1/1000\n"  # the next is due LOG_INTERVAL later
    assert progress.where() == "s, the deterministic run, block 1000/1000 (blockIdx.x=999, blockIdx.y=0, blockIdx.z=0)"
