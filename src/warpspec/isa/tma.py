"""TMA: the Tensor Memory Accelerator's bulk tensor copies (PTX ``cp.async.bulk.tensor``) and their bulk groups.

The language methods (``self.tma.global_to_shared/shared_to_global/commit_group/wait_group``), their IR statements
and their emulation: a copy is an asynchronous event that moves the tile when the scheduler completes it (a store
with ``reduce="add"`` adds it into global memory instead, PTX ``cp.reduce.async.bulk.tensor``). The
CUDA emission is ``warpspec.cuda.sm90.tma``; the tile layouts and tensor-map boxes are ``warpspec.layout.shared``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from warpspec.errors import BarrierError, InFlightAtExitError, KernelError
from warpspec.isa.base import LanguageObject, barrier_ref, check_reduction, language_call, offsets_of
from warpspec.isa.cluster import check_rank
from warpspec.isa.contracts import EmulationMachine, EmulationTask, Steps
from warpspec.isa.registry import WRITES_GLOBAL, at_exit, declare, declare_timeline, emulates
from warpspec.isa.timeline_facts import NOT_SHOWN, STATEMENT, Instrumentation, TimingCost
from warpspec.isa.values import TensorValue
from warpspec.ir import nodes as ir
from warpspec.ir.printer import format_expr

# ------------------------------------------------------------------------------------------------------- IR


@dataclass(frozen=True, eq=False)
class TmaLoad(ir.Instruction):
    """Copy the box of global view ``src`` at ``offsets`` into shared tensor ``dst``, completing its bytes on
    ``barrier``. Elements outside the view read as zero."""

    src: ir.TensorRef
    dst: ir.TensorRef
    offsets: tuple[ir.Expr, ...]
    barrier: ir.TensorRef
    multicast: tuple[int, ...] = ()  # cluster ranks that receive the box (each at dst, on barrier); () = this block


@dataclass(frozen=True, eq=False)
class TmaStore(ir.Instruction):
    """Copy shared tensor ``src`` into global view ``dst`` at ``offsets``, or with ``reduce`` ("add") combine it
    element-wise into what ``dst`` holds; elements outside the view are dropped."""

    src: ir.TensorRef
    dst: ir.TensorRef
    offsets: tuple[ir.Expr, ...]
    reduce: str | None = None


#: The reductions ``tma.shared_to_global(..., reduce=...)`` takes, each with the element types it combines. PTX's
#: cp.reduce.async.bulk.tensor has more (min, max, and, ...); attention's dQ needs only a float32 add.
TMA_REDUCTIONS = {"add": ("float32",)}


@dataclass(frozen=True, eq=False)
class TmaCommit(ir.Instruction):
    """Close the executing thread's uncommitted TMA stores into one bulk group."""


@dataclass(frozen=True, eq=False)
class TmaWait(ir.Instruction):
    """Wait until at most ``n`` of the executing thread's bulk groups are pending (with ``read``, pending their
    shared sources' reads)."""

    n: int
    read: bool = False


# ------------------------------------------------------------------------------------------------ language


