"""``warpspec check`` through ``warpspec.cli.main``: verdict lines, exit codes and usage errors."""

import os
import re
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from tests.kernels import buggy_kernels
from warpspec.cli import main
from warpspec.cli.inputs import pointer_arrays
from warpspec.emulator.run import SEED_VARIABLE
from warpspec.frontend.kernel import parameters

ROOT = Path(__file__).parents[2]
V3 = f"{ROOT / 'examples' / 'matmul_v3.py'}:MatmulWGMMAV3"
COPY = f"{ROOT / 'examples' / 'tma_copy.py'}:TmaCopy"
BUGGY = ROOT / "tests" / "kernels" / "buggy_kernels.py"
V3_SIZES = ["m_size=130", "n_size=70", "k_size=96"]  # ragged against every tile


@pytest.fixture(autouse=True)
def no_seed(monkeypatch):
    """The CLI's first run of each schedule is the deterministic one whatever the caller's environment."""
    monkeypatch.delenv(SEED_VARIABLE, raising=False)


def check(capsys, *argv):
    """Run ``warpspec check`` with ``argv``; (exit code, stdout lines, stderr)."""
    code = main(["check", *argv])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def test_v3_pinned_schedule_with_seeds(capsys):
    code, lines, err = check(capsys, V3, *V3_SIZES, "--schedule", "block_k=32,num_stages=2,block_m=128,block_n=64",
                             "--seeds", "3")
    assert code == 0, err
    assert re.fullmatch(r"ok    num_stages=2 block_m=128 block_n=64 block_k=32  \(\d+\.\d\d s, 1\+3 runs\)", lines[0])
    assert lines[1:] == ["1 ok (no hazard found, outputs not compared), 0 failed, 0 skipped"]


def test_v3_default_checks_the_first_schedule(capsys):
    code, lines, _ = check(capsys, V3, *V3_SIZES)
    assert code == 0
    assert len(lines) == 2
    assert lines[0].startswith("ok    num_stages=2 block_m=128 block_n=64 block_k=16  (")
    assert lines[0].endswith(" s, 1+0 runs)")


def test_v3_all_schedules(capsys):
    code, lines, _ = check(capsys, V3, "m_size=64", "n_size=72", "k_size=40", "--all-schedules")
    assert code == 0
    verdicts = lines[:-1]
    assert len(verdicts) == 90
    # Schedules whose stages cannot fit in a block's shared memory are refused before running, as on the GPU.
    skipped = [line for line in verdicts if line.startswith("skip  ")]
    assert len(skipped) == 10 and all("fit in a block" in line for line in skipped)
    assert all(line.startswith("ok    num_stages=") for line in verdicts if line not in skipped)
    assert verdicts[-1].startswith("skip  num_stages=7 block_m=256 block_n=256 block_k=64  CompileError: ")
    assert lines[-1] == "80 ok (no hazard found, outputs not compared), 0 failed, 10 skipped"


def test_copy_every_schedule_with_seeds(capsys):
    code, lines, _ = check(capsys, COPY, "m_size=100", "n_size=72", "--all-schedules", "--seeds", "4")
    assert code == 0
    assert [line.split("  (")[0] for line in lines[:-1]] == ["ok    tile_m=64 tile_n=64", "ok    tile_m=32 tile_n=128",
                                                            "ok    tile_m=128 tile_n=32"]
    assert all(line.endswith(" s, 1+4 runs)") for line in lines[:-1])
    assert lines[-1] == "3 ok (no hazard found, outputs not compared), 0 failed, 0 skipped"


def test_buggy_kernel_fails_with_its_error(capsys):
    line = buggy_kernels.marker_line("v3-load-a")
    code, lines, _ = check(capsys, f"{BUGGY}:ReleaseBeforeWgmmaWait", "m_size=128", "n_size=64", "k_size=256",
                           "--seeds", "2")
    assert code == 1
    assert lines[0] == (f"FAIL  ReleaseBeforeWgmmaWait  RaceError: {BUGGY}:{buggy_kernels.marker_line('v3-produce')} "
                        f"-> V3.produce at {BUGGY}:{line}: tma.global_to_shared writes sa[0] "
                        f"while an asynchronous read of it (a wgmma or a TMA store) is still in flight; wait for it "
                        f"(wgmma.wait_group / tma.wait_group) before releasing the buffer")
    assert lines[1] == "0 ok (no hazard found, outputs not compared), 1 failed, 0 skipped"
    full = "\n".join(lines[2:])
    assert "first failure: ReleaseBeforeWgmmaWait (the deterministic run):" in full
    assert "thread partitions:" in full
    assert "threads 0-127: blocked at" in full and "in wgmma.wait_group(0)" in full


def test_deadlock_is_a_failure(capsys):
    code, lines, _ = check(capsys, f"{BUGGY}:ConsumerNeverReleases", "m_size=128", "n_size=64", "k_size=256")
    assert code == 1
    assert lines[0].startswith("FAIL  ConsumerNeverReleases  DeadlockError: ")
    assert "in mbarrier.wait on producer_barriers[0] for phase parity 0" in "\n".join(lines)


def test_schedules_that_do_not_compile_are_skipped(capsys):
    target = f"{BUGGY}:V3TunedPastWgmmaWidth"
    code, lines, _ = check(capsys, target, "m_size=128", "n_size=64", "k_size=128", "--all-schedules")
    assert code == 0
    assert lines[0].startswith("ok    block_n=64  (")
    assert lines[1].startswith(f"skip  block_n=512  CompileError: {BUGGY}:")
    assert "wgmma.mma needs M a multiple of 64 per warpgroup, N a multiple of 8 up to 256" in lines[1]
    assert lines[2] == "1 ok (no hazard found, outputs not compared), 0 failed, 1 skipped"


