"""What a launch does, counted from its trip counts: how many events a GPU record must hold (``events_needed``:
per recording thread, so that a profiled launch sizes its record from the kernel instead of a fixed capacity) and
the whole grid's WGMMA work (``grid_flops``: TFLOP/s of the launch, not extrapolated from the blocks a model ran).

The walk evaluates the kernel's scalar control flow (declarations, assignments, loop bounds, branch conditions) per
block, as the emulator would, and adds up what the counted statements weigh; nothing else runs. A loop or branch
holding none is skipped (its scalars do not steer a later count in the kernels warpspec ships; where one did, a
record would come out short and say so), and a loop whose every trip counts alike is counted at once. Control flow
that needs data (a value read from memory) cannot be walked: then the count is unknown (None).
"""

from __future__ import annotations

from warpspec.arguments import launch_grid, scalar_value
from warpspec.dtypes import PointerType
from warpspec.errors import ArgumentError, KernelError
from warpspec.ir import nodes as ir
from warpspec.ir.evaluate import ExprCompiler, wrap
from warpspec.timeline.facts import timing_cost
from warpspec.timeline.instrument import Instrumented
from warpspec.timeline.profile_isa import ProfileEnd

#: At most this many blocks are walked: every block of a grid this small (a persistent kernel's), else this many
#: spread over the grid, its first and last included (the blocks of a non-persistent grid do alike).
WALKED_BLOCKS = 256


def events_needed(build: Instrumented, arguments: dict) -> int | None:
    """The most events any recording thread of any block of a launch of ``build`` with runtime ``arguments`` (by
    parameter name) records; None when its control flow depends on data."""
    recorder_of = {i: site.group.begin for i, site in enumerate(build.sites)}

    def event(stmt: ir.Stmt):
        return (recorder_of[stmt.site], 1) if isinstance(stmt, ProfileEnd) else None

    counts = _walk_blocks(build.kernel, arguments, event, WALKED_BLOCKS)
    return None if counts is None else max((n for block in counts for n in block.values()), default=0)


def grid_flops(kernel: ir.Kernel, arguments: dict) -> float | None:
    """The floating-point operations of every WGMMA every block of a launch of ``kernel`` with runtime ``arguments``
    issues (2·m·n·k each); None when its control flow depends on data."""

    def work(stmt: ir.Stmt):
        cost = timing_cost(stmt)
        if cost.kind != "wgmma":
            return None
        m, n, k, _, _ = cost.measure(stmt)
        return "flops", 2.0 * m * n * k

    counts = _walk_blocks(kernel, arguments, work, None)
    return None if counts is None else sum(block.get("flops", 0.0) for block in counts)


def grid_blocks(kernel: ir.Kernel, arguments: dict) -> int:
    """How many blocks a launch of ``kernel`` with runtime ``arguments`` (by parameter name) has."""
    grid = launch_grid(kernel, launch_scalars(kernel, arguments))
    return grid[0] * grid[1] * grid[2]


def launch_scalars(kernel: ir.Kernel, arguments: dict, caller: str | None = None) -> dict:
    """The launch's scalar parameters by variable, from ``arguments`` by parameter name (pointers as 0: neither the
    walk nor the model reads memory); ArgumentError naming ``caller`` (default: the kernel) and a missing one."""
    env = {}
    for param in kernel.params:
        if isinstance(param.type, PointerType):
            env[param.var.uid] = 0
        elif param.name in arguments:
            env[param.var.uid] = scalar_value(param, arguments[param.name])
        else:
            raise ArgumentError(f"{caller or kernel.name}: missing argument {param.name!r}")
    return env