class Tma(LanguageObject):
    """``self.tma``: the Tensor Memory Accelerator's bulk tensor copies (PTX ``cp.async.bulk.tensor``)."""

    namespace = "tma"

    def _issuer(self, name: str) -> tuple[int, int]:
        b = self.b
        begin, count, single = b.group
        if not single and count != self.target.warp_threads:
            raise b.error(f"tma.{name} is issued by one thread: call it inside self.single_thread() or from a "
                          f"thread group of exactly one warp (32 threads), not from {count} threads")
        return (begin, 1)

    def _box(self, shared: TensorValue, view: TensorValue, what: str) -> None:
        b = self.b
        if shared.ref.transposed:
            raise b.error(f"{what}: the shared tensor {shared.name} cannot be transposed")
        if len(shared.shape) != len(view.shape):
            raise b.error(f"{what}: shared tile {shared.name}{list(shared.shape)} and global view {view.name} "
                          f"({len(view.shape)} dimensions) must have the same rank")
        if len(shared.shape) < 2:
            raise b.error(f"{what}: shared tile {shared.name}{list(shared.shape)} needs at least 2 dimensions "
                          f"(rows, columns)")
        if any(extent != 1 for extent in shared.shape[:-2]):
            raise b.error(f"{what}: a TMA tile's leading dimensions must have extent 1 (one 2-D slice per copy); "
                          f"{shared.name} has shape {list(shared.shape)}")
        if shared.dtype != view.dtype:
            raise b.error(f"{what}: {shared.name} is {shared.dtype.name} but {view.name} is {view.dtype.name}")
        inner_bytes = shared.shape[-1] * shared.dtype.nbytes
        if inner_bytes % self.target.tma_inner_box_multiple:
            raise b.error(f"{what}: the inner extent of {shared.name} is {inner_bytes} bytes; TMA needs a multiple "
                          f"of 16 bytes")

    @language_call
    def global_to_shared(self, src, dst, offsets, mbarrier, multicast=None) -> None:
        """Copy the tile of global view ``src`` starting at ``offsets`` into shared tensor ``dst``; the copy
        completes ``dst.nbytes`` transaction bytes on ``mbarrier``. Elements outside ``src`` read as zero.
        Issued by one thread (``single_thread`` or a one-warp group, which elects a lane). PTX:
        ``cp.async.bulk.tensor.Nd.shared::cluster.global.tile.mbarrier::complete_tx::bytes [dst], [map, {..}], [bar];``

        ``multicast``: a compile-time list of cluster ranks (``[0, 1]``). The tile is read once and written into
        ``dst`` of every block in the list (the same shared offset in each), completing ``dst.nbytes`` bytes on
        the same ``mbarrier`` of each: every destination block expects those bytes on its own barrier. Each
        destination's ``mbarrier.alloc`` must be ordered before the copy (``self.cluster_sync()`` after alloc),
        and it must not exit before the copy lands. PTX: ``cp.async.bulk.tensor.Nd.shared::cluster.global.tile.
        mbarrier::complete_tx::bytes.multicast::cluster [dst], [map, {..}], [bar], mask;`` (``mask`` has bit r
        set for rank r)."""
        b = self.b
        threads = self._issuer("global_to_shared")
        src = b.to_tensor(src, "tma.global_to_shared src", (ir.GLOBAL,))
        dst = b.to_tensor(dst, "tma.global_to_shared dst", (ir.SHARED,))
        self._box(dst, src, "tma.global_to_shared")
        bar = barrier_ref(b, mbarrier, "tma.global_to_shared mbarrier")
        ranks: tuple[int, ...] = ()
        if multicast is not None:
            ranks = tuple(b.to_int(r, "tma.global_to_shared multicast") for r in
                          (multicast if isinstance(multicast, (list, tuple)) else [multicast]))
            if not ranks or len(set(ranks)) != len(ranks):
                raise b.error(f"tma.global_to_shared multicast takes distinct cluster ranks, got {list(ranks)}")
            for rank in ranks:
                check_rank(b, rank, "tma.global_to_shared multicast")
        b.emit(TmaLoad(b.loc, threads, src.ref, dst.ref, offsets_of(b, offsets, src, "tma.global_to_shared"), bar,
                       ranks))

    @language_call
    def shared_to_global(self, src, dst, offsets, reduce=None) -> None:
        """Copy shared tensor ``src`` into global view ``dst`` at ``offsets``; elements outside ``dst`` are not
        written. Issued by one thread (``single_thread`` or a one-warp group, which elects a lane); completion is
        tracked with ``commit_group``/``wait_group``. PTX:
        ``cp.async.bulk.tensor.Nd.global.shared::cta.tile.bulk_group [map, {..}], [src];``

        ``reduce="add"`` (float32 tiles): add ``src`` element by element into what ``dst`` holds instead, each
        element's add atomic, so the reduce-adds of several blocks into the same elements need no ordering
        between them (float32 adds in whatever order they land: equal sums up to rounding). A plain load or store
        of those elements by another block during the launch is still a race. The emulator adds when the copy
        completes. PTX: ``cp.reduce.async.bulk.tensor.Nd.global.shared::cta.add.tile.bulk_group [map, {..}],
        [src];`` (the element type is the tensor map's)."""
        b = self.b
        threads = self._issuer("shared_to_global")
        src = b.to_tensor(src, "tma.shared_to_global src", (ir.SHARED,))
        dst = b.to_tensor(dst, "tma.shared_to_global dst", (ir.GLOBAL,))
        self._box(src, dst, "tma.shared_to_global")
        check_reduction(b, "tma.shared_to_global", reduce, TMA_REDUCTIONS, src)
        b.emit(TmaStore(b.loc, threads, src.ref, dst.ref, offsets_of(b, offsets, dst, "tma.shared_to_global"),
                        reduce))

    @language_call
    def commit_group(self) -> None:
        """Close the issuing thread's outstanding ``shared_to_global`` copies into one bulk group.
        PTX: ``cp.async.bulk.commit_group;``"""
        self.b.emit(TmaCommit(self.b.loc, self._issuer("commit_group")))

    @language_call
    def wait_group(self, n, read=False) -> None:
        """Wait until at most ``n`` of the issuing thread's bulk groups are still pending (their shared sources
        read and global writes done). With ``read=True`` only their sources' reads are waited for: the shared
        memory may be written again, while the global writes may still be in flight (reading them back, or
        ending the block before a ``wait_group(0)`` without ``read``, is an error). Executed by the issuing thread.
        PTX: ``cp.async.bulk.wait_group n;`` (``cp.async.bulk.wait_group.read n;``)"""
        n = self.b.to_int(n, "tma.wait_group n")
        if not 0 <= n <= 7:
            raise self.b.error(f"tma.wait_group n must be in [0, 7], got {n}")
        if not isinstance(read, bool):
            raise self.b.error(f"tma.wait_group read must be True or False, got {read!r}")
        self.b.emit(TmaWait(self.b.loc, self._issuer("wait_group"), n, read))


