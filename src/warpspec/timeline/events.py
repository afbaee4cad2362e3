"""The records a timeline is made of, shared by the GPU instrumentation and the CPU model: an ``Event`` is one
interval of one role of one block, a ``Timeline`` is all the events of one launch with what is known of it."""

from __future__ import annotations

from dataclasses import dataclass, field

from warpspec.ir import nodes as ir
from warpspec.isa.tma import TmaLoad
from warpspec.isa.wgmma import WgmmaMma

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
    Times are nanoseconds from the launch's earliest recorded event."""

    block: tuple[int, int, int]
    role: str
    kind: str
    name: str
    start_ns: float
    end_ns: float
    line: str
    sm: int | None = None
    barrier: str | None = None  # for "wait": the barrier as named in the kernel, e.g. "full_barriers[2]"

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


@dataclass
class Timeline:
    """The events of one launch of ``kernel`` (its class name) with ``schedule`` (compile-time values), from
    ``source`` "gpu" (an instrumented build) or "model" (the CPU timing model).

    ``kernel_ns``: the whole launch's time, measured (an uninstrumented run) or modeled; ``flops``: the useful
    floating-point operations of the launch when known (for TFLOP/s); ``roles``: every role's name in block order,
    so a role with no events still gets a track; ``sm``: the SM whose blocks the events are (every block that ran
    there, up to the recording's cap); ``occupancy``: how many blocks an SM holds, when known; ``failure`` and
    ``unit``: a counterexample's error and its time axis (one step per microsecond); ``shortfalls``: the roles whose
events the record could not hold all of (a GPU record past its capacity): the events are then a fragment."""

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

    @property
    def complete(self) -> bool:
        """Whether every event of the recorded roles is here (no record ran past its capacity)."""
        return not self.shortfalls


def role_name(group: ir.Stmt) -> str:
    """A thread group's name in timelines: "producer" when its body issues TMA loads, "consumer" when it issues
    WGMMA, else "group", followed by its threads: "producer (threads 128-159)"."""
    body = list(ir.walk(group.body))
    if any(isinstance(s, WgmmaMma) for s in body):
        what = "consumer"
    elif any(isinstance(s, TmaLoad) for s in body):
        what = "producer"
    else:
        what = "group"
    return f"{what} (threads {group.begin}-{group.begin + group.count - 1})"
