"""One thread block on the emulator: thread partitions as tasks, a scheduler, async operations and the checks.

The blocks of one thread-block cluster (``warpspec.emulator.cluster``) run together: one scheduler over all their
tasks, each block with its own shared memory and barriers. Task indices (and so vector clocks) count every task of
the cluster, so the race checks order accesses across blocks as within one.

The block's threads split into partitions at every thread-group boundary; each partition always runs the same code
and is one task (a generator over the kernel body). Tasks run until they block; only when every task is blocked
does the oldest pending async operation (a TMA copy or a WGMMA group) complete, so a missing wait shows up as a
race or a deadlock rather than as luck. With a seed, tasks are interleaved and async operations completed early in a
random order instead, exploring other legal schedules. Every such decision is the ``chooser``'s
(``warpspec.emulator.choosers``).
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np

from warpspec.emulator.barrier import BarrierState
from warpspec.emulator.choosers import Chooser
from warpspec.emulator.clocks import join
from warpspec.emulator.cluster import ClusterMachine
from warpspec.emulator.global_memory import BlockMemory, GlobalTile
from warpspec.emulator.shared import Region, SharedTensor
from warpspec.errors import BarrierError, BoundsError, DeadlockError, KernelError, RaceError
from warpspec.isa import registry
from warpspec.isa.wgmma import WgmmaState
from warpspec.ir import nodes as ir
from warpspec.ir.evaluate import ExprCompiler, check_element_index, wrap


State = TypeVar("State")


def partitions(kernel: ir.Kernel) -> list[tuple[int, int]]:
    """The block's thread ranges that always run the same code: split at every thread-group boundary, and at
    every warpgroup boundary inside a group issuing WGMMAs, whose completion and ``wgmma.wait_group`` are each
    warpgroup's own (one warpgroup's wait says nothing of the other's WGMMAs)."""
    cuts = {0, kernel.num_threads}
    warpgroup = kernel.facts.target.warpgroup_threads
    for stmt in ir.walk(kernel.body):
        narrowed = registry.fact_of(registry.BODY_THREADS, type(stmt))
        if narrowed is not None:
            begin, count = narrowed(stmt)
            cuts.update((begin, begin + count))
        elif registry.fact_of(registry.PER_WARPGROUP, type(stmt)):
            begin, count = stmt.threads
            cuts.update(range(begin, begin + count, warpgroup))
    ordered = sorted(cuts)
    return list(zip(ordered[:-1], ordered[1:]))


class AsyncOperation:
    """An async operation in flight; ``complete()`` applies its effects."""

    def __init__(self, kind: str, task, loc: ir.Loc, complete, describe: str, retire=None):
        self.kind, self.task, self.loc, self.complete, self.text = kind, task, loc, complete, describe
        self.retire = retire  # run when the issuing task's wait_group observes completion
        self.done = False


class Task:
    """One thread partition ``[begin, end)`` running the kernel body."""

    def __init__(self, machine: "BlockMachine", index: int, begin: int, end: int):
        self.machine, self.index, self.begin, self.end = machine, index, begin, end
        self.name = f"threads {begin}-{end - 1}{machine.suffix}"
        self.env: dict = {}
        self.clock = [0] * machine.cluster.num_tasks
        self.clock[index] = 1
        self.loc: ir.Loc | None = None
        self.stmt: ir.Stmt | None = None  # the statement running now (an instruction's threads are its executors)
        self.synced = 0  # own clock entry at the last sync or cluster barrier: it orders all of this task's threads
        self.state = "ready"  # ready | blocked | finished
        self.waiting_for = ""
        self.ready_check = None  # callable telling whether a blocked task may go on
        self.woken = False
        self._family_states: dict[type, object] = {}  # each family's state, by its state class
        self.generator = None

    def family_state(self, kind: type[State]) -> State:
        """This task's state of one instruction family: an instance of ``kind`` (a dataclass of the family's
        module, such as ``warpspec.isa.wgmma.WgmmaState``), created empty on first use."""
        state = self._family_states.get(kind)
        if state is None:
            state = self._family_states[kind] = kind()
        return state  # type: ignore[return-value]

    @property
    def size(self) -> int:
        return self.end - self.begin

    def tick(self) -> None:
        """Advance this task's own clock entry after a release, so later accesses are distinguishable."""
        self.clock[self.index] += 1

    def wake(self) -> None:
        self.woken = True

    def describe(self) -> str:
        if self.state == "finished":
            return f"  {self.name}: finished"
        where = f" at {self.loc}" if self.loc else ""
        if self.state == "blocked" and not (self.woken or self.ready_check()):
            return f"  {self.name}: blocked{where} {self.waiting_for}"
        if self.state == "blocked":
            return f"  {self.name}: ready to continue{where} (its wait {self.waiting_for} is satisfied)"
        return f"  {self.name}: running{where}"


