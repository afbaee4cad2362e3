"""A modeled clock for the emulator: the blocks resident on one SM run the real kernel IR with a time per task.

``model_sm`` runs a few blocks together, as one SM holds them, under a timed scheduler: the task (thread partition)
whose clock is earliest always goes next, one statement at a time, and each statement costs time from ``Costs``.
Asynchronous operations complete at modeled times instead of "when every task is blocked": a TMA copy queues on the
SM's share of the chip's memory bandwidth and lands a latency later; a WGMMA group queues on the SM's one set of
tensor cores at a rate per shape; a wait ends when its barrier's phase completes, plus a wake-up latency. Every
check of the emulator still runs (a deadlock or barrier misuse is reported as usual), but global memory is not
read or written and WGMMA products are not computed: data values do not change timing, and skipping them makes an
8192³ matmul model in about a second. The plain emulator (``BlockMachine``) is untouched by all of this.

Each interval carries the tile, stage and phase the GPU instrumentation records for the same event, by the same
rules (``warpspec.timeline.instrument``): a task counts the iterations of the kernel's tile loops it begins, a
stage is its statement's ``stage_index`` and a phase its wait's ``wait_phase``, evaluated where the event ends.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from warpspec.dtypes import PointerType
from warpspec.emulator.machine import BlockMachine, Task
from warpspec.errors import DeadlockError, KernelError
from warpspec.isa import registry
from warpspec.isa.roles import ThreadGroup
from warpspec.isa.timeline_facts import STATEMENT, Instrumentation
from warpspec.isa.wgmma import WgmmaState
from warpspec.ir import nodes as ir
from warpspec.ir.printer import format_expr
from warpspec.timeline.facts import fields_of, instrumentation, timing_cost
from warpspec.timeline.instrument import stage_index, tile_loops, wait_pending, wait_phase


@dataclass(frozen=True)
class Costs:
    """What each thing costs on one SM, in nanoseconds (``warpspec.timeline.model`` fills it from a device's
    parameter file)."""

    statement_ns: float  # a scalar statement, a loop iteration or a branch
    arrive_ns: float  # an mbarrier arrive
    wait_ns: float  # an mbarrier wait that passes at once (one try_wait)
    wake_ns: float  # from a barrier phase's completion to its waiters running again
    sync_ns: float  # a block or named barrier once every member arrived
    tma_issue_ns: float  # issuing one TMA copy
    memory_latency_ns: float  # a copy's last byte lands this long after the SM's memory share delivered it
    memory_bytes_per_ns: float  # this SM's share of the chip's load bandwidth
    port_bytes_per_ns: float  # the most one SM moves when the others leave it room
    memory_burst_ns: float  # how much idle time the SM's share may catch up on
    wgmma_issue_ns: float  # issuing one wgmma instruction (m64nNkK) per warpgroup
    wgmma_latency_ns: float  # from a group's last tensor-core cycle to wait_group seeing it
    register_ns_per_element: float  # elementwise work on register tiles, per element per thread
    wgmma_flops_per_ns: Callable[[int, int, int, object], float]  # the SM's tensor-core rate for (m, n, k, dtype)
    elect_ns: float  # electing one lane of a warp to run a body or issue a copy, and reconverging after it
    record_ns: float  # an instrumented build writing one event (met only when modeling that build)
    record_join_ns: float  # its recording warp rejoining after a single_thread body that recorded


@dataclass
class Interval:
    """One thing a task did, from ``start_ns`` to ``end_ns``: ``kind`` as ``warpspec.timeline.events.KINDS``;
    ``tile``, ``stage``, ``phase`` and ``pending`` as ``warpspec.timeline.events.Event`` has them."""

    task: Task
    kind: str
    name: str
    start_ns: float
    end_ns: float
    loc: ir.Loc
    barrier: str | None = None
    tile: int = 0
    stage: int | None = None
    phase: int | None = None
    pending: int | None = None


@dataclass
class _Clock:
    """A task's modeled time and what it is in the middle of."""

    now: float = 0.0
    blocked_in: ir.Stmt | None = None
    wgmma_start: float | None = None  # the first mma of the open (uncommitted) group
    wgmma_first: ir.Stmt | None = None  # that mma, whose B operand's stage the group's event has
    wgmma_flops: list = field(default_factory=list)  # (flops, m, n, k, dtype) of the open group's mmas
    last_wgmma_wait: tuple[float, ir.Loc] | None = None  # when and where the last wgmma.wait_group ended
    tiles_begun: int = 0  # iterations of tile loops begun: the task is in tile ``tiles_begun - 1`` (0 before any)
    single: int = 0  # single_thread bodies the task is in: their statements need no lane elected

    @property
    def tile(self) -> int:
        """The tile the task's events belong to now (``warpspec.timeline.instrument``)."""
        return max(self.tiles_begun - 1, 0)


