"""Profile timestamps: the statements an instrumented build (``warpspec.profile``) records its timeline with.

No kernel author writes these: ``warpspec.passes.instrument`` inserts them around the instrumented sites of a copy
of the kernel, and only that copy is compiled for profiling, so plain builds never contain them. The emulator
runs them as no-ops (the CPU timing model, ``warpspec.timeline.model``, times kernels its own way). The CUDA
emission is ``warpspec.cuda.sm90.profile``; ``warpspec.timeline.gpu`` decodes what they write.

The buffer they write (the kernel's extra ``int64`` parameter) holds one record array per recording thread of
every sampled block: array ``slot * recorders + recorder`` starts at word ``array * array_words(capacity)``:

- a header of ``HEADER_WORDS`` words: written (1 once the recorder finished), events attempted (more than
  ``capacity`` means overflow; those were counted, not written), ``%smid``, the block as the kernel sees it
  (x | y << 21 | z << 42), then ``%globaltimer`` and ``%clock64`` at the recorder's start and at its end;
- ``capacity`` events of ``EVENT_WORDS`` words: site | index << 32, ``%clock64`` at the start and at the end.
"""

from __future__ import annotations

from dataclasses import dataclass

from warpspec.isa.registry import emulates
from warpspec.ir import nodes as ir

HEADER_WORDS = 8
EVENT_WORDS = 3
#: Header words, by name.
WRITTEN, COUNT, SMID, BLOCK, START_NS, START_CLOCK, END_NS, END_CLOCK = range(HEADER_WORDS)


def array_words(capacity: int) -> int:
    """The 64-bit words of one recorder's array holding ``capacity`` events."""
    return HEADER_WORDS + EVENT_WORDS * capacity


# ------------------------------------------------------------------------------------------------------- IR


@dataclass(frozen=True, eq=False)
class ProfileSetup(ir.Stmt):
    """At the kernel's start, on every thread: in a sampled block (one whose launch-order index is one of
    ``sampled`` evenly spaced ones) the warp of thread ``recorders[r]`` finds record array ``r`` in ``buffer``, and
    that thread writes its header's start; ``sites`` timers are declared."""

    buffer: ir.Var
    recorders: tuple[int, ...]
    sampled: int  # blocks sampled (the name ``blocks`` is Stmt's, for nested statement lists)
    capacity: int
    sites: int

    def text(self, f) -> str:
        return (f"profile.setup(buffer={self.buffer.name}, recorders={list(self.recorders)}, sampled={self.sampled}, "
                f"capacity={self.capacity})")


@dataclass(frozen=True, eq=False)
class ProfileStart(ir.Stmt):
    """Take the start time of site ``site`` (every executing thread reads the clock into the site's timer)."""

    site: int

    def text(self, f) -> str:
        return f"profile.start(site={self.site})"


@dataclass(frozen=True, eq=False)
class ProfileEnd(ir.Stmt):
    """Take the end time of site ``site``; a recording thread writes the event with the runtime ``index`` (the
    flat leading index of the barrier or tile the site names; 0 when it names none)."""

    site: int
    index: ir.Expr

    def text(self, f) -> str:
        return f"profile.end(site={self.site}, index={f(self.index)})"


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
# The emulator records nothing: profiling is the GPU's, and the timing model reads the plain kernel.


@emulates(ProfileSetup)
def _setup(machine, task, s: ProfileSetup):
    return None


@emulates(ProfileStart)
def _start(machine, task, s: ProfileStart):
    return None


@emulates(ProfileEnd)
def _end(machine, task, s: ProfileEnd):
    return None


@emulates(ProfileJoin)
def _join(machine, task, s: ProfileJoin):
    return None


@emulates(ProfileFinish)
def _finish(machine, task, s: ProfileFinish):
    return None
