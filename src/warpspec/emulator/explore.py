"""Exhaustive checking: every schedule of a block's thread partitions and asynchronous operations, up to the order
of independent steps (stateless model checking with dynamic partial-order reduction).

A **step** is one thread partition running from where it stopped to its next visible operation (an arrive, a
barrier or flag wait, a copy's issue, a shared store, an mma, a sync: the machine's preemption points and blocking
waits), or the completion of one asynchronous operation. Each step records what it touched: the mbarriers, the
shared tensors (by their leading indices), the global buffers and flags, the sync states, the issuer's groups of
stores and WGMMAs, and a block's exit. Two steps of different partitions that touch nothing in common commute, so
the schedules that differ only in their order are one **interleaving class**.

``prove`` runs the kernel, cluster after cluster as ``emulate_kernel`` does, each cluster from its start under a
``_Explorer`` chooser that replays a prefix of choices and then extends it. After each run it finds the races of the
run (two dependent steps of different partitions with nothing ordering them in between) and schedules the reverse
order at the step before the first; sleep sets keep a branch from re-exploring an order already covered
(Flanagan-Godefroid DPOR with sleep sets over the recorded footprints). A run that ends in a ``KernelError`` is the
counterexample: the error, and the choices that reproduce it (``replay``). Global memory is reset between runs of
a cluster; once every class of a cluster is proved, the cluster runs once more in the deterministic order and the
next cluster starts from its result (a race-free cluster ends in the same state under every schedule).

A step's footprint is coarse where precision would cost: a read and a write of the same object count as dependent,
and a TMA copy's completion touches what its issue touched.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from warpspec.emulator.choosers import Chooser
from warpspec.emulator.global_memory import SHADOWS
from warpspec.emulator.run import emulate_kernel, emulator_seed, launch_chooser
from warpspec.errors import KernelError
from warpspec.ir import nodes as ir

#: The instructions whose global accesses only read.
_GLOBAL_READS = ("load_global", "load_scalar", "tma.global_to_shared")

#: A process of the search: ("t", task index) or ("e", issuing task index, its n-th operation).
Process = tuple


@dataclass
class Budget:
    """Bounds on a search: at most ``runs`` executions per cluster and ``seconds`` in all (None: unbounded)."""

    runs: int | None = 10000
    seconds: float | None = None


@dataclass
class Step:
    """One step of a run: its process, what it touched, and for the witness where it ran and what it was."""

    process: Process
    keys: set = field(default_factory=set)  # objects touched
    covers: set = field(default_factory=set)  # objects that contain a touched one (a shared tensor's prefixes)
    enabler: int | None = None  # the step after which this process became able to run
    creator: int | None = None  # for an operation's completion: the step that issued it
    task: object = None
    start_loc: object = None
    end_loc: object = None
    what: str = ""  # "ran", "blocked <text>", "finished", or an operation's description
    barriers: list = field(default_factory=list)  # (name, completed, pending, expected, tx) after the step


def dependent(a: Step, b: Step) -> bool:
    """Whether two steps may not commute: they touch a common object (or one contains the other)."""
    return bool(a.keys & b.keys or a.keys & b.covers or a.covers & b.keys)


@dataclass
class ProofResult:
    """What ``prove`` found: ``proved`` (no error in any class explored and the search was exhaustive), the number
    of interleaving classes (complete runs) and runs, the seconds taken, and for a counterexample the error, the
    cluster's first block and the choices that reproduce it and the steps of that run (``witness``)."""

    proved: bool
    exhaustive: bool
    classes: int
    runs: int
    seconds: float
    error: KernelError | None = None
    block: tuple | None = None
    choices: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    kernel: ir.Kernel | None = None
    unwritten: list = field(default_factory=list)  # the launch's ``UnwrittenOutput`` findings

    @property
    def verdict(self) -> str:
        """``proved``, ``FAIL`` (a counterexample) or ``unproved`` (the budget ran out first)."""
        return "FAIL" if self.error is not None else "proved" if self.proved else "unproved"

    def detail(self) -> str:
        """What the verdict rests on: ``(N interleaving classes, T s; R runs)``, the counterexample's error (its
        first line), or that the search was not exhaustive."""
        counted = f"{self.classes} interleaving classes, {self.seconds:.2f} s; {self.runs} runs"
        if self.error is not None:
            message = str(self.error).split("\n", 1)[0]
            return f"counterexample after {counted}: {type(self.error).__name__}: {message}"
        if not self.exhaustive:
            return f"(not exhaustive: the budget ran out after {counted}; no counterexample in those)"
        return f"({counted})"

    def text(self, schedule: str = "") -> str:
        """``proved  <schedule>  (N interleaving classes, T s; R runs)``, or what was not proved and why."""
        return "  ".join(part for part in (self.verdict, schedule, self.detail()) if part)


