"""Running a kernel on the emulator: argument checks, the grid, and one ``BlockMachine`` per block, the blocks of
each thread-block cluster together (``warpspec.emulator.cluster``), clusters one after another."""

from __future__ import annotations

import os
import random
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

from threadpoolctl import threadpool_limits

from warpspec.arguments import (check_array_shape, check_flags_apart, check_tma_view, check_view, first_views,
                                launch_grid, scalar_value, tma_views, view_shapes)
from warpspec.dtypes import PointerType
from warpspec.emulator.global_memory import GlobalMemory, UnwrittenOutput
from warpspec.emulator.host import HostArray
from warpspec.emulator.choosers import Chooser, SeededChooser
from warpspec.emulator.cluster import ClusterMachine
from warpspec.emulator.machine import BlockMachine, partitions
from warpspec.errors import ArgumentError, UnwrittenOutputWarning
from warpspec.ir import nodes as ir
from warpspec.ir.evaluate import wrap

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


def launch_chooser(seed: int | None) -> Chooser:
    """The schedule of a launch: the random one of ``seed`` (``emulator_seed()``), or with None the deterministic
    one."""
    return SeededChooser(random.Random(seed)) if seed is not None else Chooser()


#: ``progress(index, total, block_idx)``: called before each cluster runs (each block, without clusters), with the
#: 0-based position of its first block among the ``total`` blocks of the grid and that block's ``(x, y, z)``
#: blockIdx.
Progress = Callable[[int, int, tuple[int, int, int]], None]

#: ``run_cluster(build, global_memory)``: runs one cluster, where ``build(chooser)`` makes its blocks' machines
#: afresh (a ``ClusterMachine``) over ``global_memory`` as it is now; the default builds them once and runs them.
ClusterRunner = Callable[[Callable[[Chooser], ClusterMachine], GlobalMemory], None]


def emulate_kernel(kernel: ir.Kernel, arguments: dict, progress: Progress | None = None,
               run_cluster: ClusterRunner | None = None) -> list[UnwrittenOutput]:
    """Run ``kernel`` with runtime ``arguments`` (by parameter name) on the emulator, cluster after cluster (block
    after block without clusters), calling ``progress`` (if given) before each: a caller can show how far a long
    run is, or say which block it was in when it was interrupted. Returns, per view the kernel wrote through, the
    elements no block wrote (empty when every written view was written whole). ``run_cluster`` replaces how each
    cluster runs (``warpspec.emulator.explore`` runs it under many schedules)."""
    env, memory, array_shapes = {}, {}, {}
    for param in kernel.params:
        value = arguments[param.name]
        if isinstance(param.type, PointerType):
            host = HostArray(kernel, param, value)
            memory[param.var.uid] = host.flat
            array_shapes[param.var.uid] = value.shape
            env[param.var.uid] = 0
        else:
            # A float32 argument as the GPU's parameter slot holds it: rounded to float32
            env[param.var.uid] = wrap(scalar_value(param, value), param.type)
    grid = launch_grid(kernel, env)
    names = {p.var.uid: p.name for p in kernel.params}
    views = list(view_shapes(kernel, env))
    for stmt, shape, strides in views:
        check_view(names[stmt.pointer.uid], stmt, shape, strides, memory[stmt.pointer.uid].size)
    for uid, (stmt, shape, strides) in first_views(views).items():
        check_array_shape(names[uid], stmt, shape, array_shapes[uid], strides)
    # The views TMA copies through become tensor maps on the GPU: what a map cannot describe is refused here too.
    copied = tma_views(kernel)
    for stmt, shape, strides in views:
        if stmt.decl.uid in copied:
            check_tma_view(names[stmt.pointer.uid], stmt.decl.name, stmt.decl.dtype,
                           memory[stmt.pointer.uid].ctypes.data, shape, strides)
    check_flags_apart(kernel, {names[uid]: (data.ctypes.data, data.ctypes.data + data.nbytes)
                               for uid, data in memory.items()})
    global_memory = GlobalMemory(memory, names)
    seed = emulator_seed()
    chooser = launch_chooser(seed)
    total = grid[0] * grid[1] * grid[2]
    shape = kernel.cluster
    size = shape[0] * shape[1] * shape[2]
    partitions_per_block = len(partitions(kernel))
    # The emulator's matrix products are small (one WGMMA group's tile): a threaded BLAS only adds contention, which
    # on a busy machine made runs ten times slower. One BLAS thread for the run, the caller's setting after.
    with threadpool_limits(limits=1, user_api="blas"):
        for first in cluster_origins(grid, shape):
            x0, y0, z0 = first
            index = x0 + grid[0] * (y0 + grid[1] * z0)
            if progress is not None:
                progress(index, total, first)

            def build(chooser: Chooser, first=first) -> ClusterMachine:
                cluster = ClusterMachine(size, partitions_per_block)
                start = global_memory.start()
                for rank, (x, y, z) in enumerate(cluster_blocks(first, shape)):
                    specials = {"blockIdx.x": x, "blockIdx.y": y, "blockIdx.z": z, "gridDim.x": grid[0],
                                "gridDim.y": grid[1], "gridDim.z": grid[2], "clusterRank": rank}
                    BlockMachine(kernel, global_memory.block((x, y, z), start if size > 1 else None), env,
                                 specials, chooser, cluster)
                return cluster

            try:
                if run_cluster is None:
                    build(chooser).machines[0].run()
                else:
                    run_cluster(build, global_memory)
            except KeyboardInterrupt as interrupt:  # still one, so that Ctrl-C stops the program; saying where
                _note(interrupt, f"interrupted while emulating {interrupt_place(kernel)}, block {index + 1}/{total} "
                                 f"(blockIdx.x={x0}, blockIdx.y={y0}, blockIdx.z={z0})"
                                 + (f", {SEED_VARIABLE}={seed}" if seed is not None else ""))
                raise
    return global_memory.unwritten(views)


