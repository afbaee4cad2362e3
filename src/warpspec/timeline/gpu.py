"""Timelines measured on the GPU: a launch of a kernel's instrumented build (``warpspec.timeline.instrument``) with
a record buffer, and the decoding of what its sampled blocks recorded into a ``Timeline`` (source "gpu").

``warpspec.profile()`` makes a ``ProfileSession``; inside it every Script launch is sent here. A launch on the GPU
is three runs of the kernel on the same arguments: the plain build, timed (``Timeline.kernel_ns``, so TFLOP/s are
of the real kernel); optionally the instrumented build, timed the same way (the instrumentation's overhead); and
one recorded run of the instrumented build, decoded. On the emulator the kernel runs as usual and the CPU timing
model's timeline (``warpspec.timeline.model``) is kept instead.

Which blocks: every block that runs on one SM (``sm``, default 0), up to the first ``blocks`` of them, so the
timeline is that of a real SM with its co-resident blocks: their tensor-core busy share and stage occupancy are the
SM's. Each recording warp takes its slot at its block's start (one atomic on a counter per recorder); the
counters say how many blocks ran there, and those past the cap are noted. Times: ``%clock64`` cycles around each
site; per block, the recorder that started first anchors them to its ``%globaltimer`` reading, and cycles become
nanoseconds at the clock rate the block ran at (cycles against ``%globaltimer`` over the block's longest recorder),
or the device's clock rate when that span is too short for the timer's resolution. Blocks on different SMs are
placed by their anchors.
"""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack
from dataclasses import dataclass, replace

import numpy as np

from warpspec import runtime
from warpspec.dtypes import int64
from warpspec.errors import ArgumentError
from warpspec.timeline import profile_isa as records
from warpspec.ir import nodes as ir
from warpspec.timeline.instrument import PARAMETER, Instrumented, instrument
from warpspec.timeline.events import Event, Occupancy, Shortfall, Timeline, resident_blocks, role_name
from warpspec.timeline.sizing import events_needed, grid_blocks

#: Below this span of ``%globaltimer`` (ns) a block's own clock rate is not trusted: the timer may tick only
#: every microsecond, so the rate would be off by more than a few percent.
MIN_RATE_SPAN_NS = 20_000

#: The events per recorder when they cannot be counted from the kernel, and the most a record holds per recorder.
DEFAULT_CAPACITY = 2048
MAX_CAPACITY = 2**20 - 1

_instrumented: dict[tuple, tuple[ir.Kernel, Instrumented]] = {}


def instrumented(kernel: ir.Kernel, blocks: int, capacity: int, sm: int = 0) -> Instrumented:
    """The instrumented build's IR of ``kernel`` for these settings, made once (and kept with ``kernel``, so its
    compiled build is cached like the plain one's)."""
    key = (id(kernel), blocks, capacity, sm)
    entry = _instrumented.get(key)
    if entry is None or entry[0] is not kernel:
        entry = _instrumented[key] = (kernel, instrument(kernel, blocks, capacity, sm))
    return entry[1]


def buffer_words(build: Instrumented) -> int:
    """The 64-bit words of ``build``'s record buffer: a counter per recorder, then the arrays."""
    return records.array_start(build.blocks, 0, len(build.recorders), build.capacity)


@dataclass(frozen=True)
class _Array:
    """One recorder's array of one sampled block, as read back."""

    recorder: int
    header: np.ndarray
    events: np.ndarray  # [written events, EVENT_WORDS]


