"""The tuning flow on the CPU: the GPU side (identity, timing, launch) is a fake, compiling is real or faked.

Asserts which schedules are timed (never a pruned, failed or spilling one while a clean one exists), which wins,
what the report says, and that a winner stored by one process is reused by the next without pruning, compiling
or timing anything.
"""

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tests.kernels import buggy_kernels
from tma_copy import TmaCopy
from warpspec import ArgumentError, CompileError, autotune, use_backend
from warpspec.cuda.compiler import CompiledModule
from warpspec.tune import cache, tuner

IDENTITY = {"gpu": "Fake H200", "compute_capability": "9.0", "driver": 13000}
ROOT = Path(__file__).parents[2]


class FakeBench:
    """The GPU side of tuning without a GPU: kernel times come from ``times`` (by the value of ``axis`` in the
    kernel's schedule); every timing and launch is recorded."""

    def __init__(self, axis, times, fail=()):
        self.axis, self.times, self.fail = axis, times, fail
        self.timed, self.launched = [], []

    def identity(self):
        return IDENTITY

    @contextmanager
    def timing(self):
        yield self.measure

    def measure(self, kernel, runtime, built):
        value = dict(kernel.constants)[self.axis]
        assert built.generated.kernel is kernel and built.module.cubin  # what was compiled is what is timed
        self.timed.append(value)
        if value in self.fail:
            raise RuntimeError("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES")
        return self.times[value]

    def launch(self, script, args, kwargs):
        self.launched.append(script.schedule()[self.axis])


class SeriesBench(FakeBench):
    """``FakeBench`` whose kernel times are series: each timing of a schedule takes the next value of its list."""

    def measure(self, kernel, runtime, built):
        value = dict(kernel.constants)[self.axis]
        self.timed.append(value)
        return self.times[value][sum(1 for timed in self.timed if timed == value) - 1]


@autotune("block_n", [64, 256, 512, 128, 32, 96])
class NarrowV3(buggy_kernels.V3):
    """V3 tuned over its tile width: 256 needs too many accumulator registers, 512 is past WGMMA's N."""


ARGS = (256, 256, 128, None, None, None)  # m_size, n_size, k_size; pointers are never read by the fakes


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """A fresh cache folder and tuner settings restored after each test."""
    monkeypatch.setenv("WARPSPEC_CACHE_DIR", str(tmp_path))
    for name, value in vars(tuner.settings).items():
        monkeypatch.setattr(tuner.settings, name, value)
    return tmp_path


def fake_compiler(monkeypatch, tuned, outcomes):
    """Replace NVRTC for in-process builds: the schedule whose ``block_n`` is a key of ``outcomes`` gets a ptxas
    log with that many (store, load) spill bytes, or a CompileError for a string. Returns the compiled values."""
    from warpspec.cuda.codegen import generate
    from warpspec.runtime import kernel_for

    compile_time = {"n_size": ARGS[1], "k_size": ARGS[2]}
    by_source = {}
    for schedule in tuned.schedules():
        try:
            by_source[generate(kernel_for(tuned.instantiate(schedule), compile_time)).source] = schedule["block_n"]
        except CompileError:
            continue  # pruned: must never reach the compiler
    compiled = []

    def compile_cuda(source):
        block_n = by_source[source]
        compiled.append(block_n)
        outcome = outcomes.get(block_n, (0, 0))
        if isinstance(outcome, str):
            raise CompileError(outcome)
        log = (f"ptxas info    : Compiling entry function 'NarrowV3' for 'sm_90a'\n"
               f"ptxas info    : Function properties for NarrowV3\n"
               f"    0 bytes stack frame, {outcome[0]} bytes spill stores, {outcome[1]} bytes spill loads\n"
               f"ptxas info    : Used {block_n // 2 + 40} registers")
        return CompiledModule(b"cubin", log, hashlib.sha256(source.encode()).hexdigest(), False)

    monkeypatch.setattr(tuner, "compile_cuda", compile_cuda)
    tuner.configure(workers=1)  # in-process builds, so the fake compiler is the one used
    return compiled


def fates(report):
    return [(f.schedule["block_n"], f.fate) for f in report.fates]