def interrupt_place(kernel: ir.Kernel) -> str:
    """The kernel and the compile-time arguments and schedule it was built with, for a message."""
    values = " ".join(f"{name}={value}" for name, value in kernel.constants)
    return f"{kernel.name} ({values})" if values else kernel.name


def _note(error: BaseException, text: str) -> None:
    """Attach ``text`` to ``error``'s report: a note (Python 3.11+), else an argument of the exception."""
    if hasattr(error, "add_note"):
        error.add_note(text)
    else:
        error.args = (*error.args, text)



_PACKAGE = str(Path(__file__).resolve().parents[1])  # src/warpspec: frames inside it are not the caller's


def call_on_emulator(kernel: ir.Kernel, arguments: dict) -> None:
    """A kernel call's run on the emulator (the Python API): ``emulate_kernel``, each unwritten-output finding warned
    as an ``UnwrittenOutputWarning`` at the caller's line, the first frame outside warpspec whatever path led
    here (a plain call, an autotuned one, a profile session)."""
    findings = emulate_kernel(kernel, arguments)
    if not findings:
        return
    level, frame = 2, sys._getframe(1)
    while frame is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(_PACKAGE):
        level, frame = level + 1, frame.f_back
    for finding in findings:
        warnings.warn(finding.message(), UnwrittenOutputWarning, stacklevel=level)


def cluster_origins(grid, shape) -> list[tuple[int, int, int]]:
    """The first block of every cluster of ``shape`` in ``grid`` (a multiple of it), clusters in the order of
    their blockIdx, x fastest."""
    return [(x, y, z) for z in range(0, grid[2], shape[2]) for y in range(0, grid[1], shape[1])
            for x in range(0, grid[0], shape[0])]


def cluster_blocks(first, shape) -> list[tuple[int, int, int]]:
    """The blocks of the cluster starting at ``first``, in the order of their rank (PTX ``%cluster_ctarank``: x
    fastest)."""
    return [(first[0] + x, first[1] + y, first[2] + z) for z in range(shape[2]) for y in range(shape[1])
            for x in range(shape[0])]
