"""Global memory with a shadow state per element: which block wrote it and which blocks read it first.

Thread blocks run in no fixed order on a GPU (and concurrently), while the emulator runs them one after another.
An element written by one block and read or written by another therefore holds whatever the hardware's order
happens to give: a race, reported at the second access. Reads by several blocks of an element nobody writes are
fine. Because blocks run one after another, the first conflicting access is always seen by the later block, and three
numbers per element suffice: the id of its last write, of its first read, and of its first read by a block other
than that first reader's (ids grow over the launch, so "by an earlier block" is ``id < block.start``). A write is a
race when either read is another block's: if the first reader is the writer itself, the second read names any other
block that read the element. The blocks of one cluster run together: from the cluster's first access on, an id is
another block's when its access says so, so a block's write after its own read of an element still meets a read of
it by another block of its cluster in between. A cluster barrier orders its blocks, but global memory is not tracked
through it: any conflicting access between two blocks is reported.

The shadow is kept per piece of memory, not per argument: the same numpy array passed for two pointers (C passed as
A) is one buffer with one shadow, each argument at its byte offset in it.

A TMA reduce-add (``tma.shared_to_global(..., reduce="add")``) adds atomically per element, so reduce-adds of
several blocks into the same elements commute and are no race with each other; a third id per element, its first
reduce-add (kept as the first read is), makes a plain load or store of it by another block one (and a reduce-add
after another block's load or store), as for any write.

Within a block, a TMA store's destination must not be read back (``load_global``, a TMA load) before the store's
bulk group is observed by ``tma.wait_group`` and that wait is ordered before the reader (vector clocks, as for
shared memory).

Flags (``warpspec.isa.flag``) order one block's writes before a later block's reads: a ``flag.signal`` records a
release (the signalling task's vector clock and the access id reached), and a ``flag.wait`` that passes on the value
it wrote gives the waiting block that release. An access of an earlier block's element is then no race when the
earlier access was a generic one (``load_global``, ``store_global``) that the release's clock covers, the new access
is generic too, and the accessing task is ordered after the wait. One task is one thread partition, which the
clocks cannot split, so each access, signal and wait also records its executing threads: a signal by one thread
publishes the task's other threads' stores only when a sync ordered them before it, and a wait by one thread orders
the task's other threads only after a later sync (``Task.synced``). TMA accesses on either side are not covered: their
data moves in the async proxy, which a flag's release and acquire do not order.

After the launch, the same writer ids say which elements of each view the kernel wrote through were never written
by any block (``GlobalMemory.unwritten``): a tile scheduler that skips tiles breaks no instruction's rule, and this
is how it is found.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from warpspec.emulator.clocks import join
from warpspec.dtypes import int32
from warpspec.errors import BoundsError, RaceError
from warpspec.ir import nodes as ir
from warpspec.ir.evaluate import wrap

NOBODY = np.iinfo(np.int32).max  # no access yet: above every access id, so one comparison finds earlier blocks' ids
_ID_BYTES = np.dtype(np.int32).itemsize
#: The shadow arrays of a ``Buffer``, by field name (a search's checkpoint saves and restores them all).
SHADOWS = ("writer", "reader", "other_reader", "reducer", "tma_store")


@dataclass(frozen=True)
class Access:
    """One global-memory access by one instruction of one block."""

    block: tuple[int, int, int]
    what: str  # the instruction: load_global, store_global, tma.global_to_shared, tma.shared_to_global
    view: str
    argument: str
    loc: ir.Loc
    task: int  # the accessing task's index in its cluster, and its own clock entry then
    epoch: int
    threads: tuple[int, int]  # the executing threads [begin, end) of the task (one thread inside single_thread)

    def text(self) -> str:
        """The instruction, view, argument and line, as race messages name the other access."""
        return f"{self.what} of {self.view}, argument {self.argument!r}, at {self.loc}"


#: The accesses a flag's release and acquire order across blocks: ordinary loads and stores (the generic proxy).
GENERIC_ACCESSES = ("load_global", "store_global")


@dataclass(frozen=True)
class Release:
    """A ``flag.signal``: the block and the signalling task's vector clock (the signaller ticks right after, so the
    clock covers exactly the accesses ordered before the signal)."""

    block: tuple[int, int, int]
    start: int  # the block's (or its cluster's) first access id: releases with the same start share clocks
    clock: tuple[int, ...]
    task: int  # the signalling task
    threads: tuple[int, int]  # the signalling threads [begin, end)
    synced: int  # the signaller's own clock entry at its last sync: what its other threads did before is covered


@dataclass(frozen=True)
class Acquire:
    """A ``flag.wait`` of this block that passed on an earlier block's release: the waiting task and threads, and
    the task's own clock entry then."""

    release: Release
    task: int
    threads: tuple[int, int]
    epoch: int