def decode(words: np.ndarray, build: Instrumented, kernel_ns: float, clock_hz: float,
           flops: float | None = None, occupancy: Occupancy | None = None) -> Timeline:
    """The Timeline of one recorded launch of ``build``: ``words`` is its record buffer as read back (uint64),
    ``kernel_ns`` the plain build's time, ``clock_hz`` the SM clock rate to use where a block's own cannot be
    measured (see the module docstring), ``occupancy`` the blocks an SM holds when known."""
    words = np.asarray(words, dtype=np.uint64)
    per_array = records.array_words(build.capacity)
    if words.size != buffer_words(build):
        raise ArgumentError(f"a record buffer of {buffer_words(build)} words was expected, got {words.size}")
    recorders = len(build.recorders)
    # Every block on the SM counts once on each recorder's counter.
    ran = max((records.blocks_counted(counter) for counter in words[:recorders]), default=0)
    arrays: dict[tuple[int, int, int], list[_Array]] = {}
    notes = [f"every block that ran on SM {build.sm} recorded ({ran}), each role's first warp"]
    if ran > build.blocks:
        notes[0] = (f"the first {build.blocks} of the {ran} blocks that ran on SM {build.sm} recorded, each role's "
                    f"first warp (profile(blocks=...) raises the cap)")
    elif ran == 0:
        notes[0] = f"no block ran on SM {build.sm}: nothing was recorded"
    shortfalls = []
    role_of = {s.group.begin: role_name(s.group) for s in build.sites}
    for array in range(build.blocks * recorders):
        start = records.array_start(array // recorders, array % recorders, recorders, build.capacity)
        data = words[start:start + per_array]
        header = data[:records.HEADER_WORDS]
        if header[records.WRITTEN] != 1:
            continue  # a slot no block took (fewer blocks on the SM than slots), or a recorder that never finished
        count = int(header[records.COUNT])
        written = min(count, build.capacity)
        block = _block(int(header[records.BLOCK]))
        recorder = build.recorders[array % recorders]
        if count > build.capacity:
            shortfalls.append(Shortfall(block, role_of[recorder], written, count))
        events = data[records.HEADER_WORDS:records.HEADER_WORDS + records.EVENT_WORDS * written]
        arrays.setdefault(block, []).append(_Array(recorder, header, events.reshape(written, records.EVENT_WORDS)))
    # At the cap the recorders of one block may race for the last slots: a block some of whose recorders got none
    # is left out rather than shown with roles missing.
    partial = [b for b, block_arrays in arrays.items() if len(block_arrays) < recorders and ran > build.blocks]
    if partial:
        notes.append(f"{len(partial)} block(s) at the cap got a slot for only some of their roles and are left out")
        for block in partial:
            del arrays[block]
        shortfalls = [short for short in shortfalls if short.block not in partial]
    events, measured = [], 0
    # %globaltimer counts from an epoch (about 1.7e18 ns): only differences fit a float to the nanosecond.
    origin = min((int(a.header[records.START_NS]) for block in arrays.values() for a in block), default=0)
    for block, block_arrays in sorted(arrays.items()):
        convert, own_rate = _converter(block_arrays, clock_hz, origin)
        measured += own_rate
        for array in block_arrays:
            sm = int(array.header[records.SMID])
            for word, start, end in array.events:
                site_id, index, phase, tile = records.event_fields(word)
                if site_id >= len(build.sites):
                    raise ArgumentError(f"record of block {block}, thread {array.recorder} names site {site_id}; "
                                        f"the build has {len(build.sites)}")
                site = build.sites[site_id]
                name, barrier = site.render(index)
                events.append(Event(block, role_name(site.group), site.kind, name, convert(int(start)),
                                    convert(int(end)), str(site.loc), sm, barrier, tile,
                                    index if site.staged else None, phase if site.kind == "wait" else None,
                                    site.pending))
    if arrays and measured < len(arrays):
        notes.append(f"{len(arrays) - measured} block(s) ran shorter than {MIN_RATE_SPAN_NS / 1000:.0f} us: their "
                     f"cycles were converted at the device clock rate, {clock_hz / 1e9:.3f} GHz")
    first = min((e.start_ns for e in events), default=0.0)
    events = [replace(e, start_ns=e.start_ns - first, end_ns=e.end_ns - first) for e in events]
    events.sort(key=lambda e: (e.block, e.role, e.start_ns))
    kernel = build.kernel
    groups = sorted({(s.group.begin, s.group.count): s.group for s in build.sites}.items())
    return Timeline(kernel.name, "gpu", dict(kernel.constants), kernel_ns, events,
                    list(dict.fromkeys(role_name(group) for _, group in groups)), flops, notes, build.sm, occupancy,
                    shortfalls=shortfalls, sm_blocks=ran)


def _block(word: int) -> tuple[int, int, int]:
    return word & 0x1FFFFF, (word >> 21) & 0x1FFFFF, word >> 42


def _converter(arrays: list[_Array], clock_hz: float, origin: int):
    """``(cycles -> ns after the timer's ``origin``, whether the block's own clock rate was used)`` for one
    block's arrays: all its recorders read one SM's ``%clock64``, anchored at the earliest recorder's
    ``%globaltimer``."""
    anchor = min(arrays, key=lambda a: int(a.header[records.START_NS]))
    anchor_ns = int(anchor.header[records.START_NS]) - origin
    anchor_clock = int(anchor.header[records.START_CLOCK])
    longest = max(arrays, key=lambda a: int(a.header[records.END_NS]) - int(a.header[records.START_NS]))
    span_ns = int(longest.header[records.END_NS]) - int(longest.header[records.START_NS])
    span_clock = int(longest.header[records.END_CLOCK]) - int(longest.header[records.START_CLOCK])
    own = span_ns >= MIN_RATE_SPAN_NS and span_clock > 0
    ns_per_cycle = span_ns / span_clock if own else 1e9 / clock_hz
    return (lambda cycles: anchor_ns + (cycles - anchor_clock) * ns_per_cycle), own


# --------------------------------------------------------------------------------------------- the session


class ProfileSession:
    """What ``with warpspec.profile(...) as session:`` yields: every Script launch inside it records, and
    ``session.timelines`` holds one Timeline per launch, in order.

    ``blocks``: the most blocks recorded per launch (the first that ran on SM ``sm``); ``capacity``: events each
    recording thread has room for (more are counted, and the Timeline says what is missing); None: as many as the
    launch records, counted from the kernel's trip counts (``warpspec.timeline.sizing``), or
    ``DEFAULT_CAPACITY`` where its control flow reads data; ``flops``: the useful
    floating-point operations of each launch, for TFLOP/s (None: unknown); ``overhead``: also time the instrumented
    build, noting its time against the plain build's (``session.instrumented_ns`` gets one entry per GPU launch);
    ``timing``: a context manager factory yielding ``time(kernel, arguments, built) -> median ms``
    (``warpspec.tune.bench.CudaBench.timing``); ``report``: called with each new Timeline."""

    def __init__(self, blocks: int = 64, capacity: int | None = None, flops: float | None = None,
                 overhead: bool = False, timing=None, report=None, sm: int = 0):
        for name, value in (("blocks", blocks), ("capacity", capacity)):
            if name == "capacity" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**20:
                raise ArgumentError(f"profile {name} must be an integer in [1, 2^20), got {value!r}")
        if isinstance(sm, bool) or not isinstance(sm, int) or not 0 <= sm < 2**16:
            raise ArgumentError(f"profile sm must be an SM number, an integer in [0, 2^16), got {sm!r}")
        if flops is not None and (isinstance(flops, bool) or not isinstance(flops, (int, float)) or flops <= 0):
            raise ArgumentError(f"profile flops must be a positive number of floating-point operations, got "
                                f"{flops!r}")
        self.blocks, self.capacity, self.flops, self.overhead, self.sm = blocks, capacity, flops, overhead, sm
        self.timing, self.report = timing, report
        self.timelines: list[Timeline] = []
        self.instrumented_ns: list[float] = []
        self._stack = ExitStack()
        self._time = None
        self._previous = None

    def __enter__(self) -> "ProfileSession":
        self._previous = runtime.set_profiler(self)
        return self

    def __exit__(self, *exc) -> None:
        runtime.set_profiler(self._previous)
        self._stack.close()
        self._time = None

    def launch(self, kernel: ir.Kernel, arguments: dict, backend: str):
        """Run ``kernel`` with runtime ``arguments`` on ``backend`` ("cuda" or "emulator") and keep its timeline;
        returns what the back end's run returns."""
        if backend == "emulator":
            from warpspec.emulator.run import call_on_emulator

            from warpspec.timeline.model import model_launch

            result = call_on_emulator(kernel, arguments)
            self._keep(model_launch(kernel, arguments))
            return result
        if self._time is None:
            self._time = self._stack.enter_context(self.timing())
        self._keep(self._record(kernel, arguments))
        return None

    def _keep(self, timeline: Timeline) -> None:
        self.timelines.append(timeline)
        if self.report is not None:
            self.report(timeline)

    def _record(self, kernel: ir.Kernel, arguments: dict) -> Timeline:
        from warpspec.cuda.driver import default_device, use_device
        from warpspec.cuda.plan import first_array_device

        # The record buffer, the timing events and the device's limits are those of the GPU the launch goes to
        # (its arrays'), whatever the current device.
        device = first_array_device(kernel, arguments)
        with use_device(default_device() if device is None else device):
            return self._record_here(kernel, arguments)

    def _record_here(self, kernel: ir.Kernel, arguments: dict) -> Timeline:
        from warpspec.cuda.driver import DeviceBuffer
        from warpspec.cuda.launch import compile_kernel, launch_planned

        plain = compile_kernel(kernel)
        kernel_ms = self._time(kernel, arguments, plain)
        capacity, notes = self._capacity(kernel, arguments)
        instrumented_build = instrumented(kernel, self.blocks, capacity, self.sm)
        built = compile_kernel(instrumented_build.kernel)
        words = buffer_words(instrumented_build)
        buffer = DeviceBuffer(8 * words)
        device = _device_limits(buffer.device)
        if self.sm >= device["sm_count"]:
            raise ArgumentError(f"profile sm={self.sm}: the device has {device['sm_count']} SMs (0-"
                                f"{device['sm_count'] - 1})")
        recorded = dict(arguments, **{PARAMETER: buffer.array((words,), int64)})
        if self.overhead:
            instrumented_ms = self._time(instrumented_build.kernel, recorded, built)
            self.instrumented_ns.append(instrumented_ms * 1e6)
            extra = 100 * (instrumented_ms / kernel_ms - 1)
            notes.append(f"instrumented build: {instrumented_ms:.4f} ms, {extra:+.1f}% over the plain build's "
                         f"{kernel_ms:.4f} ms")
        buffer.upload(np.zeros(words, np.uint64))
        launch_planned(instrumented_build.kernel, recorded, built=built)
        occupancy = _occupancy(kernel, plain, buffer.device, device)
        timeline = decode(buffer.download(np.empty(words, np.uint64)), instrumented_build, kernel_ms * 1e6,
                          device["clock_hz"], self.flops, occupancy)
        slowed = slowed_sm_note(self.sm, timeline.sm_blocks, grid_blocks(kernel, arguments), device["sm_count"],
                                occupancy.blocks)
        timeline.notes += notes + ([slowed] if slowed else [])
        return timeline

    def _capacity(self, kernel: ir.Kernel, arguments: dict) -> tuple[int, list[str]]:
        """The events each recorder has room for in this launch, and a note when it could not be counted."""
        if self.capacity is not None:
            return self.capacity, []
        return record_capacity(kernel, arguments, self.blocks, self.sm)


def record_capacity(kernel: ir.Kernel, arguments: dict, blocks: int, sm: int = 0) -> tuple[int, list[str]]:
    """The events each recorder of an instrumented build of ``kernel`` (recording ``blocks`` blocks of SM ``sm``)
    makes in a launch on ``arguments``, counted from the kernel, and a note when it could not be counted
    (``DEFAULT_CAPACITY`` then)."""
    needed = events_needed(instrumented(kernel, blocks, 1, sm), arguments)
    if needed is None:
        return DEFAULT_CAPACITY, [f"the record's capacity could not be counted from the kernel (its control flow "
                                  f"reads data): {DEFAULT_CAPACITY} events per role and block (profile(capacity=...) "
                                  f"sets it)"]
    return min(max(needed, 1), MAX_CAPACITY), []


#: What ``_device_limits`` reads, by the key ``warpspec.timeline.events.resident_blocks`` (and h200.json) uses.
_LIMITS = {"sm_count": "MULTIPROCESSOR_COUNT", "shared_bytes_per_sm": "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
           "shared_reserved_per_block": "RESERVED_SHARED_MEMORY_PER_BLOCK",
           "registers_per_sm": "MAX_REGISTERS_PER_MULTIPROCESSOR",
           "max_threads_per_sm": "MAX_THREADS_PER_MULTIPROCESSOR", "max_blocks_per_sm": "MAX_BLOCKS_PER_MULTIPROCESSOR"}


def _device_limits(device: int) -> dict:
    """The device's SM count, per-SM limits (the keys of ``_LIMITS``) and peak SM clock rate (``clock_hz``, Hz;
    the driver reports kHz)."""
    from cuda.bindings import driver as cu

    from warpspec.cuda.driver import check

    handle = check(cu.cuDeviceGet(device), f"cuDeviceGet({device})")

    def attribute(name: str) -> int:
        return check(cu.cuDeviceGetAttribute(getattr(cu.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}"), handle),
                     f"reading the device's {name.lower()}")

    limits = {key: attribute(name) for key, name in _LIMITS.items()}
    limits["clock_hz"] = 1e3 * attribute("CLOCK_RATE")
    return limits


#: A recorded SM that ran fewer blocks than this share of the grid's average per SM was slowed by its recording.
SLOWED_SHARE = 0.9


def slowed_sm_note(sm: int, ran: int | None, total: int, sm_count: int, per_sm: int) -> str | None:
    """A note when the recorded SM ``sm`` ran markedly fewer blocks (``ran``) than the grid's ``total`` spread over
    ``sm_count`` SMs would give it: where a grid is more than one wave (more blocks than the SMs hold at once,
    ``per_sm`` each), blocks go to SMs as they free up, so an SM that recording slows runs fewer of them, and the
    launch's time (the other SMs take them up) does not show it; its waits and shares are then of a slowed SM."""
    if ran is None or total <= sm_count * max(per_sm, 1):
        return None
    average = total / sm_count
    if ran >= SLOWED_SHARE * average:
        return None
    return (f"SM {sm} ran {ran} blocks where the grid's {total} over {sm_count} SMs average {average:.1f}: "
            f"recording slowed it (the other SMs took up the blocks it left), so the waits and shares above are "
            f"those of a slowed SM")


def _occupancy(kernel: ir.Kernel, plain, device: int, limits: dict) -> Occupancy:
    """How many blocks of the plain build ``plain`` (already loaded, so its dynamic shared memory is allowed) an
    SM holds: the driver's occupancy query; the limiting resource is the one whose limit gives the same count."""
    from cuda.bindings import driver as cu

    from warpspec.cuda.driver import check, load_module

    function = load_module(plain.module.cubin, device).function(plain.generated.name)
    dynamic = plain.generated.shared_bytes
    blocks = check(cu.cuOccupancyMaxActiveBlocksPerMultiprocessor(function.handle, kernel.num_threads, dynamic),
                   "cuOccupancyMaxActiveBlocksPerMultiprocessor")
    attributes = function.attributes
    shared = dynamic + attributes.get("shared_size_bytes", 0)
    registers = attributes["num_regs"]
    count, limit = resident_blocks(shared, registers, kernel.num_threads, limits)
    return Occupancy(blocks, limit if count == blocks else None, shared, registers, kernel.num_threads,
                     "the driver's occupancy query")


def report_to(folder: str):
    """A session ``report`` for ``WARPSPEC_PROFILE=1``: each launch's timeline is written by
    ``warpspec.timeline.write`` into ``folder/<kernel>-<n>``, and where it went is printed to stderr."""
    written = []

    def report(timeline: Timeline) -> None:
        from warpspec.timeline import write  # the package's own __init__, which imports this module

        written.append(timeline)
        roles = ", ".join(f"{role}: {sum(e.role == role for e in timeline.events)} events" for role in timeline.roles)
        out = os.path.join(folder, f"{timeline.kernel}-{len(written)}")
        try:
            write(timeline, out)
        except OSError as error:  # a folder that is a file, or read-only: the variable that named it is the fix
            reason = error.strerror or str(error)
            raise ArgumentError(f"WARPSPEC_PROFILE_DIR={folder}: could not write the timeline of "
                                f"{timeline.kernel} into {out}: {reason}; set WARPSPEC_PROFILE_DIR to a writable "
                                f"folder (or unset WARPSPEC_PROFILE)") from None
        print(f"warpspec profile: {timeline.kernel} ({roles}) written to {out}", file=sys.stderr)

    return report
