"""How ``warpspec check`` and ``warpspec build`` end when something goes wrong: one line saying what and where, the
right exit code, never a traceback. The kernels below are checked through this very file (the front end reads
their source)."""

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kernels import buggy_kernels
from tests.kernels import frontend_kernels
from warpspec import Script, autotune, cdiv, float16, int32
from warpspec.cli import main
from warpspec.emulator.machine import BlockMachine
from warpspec.errors import BoundsError
from warpspec.emulator.run import SEED_VARIABLE
from warpspec.ir.evaluate import ExprCompiler

ROOT = Path(__file__).parents[2]
HERE = Path(__file__).resolve()
V3 = f"{ROOT / 'examples' / 'matmul_v3.py'}:MatmulWGMMAV3"
COPY = f"{ROOT / 'examples' / 'tma_copy.py'}:TmaCopy"
BUGGY = ROOT / "tests" / "kernels" / "buggy_kernels.py"
FRONTEND = ROOT / "tests" / "kernels" / "frontend_kernels.py"


@autotune("tile", [32, 64])
class NeverSetsWarps(Script):
    """Sets its grid but never ``self.attrs.warps``: no tile can fix that."""

    def __init__(self, tile=32):
        super().__init__()
        self.tile = tile

    def __call__(self, n: int32, x_ptr: ~float16):
        self.attrs.blocks = [cdiv(n, self.tile)]


@autotune("block_n", [512, 520])
class PastWgmmaWidthEverywhere(buggy_kernels.V3):
    """V3 tuned only over tiles WGMMA cannot take: each schedule fails for its own N."""


@autotune("tile", [32, 64])
class RefusesWideTiles(Script):
    """Its constructor raises for the second schedule: the kernel author's own check."""

    def __init__(self, tile=32):
        super().__init__()
        if tile > 32:
            raise ValueError(f"tile {tile} is too wide")
        self.tile = tile

    def __call__(self, n: int32, x_ptr: ~float16):
        self.attrs.blocks = [cdiv(n, self.tile)]
        self.attrs.warps = 1


def source_line(cls, text: str) -> int:
    """The line of this file, inside class ``cls``, that contains ``text``."""
    lines, first = inspect.getsourcelines(cls)
    return first + next(i for i, line in enumerate(lines) if text in line)


@pytest.fixture(autouse=True)
def no_seed(monkeypatch):
    monkeypatch.delenv(SEED_VARIABLE, raising=False)


