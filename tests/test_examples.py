"""The examples on the emulator against numpy, at shapes that are not multiples of any tile (TMA zero-fill on loads,
clipped stores, a short K for deep pipelines), for every schedule, and under random schedules (seeds)."""

import runpy
import sys
import time
from io import StringIO
from pathlib import Path

import numpy as np
import pytest

import warpspec
# emulator is imported as an autouse fixture
from tests.support.example_checks import emulator, matmul_operands, relative_error  # noqa: F401
from matmul_v1 import MatmulWGMMAV1
from matmul_v2 import MatmulWGMMAV2
from matmul_v3 import MatmulWGMMAV3
from matmul_v4 import MatmulWGMMAV4
from matmul_v5 import MatmulWGMMAV5
from tma_copy import TmaCopy
from warpspec.emulator.run import SEED_VARIABLE

M, N, K = 300, 200, 200  # 200 / 64 leaves a ragged K-tile, and 4 K-tiles is fewer than V3's deepest pipelines
COPY_M, COPY_N = 300, 200
TOLERANCE = 1e-2  # relative Frobenius error: fp16 inputs and output, fp32 accumulation
V3_SWEEP_SECONDS = 60
V3_FILE = Path(__file__).resolve().parents[1] / "examples" / "matmul_v3.py"


@pytest.fixture(scope="module")
def operands():
    """A [M, K], B [N, K] in float16 and the float32 reference A @ B^T."""
    return matmul_operands(M, N, K)


def matmul_error(kernel, operands) -> float:
    """Run ``kernel`` on the operands and return its relative error; C starts as NaN so unwritten tiles show."""
    a, b, reference = operands
    c = np.full((M, N), np.nan, dtype=np.float16)
    kernel(M, N, K, a, b, c)
    return relative_error(c, reference)


def copy_kernel_matches(kernel) -> None:
    """Copy a ragged tensor with ``kernel`` and require an exact copy."""
    source = np.random.default_rng(1).standard_normal((COPY_M, COPY_N)).astype(np.float16)
    destination = np.full_like(source, np.nan)
    kernel(COPY_M, COPY_N, source, destination)
    np.testing.assert_array_equal(destination, source)


def schedule_id(schedule: dict) -> str:
    return ",".join(f"{name}={value}" for name, value in schedule.items())


def schedules(script_cls) -> list:
    """``pytest.param`` per schedule of an autotuned Script."""
    return [pytest.param(s, id=schedule_id(s)) for s in script_cls().schedules()]