def test_winner_is_the_fastest_clean_schedule_and_nothing_else_is_timed(monkeypatch, isolated):
    tuned = NarrowV3()
    compiled = fake_compiler(monkeypatch, tuned, {128: (16, 8), 32: "NVRTC could not compile the kernel"})
    bench = FakeBench("block_n", {64: 2.0, 96: 1.5})
    tuner.configure(bench=bench)
    with use_backend("cuda"):
        tuned(*ARGS)
    report = tuned.last_report
    assert fates(report) == [(64, "timed"), (256, "pruned"), (512, "pruned"), (128, "spills"), (32, "failed"),
                             (96, "winner")]
    assert sorted(compiled) == [32, 64, 96, 128]  # pruned schedules never reach the compiler
    assert sorted(bench.timed) == [64, 96]  # nor are failed or spilling ones timed
    assert bench.launched == [96]
    by_n = {f.schedule["block_n"]: f for f in report.fates}
    assert by_n[96].time_ms == 1.5 and by_n[96].registers == 88 and by_n[96].spill_bytes == 0
    assert by_n[128].reason == "spills 24 bytes per thread (16 stored, 8 loaded)" and by_n[128].time_ms is None
    assert by_n[32].reason == "NVRTC could not compile the kernel" and by_n[32].registers is None
    assert by_n[256].reason.startswith("WGMMA accumulators need 256 f32 registers per thread")
    assert "wgmma.mma needs M a multiple of 64 per warpgroup" in by_n[512].reason
    assert by_n[256].build_s is None and by_n[64].build_s >= 0
    assert not report.from_cache and report.winner is by_n[96]
    stored = json.loads(cache.entry_path(report.key).read_text())
    assert [f["schedule"]["block_n"] for f in stored["fates"] if f["fate"] == "winner"] == [96]
    assert stored["material"]["sizes"] == {"m_size": 256}  # n_size and k_size are compile-time: in exactly
    assert stored["material"]["compile_time"] == {"n_size": 256, "k_size": 128}
    assert stored["material"]["device"] == IDENTITY
    table = report.table().splitlines()
    assert table[0].split() == ["fate", "schedule", "regs", "smem", "spill", "build_s", "time_ms", "reason"]
    assert table[6].split()[:5] == ["winner", "block_n=96", "88", str(by_n[96].shared_bytes), "0"]
    assert table[6].split()[-1] == "1.5000"
    assert table[-1].startswith("NarrowV3: 6 schedules (1 timed, 2 pruned, 1 spills, 1 failed, 1 winner) in ")


def test_winner_is_remembered_in_the_process_and_on_disk(monkeypatch, isolated):
    tuned = NarrowV3()
    compiled = fake_compiler(monkeypatch, tuned, {})
    bench = FakeBench("block_n", {64: 2.0, 128: 0.5, 32: 3.0, 96: 1.0})
    tuner.configure(bench=bench)
    with use_backend("cuda"):
        tuned(*ARGS)
        first = tuned.last_report
        tuned(*ARGS)
        assert tuned.last_report is first
        assert len(bench.timed) == 4 and bench.launched == [128, 128]
        fresh = NarrowV3()  # a new TunedScript: nothing in memory, the record on disk
        fresh(200, *ARGS[1:])  # another m_size in the same bucket (256)
    assert fresh.last_report.from_cache and fresh.last_report.key == first.key
    assert fates(fresh.last_report) == fates(first)
    assert len(bench.timed) == 4 and len(compiled) == 4 and bench.launched == [128, 128, 128]
    assert "(an earlier run's report, from the tuning cache)" in fresh.last_report.summary()
    with use_backend("cuda"):
        fresh(300, *ARGS[1:])  # bucket 512: tuned again
    assert not fresh.last_report.from_cache and len(bench.timed) == 8
    assert cache.count_entries("tuning") == 2


def test_a_stale_record_is_replaced(monkeypatch, isolated):
    tuned = NarrowV3()
    fake_compiler(monkeypatch, tuned, {})
    bench = FakeBench("block_n", {64: 2.0, 128: 0.5, 32: 3.0, 96: 1.0})
    tuner.configure(bench=bench)
    with use_backend("cuda"):
        tuned(*ARGS)
    path = cache.entry_path(tuned.last_report.key)
    record = json.loads(path.read_text())
    for fate in record["fates"]:
        if fate["fate"] == "winner":
            fate["schedule"] = {"block_n": 48}  # not a schedule of NarrowV3 (any more)
    path.write_text(json.dumps(record))
    fresh = NarrowV3()
    with use_backend("cuda"):
        fresh(*ARGS)
    assert not fresh.last_report.from_cache and len(bench.timed) == 8
    assert json.loads(path.read_text())["fates"][3]["fate"] == "winner"


def test_spilling_schedules_are_timed_when_nothing_else_is_left(monkeypatch):
    tuned = NarrowV3()
    fake_compiler(monkeypatch, tuned, {64: (8, 8), 128: (4, 4), 32: "bad", 96: (16, 16)})
    bench = FakeBench("block_n", {64: 2.0, 128: 3.0, 96: 1.0})
    tuner.configure(bench=bench)
    with use_backend("cuda"):
        tuned(*ARGS)
    report = tuned.last_report
    assert fates(report) == [(64, "spills"), (256, "pruned"), (512, "pruned"), (128, "spills"), (32, "failed"),
                             (96, "winner")]
    assert sorted(bench.timed) == [64, 96, 128]
    assert report.winner.reason == "spills 32 bytes per thread (16 stored, 16 loaded)"