def _walk_blocks(kernel: ir.Kernel, arguments: dict, weigh, most_blocks: int | None) -> list[dict] | None:
    """Per walked block, what its statements weigh by key (``weigh(stmt) -> (key, amount) | None``): every block,
    or ``most_blocks`` spread over the grid, its first and last included."""
    env = launch_scalars(kernel, arguments)
    grid = launch_grid(kernel, env)
    total = grid[0] * grid[1] * grid[2]
    step = 1 if most_blocks is None else max(1, -(-total // most_blocks))
    walked, sited = [], {}
    for index in sorted(set(range(0, total, step)) | {total - 1}):
        block = (index % grid[0], index // grid[0] % grid[1], index // (grid[0] * grid[1]))
        specials = {"blockIdx.x": block[0], "blockIdx.y": block[1], "blockIdx.z": block[2],
                    "gridDim.x": grid[0], "gridDim.y": grid[1], "gridDim.z": grid[2]}
        walk = _Walk(ExprCompiler(specials), dict(env), weigh, sited)
        try:
            walk.body(kernel.body)
        except (KeyError, TypeError, IndexError, ZeroDivisionError, KernelError):
            # a value the walk does not have (memory, a thread's index), or one the emulator refuses (reported by
            # the model's run at its line): the count is unknown
            return None
        walked.append(walk.counts)
    return walked


class _Walk:
    """One block's walk: ``counts`` gets what its statements weigh, by key. ``sited`` caches, by statement id,
    whether a statement holds a counted one (shared by the walks of one kernel)."""

    def __init__(self, exprs: ExprCompiler, env: dict, weigh, sited: dict):
        self.exprs, self.env, self.weigh, self.sited = exprs, env, weigh, sited
        self.counts: dict = {}

    def value(self, expr: ir.Expr):
        return self.exprs(expr)(self.env)

    def holds_sites(self, stmt: ir.Stmt) -> bool:
        known = self.sited.get(id(stmt))
        if known is None:
            known = self.sited[id(stmt)] = any(self.weigh(s) is not None for s in ir.walk((stmt,)))
        return known

    def add(self, counts: dict, stmt: ir.Stmt) -> bool:
        """Add what ``stmt`` weighs to ``counts``; whether it weighs anything."""
        weight = self.weigh(stmt)
        if weight is None:
            return False
        key, amount = weight
        counts[key] = counts.get(key, 0) + amount
        return True

    def flat_counts(self, body) -> dict | None:
        """What one run of ``body`` weighs, by key, when no loop or branch inside it holds a counted statement (so
        every run weighs the same); None otherwise."""
        counts: dict = {}
        for stmt in body:
            if self.add(counts, stmt):
                continue
            if isinstance(stmt, (ir.For, ir.If)):
                if self.holds_sites(stmt):
                    return None
            else:
                for child in ir.children(stmt):
                    inner = self.flat_counts(child)
                    if inner is None:
                        return None
                    for key, amount in inner.items():
                        counts[key] = counts.get(key, 0) + amount
        return counts

    def scalars(self, body) -> None:
        """Run the declarations and assignments of ``body`` outside its loops and branches (thread groups'
        included)."""
        for stmt in body:
            if isinstance(stmt, (ir.Declare, ir.Assign)):
                self.env[stmt.var.uid] = wrap(self.value(stmt.value), stmt.var.type)
            elif not isinstance(stmt, (ir.For, ir.If)):
                for child in ir.children(stmt):
                    self.scalars(child)

    def body(self, body) -> None:
        for stmt in body:
            if self.add(self.counts, stmt):
                continue
            if isinstance(stmt, (ir.Declare, ir.Assign)):
                self.env[stmt.var.uid] = wrap(self.value(stmt.value), stmt.var.type)
            elif isinstance(stmt, ir.For):
                if not self.holds_sites(stmt):
                    continue
                trips = range(self.value(stmt.start), self.value(stmt.stop), max(self.value(stmt.step), 1))
                per_trip = self.flat_counts(stmt.body)
                if per_trip is None:
                    for value in trips:
                        self.env[stmt.var.uid] = value
                        self.body(stmt.body)
                    continue
                # Every trip records the same events (no branch or loop inside holds a site): count them at once,
                # and leave the scalars as the last trip does.
                for key, amount in per_trip.items():
                    self.counts[key] = self.counts.get(key, 0) + amount * len(trips)
                if trips:
                    self.env[stmt.var.uid] = trips[-1]
                    self.scalars(stmt.body)
            elif isinstance(stmt, ir.If):
                if self.holds_sites(stmt):
                    self.body(stmt.then if self.value(stmt.cond) else stmt.orelse)
            else:
                for child in ir.children(stmt):  # thread groups and single_thread: their bodies run
                    self.body(child)