class Block:
    """Marker yielded by a task that must stop: ``check()`` says when it may continue."""

    def __init__(self, check, text: str):
        self.check, self.text = check, text


class BlockMachine:
    """Runs one thread block of ``kernel`` over the global arrays of ``global_memory``, with the other blocks of
    its ``cluster`` (a cluster of its own when None; ``specials["clusterRank"]`` is its rank there)."""

    def __init__(self, kernel: ir.Kernel, global_memory: BlockMemory, env: dict, specials: dict,
                 chooser: Chooser | None, cluster: ClusterMachine | None = None):
        self.kernel = kernel
        self.global_memory = global_memory
        specials = {"clusterRank": 0, **specials}
        self.rank = specials["clusterRank"]
        self.exprs = ExprCompiler(specials)
        self.chooser = chooser or Chooser()
        self.ranges = partitions(kernel)
        self.cluster = cluster or ClusterMachine(1, len(self.ranges))
        self.suffix = f" of block rank {self.rank}" if self.cluster.size > 1 else ""  # names in messages
        first = self.rank * len(self.ranges)
        self.tasks = [Task(self, first + i, b, e) for i, (b, e) in enumerate(self.ranges)]
        for task in self.tasks:
            task.env.update(env)
        self.shared: dict[int, SharedTensor] = {}
        self.barriers: dict[int, list[BarrierState]] = {}
        self.barrier_inits: dict[int, tuple[int, int]] = {}  # barrier decl uid -> (task index, epoch) of its init
        # One list for the cluster: one scheduler completes them.
        self.events: list[AsyncOperation] = self.cluster.events
        self.cluster.join(self)
        self.syncs: dict[tuple[int, int], dict] = {}
        self.next_event_id = 1
        self.current: Task | None = None

    # --------------------------------------------------------------------------------------------- schedule

    def run(self) -> None:
        """Run this block with the other blocks of its cluster to the end (call it on one of them)."""
        for task in self.cluster.tasks:
            task.generator = task.machine.exec_body(task, self.kernel.body)
        try:
            self._schedule()
            for machine in self.cluster.machines:
                machine._finish_checks()
        except KernelError as error:
            if error.location is None and error.tasks is None:
                raise type(error)(str(error), str(self.current.loc) if self.current and self.current.loc else None,
                                  self.describe_tasks()) from None
            raise
        except ZeroDivisionError as error:
            raise KernelError(str(error), str(self.current.loc) if self.current else None,
                              self.describe_tasks()) from None

    def _schedule(self) -> None:
        while True:
            progressed = False
            for task in self.chooser.order(self.cluster.tasks):
                if task.state == "finished":
                    continue
                if task.state == "blocked":
                    if not (task.woken or task.ready_check()):
                        continue
                    task.state, task.woken = "ready", False
                progressed |= self._advance(task)
            if all(t.state == "finished" for t in self.cluster.tasks):
                if self.events:
                    self._complete_event(self.events[0])
                    continue
                return
            if progressed and not (self.events and self.chooser.complete_early()):
                continue
            if self.events:
                self._complete_event(self.chooser.event(self._completable()))
                continue
            if not progressed:
                raise DeadlockError("deadlock: every unfinished thread partition is blocked and no asynchronous "
                                    "operation is in flight", self._first_blocked_loc(), self.describe_tasks())

    def _completable(self) -> list[AsyncOperation]:
        # WGMMA groups of one warpgroup retire in order; everything else may complete in any order.
        result, seen_wgmma = [], set()
        for event in self.events:
            if event.kind == "wgmma":
                if event.task.index in seen_wgmma:
                    continue
                seen_wgmma.add(event.task.index)
            result.append(event)
        return result

    def _advance(self, task: Task) -> bool:
        """Run ``task`` until it blocks, yields or finishes; True if it executed anything."""
        self.current = task
        moved = False
        while True:
            try:
                block = next(task.generator)
            except StopIteration:
                task.state = "finished"
                self.cluster.finished(task)
                return True
            moved = True
            if block is None:
                if self.chooser.preempt(task):
                    return True  # a preemption point: let another task run
                continue
            if block.check():
                continue
            task.state, task.waiting_for, task.ready_check, task.woken = "blocked", block.text, block.check, False
            return moved

    def _complete_event(self, event: AsyncOperation) -> None:
        self.events.remove(event)
        saved = self.current
        self.current = event.task
        event.complete()
        event.done = True
        self.current = saved

    def _first_blocked_loc(self) -> str | None:
        for task in self.cluster.tasks:
            if task.state == "blocked" and task.loc:
                return str(task.loc)
        return None

    def describe_tasks(self) -> str:
        lines = ["thread partitions:"] + [t.describe() for t in self.cluster.tasks]
        touched = [b for machine in self.cluster.machines for bars in machine.barriers.values() for b in bars]
        if touched:
            lines.append("mbarriers:")
            lines += [f"  {b.describe()}" for b in touched]
        if self.events:
            lines.append("in flight:")
            lines += [f"  {e.text} (issued at {e.loc} by {e.task.name})" for e in self.events]
        return "\n".join(lines)

    def _finish_checks(self) -> None:
        for bars in self.barriers.values():
            for bar in bars:
                if bar.tx != 0:
                    raise BarrierError(f"the kernel ended with the transaction count of {bar.name} at {bar.tx}: "
                                       f"expected bytes that never arrived, or bytes that arrived unexpected "
                                       f"({bar.describe()})", str(self.kernel.loc), self.describe_tasks())
        for task in self.tasks:
            for check in registry.exit_checks():
                check(self, task)

    # ------------------------------------------------------------------------------------------- statements

    def exec_body(self, task: Task, body):
        """Run ``body`` in ``task``: each statement's registered emulation (``warpspec.isa``)."""
        for stmt in body:
            task.loc, task.stmt = stmt.loc, stmt
            result = registry.emulation(type(stmt))(self, task, stmt)
            if result is not None:
                yield from result

    def ev(self, task: Task, expr: ir.Expr):
        """The value of a scalar expression in ``task``."""
        return self.exprs(expr)(task.env)

    # ------------------------------------------------------------------------------ services of the emulations

    def preempt(self):
        """A point where a seeded run may switch to another task."""
        if self.chooser.preempts:
            yield None

    def wait_until(self, check, text: str, after=None):
        """Block the task until ``check()`` holds (``text`` says what it waits for), then run ``after``."""
        if not check():
            yield Block(check, text)
        if after is not None:
            after()

    def sync(self, task, begin: int, count: int, text: str | None = None):
        """Barrier over the partitions inside threads ``[begin, begin + count)``: joins their clocks."""
        members = [t for t in self.tasks if begin <= t.begin and t.end <= begin + count]
        state = self.syncs.setdefault((begin, count), {"arrived": set(), "generation": 0})
        return self.rendezvous(task, len(members), state,
                               text or f"in sync() of threads {begin}-{begin + count - 1}")

    def rendezvous(self, task, members: int, state: dict, text: str):
        """``task`` arrives at the barrier ``state`` of ``members`` tasks and waits for the others; the releases
        of all of them are joined into each (``self.sync``, the cluster barrier)."""
        generation = state["generation"]
        state["arrived"].add(task.index)
        join(state.setdefault("clock", [0] * len(task.clock)), task.clock)
        task.tick()
        epoch = task.clock[task.index]
        if len(state["arrived"]) == members:
            released = state["clock"]
            state.update(arrived=set(), generation=generation + 1, clock=[0] * len(task.clock))
            state["released"] = released

        def passed() -> None:
            join(task.clock, state["released"])
            task.synced = epoch

        return self.wait_until(lambda: state["generation"] != generation, text, after=passed)

    def create_barriers(self, task, decl: ir.TensorDecl, counts) -> None:
        """The mbarrier array ``decl`` (created once, by the first partition to reach it: ``task``)."""
        if decl.uid not in self.barriers:
            self.barriers[decl.uid] = [BarrierState(f"{decl.name}[{i}]{self.suffix}", c, len(task.clock))
                                       for i, c in enumerate(counts)]
            self.barrier_inits[decl.uid] = (task.index, task.clock[task.index])

    def barrier(self, task, ref: ir.TensorRef, block: "BlockMachine | None" = None) -> BarrierState:
        """The one mbarrier ``ref`` names in ``task``: in this block, or in ``block`` of the cluster (the same
        barrier there, its index evaluated by ``task``)."""
        bars = (block or self).barriers.get(ref.decl.uid)
        if bars is None:
            raise BarrierError(f"{ref.decl.name} is used before mbarrier.alloc created it")
        index = self.ev(task, ref.index[0])
        if not 0 <= index < len(bars):
            raise BoundsError(f"barrier index {index} is out of bounds for {ref.decl.name} ({len(bars)} barriers)")
        return bars[index]

    def arrivals(self, task, s: ir.Instruction) -> int:
        """How many arrivals an instruction executed by ``task`` makes: one per thread, one inside
        single_thread."""
        return 1 if s.threads[1] == 1 else task.size

    def create_shared(self, decl: ir.TensorDecl) -> None:
        """The shared tensor ``decl`` with its shadow state (created once)."""
        if decl.uid not in self.shared:
            self.shared[decl.uid] = SharedTensor(decl)

    def region(self, task, ref: ir.TensorRef, block: "BlockMachine | None" = None) -> Region:
        """The part of a shared tensor ``ref`` names in ``task`` (its leading indices evaluated): in this block, or
        at the same place in ``block`` of the cluster (shared memory exists from the block's start there)."""
        if block is not None and block is not self:
            block.create_shared(ref.decl)
        tensor = (block or self).shared.get(ref.decl.uid)
        if tensor is None:
            raise KernelError(f"shared tensor {ref.decl.name} is used before it is allocated")
        key = tuple(self.ev(task, e) for e in ref.index)
        check_element_index(ref.decl, key)
        text = ref.decl.name + (f"[{', '.join(str(k) for k in key)}]" if key else "") + (block or self).suffix
        return Region(tensor, key, text)

    def next_operation_id(self) -> int:
        """A fresh id for an asynchronous operation (marks the shared elements it is writing)."""
        op_id = self.next_event_id
        self.next_event_id += 1
        return op_id

    def new_event(self, kind, task, loc, complete, text, retire=None) -> AsyncOperation:
        """An asynchronous operation in flight: ``complete()`` applies it when the scheduler decides,
        ``retire()`` runs when the issuer's wait observes it."""
        event = AsyncOperation(kind, task, loc, complete, text, retire)
        self.events.append(event)
        return event

    def register(self, task, ref: ir.TensorRef, what: str) -> np.ndarray:
        """A register tensor's values, checked not to be written by an mma in flight."""
        self.touch_accumulator(task, ref.decl, what)
        return task.env[ref.decl.uid]

    def define_register(self, task, decl: ir.TensorDecl, values) -> None:
        """Give register tensor ``decl`` new values (converted to its type)."""
        self.touch_accumulator(task, decl, "a tensor operation")
        task.env[decl.uid] = np.asarray(values).astype(decl.dtype.numpy).reshape(decl.shape)

    def touch_accumulator(self, task, decl: ir.TensorDecl, what: str) -> None:
        """A register access: a RaceError while an mma writing ``decl`` is in flight; ends the wgmma fence."""
        wgmma = task.family_state(WgmmaState)
        if wgmma.inflight_accumulators.get(decl.uid):
            raise RaceError(f"{what} touches register tensor {decl.name} while a wgmma.mma writing it is still in "
                            f"flight; wgmma.wait_group must cover that mma first")
        wgmma.fenced = False

    def row_share(self, task, threads, rows: int) -> tuple[int, int]:
        """Rows of a register tile this partition holds when its group spans several partitions (each warpgroup
        holds its own slice of rows, as WGMMA accumulators are laid out)."""
        begin, count = threads
        if count <= task.size:
            return (0, rows)
        size = self.kernel.facts.target.warpgroup_threads
        groups = max(count // size, 1)
        if rows % groups:  # a row vector [1, N] (or too few rows to split): every warpgroup holds all of it
            return (0, rows)
        per = rows // groups
        first = (task.begin - begin) // size
        last = (task.end - begin + size - 1) // size
        return (first * per, last * per)

    # ------------------------------------------------------------------------------------------ global memory

    def global_tile(self, task, view: ir.TensorRef, offsets, tile_shape, what: str, rows=None,
                    cols=None) -> GlobalTile:
        """The part of global view ``view`` that the tile of ``tile_shape`` at ``offsets`` (its ``rows`` and
        ``cols`` only, when given) covers, as one access by instruction ``what`` at ``task``'s line."""
        pointer, shape, strides = task.env[view.decl.uid]
        return self.global_memory.tile(task, pointer, view.decl.name, shape, strides, offsets, tile_shape, what,
                                       rows, cols)

    def global_flag(self, task, view: ir.TensorRef, index: int, what: str):
        """Element ``index`` of the 1-D int32 flag view ``view``, which instruction ``what`` of ``task`` uses."""
        pointer, shape, strides = task.env[view.decl.uid]
        return self.global_memory.flag(pointer, view.decl.name, shape, strides, index, what)

    def read_global_tile(self, task, view: ir.TensorRef, offsets, tile_shape, what: str, rows=None) -> np.ndarray:
        """The tile of ``tile_shape`` at ``offsets`` of a global view (its ``rows`` only, when given), read now by
        ``what``; elements outside the view or those rows read as zero. RaceError if another block writes it, or if
        a TMA store into it is not waited for."""
        tile = self.global_tile(task, view, offsets, tile_shape, what, rows)
        self.global_memory.check_stores_waited(task, tile)
        return self.global_memory.read(task, tile)

    def write_global_tile(self, task, view: ir.TensorRef, offsets, tile: np.ndarray, what: str, rows=None,
                          cols=None) -> None:
        """Write ``tile`` (its ``rows`` and ``cols`` slices only, when given) into a global view now, by ``what``;
        outside elements dropped. RaceError if another block reads or writes any of them."""
        target = self.global_tile(task, view, offsets, tile.shape, what, rows, cols)
        self.global_memory.write(task, target, tile)


# ------------------------------------------------------------------------------- the core statements' semantics


@registry.emulates(ir.Declare)
@registry.emulates(ir.Assign)
def _assign(machine, task, s: ir.Declare | ir.Assign):
    task.env[s.var.uid] = wrap(machine.ev(task, s.value), s.var.type)


@registry.emulates(ir.For)
def _for(machine, task, s: ir.For):
    start, stop, step = machine.ev(task, s.start), machine.ev(task, s.stop), machine.ev(task, s.step)
    if step <= 0:  # only a runtime step can be; the generated loop would never end
        raise KernelError(f"self.range step is {step} when the loop starts; it must be positive")
    # The generated loop steps its counter by step * unroll (passes.unroll) after every trip, the last included:
    # past the type's maximum it would wrap around and never end.
    stride, dtype = step * s.unroll, s.var.type
    largest = (1 << (dtype.nbits - (dtype.kind == "int"))) - 1
    trips = range(start, stop, stride)
    if trips and trips[-1] + stride > largest:
        unrolled = f" with unroll={s.unroll}" if s.unroll > 1 else ""
        raise KernelError(f"self.range({start}, {stop}, {step}){unrolled}: after its last trip the generated loop "
                          f"adds {stride} to its counter once more, {trips[-1]} + {stride}, past the {dtype.name} "
                          f"maximum {largest}, so on the GPU it would wrap around and never end; keep stop at most "
                          f"{largest - stride + 1}")
    for value in range(start, stop, step):
        task.env[s.var.uid] = value
        yield from machine.exec_body(task, s.body)
        task.loc = s.loc


@registry.emulates(ir.If)
def _if(machine, task, s: ir.If):
    return machine.exec_body(task, s.then if machine.ev(task, s.cond) else s.orelse)