def test_pinned_schedule_that_does_not_compile_fails(capsys):
    code, lines, _ = check(capsys, f"{BUGGY}:V3TunedPastWgmmaWidth", "m_size=128", "n_size=64", "k_size=128",
                           "--schedule", "block_n=512")
    assert code == 1
    assert lines[0].startswith("FAIL  block_n=512  CompileError: ")
    assert lines[1] == "0 ok (no hazard found, outputs not compared), 1 failed, 0 skipped"


def test_untuned_kernel_that_does_not_compile_fails(capsys):
    code, lines, _ = check(capsys, f"{BUGGY}:UnknownName", "m_size=128", "n_size=64", "k_size=128")
    assert code == 1
    line = buggy_kernels.marker_line("unknown-name")
    call = buggy_kernels.marker_line("v3-consume")
    assert lines[0] == (f"FAIL  UnknownName  CompileError: {BUGGY}:{call} -> UnknownName.consume at {BUGGY}:{line}: "
                        f"unknown name 'consumer_phase'")


def test_seed_variable_is_restored(capsys, monkeypatch):
    monkeypatch.setenv(SEED_VARIABLE, "7")
    code, _, _ = check(capsys, COPY, "m_size=64", "n_size=64", "--seeds", "2")
    assert code == 0
    assert os.environ[SEED_VARIABLE] == "7"


def test_loading_a_file_leaves_modules_of_the_same_name_alone(capsys, monkeypatch):
    before = types.ModuleType("buggy_kernels")  # a module the caller loaded under the file's stem
    monkeypatch.setitem(sys.modules, "buggy_kernels", before)
    code, _, _ = check(capsys, f"{BUGGY}:V3", "m_size=128", "n_size=64", "k_size=128")
    assert code == 0
    assert sys.modules["buggy_kernels"] is before


def test_pointer_arrays_are_sized_from_the_global_views():
    from matmul_v3 import MatmulWGMMAV3

    script = MatmulWGMMAV3(num_stages=2, block_m=128, block_n=64, block_k=32)
    arrays = pointer_arrays(script, parameters(MatmulWGMMAV3), {"m_size": 300, "n_size": 200, "k_size": 100})
    assert {name: array.size for name, array in arrays.items()} == {"a_ptr": 300 * 100, "b_ptr": 200 * 100,
                                                                    "c_ptr": 300 * 200}
    assert all(array.dtype == np.float16 for array in arrays.values())
    assert np.std(arrays["a_ptr"].astype(np.float32)) > 0.5  # random normal data, not zeros


USAGE_ERRORS = [
    pytest.param([V3, "m_size=300"], "missing kernel argument(s) n_size, k_size", id="missing-arguments"),
    pytest.param([str(ROOT / "examples" / "matmul_v3.py"), "m_size=1"], "expected FILE.py:CLASS", id="no-class"),
    pytest.param([str(ROOT / "examples" / "nothing.py") + ":K"], "no such file", id="no-file"),
    pytest.param([COPY.replace(":TmaCopy", ":Copy")], "has no class 'Copy'; its Script classes: TmaCopy",
                 id="unknown-class"),
    pytest.param([V3, *V3_SIZES, "--schedule", "num_stages=2,block_m=128"],
                 "--schedule must set exactly the tuned parameters num_stages, block_m, block_n, block_k "
                 "(missing: block_n, block_k)", id="schedule-missing-names"),
    pytest.param([V3, *V3_SIZES, "--schedule", "num_stages=2,block_m=128,block_n=64,block_k=16,warps=4"],
                 "(unknown: warps)", id="schedule-unknown-name"),
    pytest.param([f"{BUGGY}:V3", *V3_SIZES, "--schedule", "num_stages=2"], "V3 is not autotuned",
                 id="schedule-on-untuned"),
    pytest.param([V3, *V3_SIZES, "a_ptr=1"], "a_ptr is a pointer parameter", id="pointer-given"),
    pytest.param([V3, *V3_SIZES, "block=1"], "MatmulWGMMAV3 has no parameter 'block'; its scalar parameters: "
                                             "m_size, n_size, k_size", id="unknown-parameter"),
    pytest.param([V3, "m_size=1.5", "n_size=64", "k_size=64"], "m_size is a runtime int32 parameter, got 1.5",
                 id="runtime-type"),
    pytest.param([V3, "m_size=64", "n_size=6.5", "k_size=64"], "argument 'n_size' is compile-time int",
                 id="compile-time-type"),
    pytest.param([V3, "m_size=x", "n_size=64", "k_size=64"], "m_size='x': expected an integer", id="not-a-number"),
    pytest.param([V3, "m_size=0", "n_size=64", "k_size=64"], "blocks.x must be positive", id="empty-grid"),
]


@pytest.mark.parametrize("argv, message", USAGE_ERRORS)
def test_usage_errors(capsys, argv, message):
    code, lines, err = check(capsys, *argv)
    assert code == 2
    assert lines == []
    assert err.startswith("warpspec check: error: ")
    assert message in err


def test_argparse_errors_exit_2(capsys):
    assert main([]) == 2
    assert "required: COMMAND" in capsys.readouterr().err
    assert main(["check", COPY, "m_size=1", "n_size=1", "--seeds", "-1"]) == 2
    assert "--seeds: expected a non-negative integer, got -1" in capsys.readouterr().err
    assert main(["check", COPY, "--bogus"]) == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err
