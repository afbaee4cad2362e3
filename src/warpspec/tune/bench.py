"""Timing kernels on the GPU: CUDA events around each launch, the L2 cache flushed before each, the median kept.

Events are PyTorch's (``torch.cuda.Event``) when the caller's PyTorch has initialised CUDA, so that they are
recorded on the stream warpspec launches on (PyTorch's current stream); otherwise the driver's (``cuEventCreate``)
on stream 0, where warpspec then launches. warpspec never imports PyTorch itself: that alone would cost seconds.

The L2 flush writes a 256 MB buffer (the H100/H200 L2 is 50-60 MB) before every timed launch, so each launch
starts with cold caches as it would inside a real workload rather than reading the previous run's operands from
L2.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager

from warpspec.cuda.launch import launch_kernel
from warpspec.runtime import multiprocessor_count, run_script

L2_FLUSH_BYTES = 256 << 20


class _TorchClock:
    """Events and flush buffer from PyTorch, on its current stream."""

    def __init__(self, torch):
        self.torch = torch
        self.buffer = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")

    def flush(self) -> None:
        self.buffer.zero_()

    def elapsed_ms(self, launch: Callable[[], None]) -> float:
        start, stop = (self.torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        launch()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop)

    def close(self) -> None:
        del self.buffer


class _DriverClock:
    """Events and flush buffer from the CUDA driver, on stream 0 (where warpspec launches without PyTorch)."""

    def __init__(self):
        from cuda.bindings import driver as cu

        from warpspec.cuda.driver import check, context

        self.cu, self.check = cu, check
        context()
        self.stream = cu.CUstream(0)
        self.events = [check(cu.cuEventCreate(cu.CUevent_flags.CU_EVENT_DEFAULT), "cuEventCreate") for _ in "ab"]
        self.buffer = check(cu.cuMemAlloc(L2_FLUSH_BYTES), "allocating the L2 flush buffer")

    def flush(self) -> None:
        self.check(self.cu.cuMemsetD8Async(self.buffer, 0, L2_FLUSH_BYTES, self.stream), "flushing L2")

    def elapsed_ms(self, launch: Callable[[], None]) -> float:
        cu, check = self.cu, self.check
        start, stop = self.events
        check(cu.cuEventRecord(start, self.stream), "cuEventRecord")
        launch()
        check(cu.cuEventRecord(stop, self.stream), "cuEventRecord")
        check(cu.cuEventSynchronize(stop), "cuEventSynchronize")
        return check(cu.cuEventElapsedTime(start, stop), "cuEventElapsedTime")

    def close(self) -> None:
        self.check(self.cu.cuMemFree(self.buffer), "freeing the L2 flush buffer")
        for event in self.events:
            self.check(self.cu.cuEventDestroy(event), "cuEventDestroy")


def median_ms(clock, launch: Callable[[], None], runs: int, warmup: int) -> float:
    """The median over ``runs`` event-timed calls of ``launch`` (each after an L2 flush), after ``warmup``
    untimed calls (module loading, first-touch of the operands)."""
    for _ in range(warmup):
        launch()
    samples = []
    for _ in range(runs):
        clock.flush()
        samples.append(clock.elapsed_ms(launch))
    return statistics.median(samples)


def clock():
    """A timing clock (``flush``, ``elapsed_ms(launch)``, ``close``) on the stream warpspec launches on:
    PyTorch's when the caller's PyTorch has initialised CUDA, the driver's on stream 0 otherwise."""
    torch = sys.modules.get("torch")
    return _TorchClock(torch) if torch is not None and torch.cuda.is_initialized() else _DriverClock()


def time_ms(launch: Callable[[], None], warmup_ms: float = 100.0, rep_ms: float = 500.0) -> float:
    """The house protocol of docs/performance.md without triton: what ``triton.testing.do_bench(launch,
    warmup=warmup_ms, rep=rep_ms, return_mode="median")`` measures. Five calls estimate one's time; then
    about ``warmup_ms`` of untimed calls, then about ``rep_ms`` of calls each timed by CUDA events after an L2
    flush; the median in milliseconds."""
    timer = clock()
    try:
        estimate = max(median_ms(timer, launch, runs=5, warmup=1), 1e-4)
        return median_ms(timer, launch, runs=max(1, int(rep_ms / estimate)),
                         warmup=max(1, int(warmup_ms / estimate)))
    finally:
        timer.close()


