"""How many events a GPU record must hold: the instrumented kernel's trip counts times the events of each trip,
counted per recording thread by walking its control flow for the launch's arguments (``events_needed``), so that a
profiled launch sizes its record from the kernel instead of a fixed capacity.

The walk evaluates the kernel's scalar control flow (declarations, assignments, loop bounds, branch conditions) per
block, as the emulator would, and counts each ``ProfileEnd`` against its site's role; nothing else runs. A loop
holding no site is skipped (its scalars do not steer a later site's count in the kernels warpspec ships; where one
did, the record would come out short and say so). Control flow that needs data (a value read from memory) cannot
be walked: then the count is unknown (None) and the session falls back to its default capacity.
"""

from __future__ import annotations

from warpspec.arguments import launch_grid, scalar_value
from warpspec.dtypes import PointerType
from warpspec.errors import ArgumentError
from warpspec.ir import nodes as ir
from warpspec.ir.evaluate import ExprCompiler, wrap
from warpspec.timeline.instrument import Instrumented
from warpspec.timeline.profile_isa import ProfileEnd

#: At most this many blocks are walked: every block of a grid this small (a persistent kernel's), else this many
#: spread over the grid, its first and last included (the blocks of a non-persistent grid do alike).
WALKED_BLOCKS = 256


def events_needed(build: Instrumented, arguments: dict) -> int | None:
    """The most events any recording thread of any block of a launch of ``build`` with runtime ``arguments`` (by
    parameter name) records; None when its control flow depends on data."""
    kernel = build.kernel
    env = {}
    for param in kernel.params:
        if isinstance(param.type, PointerType):
            env[param.var.uid] = 0
        elif param.name in arguments:
            env[param.var.uid] = scalar_value(param, arguments[param.name])
        else:
            raise ArgumentError(f"events_needed: missing argument {param.name!r}")
    grid = launch_grid(kernel, env)
    total = grid[0] * grid[1] * grid[2]
    step = max(1, -(-total // WALKED_BLOCKS))
    chosen = sorted(set(range(0, total, step)) | {total - 1})
    recorder_of = {i: site.group.begin for i, site in enumerate(build.sites)}
    most = 0
    for index in chosen:
        block = (index % grid[0], index // grid[0] % grid[1], index // (grid[0] * grid[1]))
        specials = {"blockIdx.x": block[0], "blockIdx.y": block[1], "blockIdx.z": block[2],
                    "gridDim.x": grid[0], "gridDim.y": grid[1], "gridDim.z": grid[2]}
        counts: dict[int, int] = {}
        try:
            _Walk(ExprCompiler(specials), dict(env), recorder_of, counts).body(kernel.body)
        except (KeyError, TypeError, IndexError, ZeroDivisionError):
            return None  # a value the walk does not have (memory, a thread's index): the count is unknown
        most = max([most, *counts.values()])
    return most


class _Walk:
    """One block's walk: ``counts`` gets the events of each recorder (by its first thread)."""

    def __init__(self, exprs: ExprCompiler, env: dict, recorder_of: dict, counts: dict):
        self.exprs, self.env, self.recorder_of, self.counts = exprs, env, recorder_of, counts
        self.sited: dict[int, bool] = {}

    def value(self, expr: ir.Expr):
        return self.exprs(expr)(self.env)

    def holds_sites(self, stmt: ir.Stmt) -> bool:
        known = self.sited.get(id(stmt))
        if known is None:
            known = self.sited[id(stmt)] = any(isinstance(s, ProfileEnd) for s in ir.walk((stmt,)))
        return known

    def flat_counts(self, body) -> dict[int, int] | None:
        """The events of one run of ``body`` by recorder, when no loop or branch inside it holds a site (so every
        run records the same); None otherwise."""
        counts: dict[int, int] = {}
        for stmt in body:
            if isinstance(stmt, ProfileEnd):
                recorder = self.recorder_of[stmt.site]
                counts[recorder] = counts.get(recorder, 0) + 1
            elif isinstance(stmt, (ir.For, ir.If)):
                if self.holds_sites(stmt):
                    return None
            else:
                for child in ir.children(stmt):
                    inner = self.flat_counts(child)
                    if inner is None:
                        return None
                    for recorder, count in inner.items():
                        counts[recorder] = counts.get(recorder, 0) + count
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
            if isinstance(stmt, ProfileEnd):
                recorder = self.recorder_of[stmt.site]
                self.counts[recorder] = self.counts.get(recorder, 0) + 1
            elif isinstance(stmt, (ir.Declare, ir.Assign)):
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
                for recorder, count in per_trip.items():
                    self.counts[recorder] = self.counts.get(recorder, 0) + count * len(trips)
                if trips:
                    self.env[stmt.var.uid] = trips[-1]
                    self.scalars(stmt.body)
            elif isinstance(stmt, ir.If):
                if self.holds_sites(stmt):
                    self.body(stmt.then if self.value(stmt.cond) else stmt.orelse)
            else:
                for child in ir.children(stmt):  # thread groups and single_thread: their bodies run
                    self.body(child)
