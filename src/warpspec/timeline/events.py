"""The records a timeline is made of, shared by the GPU instrumentation and the CPU model: an ``Event`` is one
interval of one role of one block, a ``Timeline`` is all the events of one launch with what is known of it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from warpspec.errors import ArgumentError
from warpspec.ir import nodes as ir
from warpspec.timeline.facts import instrumentation

#: What an event is. "wait": an mbarrier wait (``barrier`` names it); "tma": a TMA issue (load or store);
#: "wgmma": WGMMA issue up to its commit; "wgmma_wait": ``wgmma.wait_group``; "tma_wait": ``tma.wait_group``;
#: "epilogue": from a consumer's last wait_group to its role's end; "sync": a block or named barrier.
KINDS = ("wait", "tma", "wgmma", "wgmma_wait", "tma_wait", "epilogue", "sync")

#: The further kinds of a counterexample's timeline (``warpspec.timeline.witness``): "arrive": an mbarrier arrive;
#: "step": a partition running to its next visible operation; "in_flight": an asynchronous operation from its issue
#: to its completion; "phase": an mbarrier's state (phase, arrivals, tx-count) between two changes.
WITNESS_KINDS = ("arrive", "step", "in_flight", "phase")


@dataclass(frozen=True)
class Event:
    """One interval ``[start_ns, end_ns]`` of role ``role`` of block ``block``, at kernel line ``line``.

    ``name`` reads as the user wrote it: "wait full_barriers[2]", "tma a -> sa[1]", "wgmma", "epilogue".
    Times are nanoseconds from the launch's earliest recorded event.

    What the event belongs to, alike on the GPU and in the model (``warpspec.timeline.instrument`` gives the exact
    rules); None where it does not apply, and for every event of a counterexample:

    - ``tile``: which of the output tiles its role walks, 0, 1, 2, ... in the order walked: the iteration of the
      role's tile loop (a persistent kernel's loop over its tiles, which holds the K loop) the event ran in, the
      last tile for what follows the loop, and 0 throughout a block that computes one tile;
    - ``stage``: the index of the pipeline stage it concerns: i for a wait on ``full_barriers[i]`` or
      ``empty_barriers[i]`` (any indexed barrier), for a TMA load into ``sa[i]`` and for a WGMMA run whose first
      ``wgmma.mma`` reads ``sb[i]`` as its B operand (a multi-dimensional index flattened row-major); None for
      other events;
    - ``phase``: the parity (0 or 1) a wait waited for, its phase operand at run time; None for other events;
    - ``pending``: for a ``wgmma_wait``, the n of ``wgmma.wait_group(n)``: all but the role's n most recently
      committed WGMMA groups are complete when it ends; None for other events."""

    block: tuple[int, int, int]
    role: str
    kind: str
    name: str
    start_ns: float
    end_ns: float
    line: str
    sm: int | None = None
    barrier: str | None = None  # for "wait": the barrier as named in the kernel, e.g. "full_barriers[2]"
    tile: int | None = None
    stage: int | None = None
    phase: int | None = None
    pending: int | None = None

    def __post_init__(self):
        if self.kind not in KINDS + WITNESS_KINDS:
            raise ValueError(f"event kind {self.kind!r} is not one of {', '.join(KINDS + WITNESS_KINDS)}")

    @property
    def duration_ns(self) -> float:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class Occupancy:
    """How many blocks of the kernel one SM holds at once (``blocks``), the resource that limits it (``limit``:
    "shared memory", "registers", "threads" or "blocks"; None when unknown), what one block takes (shared memory
    in bytes, registers per thread, threads) and where the count comes from (``source``)."""

    blocks: int
    limit: str | None
    shared_bytes: int
    registers: int | None
    threads: int
    source: str

    def text(self) -> str:
        """"1 (limited by shared memory; 193 KB of shared memory, 168 registers x 160 threads each; the driver's
        occupancy query)"."""
        limit = f"limited by {self.limit}; " if self.limit else ""
        registers = f"{self.registers} registers x " if self.registers else ""
        return (f"{self.blocks} ({limit}{self.shared_bytes / 1024:.0f} KB of shared memory, {registers}"
                f"{self.threads} threads each; {self.source})")


