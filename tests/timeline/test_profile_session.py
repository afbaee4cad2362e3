"""warpspec.profile(): its arguments, which launches it records (every Script launch inside it, past the plan
entries plain calls take, and none after it), the emulator path (the CPU timing model's timeline when the model is
installed) and WARPSPEC_PROFILE=1. The GPU launch itself is tests/timeline/test_profile_gpu.py."""

import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import warpspec
from tma_copy import TmaCopy
from warpspec import runtime
from warpspec.timeline import gpu
from warpspec.timeline.events import Occupancy, Timeline

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize("arguments, message", [
    ({"blocks": 0}, "profile blocks must be an integer in [1, 2^20), got 0"),
    ({"blocks": 2.0}, "profile blocks must be an integer in [1, 2^20), got 2.0"),
    ({"capacity": True}, "profile capacity must be an integer in [1, 2^20), got True"),
    ({"flops": -1}, "profile flops must be a positive number of floating-point operations, got -1"),
    ({"sm": -1}, "profile sm must be an SM number, an integer in [0, 2^16), got -1"),
    ({"sm": "0"}, "profile sm must be an SM number, an integer in [0, 2^16), got '0'"),
])
def test_profile_refuses_bad_arguments(arguments, message):
    with pytest.raises(warpspec.ArgumentError) as error:
        warpspec.profile(**arguments)
    assert str(error.value) == message


def copy_arrays():
    source = np.arange(64 * 128, dtype=np.float32).reshape(64, 128).astype(np.float16)
    return source, np.zeros_like(source)


def test_every_launch_inside_the_session_records_even_where_a_plan_entry_exists(monkeypatch):
    taken = []
    script = TmaCopy(tile_m=64, tile_n=64)
    # A plan entry that takes any call, as a launch plan's does for calls like an earlier one.
    script.__dict__["_warpspec_calls"] = [lambda args: taken.append("entry")]

    def record(self, kernel, arguments):
        taken.append("profiled")
        return Timeline(kernel.name, "gpu", dict(kernel.constants), 1000.0)

    monkeypatch.setattr(gpu.ProfileSession, "_record", record)
    reported = []
    source, destination = copy_arrays()
    session = gpu.ProfileSession(blocks=2, timing=lambda: _NoTimer(), report=reported.append)
    with warpspec.use_backend("cuda"):
        script(64, 128, source, destination)
        with session as entered:
            assert entered is session and runtime._profiler is session
            script(64, 128, source, destination)
            script(64, 128, source, destination)
        assert runtime._profiler is None
        script(64, 128, source, destination)
    assert taken == ["entry", "profiled", "profiled", "entry"]
    assert [t.kernel for t in session.timelines] == ["TmaCopy", "TmaCopy"] and reported == session.timelines


class _NoTimer:
    """The timing context a session enters at its first GPU launch, for tests that never time anything."""

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def test_on_the_emulator_the_kernel_runs_and_the_model_gives_the_timeline(monkeypatch):
    modeled = []

    def model_launch(kernel, arguments):
        modeled.append((kernel.name, sorted(arguments)))
        return Timeline(kernel.name, "model", dict(kernel.constants), 5000.0)

    monkeypatch.setitem(sys.modules, "warpspec.timeline.model", types.SimpleNamespace(model_launch=model_launch))
    source, destination = copy_arrays()
    with warpspec.use_backend("emulator"), warpspec.profile(blocks=1) as session:
        result = TmaCopy(tile_m=64, tile_n=64)(64, 128, source, destination)
    assert result is None
    np.testing.assert_array_equal(destination, source)  # the emulator ran the copy
    assert modeled == [("TmaCopy", ["dst_ptr", "m_size", "n_size", "src_ptr"])]
    assert [(t.source, t.kernel_ns) for t in session.timelines] == [("model", 5000.0)]