# ----------------------------------------------------------------------------------------------- emulation


@dataclass
class TmaState:
    """A task's bulk-async groups of TMA stores on the emulator: ``task.family_state(TmaState)``."""

    uncommitted: list[Any] = field(default_factory=list)  # store events issued since the last commit
    groups: deque[list[Any]] = field(default_factory=deque)  # committed groups, oldest first, until observed
    #: store event -> what observing its source's read does; gone once a wait_group (read or not) observed it
    unread: dict[Any, Callable[[], None]] = field(default_factory=dict)


@emulates(TmaLoad)
def _tma_load(machine: EmulationMachine, task: EmulationTask, s: TmaLoad) -> Steps:
    # Each destination: this block's dst and barrier, or with multicast the same ones in every listed block.
    what = "tma.global_to_shared" + (f" multicast to ranks {list(s.multicast)}" if s.multicast else "")
    destinations = []
    for rank in s.multicast or (None,):
        block = machine if rank is None else machine.cluster.peer(task, rank, what)
        bar = (machine.barrier(task, s.barrier) if rank is None else
               machine.cluster.remote_barrier(task, rank, s.barrier, what))
        destinations.append((block, machine.region(task, s.dst, block), bar))
    offsets = [machine.ev(task, o) for o in s.offsets]
    for _, region, _ in destinations:
        region.check_writable(task, what)
    source = machine.global_tile(task, s.src, offsets, s.dst.shape, "tma.global_to_shared")
    # The copy reads its source at some time after the issue: a TMA store into it must be waited for before.
    machine.global_memory.check_stores_waited(task, source)
    issue_clock = list(task.clock)
    nbytes = s.dst.nbytes
    # One event per destination: a multicast lands in each block, and completes on its barrier, on its own time.
    for block, region, bar in destinations:
        operation = machine.next_operation_id()
        region.view("async_writer")[...] = operation
        # A read before it lands names the barrier, the phase the copy was issued in and where it was issued.
        region.tensor.copy_barriers[operation] = (bar, dict(bar.seen), bar.completed, str(s.loc))

        def complete(region: Any = region, bar: Any = bar, operation: int = operation) -> None:
            region.view("data")[...] = machine.global_memory.read(task, source)
            region.view("async_writer")[...] = 0
            del region.tensor.copy_barriers[operation]
            region.record_write(task.index, issue_clock[task.index])
            bar.complete_tx(nbytes, issue_clock)
            if bar.pending == 0 and bar.tx < 0:
                # Every arrival of the phase (and so every expect_tx) is in: no later arrival can make up for it.
                raise BarrierError(f"{what} delivered {nbytes} bytes to {bar.name} after every arrival of its phase "
                                   f"was in, driving its transaction count to {bar.tx}: the block expected fewer "
                                   f"bytes than the copies into it deliver (with multicast, each destination block "
                                   f"expects the bytes of every copy it receives on its own barrier)", str(s.loc),
                                   machine.describe_tasks())

        event = machine.new_event("tma", task, s.loc, complete,
                                  f"TMA load {format_expr(s.src)}{offsets} -> {region.text}, completing {nbytes} "
                                  f"bytes on {bar.name}")
        if block is not machine:
            machine.cluster.multicast(block.rank, event)
    task.tick()
    return machine.preempt()