def format_choices(choices: list) -> str:
    """The choice sequence as text: ``t1 t0 e1.0 ...`` (task index, or operation issuer.n)."""
    return " ".join(f"t{p[1]}" if p[0] == "t" else f"e{p[1]}.{p[2]}" for p in choices)


class _SleepBlocked(Exception):
    """Every process able to run is asleep: this run repeats a class already explored."""


class _Node:
    """The state before one step: what could run, what is still to try, what was tried, what sleeps."""

    def __init__(self, enabled: list, sleep: dict):
        self.enabled = enabled
        self.sleep = sleep  # process -> its step here (explored elsewhere; skip unless something dependent ran)
        self.backtrack: set = set()
        self.done: dict = {}  # process -> its step from here, explored


class _Recorder(Chooser):
    """A chooser that records every step's footprint by wrapping the machines' services and the tasks' generators;
    what it chooses is its subclasses' (``_Explorer``: one step at a time; ``_RecordedRun``: another chooser's)."""

    preempts = True

    def __init__(self):
        self.steps: list[Step] = []
        self.installed = False
        self.pending: Step | None = None
        self.blocked_since: dict = {}  # task process -> step index at which it was last seen blocked
        self.events: dict = {}  # id(event) -> its process
        self.issued: dict = {}  # task index -> operations issued so far
        self.cluster = None

    def _task_step(self, task) -> Step | None:
        """The step a task's next run belongs to (None: not recorded)."""
        return self.pending

    def _task_stopped(self) -> None:
        """A task's step ended at a visible operation."""

    def _record_event(self, event) -> None:
        """The completing ``event``'s footprint and description, on the pending step."""
        step = self.pending
        step.keys |= event._explore_keys
        step.covers |= event._explore_covers
        step.task, step.what, step.start_loc = event.task, event.text, event.loc

    # ------------------------------------------------------------------------------------------ recording

    def _close_step(self) -> None:
        step = self.pending
        if step is None:
            return
        self.pending = None
        if step.process[0] == "t" and not step.what:  # the step raised: it stopped where the error is
            step.end_loc, step.what = step.task.loc if step.task else None, "failed"
        step.barriers = [(b.name, b.completed, b.pending, b.expected, b.tx) for machine in self.cluster.machines
                         for bars in machine.barriers.values() for b in bars]
        self.steps.append(step)

    def _install(self, tasks) -> None:
        self.installed = True
        self.cluster = tasks[0].machine.cluster
        for machine in self.cluster.machines:
            self._wrap(machine)
        for task in tasks:
            task.generator = self._steps_of(task, task.generator)

    def _touch(self, key, covers=()) -> None:
        step = self.pending
        if step is not None:
            step.keys.add(key)
            step.covers.update(covers)

    def _cover(self, key) -> None:
        """The pending step reads ``key``: dependent on the steps that touch it (its writers), not on its readers."""
        step = self.pending
        if step is not None:
            step.covers.add(key)

    def _steps_of(self, task, generator):
        """``generator`` with each step's end recorded: where it stopped and why."""
        while True:
            step = self._task_step(task)
            if step is not None:
                step.task, step.start_loc = task, task.loc
            try:
                item = next(generator)
            except StopIteration:
                if step is not None:
                    step.end_loc, step.what = task.loc, "finished"
                    if all(t is task or t.state == "finished" for t in task.machine.tasks):
                        step.keys.add(("exit", task.machine.rank))
                    self._task_stopped()
                return
            if step is not None:
                step.end_loc = task.loc
                step.what = "ran" if item is None else f"blocked {item.text}"
                self._task_stopped()
            yield item

    def _wrap(self, machine) -> None:
        rank = machine.rank
        explorer = self
        originals = {name: getattr(machine, name) for name in
                     ("barrier", "region", "global_tile", "global_flag", "rendezvous", "new_event", "wait_until")}

        def remote(block) -> list:
            # Only another block's accesses can race with this block's exit; its own tasks all end before it.
            return [("exit", block.rank)] if block is not None and block is not machine else []

        def barrier(task, ref, block=None):
            bar = originals["barrier"](task, ref, block)
            explorer._touch(("bar", id(bar)), remote(block))
            return bar

        def region(task, ref, block=None):
            found = originals["region"](task, ref, block)
            tensor = id(found.tensor)
            prefix = tuple(k for k in found.key if isinstance(k, int))
            explorer._touch(("shm", tensor, prefix), [("shm", tensor, prefix[:i]) for i in range(len(prefix))]
                            + remote(block))
            return found

        def global_tile(task, view, offsets, tile_shape, what, rows=None, cols=None):
            tile = originals["global_tile"](task, view, offsets, tile_shape, what, rows, cols)
            key = ("global", id(tile.argument.buffer))
            if what in _GLOBAL_READS:  # reads commute with reads: a read only covers the buffer, which writes touch
                explorer._cover(key)
            else:
                explorer._touch(key)
            return tile

        def global_flag(task, view, *args):
            flag = originals["global_flag"](task, view, *args)
            explorer._touch(("flag", flag.key))
            return flag

        def rendezvous(task, members, state, text):
            explorer._touch(("sync", id(state)))
            return originals["rendezvous"](task, members, state, text)

        def wait_until(check, text, after=None):
            if explorer.pending is not None and explorer.pending.process[0] == "t":
                explorer._touch(("groups", explorer.pending.process[1]))
            return originals["wait_until"](check, text, after)

        def new_event(kind, task, loc, complete, text, retire=None):
            event = originals["new_event"](kind, task, loc, complete, text, retire)
            n = explorer.issued.get(task.index, 0)
            explorer.issued[task.index] = n + 1
            explorer.events[id(event)] = ("e", task.index, n)
            event._explore_creator = len(explorer.steps)
            # The completion touches what the issue touched (the step's sets, still growing); the block's exit
            # checks it, and a store or WGMMA group is what its issuer's wait_group waits for. Covers only: two
            # completions do not depend on each other through these.
            step = explorer.pending or Step(("t", task.index))
            step.covers.add(("exit", rank))
            if kind in ("tma_store", "wgmma"):
                step.covers.add(("groups", task.index))
            event._explore_keys, event._explore_covers = step.keys, step.covers
            return event

        for name, fn in (("barrier", barrier), ("region", region), ("global_tile", global_tile),
                         ("global_flag", global_flag), ("rendezvous", rendezvous), ("new_event", new_event),
                         ("wait_until", wait_until)):
            setattr(machine, name, fn)


