"""warpspec: write, check, see and run warp-specialized GPU kernels for NVIDIA Hopper (sm_90a).

A kernel is a ``Script`` subclass whose ``__call__`` is written in the kernel language (see docs/language.md).
Calling an instance runs it on the selected back end: ``cuda`` (an H100/H200) or ``emulator`` (any CPU, with checks
for deadlocks, races and barrier misuse).
"""

from warpspec.dtypes import (bfloat16, boolean, float8_e4m3, float8_e5m2, float16, float32, int8, int32, int64,
                             uint32)
from warpspec.errors import (ArgumentError, BarrierError, BarrierTimeoutError, BoundsError, CompileError, DeadlockError,
                             KernelError, RaceError, UnwrittenOutputWarning, WarpspecError)
from warpspec.frontend.builder import cdiv
from warpspec.pipeline import Pipeline
from warpspec.script import Class, Script, autotune
from warpspec.runtime import debug, get_backend, set_backend, set_debug, use_backend

__all__ = [
    "Script", "Class", "autotune", "cdiv", "Pipeline",
    "float16", "bfloat16", "float32", "float8_e4m3", "float8_e5m2", "int8", "int32", "int64", "uint32", "boolean",
    "WarpspecError", "CompileError", "ArgumentError", "KernelError", "DeadlockError", "RaceError", "BarrierError",
    "BoundsError", "BarrierTimeoutError", "UnwrittenOutputWarning", "get_backend", "set_backend", "use_backend", "set_debug", "debug",
]