def test_launch_failures_are_fates_and_no_timed_schedule_is_an_error(monkeypatch, isolated):
    tuned = NarrowV3()
    fake_compiler(monkeypatch, tuned, {32: "bad", 128: "bad"})
    bench = FakeBench("block_n", {}, fail=(64, 96))
    tuner.configure(bench=bench)
    with pytest.raises(CompileError) as raised, use_backend("cuda"):
        tuned(*ARGS)
    lines = str(raised.value).splitlines()
    assert lines[0] == "no schedule of NarrowV3 could be timed for these arguments:"
    assert lines[1] == "block_n=64: failed: launch failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"
    assert lines[2].startswith("block_n=256: pruned: WGMMA accumulators need 256")
    assert lines[4:6] == ["block_n=128: failed: bad", "block_n=32: failed: bad"]
    assert bench.launched == [] and cache.count_entries("tuning") == 0


def test_argument_errors_are_raised_not_recorded(monkeypatch):
    tuned = NarrowV3()
    fake_compiler(monkeypatch, tuned, {})
    bench = FakeBench("block_n", {})

    def measure(kernel, runtime, built):
        raise ArgumentError("argument 'a_ptr': expected float16 elements")

    bench.measure = measure
    tuner.configure(bench=bench)
    with pytest.raises(ArgumentError, match="expected float16 elements"), use_backend("cuda"):
        tuned(*ARGS)


def test_key_sizes():
    runtime = {"m_size": 300, "flag": True, "scale": 2.5, "a_ptr": np.zeros(3), "count": np.int32(5)}
    plain = type("Plain", (), {})
    assert tuner.key_sizes(plain, runtime) == {"m_size": 512, "count": 8}
    assert tuner.key_sizes(type("ByM", (), {"tune_key": ("m_size",)}), runtime) == {"m_size": 512}
    assert tuner.key_sizes(type("Any", (), {"tune_key": ()}), runtime) == {}
    for bad in (("a_ptr",), "m_size"):
        with pytest.raises(ArgumentError) as raised:
            tuner.key_sizes(type("Bad", (), {"tune_key": bad}), runtime)
        assert str(raised.value) == (f"Bad.tune_key must be a tuple of integer runtime parameter names (m_size, "
                                     f"count), got {bad!r}")


SECOND_PROCESS = textwrap.dedent("""
    import json, sys
    import warpspec
    from warpspec.cuda.launch import compile_kernel
    from warpspec.frontend.kernel import bind_arguments
    from warpspec.runtime import kernel_for
    from warpspec.tune import tuner

    def refuse(*args, **kwargs):
        raise AssertionError("the second process pruned, compiled or timed")

    class Bench:
        built = []
        def identity(self):
            return IDENTITY
        def timing(self):
            refuse()
        def launch(self, script, args, kwargs):
            _, compile_time = bind_arguments(type(script), args, kwargs)
            self.built.append(compile_kernel(kernel_for(script, compile_time)).module.from_cache)

    tuner.prepare = tuner.build_candidates = tuner.tune = refuse
    bench = Bench()
    tuner.configure(bench=bench)
    from tma_copy import TmaCopy
    kernel = TmaCopy()
    with warpspec.use_backend("cuda"):
        kernel(100, 72, None, None)
    print(json.dumps({"from_cache": kernel.last_report.from_cache, "winner": kernel.last_report.winner.schedule,
                      "cubin_from_cache": bench.built}))
""")


def test_real_parallel_build_then_a_new_process_reuses_the_winner(isolated, capsys):
    tuner.configure(bench=FakeBench("tile_n", {64: 3.0, 128: 1.0, 32: 2.0}), workers=2, verbose=True)
    kernel = TmaCopy()
    with use_backend("cuda"):
        kernel(100, 72, None, None)
    report = kernel.last_report
    assert [(f.label, f.fate) for f in report.fates] == [("tile_m=64 tile_n=64", "timed"),
                                                         ("tile_m=32 tile_n=128", "winner"),
                                                         ("tile_m=128 tile_n=32", "timed")]
    assert all(f.registers > 0 and f.spill_bytes == 0 and f.build_s > 0 for f in report.fates)
    progress = capsys.readouterr().err
    assert progress.startswith("\r[1/3] built tile_m=") and "\r[3/3] built tile_m=" in progress
    assert progress.endswith("\n")

    program = f"IDENTITY = {IDENTITY!r}\n" + SECOND_PROCESS
    # The generated source names the kernel's file, so the second process imports it by the same path spelling
    # (conftest's "tests/../examples", which PYTHONPATH would normalise) to find the same cubin in the compile cache.
    examples = os.path.dirname(sys.modules[TmaCopy.__module__].__file__)
    program = f"import sys\nsys.path.insert(0, {examples!r})\n" + program
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=environment,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"from_cache": True, "winner": {"tile_m": 32, "tile_n": 128},
                                         "cubin_from_cache": [True]}