class _Explorer(_Recorder):
    """A chooser that runs one schedule: ``prefix`` replayed, then at each state the first operation's completion not
    asleep, else the first partition not asleep."""

    def __init__(self, nodes: list, prefix: list):
        super().__init__()
        self.nodes, self.prefix = nodes, prefix
        self.chosen = None

    # ------------------------------------------------------------------------------------------ the choices

    def order(self, tasks: list) -> list:
        if not self.installed:
            self._install(tasks)
        self._close_step()
        enabled = self._enabled(tasks)
        depth = len(self.steps)
        if depth < len(self.nodes):
            node = self.nodes[depth]
            process = self.prefix[depth]
        else:
            sleep = self._child_sleep(depth)
            node = _Node([p for p, _ in enabled], sleep)
            awake = [p for p, _ in enabled if p not in sleep]
            if not awake:
                if enabled:
                    raise _SleepBlocked()
                return []  # nothing can run: the machine reports the deadlock (or the end)
            # An operation's completion first: a wait that finds its operation complete does not block, and a blocked
            # wait races with the completion that wakes it, a race whose other order is one more run (most of them
            # ending sleep-blocked). Measured: V3 632 -> 393 runs, stream-K's split 3610 -> 2332, same classes.
            process = next((p for p in awake if p[0] == "e"), awake[0])
            node.backtrack.add(process)
            self.nodes.append(node)
            self.prefix.append(process)
        node.done.setdefault(process, None)
        runnable = dict(enabled)
        if process not in runnable:
            raise AssertionError(f"replayed choice {process} is not enabled: the emulator is not deterministic")
        step = Step(process)
        if process[0] == "t":
            step.enabler = self.blocked_since.pop(process, None)
        else:
            step.creator = getattr(runnable[process], "_explore_creator", None)
        self.pending = step
        self.chosen = runnable[process]
        return [self.chosen] if process[0] == "t" else []

    def preempt(self, task) -> bool:
        return True

    def complete_early(self) -> bool:
        return False

    def event(self, completable: list):
        self._record_event(self.chosen)
        return self.chosen

    def _close_step(self) -> None:
        step = self.pending
        super()._close_step()
        if step is not None:
            node = self.nodes[len(self.steps) - 1]
            if node.done.get(step.process) is None:
                node.done[step.process] = step

    # --------------------------------------------------------------------------------------- what could run

    def _enabled(self, tasks) -> list:
        machine = tasks[0].machine
        found = []
        for task in tasks:
            if task.state == "finished":
                continue
            if task.state == "blocked" and not (task.woken or task.ready_check()):
                self.blocked_since[("t", task.index)] = len(self.steps)
                continue
            found.append((("t", task.index), task))
        if not all(t.state == "finished" for t in tasks):
            for event in machine._completable():
                found.append((self.events[id(event)], event))
        return found

    def _child_sleep(self, depth: int) -> dict:
        """The sleep set at ``depth``: what slept or was explored at the parent, independent of the step taken."""
        if depth == 0:
            return {}
        parent, taken = self.nodes[depth - 1], self.steps[depth - 1]
        asleep = {**parent.sleep, **{p: s for p, s in parent.done.items() if s is not None}}
        return {p: s for p, s in asleep.items() if p != taken.process and not dependent(s, taken)}

