"""warpspec: write, check, see and run warp-specialized GPU kernels for NVIDIA Hopper (sm_90a).

A kernel is a ``Script`` subclass whose ``__call__`` is written in the kernel language (see docs/language.md).
Calling an instance runs it on the selected back end: ``cuda`` (an H100/H200) or ``emulator`` (any CPU, with checks
for deadlocks, races and barrier misuse).
"""

#: The release, read by pyproject.toml too (``[tool.setuptools.dynamic]``): the one place it is written.
__version__ = "0.1.0"

from warpspec.dtypes import (bfloat16, boolean, float8_e4m3, float8_e5m2, float16, float32, int8, int32, int64,
                             uint32)
from warpspec.errors import (ArgumentError, BarrierError, BarrierTimeoutError, BoundsError, CompileError, DeadlockError,
                             KernelError, RaceError, UnwrittenOutputWarning, WarpspecError)
from warpspec.frontend.interpreter import cdiv
from warpspec.pipeline import Pipeline
from warpspec.script import Class, Script, autotune
from warpspec.environment import environment
from warpspec.runtime import debug, get_backend, set_backend, set_debug, use_backend


def profile(blocks: int = 64, capacity: int | None = None, flops: float | None = None, overhead: bool = False,
            sm: int = 0):
    """``with warpspec.profile(sm=0) as session:`` records every Script launch inside it: on the GPU through an
    instrumented build that timestamps each role's barrier waits, TMA issues, WGMMA and epilogue in every block that
    runs on SM ``sm``, up to the first ``blocks`` of them (``capacity`` events per role and block, by default as many
    as the launch records, counted from the kernel's trip counts; more are counted, not recorded, and the timeline
    says what is missing); on the emulator through the CPU timing model. ``session.timelines`` holds one
    ``warpspec.timeline.events.Timeline`` per launch, whose ``kernel_ns`` is a plain (uninstrumented) build's
    time by the benchmarks' protocol (``warpspec.tune.bench.time_ms``: about 0.6 s of calls, the median) and whose
    ``flops`` is ``flops``; ``overhead=True`` also times the instrumented build (noted in the Timeline, listed in
    ``session.instrumented_ns``). A profiled GPU call runs the kernel many times on its arguments, as
    benchmarking does. docs/cuda.md has the details."""
    from warpspec.timeline.gpu import ProfileSession
    from warpspec.tune.bench import house_timing

    return ProfileSession(blocks, capacity, flops, overhead, timing=house_timing, sm=sm)


# WARPSPEC_PROFILE=1 when warpspec is imported: the whole process is one profile session, and each launch's
# timeline is written under WARPSPEC_PROFILE_DIR (default ./warpspec-profile), saying where on stderr.
if environment("WARPSPEC_PROFILE", "").strip().lower() in ("1", "true", "yes", "on"):
    from warpspec.timeline.gpu import report_to

    _process_profile = profile()
    _process_profile.report = report_to(environment("WARPSPEC_PROFILE_DIR", "warpspec-profile"))
    _process_profile.__enter__()

__all__ = [
    "Script", "Class", "autotune", "cdiv", "Pipeline",
    "float16", "bfloat16", "float32", "float8_e4m3", "float8_e5m2", "int8", "int32", "int64", "uint32", "boolean",
    "WarpspecError", "CompileError", "ArgumentError", "KernelError", "DeadlockError", "RaceError", "BarrierError",
    "BoundsError", "BarrierTimeoutError", "UnwrittenOutputWarning", "get_backend", "set_backend", "use_backend",
    "set_debug", "debug", "profile",
]