def executing_threads(task) -> tuple[int, int]:
    """The threads ``[begin, end)`` of ``task`` that execute its current instruction: all of the task's, or the one
    of a ``single_thread`` block. Within one task the vector clocks cannot tell its threads apart, so flags ask
    this: a signal by one thread publishes no other thread's stores, a wait by one orders no other thread's loads,
    until a sync orders them."""
    begin, count = getattr(task.stmt, "threads", (task.begin, task.size))
    return max(begin, task.begin), min(begin + count, task.end)


def _within(inner: tuple[int, int], outer: tuple[int, int]) -> bool:
    return outer[0] <= inner[0] and inner[1] <= outer[1]


class GlobalFlag:
    """One int32 element of a flag view: ``name`` as messages show it (``flags[3]``)."""

    def __init__(self, name: str, argument: "Argument", element: int):
        self.name, self.argument, self.element = name, argument, element
        self.key = (id(argument.buffer), argument.offset + element * argument.scale)


@dataclass(frozen=True)
class UnwrittenOutput:
    """Elements of a global view that the kernel writes through (``store_global``, a TMA store) which no block
    wrote: a finding of the launch, not an error of one instruction (a kernel may write part of an output by
    design)."""

    argument: str  # the pointer parameter
    view: str
    shape: tuple[int, ...]
    count: int  # elements never written
    first: tuple[int, ...]  # the view index of the first of them, in row-major order
    loc: ir.Loc  # the global_view line

    def message(self) -> str:
        """``file:line: c_ptr: 8800 elements of view gc [300, 200] were never written ...``."""
        return (f"{self.loc}: {self.argument}: {self.count} elements of view {self.view} {list(self.shape)} were "
                f"never written by any block; the first is {self.view}{list(self.first)}")


class Buffer:
    """The shadow of one piece of memory that one or more array arguments occupy, in units of ``unit`` bytes."""

    def __init__(self, units: int):
        self.writer = np.full(units, NOBODY, dtype=np.int32)  # id of the last access that wrote the unit
        self.reader = np.full(units, NOBODY, dtype=np.int32)  # id of the first access that read it
        # id of the first read by a block other than the first reader's (in a cluster, the partner's read between a
        # block's own read and its write)
        self.other_reader = np.full(units, NOBODY, dtype=np.int32)
        self.reducer = np.full(units, NOBODY, dtype=np.int32)  # id of the first TMA reduce-add into it
        self.tma_store = np.full(units, NOBODY, dtype=np.int32)  # id of the last TMA store issued into it


class Argument:
    """One array argument: its flat data, and where its elements lie in its buffer's shadow."""

    def __init__(self, name: str, data: np.ndarray, buffer: Buffer, offset: int, scale: int):
        self.name, self.data, self.buffer = name, data, buffer
        self.offset = offset  # shadow unit of element 0
        self.scale = scale  # shadow units per element