@pytest.fixture(scope="module", autouse=True)
def cache_dir(tmp_path_factory):
    """One cache for the module: the builds reuse each other's cubins."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WARPSPEC_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


def run(capsys, *argv):
    """Run ``warpspec`` with ``argv``; (exit code, stdout lines, stderr)."""
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


# ------------------------------------------------------------------------------------- input memory limit


def test_inputs_over_the_memory_limit_are_refused_before_allocating(capsys):
    code, lines, err = run(capsys, "check", V3, "m_size=2000000000", "n_size=200", "k_size=200")
    assert code == 2 and lines == []
    assert err == ("warpspec check: error: the random inputs of MatmulWGMMAV3 for these arguments need 1.5 TiB, more "
                   "than --max-memory 4 GiB: a_ptr 400000000000 float16 elements (745.1 GiB), c_ptr 400000000000 "
                   "float16 elements (745.1 GiB), b_ptr 40000 float16 elements (78.1 KiB); give smaller sizes or a "
                   "larger --max-memory\n")


def test_max_memory_option_sets_the_limit(capsys):
    # a_ptr 130*96, b_ptr 70*96, c_ptr 130*70 float16 elements: 56600 bytes, 55.3 KiB.
    sizes = ["m_size=130", "n_size=70", "k_size=96"]
    code, _, err = run(capsys, "check", V3, *sizes, "--max-memory", "55KiB")
    assert code == 2
    assert "need 55.3 KiB, more than --max-memory 55 KiB: a_ptr 12480 float16 elements (24.4 KiB)" in err
    code, lines, err = run(capsys, "check", V3, *sizes, "--max-memory", "56600")
    assert code == 0, err
    assert lines[-1] == "1 ok (no hazard found, outputs not compared), 0 failed, 0 skipped"


def test_max_memory_must_be_a_size(capsys):
    assert main(["check", COPY, "m_size=64", "n_size=64", "--max-memory", "lots"]) == 2
    assert "--max-memory: expected a size such as 4GiB, 512MiB or a number of bytes, got 'lots'" in \
           capsys.readouterr().err


def test_runtime_integer_out_of_range_is_a_usage_error(capsys):
    code, lines, err = run(capsys, "check", V3, "m_size=3000000000", "n_size=200", "k_size=200")
    assert code == 2 and lines == []
    assert err == "warpspec check: error: m_size is a runtime int32 parameter, got 3000000000, which does not fit\n"


# ------------------------------------------------------------------------------------ kernel-wide errors


def test_error_every_schedule_shares_is_one_failure(capsys):
    line = source_line(NeverSetsWarps, "self.attrs.blocks =")
    error = (f"CompileError: {HERE}:{line}: the kernel never sets self.attrs.warps (the threads of a block: 32 per "
             f"warp); set it beside self.attrs.blocks")
    for extra in ([], ["--all-schedules"]):
        code, lines, _ = run(capsys, "check", f"{HERE}:NeverSetsWarps", "n=100", *extra)
        assert code == 1
        assert lines == [f"FAIL  NeverSetsWarps, every schedule  {error}", "0 ok (no hazard found, outputs not compared), 1 failed, 0 skipped", "",
                         "first failure: NeverSetsWarps, every schedule (compiling):", error]


def test_build_reports_an_error_every_schedule_shares_once(capsys):
    line = source_line(NeverSetsWarps, "self.attrs.blocks =")
    code, lines, err = run(capsys, "build", f"{HERE}:NeverSetsWarps", "--all-schedules")
    assert code == 1, err
    assert lines == [f"FAIL  NeverSetsWarps, every schedule  CompileError: {HERE}:{line}: the kernel never sets "
                     f"self.attrs.warps (the threads of a block: 32 per warp); set it beside self.attrs.blocks"]


def test_build_of_an_untuned_kernel_that_does_not_compile_fails(capsys):
    code, lines, _ = run(capsys, "build", f"{BUGGY}:UnknownName", "n_size=64", "k_size=64")
    assert code == 1
    assert lines == [f"FAIL  UnknownName  CompileError: {BUGGY}:{buggy_kernels.marker_line('v3-consume')} -> "
                     f"UnknownName.consume at {BUGGY}:{buggy_kernels.marker_line('unknown-name')}: "
                     f"unknown name 'consumer_phase'"]


def test_schedules_failing_each_for_its_own_reason_are_skipped(capsys):
    code, lines, _ = run(capsys, "check", f"{HERE}:PastWgmmaWidthEverywhere", "m_size=128", "n_size=64",
                         "k_size=128")
    assert code == 1
    assert lines[0].startswith(f"skip  block_n=512  CompileError: {BUGGY}:")
    assert lines[1].startswith(f"skip  block_n=520  CompileError: {BUGGY}:")
    assert "N=512, K=64" in lines[0] and "N=520, K=64" in lines[1]
    assert lines[2:] == ["0 ok (no hazard found, outputs not compared), 0 failed, 2 skipped", "no schedule compiles for these arguments"]


@pytest.mark.parametrize("command", ["check", "build"])
def test_signature_the_language_refuses_fails_without_traceback(capsys, command):
    code, lines, err = run(capsys, command, f"{FRONTEND}:Float16Scalar", "scale=1.0")
    assert code == 1 and err == ""
    assert lines == [f"FAIL  Float16Scalar  CompileError: {FRONTEND}:{frontend_kernels.marker_line('f16-param')}: "
                     f"parameter 'scale': runtime scalars are int32, uint32, int64, float32, boolean; got float16"]


def test_untuned_kernel_without_scalars_says_so(capsys):
    code, _, err = run(capsys, "check", f"{FRONTEND}:PowerOfTensor", "n=1")
    assert code == 2
    assert err == "warpspec check: error: PowerOfTensor has no parameter 'n'; its scalar parameters: none\n"


# ------------------------------------------------------------------------ exceptions that are not warpspec's


def test_exception_from_the_kernels_own_code_names_its_line(capsys):
    line = source_line(RefusesWideTiles, "raise ValueError")
    code, lines, err = run(capsys, "check", f"{HERE}:RefusesWideTiles", "n=100")
    assert code == 1 and lines == []
    assert err == f"warpspec check: ValueError raised by the kernel's code at {HERE}:{line}: tile 64 is too wide\n"


def internal_failure(self):
    """What an emulator bug looks like: an exception warpspec did not mean to raise, from inside warpspec."""
    ExprCompiler({})(object())


def test_internal_error_in_a_run_is_a_fail_line(capsys, monkeypatch):
    monkeypatch.setattr(BlockMachine, "run", internal_failure)
    code, lines, err = run(capsys, "check", COPY, "m_size=64", "n_size=64")
    assert code == 1, err
    internal = ("internal error (a bug in warpspec, not in the kernel or the command line): TypeError: cannot "
                "evaluate object (at warpspec/ir/evaluate.py:")
    assert lines[0].startswith(f"FAIL  tile_m=64 tile_n=64  {internal}")
    assert lines[1] == "0 ok (no hazard found, outputs not compared), 1 failed, 0 skipped"
    assert lines[3] == "first failure: tile_m=64 tile_n=64 (the deterministic run):"
    assert lines[4].startswith(internal)


def test_internal_error_in_one_schedule_does_not_stop_the_sweep(capsys, monkeypatch):
    import warpspec.cli.check

    real_pointer_arrays = warpspec.cli.check.pointer_arrays

    def pointer_arrays(script, params, scalars):
        if script.tile_m == 32:
            internal_failure(None)
        return real_pointer_arrays(script, params, scalars)

    monkeypatch.setattr(warpspec.cli.check, "pointer_arrays", pointer_arrays)
    code, lines, _ = run(capsys, "check", COPY, "m_size=64", "n_size=128", "--all-schedules")
    assert code == 1
    assert [line.split("  (")[0] for line in lines[:4:2]] == ["ok    tile_m=64 tile_n=64", "ok    tile_m=128 tile_n=32"]
    assert lines[1].startswith("FAIL  tile_m=32 tile_n=128  internal error (a bug in warpspec, not in the kernel or "
                               "the command line): TypeError: cannot evaluate object (at warpspec/ir/evaluate.py:")
    assert lines[3] == "2 ok (no hazard found, outputs not compared), 1 failed, 0 skipped"
    assert lines[5] == "first failure: tile_m=32 tile_n=128 (building the kernel and its inputs):"


def test_internal_error_while_building_is_that_schedules_fate(capsys, monkeypatch):
    import warpspec.tune.tuner as tuner

    real_prune = tuner.prune

    def prune(script, compile_time):
        if script.tile_m == 32:
            internal_failure(None)
        return real_prune(script, compile_time)

    monkeypatch.setattr(tuner, "prune", prune)
    code, lines, err = run(capsys, "build", COPY, "--all-schedules")
    assert code == 1, err
    failed = [line for line in lines if line.startswith("failed")]
    assert len(failed) == 1
    assert failed[0].startswith("failed  tile_m=32 tile_n=128 ")
    raised_at = inspect.getsourcelines(ExprCompiler.other)[1] + 1  # the raise, first line of the method's body
    assert failed[0].endswith("internal error (a bug in warpspec, not in the kernel or the command line): "
                              f"TypeError: cannot evaluate object (at warpspec/ir/evaluate.py:{raised_at})")
    assert sum(line.startswith("ok ") for line in lines) == 2
    assert lines[-1].startswith("TmaCopy: 3 schedules (2 ok, 1 failed) in ")


def out_of_bounds(*args):
    """A warpspec error raised while a schedule is prepared rather than by the front end or a run."""
    raise BoundsError("index 9 is out of bounds for dimension 0 of consumer_phases (size 2)", "kernel.py:12")


def test_warpspec_error_while_preparing_a_schedule_reads_as_itself(capsys, monkeypatch):
    import warpspec.cli.check
    import warpspec.tune.tuner as tuner

    error = "BoundsError: kernel.py:12: index 9 is out of bounds for dimension 0 of consumer_phases (size 2)"
    monkeypatch.setattr(warpspec.cli.check, "pointer_arrays", out_of_bounds)
    code, lines, _ = run(capsys, "check", COPY, "m_size=64", "n_size=64")
    assert code == 1
    assert lines[:2] == [f"FAIL  tile_m=64 tile_n=64  {error}", "0 ok (no hazard found, outputs not compared), 1 failed, 0 skipped"]
    monkeypatch.setattr(tuner, "prune", out_of_bounds)
    code, lines, _ = run(capsys, "build", COPY, "--schedule", "tile_m=64,tile_n=64")
    assert code == 1
    assert lines[1].startswith("failed  tile_m=64 tile_n=64 ") and lines[1].endswith(error)


# ------------------------------------------------------------------------------------ Ctrl-C and pipes


class InterruptedBlockMachine(BlockMachine):
    """The emulator's block machine, interrupted (as by Ctrl-C) in block 2 of the run with seed 1."""

    def __init__(self, kernel, memory, env, specials, rng, cluster=None):
        super().__init__(kernel, memory, env, specials, rng, cluster)
        self.block_x = specials["blockIdx.x"]

    def run(self):
        if os.environ.get(SEED_VARIABLE) == "1" and self.block_x == 2:
            raise KeyboardInterrupt
        super().run()


