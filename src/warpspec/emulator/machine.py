"""One thread block on the emulator: thread partitions as tasks, a scheduler, async operations and the checks.

The block's threads split into partitions at every thread-group boundary; each partition always runs the same code
and is one task (a generator over the kernel body). Tasks run until they block; only when every task is blocked
does the oldest pending async operation (a TMA copy or a WGMMA group) complete, so a missing wait shows up as a
race or a deadlock rather than as luck. With a seed, tasks are interleaved and async operations completed early in a
random order instead, exploring other legal schedules.
"""

from __future__ import annotations

import random
from collections import deque

import numpy as np

from warpspec import dtypes
from warpspec.emulator.barrier import Mbarrier
from warpspec.emulator.clocks import join
from warpspec.ir.evaluate import ExprCompiler, check_element_index, wrap
from warpspec.emulator.shared import Region, SharedTensor
from warpspec.errors import BarrierError, BoundsError, DeadlockError, KernelError, RaceError
from warpspec.ir import nodes as ir
from warpspec.ir.printer import format_expr

_NUMPY_BINARY = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "min": np.minimum,
                 "max": np.maximum}  # exactly the front end's TENSOR_OPERATORS


def partitions(kernel: ir.Kernel) -> list[tuple[int, int]]:
    """The block's thread ranges that always run the same code: split at every thread-group boundary."""
    cuts = {0, kernel.num_threads}
    for stmt in ir.walk(kernel.body):
        if isinstance(stmt, ir.ThreadGroup):
            cuts.update((stmt.begin, stmt.begin + stmt.count))
    ordered = sorted(cuts)
    return list(zip(ordered[:-1], ordered[1:]))


class Event:
    """An async operation in flight; ``complete()`` applies its effects."""

    def __init__(self, kind: str, task, loc: ir.Loc, complete, describe: str, retire=None):
        self.kind, self.task, self.loc, self.complete, self.text = kind, task, loc, complete, describe
        self.retire = retire  # run when the issuing task's wait_group observes completion
        self.done = False