def _arguments(memory: dict, names: dict) -> dict:
    """An ``Argument`` per pointer uid, arrays whose bytes overlap sharing one ``Buffer``."""
    spans = sorted(((data.ctypes.data, data.ctypes.data + data.nbytes, uid) for uid, data in memory.items()),
                   key=lambda span: span[:2])
    groups: list[list] = []
    for span in spans:
        if groups and span[0] < max(end for _, end, _ in groups[-1]):
            groups[-1].append(span)
        else:
            groups.append([span])
    arguments = {}
    for group in groups:
        low, high = group[0][0], max(end for _, end, _ in group)
        unit = math.gcd(*(memory[uid].itemsize for _, _, uid in group), *(start - low for start, _, _ in group))
        buffer = Buffer((high - low) // unit)
        for start, _, uid in group:
            data = memory[uid]
            arguments[uid] = Argument(names[uid], data, buffer, (start - low) // unit, data.itemsize // unit)
    return arguments


class GlobalMemory:
    """The array arguments of one launch and their shadow; ``block()`` gives each block its view of them."""

    def __init__(self, memory: dict, names: dict):
        """``memory``: pointer uid -> flat numpy array; ``names``: pointer uid -> parameter name."""
        self.arguments = _arguments(memory, names)
        self.accesses: list[Access] = []
        self.written: set[tuple[str, str]] = set()  # (argument, view) of every write, for ``unwritten``
        # flag element -> the last flag.signal into it and the flag.adds after it: what a wait on its value acquires
        self.releases: dict[tuple[int, int], tuple[Release, ...]] = {}
        self.flag_initial: dict[tuple[int, int], int] = {}  # flag element -> its value when the launch began

    def start(self) -> int:
        """The id the next access will get: every access below it was made before now."""
        return len(self.accesses)

    def block(self, block: tuple[int, int, int], start: int | None = None) -> "BlockMemory":
        """Global memory as the block at ``blockIdx`` ``block`` (run after every block before it) accesses it.
        ``start``: the blocks of a cluster run together from access id ``start`` on (None: this block alone)."""
        return BlockMemory(self, block, start)

    def unwritten(self, views) -> list[UnwrittenOutput]:
        """For each view the launch wrote through (``views``: ``(GlobalView statement, shape, strides)`` as
        ``warpspec.arguments.view_shapes`` gives them), its elements that no block wrote, read off the writer
        shadow of the race checks: one boolean mask per view, after the last block."""
        found = []
        for stmt, shape, strides in views:
            argument = self.arguments[stmt.pointer.uid]
            if stmt.scratch or (argument.name, stmt.decl.name) not in self.written or 0 in shape:
                continue
            whole = GlobalTile(argument, -1, shape, strides, [0] * len(shape), shape, None)
            never = (whole.shadow("writer") == NOBODY) & (whole.shadow("reducer") == NOBODY)
            if argument.scale > 1:  # an element of several shadow units is written when all of them are
                never = never.any(axis=-1)
            count = int(np.count_nonzero(never))
            if count:
                first = tuple(int(i) for i in np.argwhere(never)[0])
                found.append(UnwrittenOutput(argument.name, stmt.decl.name, tuple(shape), count, first, stmt.loc))
        return found


class GlobalTile:
    """The part of a tile at ``offsets`` of a global view that lies inside the view (a box: views clip), as one
    access of one instruction."""

    def __init__(self, argument: Argument, access_id: int, shape, strides, offsets, tile_shape, rows, cols=None):
        self.argument, self.id, self.tile_shape = argument, access_id, tuple(tile_shape)
        ranges = [(0, extent) for extent in self.tile_shape]
        if rows is not None:
            ranges[0] = rows
        if cols is not None:
            ranges[1] = cols
        low = [max(o + a, 0) for o, (a, _) in zip(offsets, ranges)]
        high = [min(o + b, extent) for o, (_, b), extent in zip(offsets, ranges, shape)]
        self.origin = tuple(low)  # the view index of the box's first element
        self.shape = tuple(max(h - l, 0) for l, h in zip(low, high))
        self.slices = tuple(slice(l - o, l - o + n) for l, o, n in zip(low, offsets, self.shape))
        self.empty = 0 in self.shape
        self.base = sum(l * s for l, s in zip(low, strides))  # flat element of the box's first element
        self.strides = tuple(strides)
        data = argument.data
        # The box in the argument's array, as a strided view: no index arrays to build. numpy refuses (ValueError)
        # a box reaching outside the array.
        self.data = None if self.empty else np.ndarray(self.shape, data.dtype, data, self.base * data.itemsize,
                                                       tuple(s * data.itemsize for s in self.strides))

    def shadow(self, field: str) -> np.ndarray:
        """The box in the buffer's shadow array ``field``; an element of several units adds a last axis."""
        argument = self.argument
        scale = argument.scale
        shape, strides = self.shape, tuple(s * scale * _ID_BYTES for s in self.strides)
        if scale > 1:
            shape, strides = shape + (scale,), strides + (_ID_BYTES,)
        return np.ndarray(shape, np.int32, getattr(argument.buffer, field),
                          (argument.offset + self.base * scale) * _ID_BYTES, strides)

    def index(self, position) -> str:
        """The view index of box position ``position`` (a shadow position: a unit axis is dropped)."""
        return str([int(o + p) for o, p in zip(self.origin, position[:len(self.shape)])])


@dataclass
class PendingStore:
    """A TMA store of the block: who issued it, and the issuer's clock when its wait_group observed it."""

    issuer: object  # the issuing task
    observed: int | None = None


class BlockMemory:
    """Global memory as one block accesses it: the race checks and shadow updates of its loads and stores."""

    def __init__(self, memory: GlobalMemory, block: tuple[int, int, int], start: int | None = None):
        self.memory, self.block = memory, block
        self.together = start is not None  # accesses from `start` on may be this block's or its cluster's
        self.start = memory.start() if start is None else start  # every access id below this is an earlier block's
        self.stores: dict[int, PendingStore] = {}  # by the TMA store's access id
        self.acquired: list[Acquire] = []  # the flag waits of this block that passed on an earlier block's signal

    def tile(self, task, pointer: int, view: str, shape, strides, offsets, tile_shape, what: str,
             rows=None, cols=None) -> GlobalTile:
        """The elements of view ``view`` (of pointer ``pointer``, ``shape`` and ``strides``) that ``what`` at
        ``task``'s line accesses: the tile at ``offsets``, its ``rows`` and ``cols`` only when given, clipped to
        the view."""
        argument = self.memory.arguments[pointer]
        accesses = self.memory.accesses
        # Views use only kernel parameters, so the launch checked that every view fits its array.
        tile = GlobalTile(argument, len(accesses), shape, strides, offsets, tile_shape, rows, cols)
        accesses.append(Access(self.block, what, view, argument.name, task.loc, task.index, task.clock[task.index],
                               executing_threads(task)))
        return tile

    # ----------------------------------------------------------------------------------------------- flags

    def flag(self, pointer: int, view: str, shape, strides, index: int, what: str) -> GlobalFlag:
        """Element ``index`` of the 1-D flag view ``view`` (of pointer ``pointer``); BoundsError outside it."""
        if not 0 <= index < shape[0]:
            raise BoundsError(f"{what}: index {index} is outside {view} (size {shape[0]})")
        flag = GlobalFlag(f"{view}[{index}]", self.memory.arguments[pointer], index * strides[0])
        self.memory.flag_initial.setdefault(flag.key, self.flag_value(flag))  # the first use sees the launch's value
        return flag

    def flag_value(self, flag: GlobalFlag) -> int:
        """What the flag holds now."""
        return int(flag.argument.data[flag.element])

    def flag_holds(self, flag: GlobalFlag, value: int) -> bool:
        """Whether the flag holds ``value`` now."""
        return self.flag_value(flag) == value

    def flag_signal(self, task, flag: GlobalFlag, value: int) -> None:
        """``task`` sets the flag to ``value``, releasing what its clock covers (and no earlier block's writes:
        the value no longer counts their adds)."""
        flag.argument.data[flag.element] = value
        self.memory.releases[flag.key] = (self._release(task),)

    def flag_add(self, task, flag: GlobalFlag, value: int) -> None:
        """``task`` adds ``value`` to the flag, releasing what its clock covers; the value still counts the earlier
        releases into it, so a wait on it acquires them all."""
        # red.add.s32 wraps; numpy's int32 scalar would warn, and fail under warnings-as-errors
        flag.argument.data[flag.element] = wrap(self.flag_value(flag) + value, int32)
        self.memory.releases[flag.key] = self.memory.releases.get(flag.key, ()) + (self._release(task),)

    def _release(self, task) -> Release:
        return Release(self.block, self.start, tuple(task.clock), task.index, executing_threads(task), task.synced)

    def flag_acquired(self, task, flag: GlobalFlag) -> None:
        """``task``'s wait on the flag passed: it acquires the releases that made the value (none when the value
        was there before the launch). Within a block or cluster that joins clocks, as a barrier wait does; from an
        earlier block it covers that block's released generic accesses (``_published``)."""
        for release in self.memory.releases.get(flag.key, ()):
            if release.start == self.start:
                join(task.clock, list(release.clock))
                continue
            value = self.flag_value(flag)
            if self.memory.flag_initial[flag.key] == value:
                raise RaceError(f"flag.wait in block {self.block} for {flag.name} == {value} may pass before block "
                                f"{release.block}'s flag.signal: {flag.name} already held {value} when the launch "
                                f"began, and blocks run in no fixed order. Give the flag back its old value once its "
                                f"data was read (a flag.signal of it), so that every launch starts from it")
            self.acquired.append(Acquire(release, task.index, executing_threads(task), task.clock[task.index]))

    def _published(self, task, access_id: int) -> bool:
        """Whether an acquired release orders access ``access_id`` of an earlier block before ``task`` now."""
        access = self.memory.accesses[access_id]
        if access.what not in GENERIC_ACCESSES:
            return False
        return any(_released(acquire.release, access) and _acquired(acquire, task) for acquire in self.acquired)

    def _thread_order_missing(self, task, access: Access) -> str:
        """Why the flags this block acquired do not order the earlier block's ``access`` before ``task``'s current
        one when the only gap is between threads of one task (a sync missing before a signal or after a wait),
        else ''."""
        for acquire in self.acquired:
            release = acquire.release
            if release.block != access.block or release.clock[access.task] < access.epoch:
                continue
            if not _released(release, access):
                return (f": the flag.signal of block {release.block} was made by threads {_span(release.threads)} "
                        f"only, and no self.sync() after threads {_span(access.threads)} stored ({access.text()}) "
                        f"ordered their stores before it")
            if task.clock[acquire.task] >= acquire.epoch and not _acquired(acquire, task):
                return (f": the flag.wait was made by threads {_span(acquire.threads)} only, and no self.sync() "
                        f"after it orders threads {_span(executing_threads(task))} after the wait")
        return ""

    def access(self, tile: GlobalTile) -> Access:
        """What made ``tile``'s access, and where."""
        return self.memory.accesses[tile.id]

    def read(self, task, tile: GlobalTile) -> np.ndarray:
        """The tile's values (zero outside the view); RaceError if another block wrote any of them."""
        out = np.zeros(tile.tile_shape, dtype=tile.argument.data.dtype)
        if tile.empty:
            return out
        writers = tile.shadow("writer")
        self._check_blocks(task, tile, writers, "reads", "wrote")
        self._check_blocks(task, tile, tile.shadow("reducer"), "reads", "reduce-added into")
        readers, other_readers = tile.shadow("reader"), tile.shadow("other_reader")
        # This read is the element's other reader where its first reader is another block and none is kept yet.
        np.minimum(other_readers, tile.id, out=other_readers, where=self._other_blocks(readers))
        np.minimum(readers, tile.id, out=readers)
        out[tile.slices] = tile.data
        return out

    def write(self, task, tile: GlobalTile, values: np.ndarray) -> None:
        """Write ``values`` (tile-shaped) into the tile's elements; RaceError if another block wrote or read any."""
        access = self.access(tile)
        self.memory.written.add((access.argument, access.view))
        if tile.empty:
            return
        writers = tile.shadow("writer")
        self._check_blocks(task, tile, writers, "writes", "also wrote")
        self._check_readers(task, tile, "writes")
        self._check_blocks(task, tile, tile.shadow("reducer"), "writes", "reduce-added into")
        writers[...] = tile.id
        tile.data[...] = values[tile.slices]

    def reduce_add(self, task, tile: GlobalTile, values: np.ndarray, combine=None) -> None:
        """Add ``values`` (tile-shaped) into the tile's elements, or store ``combine(held, added)`` there when given
        (an instruction's own rounding of the sum); RaceError if another block wrote or read any with a plain
        access (another block's reduce-adds commute with this one)."""
        access = self.access(tile)
        self.memory.written.add((access.argument, access.view))
        if tile.empty:
            return
        self._check_blocks(task, tile, tile.shadow("writer"), "adds into", "wrote")
        self._check_readers(task, tile, "adds into")
        reducers = tile.shadow("reducer")
        np.minimum(reducers, tile.id, out=reducers)
        if combine is None:
            tile.data[...] += values[tile.slices]
        else:
            tile.data[...] = combine(tile.data, values[tile.slices])

    def _check_readers(self, task, tile: GlobalTile, verb: str) -> None:
        """RaceError if a block other than this one read any of the tile's elements: its first reader, or where
        that is this block, the first other block that read it."""
        self._check_blocks(task, tile, tile.shadow("reader"), verb, "read")
        self._check_blocks(task, tile, tile.shadow("other_reader"), verb, "read")

    def _other_blocks(self, ids: np.ndarray) -> np.ndarray:
        """Which of the access ``ids`` another block made: an earlier one, or one of this block's cluster."""
        others = ids < self.start
        if self.together:
            recent = (ids >= self.start) & (ids != NOBODY)
            for access_id in np.unique(ids[recent]):
                if self.memory.accesses[access_id].block != self.block:
                    others |= ids == access_id
        return others

    def _check_blocks(self, task, tile: GlobalTile, ids: np.ndarray, verb: str, other_verb: str) -> None:
        earlier = self._other_blocks(ids)
        if not earlier.any():
            return
        if self.acquired and self.access(tile).what in GENERIC_ACCESSES:
            for access_id in np.unique(ids[earlier]):
                if access_id < self.start and self._published(task, int(access_id)):
                    earlier &= ids != access_id
            if not earlier.any():
                return
        position = tuple(np.argwhere(earlier)[0])
        other, this = self.memory.accesses[ids[position]], self.access(tile)
        missing = self._thread_order_missing(task, other) if self.acquired else ""
        raise RaceError(f"{this.what} in block {this.block} {verb} {this.view}{tile.index(position)} (argument "
                        f"{this.argument!r}), which block {other.block} {other_verb} ({other.text()}): thread blocks "
                        f"run in no fixed order, so no block may read or write global memory that another block "
                        f"writes{self._unless()}{missing}", str(this.loc), task.machine.describe_tasks())

    def _unless(self) -> str:
        """The way out a race message names: a flag, when the block waited for one (it did not cover this)."""
        if self.acquired:
            return (" unless a flag orders the two: a flag.wait of this block, before this access, that passed on a "
                    "flag.signal the other block made after its access, both accesses ordinary loads or stores")
        return " (to hand data from one block to a later one, use self.flag.signal and self.flag.wait)"

    def store_issued(self, task, tile: GlobalTile) -> None:
        """A TMA store into the tile is in flight until ``store_observed``: reading the tile back races."""
        if not tile.empty:
            tile.shadow("tma_store")[...] = tile.id
            self.stores[tile.id] = PendingStore(task)

    def store_observed(self, task, tile: GlobalTile) -> None:
        """The issuer's ``tma.wait_group`` observed the store done: readers ordered after this may read it."""
        if tile.id in self.stores:
            self.stores[tile.id].observed = task.clock[task.index]

    def check_stores_waited(self, task, tile: GlobalTile) -> None:
        """RaceError if the tile holds the destination of a TMA store of this block that no ``tma.wait_group``
        ordered before ``task`` has observed."""
        if not self.stores or tile.empty:
            return
        marks = tile.shadow("tma_store")
        ours = (marks >= self.start) & (marks != NOBODY)
        if not ours.any():
            return
        for store_id in np.unique(marks[ours]):
            store = self.stores.get(int(store_id))
            if store is None:  # another block of the cluster stored there: a race its write reports
                continue
            issuer, observed = store.issuer, store.observed
            if observed is not None and (issuer is task or task.clock[issuer.index] >= observed):
                continue
            position = tuple(np.argwhere(marks == store_id)[0])
            this, issued = self.access(tile), self.memory.accesses[store_id]
            why = ("before tma.wait_group observed that store's bulk group" if observed is None else
                   f"after {issuer.name} observed it with tma.wait_group, but no barrier wait or sync orders that "
                   f"wait before this read")
            raise RaceError(f"{this.what} reads {this.view}{tile.index(position)} (argument {this.argument!r}), the "
                            f"destination of a TMA store ({issued.text()}), {why}: the copy may still be writing it",
                            str(this.loc), task.machine.describe_tasks())


def _released(release: Release, access: Access) -> bool:
    """Whether ``release`` (which follows ``access`` in the vector clocks) publishes it: the access is the
    signaller's own thread's, another task's, or a sync ordered it before the signal."""
    return (release.clock[access.task] >= access.epoch and
            (access.task != release.task or _within(access.threads, release.threads) or release.synced > access.epoch))


def _acquired(acquire: Acquire, task) -> bool:
    """Whether ``task``'s current instruction is ordered after the wait ``acquire``: by the vector clocks, and
    within the waiting task only for the threads that waited, or all of them after a later sync."""
    if task.clock[acquire.task] < acquire.epoch:
        return False
    return (task.index != acquire.task or _within(executing_threads(task), acquire.threads)
            or task.synced > acquire.epoch)


def _span(threads: tuple[int, int]) -> str:
    begin, end = threads
    return f"{begin}" if end - begin == 1 else f"{begin}-{end - 1}"