def v3_needs_too_much_shared_memory(num_stages, block_m, block_n, block_k) -> bool:
    """Whether a V3 schedule's stages (each tile padded to 1 KB) and 2 barriers per stage exceed the 227 KB a block
    has, less the 1 KB alignment reserve."""
    def tile(rows):
        return -(-rows * block_k * 2 // 1024) * 1024
    return num_stages * (tile(block_m) + tile(block_n) + 16) > 227 * 1024 - 1024


def test_v3_every_schedule_is_correct_and_fast(operands):
    """All 90 schedules of the seed's V3: correct, or refused before running when their shared memory cannot fit
    in a block (as the GPU build refuses them); the sweep must stay cheap enough to run on every commit."""
    tuned = MatmulWGMMAV3()
    assert len(tuned.schedules()) == 90
    start = time.perf_counter()
    errors, refused = {}, set()
    for s in tuned.schedules():
        try:
            errors[schedule_id(s)] = matmul_error(tuned.instantiate(s), operands)
        except warpspec.CompileError as error:
            assert "fit in a block" in str(error) and error.location.startswith(str(V3_FILE)), error
            refused.add(schedule_id(s))
    elapsed = time.perf_counter() - start
    assert refused == {schedule_id(s) for s in tuned.schedules() if v3_needs_too_much_shared_memory(**s)}
    assert 0 < len(refused) < 90
    bad = {name: error for name, error in errors.items() if not error < TOLERANCE}
    assert not bad, f"schedules over tolerance {TOLERANCE}: {bad}"
    assert elapsed < V3_SWEEP_SECONDS, f"the V3 sweep took {elapsed:.1f} s"


@pytest.mark.parametrize("schedule", schedules(MatmulWGMMAV1))
def test_v1(schedule, operands):
    assert matmul_error(MatmulWGMMAV1(**schedule), operands) < TOLERANCE


@pytest.mark.parametrize("schedule", schedules(MatmulWGMMAV2))
def test_v2(schedule, operands):
    assert matmul_error(MatmulWGMMAV2(**schedule), operands) < TOLERANCE


@pytest.mark.parametrize("schedule", schedules(MatmulWGMMAV4))
def test_v4(schedule, operands):
    assert matmul_error(MatmulWGMMAV4(**schedule), operands) < TOLERANCE


@pytest.mark.parametrize("schedule", [s for s in schedules(MatmulWGMMAV5)
                                      if not s.id.startswith("num_stages=5,block_m=256,block_n=128,block_k=64")])
def test_v5(schedule, operands):
    assert matmul_error(MatmulWGMMAV5(**schedule), operands) < TOLERANCE


@pytest.mark.parametrize("schedule", schedules(TmaCopy))
def test_tma_copy(schedule):
    copy_kernel_matches(TmaCopy(**schedule))


def test_tuned_call_runs_the_first_schedule(operands):
    """Calling an autotuned Script without a schedule runs it (the emulator picks the first that compiles)."""
    assert matmul_error(MatmulWGMMAV3(), operands) < TOLERANCE


SEEDS = range(20)
V3_SEEDED = [dict(num_stages=2, block_m=128, block_n=64, block_k=32),
             dict(num_stages=4, block_m=128, block_n=128, block_k=16)]


@pytest.mark.parametrize("schedule", [pytest.param(s, id=schedule_id(s)) for s in V3_SEEDED])
def test_v3_under_random_schedules(schedule, operands, monkeypatch):
    """Random interleavings and early async completions: still no error and the right result."""
    for seed in SEEDS:
        monkeypatch.setenv(SEED_VARIABLE, str(seed))
        error = matmul_error(MatmulWGMMAV3(**schedule), operands)
        assert error < TOLERANCE, f"seed {seed}: relative error {error}"


@pytest.mark.parametrize("schedule", schedules(TmaCopy))
def test_tma_copy_under_random_schedules(schedule, monkeypatch):
    for seed in SEEDS:
        monkeypatch.setenv(SEED_VARIABLE, str(seed))
        copy_kernel_matches(TmaCopy(**schedule))


@pytest.mark.parametrize("kernel", [
    pytest.param(MatmulWGMMAV1(block_m=64, block_n=64, block_k=32), id="v1"),
    pytest.param(MatmulWGMMAV2(num_stages=3, block_m=128, block_n=128, block_k=32), id="v2"),
    pytest.param(MatmulWGMMAV4(num_stages=3, block_m=256, block_n=128, block_k=32), id="v4"),
    pytest.param(MatmulWGMMAV5(num_stages=4, block_m=128, block_n=128, block_k=32), id="v5"),
])
def test_other_matmuls_under_random_schedules(kernel, operands, monkeypatch):
    for seed in range(5):
        monkeypatch.setenv(SEED_VARIABLE, str(seed))
        assert matmul_error(kernel, operands) < TOLERANCE, f"seed {seed}"


@pytest.mark.parametrize("script", ["matmul_v1.py", "matmul_v2.py", "matmul_v4.py", "matmul_v5.py", "matmul_v7.py",
                                    "tma_copy.py"])
def test_example_runs_as_a_script(script, monkeypatch):
    """``python examples/X.py`` checks itself at a ragged shape and prints its error, then OK."""
    output = StringIO()
    monkeypatch.setattr(sys, "stdout", output)
    runpy.run_path(str(Path(__file__).parents[1] / "examples" / script), run_name="__main__")
    lines = output.getvalue().splitlines()
    assert lines[0].startswith("emulator: max abs error ")
    assert lines[-1] == "OK"


def test_the_main_job_on_the_emulator(capsys):
    """The README's first command on a machine without a GPU: every V3 schedule checked, those that cannot fit
    refused (here at a small shape, to stay quick)."""
    main = runpy.run_path(str(Path(__file__).parents[1] / "examples" / "main.py"))
    main["on_emulator"](130, 72, 40)
    out = capsys.readouterr().out
    assert out.startswith("emulator: 80 schedules of V3 at 130x72x40 passed every check (10 refused before running")
