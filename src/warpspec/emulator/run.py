"""Running a kernel on the emulator: argument checks, the grid, and one ``BlockMachine`` per block."""

from __future__ import annotations

import os
import random
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

from threadpoolctl import threadpool_limits

from warpspec.arguments import check_view, launch_grid, scalar_value, view_shapes
from warpspec.dtypes import PointerType
from warpspec.emulator.global_memory import GlobalMemory, UnwrittenOutput
from warpspec.emulator.host import HostArray
from warpspec.emulator.machine import BlockMachine
from warpspec.errors import ArgumentError, UnwrittenOutputWarning
from warpspec.ir import nodes as ir

SEED_VARIABLE = "WARPSPEC_EMULATOR_SEED"


def emulator_seed() -> int | None:
    """The seed from WARPSPEC_EMULATOR_SEED, read at each launch (None: the deterministic as-late-as-possible
    order)."""
    text = os.environ.get(SEED_VARIABLE, "").strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise ArgumentError(f"{SEED_VARIABLE} must be an integer, got {text!r}") from None


#: ``progress(index, total, block_idx)``: called before each block runs, with its 0-based position among the
#: ``total`` blocks of the grid and its ``(x, y, z)`` blockIdx.
Progress = Callable[[int, int, tuple[int, int, int]], None]


def run_kernel(kernel: ir.Kernel, arguments: dict, progress: Progress | None = None) -> list[UnwrittenOutput]:
    """Run ``kernel`` with runtime ``arguments`` (by parameter name) on the emulator, block after block, calling
    ``progress`` (if given) before each block: a caller can show how far a long run is, or say which block it
    was in when it was interrupted. Returns, per view the kernel wrote through, the elements no block wrote
    (empty when every written view was written whole)."""
    env, memory = {}, {}
    for param in kernel.params:
        value = arguments[param.name]
        if isinstance(param.type, PointerType):
            host = HostArray(kernel, param, value)
            memory[param.var.uid] = host.flat
            env[param.var.uid] = 0
        else:
            env[param.var.uid] = scalar_value(param, value)
    grid = launch_grid(kernel, env)
    names = {p.var.uid: p.name for p in kernel.params}
    views = list(view_shapes(kernel, env))
    for stmt, shape, strides in views:
        check_view(names[stmt.pointer.uid], stmt, shape, strides, memory[stmt.pointer.uid].size)
    global_memory = GlobalMemory(memory, names)
    seed = emulator_seed()
    rng = random.Random(seed) if seed is not None else None
    total = grid[0] * grid[1] * grid[2]
    # The emulator's matrix products are small (one WGMMA group's tile): a threaded BLAS only adds contention, which
    # on a busy machine made runs ten times slower. One BLAS thread for the run, the caller's setting after.
    with threadpool_limits(limits=1, user_api="blas"):
        for z in range(grid[2]):
            for y in range(grid[1]):
                for x in range(grid[0]):
                    if progress is not None:
                        progress(x + grid[0] * (y + grid[1] * z), total, (x, y, z))
                    specials = {"blockIdx.x": x, "blockIdx.y": y, "blockIdx.z": z,
                                "gridDim.x": grid[0], "gridDim.y": grid[1], "gridDim.z": grid[2]}
                    BlockMachine(kernel, global_memory.block((x, y, z)), env, specials, rng).run()
    return global_memory.unwritten(views)


_PACKAGE = str(Path(__file__).resolve().parents[1])  # src/warpspec: frames inside it are not the caller's


def call_on_emulator(kernel: ir.Kernel, arguments: dict) -> None:
    """A kernel call's run on the emulator (the Python API): ``run_kernel``, each unwritten-output finding warned
    as an ``UnwrittenOutputWarning`` at the caller's line, the first frame outside warpspec whatever path led
    here (a plain call, an autotuned one, a profile session)."""
    findings = run_kernel(kernel, arguments)
    if not findings:
        return
    level, frame = 2, sys._getframe(1)
    while frame is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(_PACKAGE):
        level, frame = level + 1, frame.f_back
    for finding in findings:
        warnings.warn(finding.message(), UnwrittenOutputWarning, stacklevel=level)