class _NullTile:
    """A global tile as the model sees it: its shape only."""

    def __init__(self, tile_shape, dtype):
        self.tile_shape, self.dtype, self.empty = tuple(tile_shape), dtype, False


class NullMemory:
    """Global memory for the model: accesses are not checked or performed (a tile reads as zeros), so arrays of any
    size cost nothing. ``dtypes``: pointer parameter uid -> numpy dtype."""

    def __init__(self, dtypes: dict):
        self.dtypes = dtypes

    def tile(self, task, pointer, view, shape, strides, offsets, tile_shape, what, rows=None,
             cols=None) -> _NullTile:
        """The tile's shape and element type (the machine's ``global_tile`` service)."""
        return _NullTile(tile_shape, self.dtypes[pointer])

    def read(self, task, tile: _NullTile) -> np.ndarray:
        """Zeros of the tile's shape: the model does not carry data."""
        return np.zeros(tile.tile_shape, dtype=tile.dtype)

    def write(self, task, tile, values) -> None:
        """Dropped: the model does not carry data."""

    def reduce_add(self, task, tile, values, combine=None) -> None:
        """Dropped: the model does not carry data (a reduce-add, by TMA or ``store_global``, costs its transfer, as
        a store does)."""

    def check_stores_waited(self, task, tile) -> None:
        """No race checks in the model (``warpspec check`` makes them)."""

    def store_issued(self, task, tile) -> None:
        """No race checks in the model."""

    def store_observed(self, task, tile) -> None:
        """No race checks in the model."""

    def flag(self, pointer, view, shape, strides, index, what) -> str:
        """A flag's name: the model keeps no flag values."""
        return f"{view}[{index}]"

    def flag_value(self, flag) -> int:
        """The model keeps no flag values."""
        return 0

    def flag_holds(self, flag, value) -> bool:
        """Every flag wait passes at once: the blocks a modeled SM waits for are taken to have signalled (the
        model times one SM's blocks, not the others')."""
        return True

    def flag_signal(self, task, flag, value) -> None:
        """Dropped: the model keeps no flag values."""

    def flag_add(self, task, flag, value) -> None:
        """Dropped: the model keeps no flag values."""

    def flag_acquired(self, task, flag) -> None:
        """No race checks in the model."""


class SmResources:
    """What the blocks resident on one SM share: the tensor cores and the SM's share of memory bandwidth, each a
    queue that is free again at ``*_free`` ns."""

    def __init__(self, costs: Costs):
        self.costs = costs
        self.tensor_free = 0.0
        self.memory_free = 0.0
        self.port_free = 0.0
        self.tensor_intervals: list[tuple[float, float]] = []

    def transfer(self, now: float, nbytes: int) -> float:
        """When ``nbytes`` requested at ``now`` have all landed. The SM's port moves them at its own rate, but
        over time the SM gets only its share of the chip's bandwidth: idle time earns credit for at most
        ``memory_burst_ns`` (while other SMs idle too, a burst goes faster than the share)."""
        c = self.costs
        port = max(now, self.port_free) + nbytes / c.port_bytes_per_ns
        self.port_free = port
        share = max(now - c.memory_burst_ns, self.memory_free) + nbytes / c.memory_bytes_per_ns
        self.memory_free = share
        return max(port, share) + c.memory_latency_ns

    def compute(self, now: float, duration: float) -> float:
        """When a WGMMA group of ``duration`` ns of tensor-core work, issued from ``now`` on, is complete."""
        start = max(now, self.tensor_free)
        self.tensor_free = start + duration
        self.tensor_intervals.append((start, self.tensor_free))
        return self.tensor_free + self.costs.wgmma_latency_ns