def test_ctrl_c_says_where_the_run_was(capsys, monkeypatch):
    import warpspec.emulator.run

    monkeypatch.setattr(warpspec.emulator.run, "BlockMachine", InterruptedBlockMachine)
    code, lines, err = run(capsys, "check", COPY, "m_size=200", "n_size=64", "--seeds", "3")
    assert code == 130
    assert lines == []  # the interrupted schedule has no verdict
    assert err == ("warpspec check: interrupted in tile_m=64 tile_n=64, WARPSPEC_EMULATOR_SEED=1, block 3/4 "
                   "(blockIdx.x=2, blockIdx.y=0, blockIdx.z=0)\n")


def test_ctrl_c_outside_a_run_is_one_line(capsys, monkeypatch):
    import warpspec.cli.build

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(warpspec.cli.build, "compile_time_arguments", interrupted)
    code, lines, err = run(capsys, "build", COPY)
    assert code == 130 and lines == []
    assert err == "warpspec build: interrupted\n"


def test_reader_that_closes_early_ends_it_quietly():
    # Every schedule takes 9 runs (tenths of a second): the reader is gone before the second verdict is written.
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, "-m", "warpspec.cli", "check", COPY, "m_size=100", "n_size=72",
                                "--all-schedules", "--seeds", "8"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               env=environment, text=True)
    first = process.stdout.readline()
    process.stdout.close()  # as `| head -1` does
    err = process.stderr.read()
    assert process.wait(timeout=60) == 141
    assert first.startswith("ok    tile_m=64 tile_n=64  (")
    assert err == ""
