"""Profile timestamps: the statements an instrumented build (``warpspec.profile``) records its timeline with.

No kernel author writes these: ``warpspec.timeline.instrument`` inserts them around the instrumented sites of a copy
of the kernel, and only that copy is compiled for profiling, so plain builds never contain them. The emulator
runs them as no-ops (the CPU timing model, ``warpspec.timeline.model``, times kernels its own way). The CUDA
emission is ``warpspec.timeline.sm90_profile``; ``warpspec.timeline.gpu`` decodes what they write.

Which blocks record: every block that runs on one chosen SM (``%smid`` compared at the block's start), up to a cap.
The buffer they write (the kernel's extra ``int64`` parameter) starts with one counter word per recording thread:
each recording warp of a block on that SM takes its record slot with one atomic on its counter at the block's start
(never later), so after the launch a counter holds how many blocks ran on the SM (its low ``COUNT_BITS`` bits; the
bits above tag it with the launch's ``%gridid``, so that every launch on one buffer, the timed ones too, counts from
zero), and slots at or past the cap are counted, not written. Then one record array per slot and recording thread:
array ``slot * recorders + recorder`` starts at word ``recorders + array * array_words(capacity)`` (the recorders of
one block may hold different slots; the header says which block an array is):

- a header of ``HEADER_WORDS`` words: written (1 once the recorder finished), events attempted (more than
  ``capacity`` means overflow; those were counted, not written), ``%smid``, the block as the kernel sees it
  (x | y << 21 | z << 42), then ``%globaltimer`` and ``%clock64`` at the recorder's start and at its end;
- ``capacity`` events of ``EVENT_WORDS`` words: what the event is, then ``%clock64`` at its start and at its end.
  The timestamps are the SM's 64-bit cycle counter as read (it counts from the SM's start, far past 32 bits), so
  they keep their words; the first word packs, from its low bits up, the site (``SITE_BITS``), the recorded index
  (``INDEX_BITS``: the flat index of the barrier or tile the site names, or of the stage a WGMMA run reads), the
  parity a wait waited for (``PHASE_BITS``) and the tile the recorder was in (``TILE_BITS``;
  ``warpspec.timeline.instrument`` says which tile that is).
  ``event_fields`` unpacks it.
"""

from __future__ import annotations

from dataclasses import dataclass

from warpspec.isa.contracts import EmulationMachine, EmulationTask, Steps
from warpspec.isa.registry import declare_timeline, emulates
from warpspec.isa.timeline_facts import NOT_SHOWN, STATEMENT, TimingCost
from warpspec.ir import nodes as ir

HEADER_WORDS = 8
EVENT_WORDS = 3
#: Header words, by name.
WRITTEN, COUNT, SMID, BLOCK, START_NS, START_CLOCK, END_NS, END_CLOCK = range(HEADER_WORDS)
#: A slot counter: blocks counted in its low bits, the launch's tag (low bits of ``%gridid``) above them.
COUNT_BITS = 24
COUNT_MASK = (1 << COUNT_BITS) - 1
GRID_TAG_MASK = (1 << (64 - COUNT_BITS)) - 1
#: The fields of an event's first word, low bits first: its site, its index, a wait's phase parity, its tile. A
#: build has at most ``2**SITE_BITS`` sites and indexes no array of more than ``2**INDEX_BITS`` barriers or
#: tiles (``warpspec.timeline.instrument`` refuses more); the tile counts modulo ``2**TILE_BITS``.
SITE_BITS, INDEX_BITS, PHASE_BITS, TILE_BITS = 16, 16, 1, 31
INDEX_SHIFT = SITE_BITS
PHASE_SHIFT = INDEX_SHIFT + INDEX_BITS
TILE_SHIFT = PHASE_SHIFT + PHASE_BITS


def blocks_counted(counter: int) -> int:
    """How many blocks a slot counter read back after a launch counted."""
    return int(counter) & COUNT_MASK


def event_fields(word: int) -> tuple[int, int, int, int]:
    """``(site, index, phase, tile)`` of an event's first word."""
    word = int(word)
    return (word & ((1 << SITE_BITS) - 1), word >> INDEX_SHIFT & ((1 << INDEX_BITS) - 1),
            word >> PHASE_SHIFT & ((1 << PHASE_BITS) - 1), word >> TILE_SHIFT)