def test_the_environment_variable_profiles_the_whole_process():
    code = ("import warpspec, warpspec.runtime as r, warpspec.timeline.gpu as g; "
            "print(type(r._profiler).__name__, r._profiler.blocks)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "WARPSPEC_PROFILE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ProfileSession", "64"]


def test_the_process_session_writes_each_timeline_and_says_where(monkeypatch, tmp_path, capsys):
    import warpspec.timeline as package

    written = []
    monkeypatch.setattr(package, "write", lambda timeline, out: written.append((timeline.kernel, out)))
    report = gpu.report_to(str(tmp_path))
    timeline = Timeline("MatmulWGMMAV3", "gpu", {}, 1500.0, roles=["consumer (threads 0-127)"])
    report(timeline)
    report(timeline)
    assert written == [("MatmulWGMMAV3", str(tmp_path / "MatmulWGMMAV3-1")),
                       ("MatmulWGMMAV3", str(tmp_path / "MatmulWGMMAV3-2"))]
    assert capsys.readouterr().err.splitlines()[0] == (
        f"warpspec profile: MatmulWGMMAV3 (consumer (threads 0-127): 0 events) written to "
        f"{tmp_path / 'MatmulWGMMAV3-1'}")


class _FakeBuffer:
    """Device memory as numpy words, for a recorded launch without a GPU."""

    made = []

    def __init__(self, nbytes):
        self.words, self.device = np.full(nbytes // 8, 0xDEAD, np.uint64), 0
        _FakeBuffer.made.append(self)

    def array(self, shape, dtype):
        return ("buffer", shape, dtype.name)

    def upload(self, host):
        self.words[:] = host

    def download(self, host):
        host[:] = self.words
        return host


def test_a_gpu_launch_times_the_plain_build_then_records_the_instrumented_one(monkeypatch):
    """The recorded launch's orchestration, with the device faked: the plain build timed, the instrumented one
    timed for the overhead, the buffer zeroed, passed as the extra parameter, read back and decoded."""
    from contextlib import nullcontext

    import matmul_v3
    from tests.timeline import test_gpu_decode as decoding
    from warpspec.cuda import driver, launch
    from warpspec.timeline.instrument import PARAMETER

    calls = []

    def time(kernel, arguments, built):
        profiled = PARAMETER in arguments
        calls.append("time instrumented" if profiled else "time plain")
        return 2.05 if profiled else 2.0

    def launch_planned(kernel, arguments, built=None):
        (buffer,) = _FakeBuffer.made
        assert arguments[PARAMETER] == ("buffer", (buffer.words.size,), "int64")
        assert not buffer.words.any()  # zeroed before the recorded launch
        build = gpu.instrumented(plain_kernel[0], 4, 64, 2)
        assert kernel is build.kernel and built is launch.compile_kernel(build.kernel)
        calls.append("record")
        buffer.words[:2] = 1
        wait = next(i for i, s in enumerate(build.sites) if s.kind == "wait" and s.group.begin == 0)
        decoding.write_array(buffer.words, build, 0, 0,
                             decoding.header(1, 3, (0, 0, 0), 0, 0, 100_000, 200_000), [(wait, 1, 100, 300)])

    monkeypatch.setattr(driver, "DeviceBuffer", _FakeBuffer)
    monkeypatch.setattr(launch, "launch_planned", launch_planned)
    occupancy = Occupancy(2, "registers", 66560, 168, 160, "the driver's occupancy query")
    monkeypatch.setattr(gpu, "_device_limits", lambda device: {"sm_count": 132, "clock_hz": 1e9})
    monkeypatch.setattr(gpu, "_occupancy", lambda kernel, plain, device, limits: occupancy)
    _FakeBuffer.made = []
    script = matmul_v3.MatmulWGMMAV3(num_stages=2, block_m=128, block_n=128, block_k=64)
    plain_kernel = []
    original = gpu.ProfileSession._record

    def record(self, kernel, arguments):
        plain_kernel.append(kernel)
        return original(self, kernel, arguments)

    monkeypatch.setattr(gpu.ProfileSession, "_record", record)
    a, b = np.zeros((256, 128), np.float16), np.zeros((256, 128), np.float16)
    c = np.zeros((256, 256), np.float16)
    session = gpu.ProfileSession(blocks=4, capacity=64, flops=1e9, overhead=True, timing=lambda: nullcontext(time),
                                 sm=2)
    with warpspec.use_backend("cuda"), session:
        script(256, 256, 128, a, b, c)
    assert calls == ["time plain", "time instrumented", "record"]
    (timeline,) = session.timelines
    assert (timeline.kernel_ns, timeline.flops) == (2.0e6, 1e9) and session.instrumented_ns == [pytest.approx(2.05e6)]
    assert [(e.role, e.name, e.start_ns, e.end_ns, e.sm) for e in timeline.events] == [
        ("consumer (threads 0-127)", "wait consumer_barriers[1]", 0.0, 100.0, 3)]
    assert timeline.notes[-1] == "instrumented build: 2.0500 ms, +2.5% over the plain build's 2.0000 ms"
    assert (timeline.sm, timeline.occupancy) == (2, occupancy)
    # An SM the device does not have is refused before anything is recorded.
    calls.clear()
    with warpspec.use_backend("cuda"), gpu.ProfileSession(sm=132, timing=lambda: nullcontext(time)):
        with pytest.raises(warpspec.ArgumentError, match=r"profile sm=132: the device has 132 SMs \(0-131\)"):
            script(256, 256, 128, a, b, c)
    assert "record" not in calls


def test_an_emulator_session_keeps_the_timing_models_timeline():
    source, destination = copy_arrays()
    with warpspec.use_backend("emulator"), warpspec.profile() as session:
        TmaCopy(tile_m=64, tile_n=64)(64, 128, source, destination)
    np.testing.assert_array_equal(destination, source)
    (timeline,) = session.timelines
    assert (timeline.source, timeline.kernel) == ("model", "TmaCopy") and timeline.kernel_ns > 0
    assert {e.kind for e in timeline.events} >= {"wait", "tma"}


def test_blocks_per_sm_on_the_gpu_are_the_drivers_count_with_the_limit_that_explains_it(monkeypatch):
    """``_occupancy`` with the driver faked: its count is kept, and the limiting resource is named only when the
    per-resource limits (the model's formula over the device's limits) give the same count."""
    cu = pytest.importorskip("cuda.bindings.driver")
    from warpspec.cuda import driver

    import matmul_v3
    from warpspec.runtime import kernel_for

    function = types.SimpleNamespace(handle="fn", attributes={"num_regs": 182, "shared_size_bytes": 0})
    monkeypatch.setattr(driver, "load_module", lambda cubin, device: types.SimpleNamespace(
        function=lambda name: function))
    asked, count = [], 1

    def occupancy_query(handle, threads, dynamic):
        asked.append((handle, threads, dynamic))
        return cu.CUresult.CUDA_SUCCESS, count

    monkeypatch.setattr(cu, "cuOccupancyMaxActiveBlocksPerMultiprocessor", occupancy_query)
    kernel = kernel_for(matmul_v3.MatmulWGMMAV3(num_stages=6, block_m=128, block_n=128, block_k=64),
                        {"n_size": 8192, "k_size": 8192})
    plain = types.SimpleNamespace(module=types.SimpleNamespace(cubin=b""),
                                  generated=types.SimpleNamespace(name="k", shared_bytes=197_632))
    h200 = {"shared_bytes_per_sm": 233472, "shared_reserved_per_block": 1024, "registers_per_sm": 65536,
            "max_threads_per_sm": 2048, "max_blocks_per_sm": 32}
    got = gpu._occupancy(kernel, plain, 0, h200)
    assert asked == [("fn", 160, 197_632)]
    assert got == Occupancy(1, "shared memory", 197_632, 182, 160, "the driver's occupancy query")
    count = 2  # a count the limits do not explain: no resource is named
    assert gpu._occupancy(kernel, plain, 0, h200).limit is None


def test_a_recorded_sm_that_ran_markedly_fewer_blocks_than_the_average_is_said_to_be_slowed():
    """V3 at 6 stages on the H200: 26 blocks ran on the recorded SM where 4096 blocks over 132 SMs average 31.0."""
    note = gpu.slowed_sm_note(0, 26, 4096, 132, 1)
    assert note == ("SM 0 ran 26 blocks where the grid's 4096 over 132 SMs average 31.0: recording slowed it (the "
                    "other SMs took up the blocks it left), so the waits and shares above are those of a slowed SM")
    assert gpu.slowed_sm_note(0, 28, 4096, 132, 1) is None  # within 10% of the average: tail effects
    # One wave (a persistent grid, or fewer blocks than the SMs hold at once): no block moves to another SM.
    assert gpu.slowed_sm_note(0, 1, 132, 132, 1) is None
    assert gpu.slowed_sm_note(0, 1, 264, 132, 2) is None
    assert gpu.slowed_sm_note(0, None, 4096, 132, 1) is None