def resident_blocks(shared_bytes: int, registers: int, threads: int, device: dict) -> tuple[int, str]:
    """How many blocks taking ``shared_bytes`` of shared memory and ``threads`` threads of ``registers`` registers
    each fit one SM of ``device`` (the keys ``shared_bytes_per_sm``, ``shared_reserved_per_block``,
    ``registers_per_sm``, ``max_threads_per_sm``, ``max_blocks_per_sm``), and the resource that limits it."""
    warps_threads = -(-threads // 32) * 32  # registers are allocated per warp
    limits = {
        "shared memory": device["shared_bytes_per_sm"] // (shared_bytes + device["shared_reserved_per_block"]),
        "registers": device["registers_per_sm"] // (registers * warps_threads),
        "threads": device["max_threads_per_sm"] // threads,
        "blocks": device["max_blocks_per_sm"],
    }
    limit = min(limits, key=limits.get)
    return limits[limit], limit


@dataclass(frozen=True)
class Failure:
    """Where a counterexample's timeline ends: the error at ``time_ns``, its kernel ``line`` and its ``text``."""

    time_ns: float
    line: str
    text: str


@dataclass(frozen=True)
class Shortfall:
    """A role of one block whose events a record could not hold all of: ``recorded`` of ``needed``."""

    block: tuple[int, int, int]
    role: str
    recorded: int
    needed: int

    def text(self) -> str:
        """"block (0, 0, 0), producer (threads 128-159): 2048 of 5851 events"."""
        return f"block {self.block}, {self.role}: {self.recorded} of {self.needed} events"


@dataclass(frozen=True)
class Selection:
    """What a selected timeline (``Timeline.select``) holds: the events of ``tiles`` and of ``stages`` (None: of
    any), ``kept`` of the ``total`` events of the timeline it was selected from."""

    tiles: frozenset[int] | None
    stages: frozenset[int] | None
    kept: int
    total: int

    def text(self) -> str:
        """"tiles 0-3 and stage 1: 120 of 4096 events"."""
        parts = [f"{noun if len(values) == 1 else noun + 's'} {numbers_text(values)}"
                 for noun, values in (("tile", self.tiles), ("stage", self.stages)) if values is not None]
        return f"{' and '.join(parts) or 'every event'}: {self.kept} of {self.total} events"


def numbers_text(values: Iterable[int]) -> str:
    """Integers as a short list, runs as ranges: {0, 1, 2, 3, 7} -> "0-3, 7"."""
    runs: list[list[int]] = []
    for value in sorted(values):
        if runs and value == runs[-1][1] + 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def parse_numbers(option: str, text: str) -> frozenset[int]:
    """The non-negative integers of a list such as "0-3,7" (``--tiles``, ``--stages``); ArgumentError naming
    ``option`` otherwise."""
    values: set[int] = set()
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        if not (first.isdigit() and (last.isdigit() if dash else not last)) or (dash and int(last) < int(first)):
            raise ArgumentError(f"{option} must be a comma-separated list of non-negative integers and ranges A-B "
                                f"with A <= B (e.g. 0-3,7), got {text!r}")
        values.update(range(int(first), int(last if dash else first) + 1))
    return frozenset(values)


def _selected(name: str, values) -> frozenset[int] | None:
    """``Timeline.select``'s ``tiles`` or ``stages``: None, an integer or integers, as a set."""
    if values is None:
        return None
    try:
        chosen = frozenset((values,) if isinstance(values, int) else values)
    except TypeError:  # neither an integer nor a collection of them
        chosen = None
    if chosen is None or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in chosen):
        raise ArgumentError(f"Timeline.select {name} must be a non-negative integer or integers, got {values!r}")
    return chosen


def _both(earlier: frozenset[int] | None, now: frozenset[int] | None) -> frozenset[int] | None:
    """What two selections of tiles (or of stages) keep together; None keeps any."""
    if earlier is None or now is None:
        return now if earlier is None else earlier
    return earlier & now