def array_words(capacity: int) -> int:
    """The 64-bit words of one recorder's array holding ``capacity`` events."""
    return HEADER_WORDS + EVENT_WORDS * capacity


def array_start(slot: int, recorder: int, recorders: int, capacity: int) -> int:
    """The first word of recorder ``recorder``'s array in record slot ``slot`` (after the counters)."""
    return recorders + (slot * recorders + recorder) * array_words(capacity)


# ------------------------------------------------------------------------------------------------------- IR


@dataclass(frozen=True, eq=False)
class ProfileSetup(ir.Stmt):
    """At the kernel's start, on every thread: in a block running on SM ``sm``, the warp of thread
    ``recorders[r]`` takes the next record slot of recorder ``r`` (one atomicAdd on its counter) and, when the slot
    is below ``sampled``, finds its array in ``buffer`` there, and that thread writes its header's start; ``sites``
    timers are declared."""

    buffer: ir.Var
    recorders: tuple[int, ...]
    sampled: int  # the most blocks recorded (the name ``blocks`` is Stmt's, for nested statement lists)
    capacity: int
    sites: int
    sm: int = 0

    def text(self, f) -> str:
        return (f"profile.setup(buffer={self.buffer.name}, recorders={list(self.recorders)}, sm={self.sm}, "
                f"sampled={self.sampled}, capacity={self.capacity})")


@dataclass(frozen=True, eq=False)
class ProfileStart(ir.Stmt):
    """Take the start time of site ``site`` (every executing thread reads the clock into the site's timer)."""

    site: int

    def text(self, f) -> str:
        return f"profile.start(site={self.site})"


@dataclass(frozen=True, eq=False)
class ProfileEnd(ir.Stmt):
    """Take the end time of site ``site``; a recording thread writes the event with the runtime ``index`` (the
    flat leading index of the barrier or tile the site names, or of the stage a WGMMA run reads; 0 when it names
    none), the runtime ``phase`` parity of a wait (None elsewhere: 0 is written) and its tile counter."""

    site: int
    index: ir.Expr
    phase: ir.Expr | None = None

    def text(self, f) -> str:
        phase = "" if self.phase is None else f", phase={f(self.phase)}"
        return f"profile.end(site={self.site}, index={f(self.index)}{phase})"


@dataclass(frozen=True, eq=False)
class ProfileNextTile(ir.Stmt):
    """At the head of each iteration of a tile loop (``warpspec.timeline.instrument``): the executing thread's
    count of tile-loop iterations begun goes up by one; the events it records from here on are of the next
    tile."""

    def text(self, f) -> str:
        return "profile.next_tile()"


@dataclass(frozen=True, eq=False)
class ProfileJoin(ir.Stmt):
    """After a ``single_thread`` body holding sites: the lanes of the recording warp agree on their event count
    again. The elected thread, whichever lane ``elect.sync`` chose, recorded the body's events and counted them."""

    def text(self, f) -> str:
        return "profile.join()"


@dataclass(frozen=True, eq=False)
class ProfileFinish(ir.Stmt):
    """At the kernel's end, on every thread: a recording thread writes its header's count and end times."""

    def text(self, f) -> str:
        return "profile.finish()"


# ----------------------------------------------------------------------------------------------- emulation
# The emulator records nothing: profiling is the GPU's (the timing model charges its time, below, and records its
# events its own way).


@emulates(ProfileSetup)
@emulates(ProfileStart)
@emulates(ProfileEnd)
@emulates(ProfileNextTile)
@emulates(ProfileJoin)
@emulates(ProfileFinish)
def _record_nothing(machine: EmulationMachine, task: EmulationTask, s) -> Steps | None:
    """Every profiling statement's emulation: nothing happens."""
    return None


# The timestamps are what timelines are made of, not events of their own. The timing model meets them only when it
# models the instrumented build ("as recorded", ``warpspec.timeline.model.model_launch``), to set its summary beside
# a GPU recording's: a clock read costs a scalar statement, writing an event ``record_ns`` (its end clock, the three
# stores, the count) and the join after a single_thread body that recorded ``record_join_ns``.
for _profile in (ProfileSetup, ProfileStart, ProfileNextTile, ProfileFinish):
    declare_timeline(_profile, STATEMENT, NOT_SHOWN)
declare_timeline(ProfileEnd, TimingCost("record"), NOT_SHOWN)
declare_timeline(ProfileJoin, TimingCost("record_join"), NOT_SHOWN)