@emulates(TmaStore)
def _tma_store(machine: EmulationMachine, task: EmulationTask, s: TmaStore) -> Steps:
    region = machine.region(task, s.src)
    offsets = [machine.ev(task, o) for o in s.offsets]
    region.check_readable(task, "tma.shared_to_global", async_proxy=True)
    region.record_read(task)
    readers = region.view("async_readers")
    readers += 1
    what = "tma.shared_to_global" + (f"(reduce={s.reduce!r})" if s.reduce else "")
    destination = machine.global_tile(task, s.dst, offsets, s.src.shape, what)
    machine.global_memory.store_issued(task, destination)

    def complete() -> None:
        if s.reduce:
            machine.global_memory.reduce_add(task, destination, region.view("data"))
        else:
            machine.global_memory.write(task, destination, region.view("data"))

    state = task.family_state(TmaState)

    def observe_read() -> None:
        region.view("async_readers")[...] -= 1
        region.record_read(task)  # the read ends, for ordering purposes, when the issuer observes it

    def retire() -> None:
        if state.unread.pop(event, None) is not None:
            observe_read()
        machine.global_memory.store_observed(task, destination)

    event = machine.new_event("tma_store", task, s.loc, complete,
                              f"TMA {'reduce-add' if s.reduce else 'store'} {region.text} -> {format_expr(s.dst)}"
                              f"{offsets}", retire)
    state.unread[event] = observe_read
    state.uncommitted.append(event)
    return machine.preempt()


@emulates(TmaCommit)
def _tma_commit(machine: EmulationMachine, task: EmulationTask, s: TmaCommit) -> None:
    state = task.family_state(TmaState)
    state.groups.append(state.uncommitted)
    state.uncommitted = []


@emulates(TmaWait)
def _tma_wait(machine: EmulationMachine, task: EmulationTask, s: TmaWait) -> Steps:
    state = task.family_state(TmaState)
    groups = state.groups

    def ready() -> bool:
        # PTX: every group but the newest n is complete. Bulk groups may complete out of order (a seeded run
        # completes them at random), so counting the incomplete ones is not enough: an older one may be among them.
        older = len(groups) - s.n
        return all(all(e.done for e in group) for group in list(groups)[:max(older, 0)])

    def observe() -> None:
        # Only now does the program know the stores have read their sources: until then a write into them
        # races, however early the copy engine actually finished. It knows it of the groups older than the newest
        # n only: those may have finished too, but wait_group(n) does not say so. A read wait says nothing of
        # the global writes: its groups stay, for a later wait_group to observe them written.
        if s.read:
            for group in list(groups)[:max(len(groups) - s.n, 0)]:
                for event in group:
                    observe_read = state.unread.pop(event, None)
                    if observe_read is not None:
                        observe_read()
            return
        while len(groups) > s.n:
            for event in groups.popleft():
                event.retire()

    return machine.wait_until(ready, f"in tma.wait_group({s.n}{', read=True' if s.read else ''})", after=observe)


@at_exit
def _uncommitted_stores(machine: EmulationMachine, task: EmulationTask) -> None:
    uncommitted = task.family_state(TmaState).uncommitted
    if uncommitted:
        raise KernelError(f"{task.name} issued tma.shared_to_global that was never committed "
                          f"(tma.commit_group)", str(uncommitted[0].loc), machine.describe_tasks())
    state = task.family_state(TmaState)
    for group in state.groups:
        for event in group:
            if event not in state.unread:  # a read wait saw its source read; nothing saw its global write
                raise InFlightAtExitError(
                    f"{task.name} ends after tma.wait_group(read=True) saw the source of {event.text} read, but "
                    f"no wait saw its global write done: end with tma.wait_group(0)", str(event.loc),
                    machine.describe_tasks())


# ---------------------------------------------------------------------------------------------------------- timeline
# What each statement costs the CPU timing model and how timelines show it (``isa.timeline_facts``).
# A copy's issue is shown; its bytes cross the SM's memory share after it (the model's asynchronous completion).
declare_timeline(TmaLoad, TimingCost("tma", lambda s: s.dst.nbytes),
                 Instrumentation("tma", "tma {src} -> {dst}", indexed="dst", barrier="barrier", stage="dst"))
declare_timeline(TmaStore, TimingCost("tma", lambda s: s.src.nbytes),
                 Instrumentation("tma", "tma {src} -> {dst}", indexed="src"))
declare_timeline(TmaCommit, STATEMENT, NOT_SHOWN)
declare_timeline(TmaWait, STATEMENT, Instrumentation("tma_wait", "tma.wait_group({n})"))

declare(WRITES_GLOBAL, TmaStore, lambda s: s.dst)