class _RecordedRun(_Recorder):
    """A chooser that makes ``inner``'s decisions (a seeded or the deterministic schedule, decision for decision)
    and records them as steps: a task's run from one visible operation to the next, an operation's completion."""

    def __init__(self, inner: Chooser):
        super().__init__()
        self.inner = inner
        self.preempts = inner.preempts

    def order(self, tasks: list) -> list:
        if not self.installed:
            self._install(tasks)
        self._close_step()
        return self.inner.order(tasks)

    def preempt(self, task) -> bool:
        return self.inner.preempt(task)

    def complete_early(self) -> bool:
        return self.inner.complete_early()

    def event(self, completable: list):
        self._close_step()
        event = self.inner.event(completable)
        self.pending = Step(self.events[id(event)], creator=event._explore_creator)
        self._record_event(event)
        return event

    def _task_step(self, task) -> Step:
        self._close_step()
        self.pending = Step(("t", task.index))
        return self.pending

    def _task_stopped(self) -> None:
        self._close_step()


def _add_backtracks(nodes: list, steps: list[Step]) -> None:
    """For every race of the run (two dependent steps of different processes, nothing ordering the first before
    the second), schedule at the state before the first a process that starts the reversed order."""
    past: list[dict] = []  # per step: process -> the latest of its step indices ordered before or at it
    last_of: dict = {}
    for j, step in enumerate(steps):
        clock: dict = {}
        preds = []
        if step.process in last_of:
            preds.append(last_of[step.process])
        for extra in (step.enabler, step.creator):
            if extra is not None and extra < j:
                preds.append(extra)
        races = []
        for i in range(j - 1, -1, -1):
            other = steps[i]
            if other.process != step.process and dependent(other, step):
                preds.append(i)
                if i != step.enabler and i != step.creator:
                    races.append(i)
        for i in preds:
            for p, index in past[i].items():
                if clock.get(p, -1) < index:
                    clock[p] = index
        clock[step.process] = j
        past.append(clock)
        last_of[step.process] = j
        for i in races:
            # A race only if no other dependent step between orders i before j.
            if any(k > i and past[k].get(steps[i].process, -1) >= i for k in preds):
                continue
            node = nodes[i]
            wanted = step.process
            candidates = [wanted] if wanted in node.enabled else _initials(steps, past, i, j, node)
            if not any(c in node.backtrack or c in node.done for c in candidates):
                chosen = next((c for c in candidates if c not in node.sleep), None)
                if chosen is not None:
                    node.backtrack.add(chosen)


def _initials(steps, past, i, j, node) -> list:
    """Processes enabled before step ``i`` whose next step leads to ``j`` without ``i``: the steps after ``i``
    ordered before ``j`` and not after ``i``; all enabled ones when none is."""
    found = []
    for k in range(i + 1, j + 1):
        ordered_before_j = past[j].get(steps[k].process, -1) >= k
        after_i = past[k].get(steps[i].process, -1) >= i
        if ordered_before_j and not after_i and steps[k].process in node.enabled:
            found.append(steps[k].process)
            break
    return found or list(node.enabled)


def _checkpoint(memory):
    """A function restoring global memory (data and shadow) to what it holds now."""
    arrays = []
    for argument in memory.arguments.values():
        if argument.data.flags.writeable:  # a read-only array (a cached table) holds what it held
            arrays.append((argument.data, argument.data.copy()))
        for name in SHADOWS:
            shadow = getattr(argument.buffer, name)
            arrays.append((shadow, shadow.copy()))
    accesses, written = len(memory.accesses), set(memory.written)
    releases, initial = dict(memory.releases), dict(memory.flag_initial)

    def restore() -> None:
        for target, saved in arrays:
            target[...] = saved
        del memory.accesses[accesses:]
        memory.written, memory.releases, memory.flag_initial = set(written), dict(releases), dict(initial)

    return restore