class Task:
    """One thread partition ``[begin, end)`` running the kernel body."""

    def __init__(self, machine: "BlockMachine", index: int, begin: int, end: int):
        self.machine, self.index, self.begin, self.end = machine, index, begin, end
        self.name = f"threads {begin}-{end - 1}"
        self.env: dict = {}
        self.clock = [0] * len(machine.ranges)
        self.clock[index] = 1
        self.loc: ir.Loc | None = None
        self.state = "ready"  # ready | blocked | finished
        self.waiting_for = ""
        self.ready_check = None  # callable telling whether a blocked task may go on
        self.woken = False
        self.wgmma_uncommitted: list = []
        self.wgmma_groups: deque = deque()
        self.wgmma_fenced = False
        self.tma_uncommitted: list = []
        self.tma_groups: deque = deque()
        self.inflight_accumulators: dict[int, int] = {}  # register tensor uid -> pending mma count
        self.generator = None

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
    """Runs one thread block of ``kernel`` over the global arrays in ``memory``."""

    def __init__(self, kernel: ir.Kernel, memory: dict, env: dict, specials: dict, rng: random.Random | None):
        self.kernel = kernel
        self.memory = memory  # pointer Var uid -> flat numpy array
        self.exprs = ExprCompiler(specials)
        self.rng = rng
        self.ranges = partitions(kernel)
        self.tasks = [Task(self, i, b, e) for i, (b, e) in enumerate(self.ranges)]
        for task in self.tasks:
            task.env.update(env)
        self.shared: dict[int, SharedTensor] = {}
        self.barriers: dict[int, list[Mbarrier]] = {}
        self.views: dict[int, tuple] = {}  # global decl uid -> (pointer uid, shape, strides), per task env
        self.events: list[Event] = []
        self.syncs: dict[tuple[int, int], dict] = {}
        self.next_event_id = 1
        self.current: Task | None = None

    # --------------------------------------------------------------------------------------------- schedule

    def run(self) -> None:
        for task in self.tasks:
            task.generator = self.exec_body(task, self.kernel.body)
        try:
            self._schedule()
            self._finish_checks()
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
            order = list(self.tasks)
            if self.rng:
                self.rng.shuffle(order)
            for task in order:
                if task.state == "finished":
                    continue
                if task.state == "blocked":
                    if not (task.woken or task.ready_check()):
                        continue
                    task.state, task.woken = "ready", False
                progressed |= self._advance(task)
            if all(t.state == "finished" for t in self.tasks):
                if self.events:
                    self._complete_event(self.events[0])
                    continue
                return
            if progressed and not (self.rng and self.events and self.rng.random() < 0.3):
                continue
            if self.events:
                event = self.rng.choice(self._completable()) if self.rng else self._completable()[0]
                self._complete_event(event)
                continue
            if not progressed:
                raise DeadlockError("deadlock: every unfinished thread partition is blocked and no asynchronous "
                                    "operation is in flight", self._first_blocked_loc(), self.describe_tasks())

    def _completable(self) -> list[Event]:
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
                return True
            moved = True
            if block is None:
                if self.rng and self.rng.random() < 0.5:
                    return True  # a preemption point: let another task run
                continue
            if block.check():
                continue
            task.state, task.waiting_for, task.ready_check, task.woken = "blocked", block.text, block.check, False
            return moved

    def _complete_event(self, event: Event) -> None:
        self.events.remove(event)
        saved = self.current
        self.current = event.task
        event.complete()
        event.done = True
        self.current = saved

    def _first_blocked_loc(self) -> str | None:
        for task in self.tasks:
            if task.state == "blocked" and task.loc:
                return str(task.loc)
        return None

    def describe_tasks(self) -> str:
        lines = ["thread partitions:"] + [t.describe() for t in self.tasks]
        touched = [b for bars in self.barriers.values() for b in bars]
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
            if task.wgmma_uncommitted:
                raise KernelError(f"{task.name} issued wgmma.mma that was never committed (wgmma.commit_group)",
                                  str(task.wgmma_uncommitted[0][0]), self.describe_tasks())
            if task.tma_uncommitted:
                raise KernelError(f"{task.name} issued tma.shared_to_global that was never committed "
                                  f"(tma.commit_group)", str(task.tma_uncommitted[0]), self.describe_tasks())

    # ------------------------------------------------------------------------------------------- statements

    def exec_body(self, task: Task, body):
        for stmt in body:
            task.loc = stmt.loc
            handler = self.HANDLERS[type(stmt)]
            result = handler(self, task, stmt)
            if result is not None:
                yield from result

    def ev(self, task: Task, expr: ir.Expr):
        return self.exprs(expr)(task.env)

    def _declare(self, task, s: ir.Declare):
        task.env[s.var.uid] = wrap(self.ev(task, s.value), s.var.type)

    def _assign(self, task, s: ir.Assign):
        task.env[s.var.uid] = wrap(self.ev(task, s.value), s.var.type)

    def _global_view(self, task, s: ir.GlobalView):
        shape = tuple(self.ev(task, e) for e in s.decl.shape)
        strides = tuple(self.ev(task, e) for e in s.strides)
        task.env[s.decl.uid] = (s.pointer.uid, shape, strides)

    def _alloc_shared(self, task, s: ir.AllocShared):
        if s.decl.uid not in self.shared:
            self.shared[s.decl.uid] = SharedTensor(s.decl)

    def _alloc_barriers(self, task, s: ir.AllocBarriers):
        if s.decl.uid not in self.barriers:
            n = len(self.tasks)
            self.barriers[s.decl.uid] = [Mbarrier(f"{s.decl.name}[{i}]", c, n) for i, c in enumerate(s.counts)]
        # Initialisation is visible to all threads only after a block-wide barrier, which the CUDA back end emits
        # right after init: model it as a sync of the whole block.
        return self._sync(task, ir.Sync(s.loc, 0, self.kernel.num_threads),
                          f"in the block-wide barrier after mbarrier.alloc of {s.decl.name}")

    def _alloc_register(self, task, s: ir.AllocRegister):
        if s.init is None:
            data = np.full(s.decl.shape, np.nan if s.decl.dtype.is_float else 0, dtype=s.decl.dtype.numpy)
        else:
            data = np.full(s.decl.shape, self.ev(task, s.init), dtype=s.decl.dtype.numpy)
        self._touch_accumulator(task, s.decl, "register_tensor")
        task.env[s.decl.uid] = data

    def _store_element(self, task, s: ir.StoreElement):
        decl = s.tensor.decl
        self._touch_accumulator(task, decl, "an element write")
        idx = tuple(self.ev(task, e) for e in s.tensor.index + s.indices)
        check_element_index(decl, idx)
        task.env[decl.uid][idx] = wrap(self.ev(task, s.value), decl.dtype)

    def _compute_tensor(self, task, s: ir.ComputeTensor):
        decl = s.decl
        if s.op == "cast":
            src = self._register(task, s.operands[0], "cast")
            out = dtypes.round_to(decl.dtype, src)
        elif s.op == "binary":
            a, b = (self._register(task, o, s.attr) if isinstance(o, ir.TensorRef) else self.ev(task, o)
                    for o in s.operands)
            out = dtypes.round_to(decl.dtype, _NUMPY_BINARY[s.attr](a, b))
        elif s.op == "unary":
            out = dtypes.round_to(decl.dtype, -self._register(task, s.operands[0], "negation"))
        elif s.op == "load_global":
            view = s.operands[0]
            offsets = [self.ev(task, o) for o in s.operands[1:]]
            out = self._global_tile(task, view, offsets, decl.shape)
        elif s.op == "load_shared":
            region = self.region(task, s.operands[0])
            region.check_readable(task, "load_shared", async_proxy=False)
            region.record_read(task)
            out = region.view("data").copy()
        else:  # pragma: no cover - the front end emits only the ops above
            raise KernelError(f"unknown tensor operation {s.op}")
        self._touch_accumulator(task, decl, s.op)
        task.env[decl.uid] = np.array(out, dtype=decl.dtype.numpy).reshape(decl.shape)

    def _register(self, task, ref: ir.TensorRef, what: str) -> np.ndarray:
        self._touch_accumulator(task, ref.decl, what)
        return task.env[ref.decl.uid]

    def _touch_accumulator(self, task, decl: ir.TensorDecl, what: str) -> None:
        if task.inflight_accumulators.get(decl.uid):
            raise RaceError(f"{what} touches register tensor {decl.name} while a wgmma.mma writing it is still in "
                            f"flight; wgmma.wait_group must cover that mma first")
        task.wgmma_fenced = False

    def _for(self, task, s: ir.For):
        start, stop, step = self.ev(task, s.start), self.ev(task, s.stop), self.ev(task, s.step)
        for value in range(start, stop, step):
            task.env[s.var.uid] = value
            yield from self.exec_body(task, s.body)
            task.loc = s.loc

    def _if(self, task, s: ir.If):
        yield from self.exec_body(task, s.then if self.ev(task, s.cond) else s.orelse)

    def _thread_group(self, task, s: ir.ThreadGroup):
        if s.begin <= task.begin and task.end <= s.begin + s.count:
            yield from self.exec_body(task, s.body)

    def _single_thread(self, task, s: ir.SingleThread):
        if task.begin <= s.begin < task.end:
            yield from self.exec_body(task, s.body)

    def _sync(self, task, s: ir.Sync, text: str | None = None):
        members = [t for t in self.tasks if s.begin <= t.begin and t.end <= s.begin + s.count]
        key = (s.begin, s.count)
        state = self.syncs.setdefault(key, {"arrived": set(), "generation": 0, "clock": [0] * len(self.tasks)})
        generation = state["generation"]
        state["arrived"].add(task.index)
        join(state["clock"], task.clock)
        task.tick()
        if len(state["arrived"]) == len(members):
            released = state["clock"]
            state.update(arrived=set(), generation=generation + 1, clock=[0] * len(self.tasks))
            state["released"] = released
        return self._await(lambda: state["generation"] != generation,
                           text or f"in sync() of threads {s.begin}-{s.begin + s.count - 1}",
                           after=lambda: join(task.clock, state["released"]))

    def _await(self, check, text: str, after=None):
        if not check():
            yield Block(check, text)
        if after is not None:
            after()

    # -------------------------------------------------------------------------------------------- barriers

    def barrier(self, task, ref: ir.TensorRef) -> Mbarrier:
        bars = self.barriers.get(ref.decl.uid)
        if bars is None:
            raise BarrierError(f"{ref.decl.name} is used before mbarrier.alloc created it")
        index = self.ev(task, ref.index[0])
        if not 0 <= index < len(bars):
            raise BoundsError(f"barrier index {index} is out of bounds for {ref.decl.name} ({len(bars)} barriers)")
        return bars[index]

    def _arrivals(self, task, s: ir.Instruction) -> int:
        return 1 if s.threads[1] == 1 else task.size

    def _mbarrier_arrive(self, task, s: ir.MbarrierArrive):
        self.barrier(task, s.barrier).arrive(self._arrivals(task, s), task.clock)
        task.tick()
        return self._preempt()

    def _mbarrier_arrive_expect_tx(self, task, s: ir.MbarrierArriveExpectTx):
        count = self._arrivals(task, s)
        nbytes = self.ev(task, s.nbytes)
        self.barrier(task, s.barrier).arrive(count, task.clock, tx=nbytes * count)
        task.tick()
        return self._preempt()

    def _mbarrier_wait(self, task, s: ir.MbarrierWait):
        bar = self.barrier(task, s.barrier)
        parity = self.ev(task, s.phase)
        if parity not in (0, 1):
            raise BarrierError(f"mbarrier.wait on {bar.name} with phase {parity}; the phase parity must be 0 or 1")
        if bar.try_wait(task, parity):
            return self._preempt()
        return self._await(lambda: task.woken, f"in mbarrier.wait on {bar.name} for phase parity {parity}")

    def _preempt(self):
        if self.rng:
            yield None

    # ------------------------------------------------------------------------------------------ shared, TMA

    def region(self, task, ref: ir.TensorRef) -> Region:
        tensor = self.shared.get(ref.decl.uid)
        if tensor is None:
            raise KernelError(f"shared tensor {ref.decl.name} is used before it is allocated")
        key = tuple(self.ev(task, e) for e in ref.index)
        check_element_index(ref.decl, key)
        text = ref.decl.name + (f"[{', '.join(str(k) for k in key)}]" if key else "")
        return Region(tensor, key, text)

    def _global(self, task, ref: ir.TensorRef):
        pointer, shape, strides = task.env[ref.decl.uid]
        return self.memory[pointer], shape, strides

    def _tile_indices(self, shape, strides, offsets, tile_shape):
        grids = np.meshgrid(*[o + np.arange(t) for o, t in zip(offsets, tile_shape)], indexing="ij")
        inside = np.ones(tuple(tile_shape), dtype=bool)
        flat = np.zeros(tuple(tile_shape), dtype=np.int64)
        for grid, extent, stride in zip(grids, shape, strides):
            inside &= (grid >= 0) & (grid < extent)
            flat += grid.astype(np.int64) * stride
        return flat, inside

    def _global_tile(self, task, view: ir.TensorRef, offsets, tile_shape) -> np.ndarray:
        memory, shape, strides = self._global(task, view)
        flat, inside = self._tile_indices(shape, strides, offsets, tile_shape)
        out = np.zeros(tuple(tile_shape), dtype=memory.dtype)
        out[inside] = memory[flat[inside]]
        return out

    def _store_tile(self, task, view: ir.TensorRef, offsets, tile: np.ndarray, rows=None) -> None:
        memory, shape, strides = self._global(task, view)
        flat, inside = self._tile_indices(shape, strides, offsets, tile.shape)
        if rows is not None:
            mask = np.zeros(tile.shape[0], dtype=bool)
            mask[rows[0]:rows[1]] = True
            inside &= mask.reshape((-1,) + (1,) * (tile.ndim - 1))
        memory[flat[inside]] = tile[inside].astype(memory.dtype)

    def _new_event(self, kind, task, loc, complete, text, retire=None) -> Event:
        event = Event(kind, task, loc, complete, text, retire)
        self.events.append(event)
        return event

    def _tma_load(self, task, s: ir.TmaLoad):
        region = self.region(task, s.dst)
        bar = self.barrier(task, s.barrier)
        offsets = [self.ev(task, o) for o in s.offsets]
        region.check_writable(task, "tma.global_to_shared")
        op_id = self.next_event_id
        self.next_event_id += 1
        region.view("async_writer")[...] = op_id
        issue_clock = list(task.clock)
        nbytes = s.dst.nbytes

        def complete():
            tile = self._global_tile(task, s.src, offsets, s.dst.shape)
            region.view("data")[...] = tile
            region.view("async_writer")[...] = 0
            region.record_write(task.index, issue_clock[task.index])
            bar.complete_tx(nbytes, issue_clock)

        self._new_event("tma", task, s.loc, complete,
                        f"TMA load {format_expr(s.src)}{offsets} -> {region.text}, completing {nbytes} bytes on "
                        f"{bar.name}")
        task.tick()
        return self._preempt()

    def _tma_store(self, task, s: ir.TmaStore):
        region = self.region(task, s.src)
        offsets = [self.ev(task, o) for o in s.offsets]
        region.check_readable(task, "tma.shared_to_global", async_proxy=True)
        region.record_read(task)
        readers = region.view("async_readers")
        readers += 1

        def complete():
            self._store_tile(task, s.dst, offsets, region.view("data"))

        def retire():
            region.view("async_readers")[...] -= 1
            region.record_read(task)  # the read ends, for ordering purposes, when the issuer observes it

        event = self._new_event("tma_store", task, s.loc, complete,
                                f"TMA store {region.text} -> {format_expr(s.dst)}{offsets}", retire)
        task.tma_uncommitted.append(event)
        return self._preempt()

    def _tma_commit(self, task, s):
        task.tma_groups.append(task.tma_uncommitted)
        task.tma_uncommitted = []

    def _tma_wait(self, task, s: ir.TmaWait):
        def ready():
            return len([g for g in task.tma_groups if not all(e.done for e in g)]) <= s.n

        def observe():
            # Only now does the program know the stores have read their sources: until then a write into them
            # races, however early the copy engine actually finished.
            while task.tma_groups and all(e.done for e in task.tma_groups[0]):
                for event in task.tma_groups.popleft():
                    event.retire()

        return self._await(ready, f"in tma.wait_group({s.n})", after=observe)

    def _fence_proxy_async(self, task, s):
        for tensor in self.shared.values():
            tensor.unfenced[tensor.write_task == task.index] = False

    def _store_shared(self, task, s: ir.StoreShared):
        region = self.region(task, s.dst)
        region.check_writable(task, "store_shared")
        src = self._register(task, s.src, "store_shared")
        rows = self._row_share(task, s.threads, src.shape[0])
        region.view("data")[rows[0]:rows[1]] = src[rows[0]:rows[1]]
        view_key = region.key + (slice(rows[0], rows[1]),)
        part = Region(region.tensor, view_key, region.text)
        part.record_write(task.index, task.clock[task.index], unfenced=True)
        return self._preempt()

    def _store_global(self, task, s: ir.StoreGlobal):
        src = self._register(task, s.src, "store_global")
        offsets = [self.ev(task, o) for o in s.offsets]
        self._store_tile(task, s.dst, offsets, src, rows=self._row_share(task, s.threads, src.shape[0]))

    def _row_share(self, task, threads, rows: int) -> tuple[int, int]:
        """Rows of a register tile this partition holds when its group spans several partitions (each warpgroup
        holds its own slice of rows, as WGMMA accumulators are laid out)."""
        begin, count = threads
        if count <= task.size:
            return (0, rows)
        groups = max(count // 128, 1)
        per = rows // groups
        first = (task.begin - begin) // 128
        last = (task.end - begin + 127) // 128
        return (first * per, last * per)

    # ----------------------------------------------------------------------------------------------- WGMMA

    def _wgmma_fence(self, task, s):
        task.wgmma_fenced = True

    def _wgmma_mma(self, task, s: ir.WgmmaMma):
        if not task.wgmma_fenced:
            raise KernelError(f"wgmma.mma into {s.d.decl.name} without a wgmma.fence() after the last register "
                              f"access; the PTX ISA requires the fence before the first mma_async and after touching "
                              f"its registers")
        operands = []
        for ref, name in ((s.a, "a"), (s.b, "b")):
            if ref.kind == ir.SHARED:
                region = self.region(task, ref)
                region.check_readable(task, f"wgmma.mma operand {name}", async_proxy=True)
                region.record_read(task)
                region.view("async_readers")[...] += 1
                operands.append(region)
            else:
                operands.append(self._register(task, ref, "wgmma.mma a"))
                task.wgmma_fenced = True
        rows = self._row_share(task, s.threads, s.d.shape[0])
        d_uid = s.d.decl.uid
        task.inflight_accumulators[d_uid] = task.inflight_accumulators.get(d_uid, 0) + 1
        text = " @ ".join((o.text + (".T" if r.transposed else "")) if isinstance(o, Region) else format_expr(r)
                          for o, r in zip(operands, (s.a, s.b)))

        def complete():
            a = operands[0].view("data") if isinstance(operands[0], Region) else operands[0]
            b = operands[1].view("data")
            if s.b.transposed:
                b = b.swapaxes(-1, -2)
            if s.a.transposed and isinstance(operands[0], Region):
                a = a.swapaxes(-1, -2)
            a = a[rows[0]:rows[1]].astype(np.float32)
            d = task.env[d_uid]
            d[rows[0]:rows[1]] = dtypes.round_to(s.d.decl.dtype, d[rows[0]:rows[1]] + a @ b.astype(np.float32))

        def retire():
            # The shared operands are free and the accumulator readable only once wait_group observes the group.
            for operand in operands:
                if isinstance(operand, Region):
                    operand.view("async_readers")[...] -= 1
                    operand.record_read(task)  # ordered from here on: a release before this point races
            task.inflight_accumulators[d_uid] -= 1

        task.wgmma_uncommitted.append((s.loc, complete, retire, f"wgmma {text} -> {s.d.decl.name}"))
        return self._preempt()

    def _wgmma_commit(self, task, s):
        mmas = task.wgmma_uncommitted
        task.wgmma_uncommitted = []

        def complete():
            for _, fn, _, _ in mmas:
                fn()

        def retire():
            for _, _, fn, _ in mmas:
                fn()

        text = "; ".join(t for _, _, _, t in mmas) or "empty wgmma group"
        loc = mmas[0][0] if mmas else s.loc
        task.wgmma_groups.append(self._new_event("wgmma", task, loc, complete, text, retire))

    def _wgmma_wait(self, task, s: ir.WgmmaWait):
        def ready():
            return sum(not e.done for e in task.wgmma_groups) <= s.n

        def observe():
            while task.wgmma_groups and task.wgmma_groups[0].done and len(task.wgmma_groups) > s.n:
                task.wgmma_groups.popleft().retire()

        return self._await(ready, f"in wgmma.wait_group({s.n})", after=observe)

    HANDLERS = {
        ir.Declare: _declare, ir.Assign: _assign, ir.GlobalView: _global_view, ir.AllocShared: _alloc_shared,
        ir.AllocBarriers: _alloc_barriers, ir.AllocRegister: _alloc_register, ir.StoreElement: _store_element,
        ir.ComputeTensor: _compute_tensor, ir.For: _for, ir.If: _if, ir.ThreadGroup: _thread_group,
        ir.SingleThread: _single_thread, ir.Sync: _sync, ir.MbarrierArrive: _mbarrier_arrive,
        ir.MbarrierArriveExpectTx: _mbarrier_arrive_expect_tx, ir.MbarrierWait: _mbarrier_wait,
        ir.TmaLoad: _tma_load, ir.TmaStore: _tma_store, ir.TmaCommit: _tma_commit, ir.TmaWait: _tma_wait,
        ir.FenceProxyAsync: _fence_proxy_async, ir.WgmmaFence: _wgmma_fence, ir.WgmmaMma: _wgmma_mma,
        ir.WgmmaCommit: _wgmma_commit, ir.WgmmaWait: _wgmma_wait, ir.StoreGlobal: _store_global,
        ir.StoreShared: _store_shared,
    }