def test_a_worker_that_dies_fails_its_job_and_is_replaced():
    source = 'extern "C" __global__ void empty_kernel() {}'
    with tuner._WorkerPool(1) as pool:
        pool.processes[0].kill()
        with pytest.raises(RuntimeError, match=r"^the build worker process died \(exit code -9\)$"):
            pool.submit((source, "empty_kernel", False)).result()
        module, error, seconds, sass, counts = pool.submit((source, "empty_kernel", False)).result()
        assert module.cubin.startswith(b"\x7fELF") and error == "" and seconds > 0
        with pytest.raises(RuntimeError, match="^the build worker failed: AttributeError: "):
            pool.submit((None, "empty_kernel", False)).result()  # an error outside the compiler's own
    assert all(process.returncode == 0 for process in pool.processes)


def test_median_flushes_before_every_timed_run_and_skips_the_warmup():
    from warpspec.tune.bench import median_ms

    events = []

    class Clock:
        def flush(self):
            events.append("flush")

        def elapsed_ms(self, launch):
            launch()
            return [5.0, 1.0, 3.0, 2.0, 4.0][sum(e == "flush" for e in events) - 1]

    assert median_ms(Clock(), lambda: events.append("launch"), runs=5, warmup=2) == 3.0
    assert events == ["launch", "launch"] + ["flush", "launch"] * 5


@pytest.mark.gpu
def test_tuning_on_the_gpu(isolated):
    torch = pytest.importorskip("torch")
    from warpspec.tune.bench import _DriverClock, device_identity, median_ms

    source = torch.randn(300, 200, device="cuda", dtype=torch.float16)
    destination = torch.full_like(source, float("nan"))
    kernel = TmaCopy()
    with use_backend("cuda"):
        kernel(300, 200, source, destination)
    torch.cuda.synchronize()
    assert torch.equal(destination, source)
    report = kernel.last_report
    assert sorted(f.fate for f in report.fates) == ["timed", "timed", "winner"]
    assert all(f.time_ms > 0 for f in report.fates) and report.winner.time_ms == min(f.time_ms for f in report.fates)
    again = TmaCopy()
    with use_backend("cuda"):
        again(300, 200, source, destination)
    assert again.last_report.from_cache and again.last_report.winner.schedule == report.winner.schedule
    identity = device_identity()
    assert identity["compute_capability"].startswith("9.") and identity["driver"] > 0 and identity["gpu"]
    clock = _DriverClock()
    try:
        assert median_ms(clock, lambda: None, runs=3, warmup=0) >= 0
    finally:
        clock.close()


def test_a_lucky_first_timing_loses_the_final_round(monkeypatch):
    """Schedules within 3% of the fastest first timing are timed three more times, taking turns, and ranked by the
    median of their four timings: 64's first 1.00 was luck (then 1.10 each time), 96 is steadily 1.02 and wins.
    Schedules further off (128 at +10%, 32 at +5%) are timed once."""
    tuned = NarrowV3()
    fake_compiler(monkeypatch, tuned, {})
    bench = SeriesBench("block_n", {64: [1.00, 1.10, 1.10, 1.10], 96: [1.02] * 4, 128: [1.10], 32: [1.05]})
    tuner.configure(bench=bench)
    with use_backend("cuda"):
        tuned(*ARGS)
    report = tuned.last_report
    assert sorted(bench.timed[:4]) == [32, 64, 96, 128]
    assert bench.timed[4:] == [64, 96, 64, 96, 64, 96]  # the finalists in turns, fastest first timing first
    by_n = {f.schedule["block_n"]: f for f in report.fates}
    assert report.winner is by_n[96] and bench.launched == [96]
    assert (by_n[64].time_ms, by_n[96].time_ms, by_n[128].time_ms, by_n[32].time_ms) == (1.10, 1.02, 1.10, 1.05)


def test_the_final_round_takes_at_most_four_finalists():
    """Six schedules within 3%: the four fastest first timings are timed again, the other two are not."""
    candidates = [SimpleNamespace(name=name, fate=SimpleNamespace(time_ms=t))
                  for name, t in zip("abcdef", (1.0, 1.029, 1.01, 1.02, 1.025, 1.5))]
    timed = []

    def measure(candidate):
        timed.append(candidate.name)
        return 2.0

    tuner.final_round(candidates, measure)
    assert timed == ["a", "c", "d", "e"] * 3
    assert [c.fate.time_ms for c in candidates] == [2.0, 1.029, 2.0, 2.0, 2.0, 1.5]  # medians of 1 + 3 timings