@contextmanager
def house_timing():
    """Yield ``time(kernel, runtime, built) -> ms``: ``time_ms`` (the house protocol, what do_bench measures) of
    launching ``built``, the ``BuiltKernel`` of ``kernel``: a profile's kernel time, so that its TFLOP/s are the
    benchmarks' (ten calls after one, as tuning times, read V6 up to 4.6% faster on the H200)."""
    yield lambda kernel, runtime, built: time_ms(lambda: launch_kernel(kernel, runtime, built=built))


def device_identity() -> dict:
    """The GPU warpspec launches on (the current device), as it enters tuning keys: name, compute capability, SM
    count and driver version. Two GPUs of one name can differ in SMs (a MIG slice, a cut-down part), and a winner
    timed on one must not serve the other."""
    from cuda.bindings import driver as cu

    from warpspec.cuda.driver import check, default_device

    ordinal = default_device()
    multiprocessors = multiprocessor_count(ordinal)  # first: it initialises the driver
    device = check(cu.cuDeviceGet(ordinal), "cuDeviceGet")
    name = check(cu.cuDeviceGetName(256, device), "cuDeviceGetName")
    attribute = cu.CUdevice_attribute
    major = check(cu.cuDeviceGetAttribute(attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device))
    minor = check(cu.cuDeviceGetAttribute(attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device))
    return {"gpu": name.split(b"\0", 1)[0].decode(errors="replace"), "compute_capability": f"{major}.{minor}",
            "multiprocessors": multiprocessors,
            "driver": check(cu.cuDriverGetVersion(), "cuDriverGetVersion")}


class CudaBench:
    """The tuner's view of the GPU: who it is, how long a kernel takes, and the launch itself. Tests replace it
    (``warpspec.tune.tuner.configure(bench=...)``) with a fake that needs no GPU."""

    def __init__(self, runs: int = 10, warmup: int = 1):
        self.runs, self.warmup = runs, warmup

    def identity(self) -> dict:
        """See ``device_identity``."""
        return device_identity()

    @contextmanager
    def timing(self):
        """Yield ``time(kernel, runtime, built) -> median milliseconds`` of launching ``built`` (the
        ``BuiltKernel`` of ``kernel``); the flush buffer and events live as long as the block."""
        timer = clock()
        try:
            yield lambda kernel, runtime, built: median_ms(timer, lambda: launch_kernel(kernel, runtime, built=built),
                                                           self.runs, self.warmup)
        finally:
            timer.close()

    def launch(self, script, args: tuple, kwargs: dict) -> None:
        """Run the chosen (pinned) ``script`` on the call's arguments: its own launch path, whose plan entries
        make a repeated call cost no more than a pinned Script's."""
        run_script(script, args, kwargs)


def host_us_per_call(call, synchronize, calls: int = 200, repeats: int = 25) -> float:
    """Host time per call of ``call()`` in microseconds: the median over ``repeats`` loops of ``calls`` calls, with
    ``synchronize()`` (waiting for the GPU) before each loop and after it: what a call costs before the GPU sees
    it. A loop is short enough that its launches never fill the GPU's launch queue (about a thousand entries):
    a small kernel runs for 8 to 14 us on the GPU, as long as its launch takes on the host, and a longer loop
    would wait for the queue and measure the GPU instead. The heap is collected first, so garbage that earlier
    work left (a tuning run's, a test suite's) is not charged to these calls."""
    gc.collect()
    call()
    synchronize()
    loops = []
    for _ in range(repeats):
        started = time.perf_counter()
        for _ in range(calls):
            call()
        loops.append((time.perf_counter() - started) / calls)
        synchronize()
    return statistics.median(loops) * 1e6


def gpu_ms_per_call(run: Callable[[], None], count: int, repeats: int = 5) -> float:
    """GPU milliseconds per call when ``run()`` makes ``count`` calls back to back: the median over ``repeats``
    event-timed runs (after one untimed), divided by ``count``; no L2 flush in between, as an application calls."""
    timer = clock()
    try:
        run()
        return statistics.median([timer.elapsed_ms(run) for _ in range(repeats)]) / count
    finally:
        timer.close()