@dataclass
class Timeline:
    """The events of one launch of ``kernel`` (its class name) with ``schedule`` (compile-time values), from
    ``source`` "gpu" (an instrumented build) or "model" (the CPU timing model).

    ``kernel_ns``: the whole launch's time, measured (an uninstrumented run) or modeled; ``flops``: the useful
    floating-point operations of the launch when known (for TFLOP/s); ``roles``: every role's name in block order,
    so a role with no events still gets a track; ``sm``: the SM whose blocks the events are (every block that ran
    there, up to the recording's cap); ``occupancy``: how many blocks an SM holds, when known; ``failure`` and
    ``unit``: a counterexample's error and its time axis (one step per microsecond); ``shortfalls``: the roles whose
    events the record could not hold all of (a GPU record past its capacity): the events are then a fragment;
    ``selection``: what the events are when they are only some tiles' or stages' (``select``), else None;
    ``view_bytes``: the bytes the launch's global views hold (each crosses HBM at least once) and ``hbm_gbps`` the
    HBM bandwidth the device sustains, when known (the model's parameters), so a kernel's memory bound can be
    judged; ``sm_blocks``: how many blocks ran on ``sm`` in all (the GPU record's counter, recorded or not), when
    known."""

    kernel: str
    source: str
    schedule: dict
    kernel_ns: float
    events: list[Event] = field(default_factory=list)
    roles: list[str] = field(default_factory=list)
    flops: float | None = None
    notes: list[str] = field(default_factory=list)
    sm: int | None = None
    occupancy: Occupancy | None = None
    failure: Failure | None = None  # a counterexample's error, marked on its chart
    unit: str = "time (µs)"  # the chart's time axis (a counterexample counts steps instead)
    shortfalls: list[Shortfall] = field(default_factory=list)
    selection: Selection | None = None
    view_bytes: float | None = None
    hbm_gbps: float | None = None
    sm_blocks: int | None = None

    @property
    def complete(self) -> bool:
        """Whether every event of the recorded roles is here (no record ran past its capacity)."""
        return not self.shortfalls

    def select(self, tiles: int | Iterable[int] | None = None,
               stages: int | Iterable[int] | None = None) -> Timeline:
        """A copy holding only the events of ``tiles`` and of ``stages`` (an integer or integers each; None: any),
        so that one tile's or one stage's events can be read, drawn and summarised alone. An event without a tile
        or a stage (a wait_group has no stage) is of none. The copy's ``selection`` says what it holds; selecting
        from a selection keeps what both select."""
        tile_set, stage_set = _selected("tiles", tiles), _selected("stages", stages)
        total = len(self.events)
        if self.selection is not None:
            total = self.selection.total
            tile_set, stage_set = _both(self.selection.tiles, tile_set), _both(self.selection.stages, stage_set)
        events = [e for e in self.events if (tile_set is None or e.tile in tile_set) and
                  (stage_set is None or e.stage in stage_set)]
        return replace(self, events=events, roles=list(self.roles), notes=list(self.notes),
                       shortfalls=list(self.shortfalls), selection=Selection(tile_set, stage_set, len(events), total))


def role_name(group: ir.Stmt) -> str:
    """A thread group's name in timelines: "producer" when its body issues TMA loads, "consumer" when it issues
    WGMMA, else "group", followed by its threads: "producer (threads 128-159)"."""
    # As each statement's family declares it shown (``isa.timeline_facts``): WGMMA issues run as "wgmma" events, and
    # of the "tma" events the loads are the ones completing on a barrier (a store has none).
    shown = [instrumentation(s) for s in ir.walk(group.body)]
    if any(fact.kind == "wgmma" for fact in shown):
        what = "consumer"
    elif any(fact.kind == "tma" and fact.barrier is not None for fact in shown):
        what = "producer"
    else:
        what = "group"
    return f"{what} (threads {group.begin}-{group.begin + group.count - 1})"