class TimedMachine(BlockMachine):
    """One block under the model: the emulator's machine with a clock per task, run by ``SmModel``."""

    def __init__(self, kernel: ir.Kernel, memory: NullMemory, env: dict, specials: dict, sm: SmResources,
                 block: tuple[int, int, int]):
        super().__init__(kernel, memory, env, specials, None)
        self.sm, self.costs, self.block = sm, sm.costs, block
        self.clocks = {task.index: _Clock() for task in self.tasks}
        self.done_at: dict = {}  # async operation in flight -> its completion time
        self.intervals: list[Interval] = []
        self.flops = 0.0
        self.recorded = role_groups(kernel, self.tasks)
        self.tile_bodies = {id(loop.body): loop.body for loop in tile_loops(kernel.body)}
        # One stage expression per statement, kept: the expression compiler caches its closures by object.
        self.stages = {id(s): stage_index(s) for s in ir.walk(kernel.body) if not type(s).blocks}

    # ------------------------------------------------------------------------------------ one statement at a time

    def exec_body(self, task: Task, body):
        """Run ``body`` in ``task`` one leaf statement per step, each charged to the task's clock, yielding to the
        scheduler after each so that tasks advance in modeled-time order."""
        clock = self.clocks[task.index]
        clock.now += self.costs.statement_ns  # a loop iteration or a branch taken
        if self.tile_bodies.get(id(body)) is body:
            clock.tiles_begun += 1  # an iteration of a tile loop: the next tile
        for stmt in body:
            task.loc = stmt.loc
            if type(stmt).blocks:  # loops, branches, thread groups: their bodies' statements are the steps
                result = registry.emulation(type(stmt))(self, task, stmt)
                if result is not None:
                    elected = timing_cost(stmt).kind == "elect"
                    if elected:
                        clock.now += self.costs.elect_ns
                        clock.single += 1
                    yield from result
                    if elected:
                        clock.single -= 1
                continue
            start = clock.now
            clock.now += self._cost(task, stmt)
            clock.blocked_in = stmt
            result = registry.emulation(type(stmt))(self, task, stmt)
            if result is not None:
                yield from result
            clock.blocked_in = None
            self._record(task, stmt, start)
            yield None

    def _cost(self, task: Task, s: ir.Stmt) -> float:
        c = self.costs
        cost = timing_cost(s)
        kind = cost.kind
        if kind == "arrive":
            return c.arrive_ns
        if kind == "wait":
            return c.wait_ns
        if kind == "tma":
            # Outside single_thread a group of threads elects a lane to issue (the CUDA emission's elect_one).
            elect = c.elect_ns if task.size > 1 and not self.clocks[task.index].single else 0.0
            return c.tma_issue_ns + elect
        if kind == "record":
            return c.record_ns
        if kind == "record_join":
            return c.record_join_ns
        if kind == "wgmma":
            m, n, k, a_dtype, b_dtype = cost.measure(s)
            warpgroups = max(s.threads[1] // self.kernel.facts.target.warpgroup_threads, 1)
            form = self.kernel.facts.target.wgmma_form(a_dtype, b_dtype)
            clock = self.clocks[task.index]
            if clock.wgmma_start is None:
                clock.wgmma_start, clock.wgmma_first = clock.now, s
            # A statement of several warpgroups runs as one partition per warpgroup (``partitions``), each
            # multiplying its own rows: this partition's share of the flops and of the tensor cores' time.
            rows = m * max(task.size // self.kernel.facts.target.warpgroup_threads, 1) // warpgroups
            clock.wgmma_flops.append((2.0 * rows * n * k, rows, n, k, a_dtype))
            instructions = (m // (64 * warpgroups)) * (k // form.k)
            return instructions * c.wgmma_issue_ns
        if kind == "registers":
            return math.prod(cost.measure(s)) / task.size * c.register_ns_per_element
        if kind in ("global_load", "global_store"):
            ref = cost.measure(s)
            nbytes = math.prod(ref.shape) * ref.dtype.nbytes
            landed = self.sm.transfer(self.clocks[task.index].now, nbytes)
            issue = math.prod(ref.shape) / task.size * c.register_ns_per_element
            # A load waits for its data; a store only issues (the block's end does not wait for it here).
            return max(landed - self.clocks[task.index].now, issue) if kind == "global_load" else issue
        if kind == "sync":
            return 0.0  # the wait for the other members is the cost, charged when they all arrived
        return c.statement_ns

    def _record(self, task: Task, s: ir.Stmt, start: float) -> None:
        """The interval statement ``s`` took, if it is one a timeline shows."""
        clock = self.clocks[task.index]
        if timing_cost(s).kind == "wgmma_commit":
            group = clock.wgmma_flops
            duration = sum(f / self.costs.wgmma_flops_per_ns(m, n, k, dt) for f, m, n, k, dt in group)
            self.flops += sum(f for f, *_ in group)
            # The tensor cores take a group's instructions as they issue: its work starts with its first one.
            issued = clock.wgmma_start if group else clock.now
            self.done_at[task.family_state(WgmmaState).groups[-1]] = self.sm.compute(issued, duration)
            if task.index in self.recorded:
                stage = None if clock.wgmma_first is None else self._stage(task, clock.wgmma_first)
                self._add(task, "wgmma", "wgmma", clock.wgmma_start if group else start, clock.now, s.loc,
                          stage=stage)
            clock.wgmma_start, clock.wgmma_first, clock.wgmma_flops = None, None, []
            return
        shown = instrumentation(s)
        if task.index not in self.recorded or shown.kind is None or shown.run:
            return  # a run's event (WGMMA issues) is its closing statement's, above
        barrier = None if shown.barrier is None else self.barrier(task, getattr(s, shown.barrier)).name
        phase = wait_phase(s)
        self._add(task, shown.kind, self._name(task, s, shown), start, clock.now, s.loc, barrier,
                  self._stage(task, s), None if phase is None else int(self.ev(task, phase)), wait_pending(s))
        if shown.kind == "wgmma_wait":
            clock.last_wgmma_wait = (clock.now, s.loc)

    def _stage(self, task: Task, s: ir.Stmt) -> int | None:
        """The stage statement ``s`` concerns, as ``task`` runs it now (None when it concerns none)."""
        index = self.stages[id(s)]
        return None if index is None else int(self.ev(task, index))

    def _name(self, task: Task, s: ir.Stmt, shown: Instrumentation) -> str:
        """The event's name as this block ran it: the indexed field's barrier or tile with its runtime index
        ("wait full_barriers[2]", "tma ga -> sa[1]"), the other fields as written."""
        fields = {}
        for name in fields_of(shown.name):
            value = getattr(s, name)
            if name == shown.indexed:
                fields[name] = (self.barrier(task, value).name if name == shown.barrier else
                                self.region(task, value).text)
            else:
                fields[name] = format_expr(value)
        return shown.name.format(**fields)

    def _add(self, task, kind, name, start, end, loc, barrier=None, stage=None, phase=None, pending=None) -> None:
        self.intervals.append(Interval(task, kind, name, start, end, loc, barrier, self.clocks[task.index].tile,
                                       stage, phase, pending))

    def finish(self, task: Task) -> None:
        """``task`` ended: a consumer's epilogue runs from its last wgmma.wait_group to here."""
        clock = self.clocks[task.index]
        if task.index in self.recorded and clock.last_wgmma_wait is not None:
            at, loc = clock.last_wgmma_wait
            self._add(task, "epilogue", "epilogue", at, clock.now, loc)

    # ---------------------------------------------------------------------------- asynchronous operations, timed

    def new_event(self, kind, task, loc, complete, text, retire=None):
        """The emulator's async operation, with the modeled time it completes at."""
        event = super().new_event(kind, task, loc, complete, text, retire)
        stmt = self.clocks[task.index].blocked_in
        cost = timing_cost(stmt) if stmt is not None else STATEMENT
        if cost.kind == "tma":
            self.done_at[event] = self.sm.transfer(self.clocks[task.index].now, cost.measure(stmt))
        # A WGMMA group's time is known once its commit has been charged: ``_record`` sets it.
        return event

    def _complete_event(self, event) -> None:
        if event.kind == "wgmma":  # only the accumulator's values: the model skips the product
            self.events.remove(event)
            event.done = True
            return
        super()._complete_event(event)

    def wake_cost(self, task: Task) -> float:
        """How long after its wait became satisfiable ``task`` runs again."""
        stmt = self.clocks[task.index].blocked_in
        kind = timing_cost(stmt).kind if stmt is not None else "statement"
        if kind == "wait":
            return self.costs.wake_ns
        if kind == "sync":
            return self.costs.sync_ns
        return self.costs.statement_ns


def role_groups(kernel: ir.Kernel, tasks: list[Task]) -> dict[int, ThreadGroup | None]:
    """The tasks a timeline follows, by index, with the role (outermost thread group) each leads: per role the
    task holding its first thread, as the GPU instrumentation records a role's first thread. A task in no thread
    group maps to None."""
    groups = [s for s in ir.walk(kernel.body) if isinstance(s, ThreadGroup)]
    recorded = {}
    for task in tasks:
        owners = [g for g in groups if g.begin <= task.begin and task.end <= g.begin + g.count]
        outer = max(owners, key=lambda g: g.count, default=None)
        if outer is None or outer.begin == task.begin:
            recorded[task.index] = outer
    return recorded


class SmModel:
    """The blocks resident on one SM, run together in modeled-time order."""

    def __init__(self, machines: list[TimedMachine]):
        self.machines = machines
        self.tasks = [(m, t) for m in machines for t in m.tasks]

    def run(self) -> None:
        """Run every block to its end; KernelError (deadlock, misuse, an integer division by zero) as the emulator
        reports it, with the location and thread partitions of the block it happened in."""
        for machine, task in self.tasks:
            task.generator = machine.exec_body(task, machine.kernel.body)
        current = self.machines[0]  # the block whose statement or async operation runs now
        try:
            while True:
                event_at, event_owner, event = self._earliest_event()
                ready = [(m.clocks[t.index].now, i) for i, (m, t) in enumerate(self.tasks) if t.state == "ready"]
                task_at, index = min(ready, default=(math.inf, None))
                if event is not None and event_at <= task_at:
                    current = event_owner
                    event_owner.done_at.pop(event)
                    event_owner._complete_event(event)
                    self._wake(event_at)
                elif index is not None:
                    current, task = self.tasks[index]
                    self._step(current, task)
                    self._wake(current.clocks[task.index].now)
                elif all(t.state == "finished" for _, t in self.tasks):
                    return
                else:
                    current = next(m for m, t in self.tasks if t.state == "blocked")
                    raise DeadlockError("deadlock: every unfinished thread partition is blocked and no "
                                        "asynchronous operation is in flight", current._first_blocked_loc(),
                                        current.describe_tasks())
        except (KernelError, ZeroDivisionError) as error:
            # As BlockMachine.run: an error without a place gets the running statement's, and a division by zero
            # in the kernel's own arithmetic is the kernel's error.
            if isinstance(error, KernelError) and (error.location is not None or error.tasks is not None):
                raise
            loc = current.current.loc if current.current else None
            kind = type(error) if isinstance(error, KernelError) else KernelError
            raise kind(str(error), str(loc) if loc else None, current.describe_tasks()) from None

    def _earliest_event(self):
        best = (math.inf, None, None)
        for machine in self.machines:
            for event in machine.events:
                at = machine.done_at.get(event)
                if at is not None and at < best[0]:
                    best = (at, machine, event)
        return best

    def _step(self, machine: TimedMachine, task: Task) -> None:
        """Run ``task`` for one statement (or until it blocks or ends)."""
        machine.current = task
        while True:
            try:
                block = next(task.generator)
            except StopIteration:
                task.state = "finished"
                machine.finish(task)
                return
            if block is None:
                return
            if block.check():
                continue
            task.state, task.waiting_for, task.ready_check, task.woken = "blocked", block.text, block.check, False
            return

    def _wake(self, now: float) -> None:
        """Let every blocked task whose wait is satisfied at ``now`` go on, after its wake-up cost."""
        for machine, task in self.tasks:
            if task.state == "blocked" and (task.woken or task.ready_check()):
                task.state, task.woken = "ready", False
                clock = machine.clocks[task.index]
                clock.now = max(clock.now, now + machine.wake_cost(task))


def model_sm(kernel: ir.Kernel, env: dict, grid: tuple[int, int, int], blocks: list[tuple[int, int, int]],
             costs: Costs) -> tuple[list[TimedMachine], SmResources]:
    """Run ``blocks`` of ``kernel`` (parameter values ``env`` by Var uid, pointers as 0) together on one modeled
    SM; returns their machines (intervals, task clocks, flops) and the SM's shared resources."""
    memory = NullMemory({p.var.uid: p.type.dtype.numpy for p in kernel.params if isinstance(p.type, PointerType)})
    sm = SmResources(costs)
    machines = []
    for block in blocks:
        specials = {"blockIdx.x": block[0], "blockIdx.y": block[1], "blockIdx.z": block[2],
                    "gridDim.x": grid[0], "gridDim.y": grid[1], "gridDim.z": grid[2]}
        machines.append(TimedMachine(kernel, memory, env, specials, sm, block))
    SmModel(machines).run()
    for machine in machines:
        machine._finish_checks()
    return machines, sm