class _Search:
    """The search over every cluster of one launch (``emulate_kernel``'s ``run_cluster``)."""

    def __init__(self, budget: Budget):
        self.budget = budget
        self.start = time.perf_counter()
        self.classes = self.runs = 0
        self.exhaustive = True
        self.failure: tuple | None = None

    def out_of_time(self) -> bool:
        seconds = self.budget.seconds
        return seconds is not None and time.perf_counter() - self.start > seconds

    def __call__(self, build, memory) -> None:
        if self.failure is not None:
            return
        restore = _checkpoint(memory)
        nodes: list[_Node] = []
        prefix: list = []
        runs = 0
        while True:
            explorer = _Explorer(nodes, prefix)
            cluster = build(explorer)
            runs += 1
            self.runs += 1
            try:
                cluster.machines[0].run()
                self.classes += 1
            except _SleepBlocked:
                pass
            except KernelError as error:
                explorer._close_step()
                self.failure = (error, cluster.machines[0].global_memory.block, list(prefix[:len(explorer.steps)]),
                                explorer.steps)
                return
            explorer._close_step()
            _add_backtracks(nodes, explorer.steps)
            restore()
            if not self._next_prefix(nodes, prefix):
                break
            if (self.budget.runs is not None and runs >= self.budget.runs) or self.out_of_time():
                self.exhaustive = False
                break
        build(Chooser()).machines[0].run()

    @staticmethod
    def _next_prefix(nodes: list, prefix: list) -> bool:
        """Truncate the search to the deepest state with a process still to try, and choose it there."""
        for depth in range(len(nodes) - 1, -1, -1):
            node = nodes[depth]
            todo = [p for p in node.backtrack if p not in node.done and p not in node.sleep]
            if todo:
                del nodes[depth + 1:]
                del prefix[depth:]
                choice = min(todo)
                node.done.setdefault(choice, None)
                prefix.append(choice)
                # The node's sleep set grows by what was explored from it before (its child inherits those).
                return True
        return False


def prove(kernel, arguments: dict, budget: Budget | None = None) -> ProofResult:
    """Check ``kernel`` (the IR, as ``warpspec.runtime.kernel_for`` builds it) with runtime ``arguments`` (by
    parameter name, as ``emulate_kernel`` takes them) under every interleaving class of every cluster, clusters in
    launch order. ``budget`` bounds the search (default: 10000 runs per cluster, no time limit)."""
    search = _Search(budget or Budget())
    unwritten: list = []
    try:
        unwritten = emulate_kernel(kernel, arguments, run_cluster=search)
    except KernelError as error:  # found outside a search (a check at the launch's end)
        search.failure = (error, None, [], [])
    seconds = time.perf_counter() - search.start
    if search.failure is not None:
        error, block, choices, steps = search.failure
        return ProofResult(False, search.exhaustive, search.classes, search.runs, seconds, error, block, choices,
                           steps, kernel)
    return ProofResult(search.exhaustive, search.exhaustive, search.classes, search.runs, seconds, kernel=kernel,
                       unwritten=unwritten)


def record_run(kernel, arguments: dict) -> ProofResult | None:
    """Run ``kernel`` once in the schedule a plain launch has now (``WARPSPEC_EMULATOR_SEED``'s or the
    deterministic one, decision for decision), recording its steps; None when it passes, else the failure as a
    ``ProofResult`` of one run (not proved, not exhaustive, no choices: the seed reproduces it) for the witness."""
    inner = launch_chooser(emulator_seed())
    recorders: list[tuple[_RecordedRun, object]] = []

    def run_cluster(build, memory) -> None:
        recorder = _RecordedRun(inner)
        cluster = build(recorder)
        recorders.append((recorder, cluster.machines[0].global_memory.block))
        cluster.machines[0].run()

    start = time.perf_counter()
    try:
        emulate_kernel(kernel, arguments, run_cluster=run_cluster)
    except KernelError as error:
        recorder, block = recorders[-1] if recorders else (None, None)
        steps = []
        if recorder is not None:
            recorder._close_step()
            steps = recorder.steps
        return ProofResult(False, False, 0, 1, time.perf_counter() - start, error, block, [], steps, kernel)
    return None
