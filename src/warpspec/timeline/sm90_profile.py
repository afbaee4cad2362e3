"""sm_90a emission of profile timestamps (``warpspec.timeline.profile_isa``), in instrumented builds only.

Times are ``%clock64`` (the SM's cycle counter, which every warp of a block reads alike, so a block's roles compare
to the cycle) held in a register per site from start to end; the recording thread writes an event with plain 64-bit
stores when it ends: each role's first warp owns its array, its first lane writes what the whole group runs, and the
lane ``single_thread`` elects writes what it runs alone. The one atomic is the slot: at the block's start, a
recording warp of a block on the recorded SM (``%smid``) takes its array with one atomic on its recorder's counter
(an add; a compare-and-swap for the launch's first block there, which tags the counter with the launch's
``%gridid``, so repeated launches on one buffer each count from zero). Only those warps, in recorded blocks, read
the clock at all: elsewhere a site costs a predicate. ``%globaltimer`` (nanoseconds, but updated only every
microsecond or so on some parts) is read twice per recorder, at its start and its end, so the host converts cycles
to nanoseconds with the clock rate the kernel itself ran at and places blocks of different SMs on one time axis.
Every read is ``asm volatile`` with a memory clobber: the compiler neither drops it nor moves the instrumented
instruction's memory accesses across it. The tile an event belongs to is a register that every thread sets at the
head of each tile-loop iteration from a count of them (an add and a shift per tile, none per event); a kernel
without tile loops never sets it, and the compiler folds its events' tile to 0.
"""

from __future__ import annotations

from warpspec.cuda.contracts import CodeGenerator
from warpspec.timeline.profile_isa import (BLOCK, COUNT, COUNT_BITS, COUNT_MASK, END_CLOCK, END_NS, EVENT_WORDS,
                                           GRID_TAG_MASK, HEADER_WORDS, INDEX_BITS, INDEX_SHIFT, PHASE_SHIFT, SMID,
                                           START_CLOCK, START_NS, TILE_SHIFT, WRITTEN, ProfileEnd, ProfileFinish,
                                           ProfileJoin, ProfileNextTile, ProfileSetup, ProfileStart, array_words)
from warpspec.isa.registry import emits
from warpspec.ir import nodes as ir
from warpspec.target import SM90A

TARGET = SM90A.name
# The record array of this thread's warp (null: the warp does not record), whether this thread is the warp's first
# (it writes the events of the whole group and the header), the role's events so far and the room in the array.
_RECORD, _LEAD, _COUNT, _CAPACITY = "wsprof_rec_", "wsprof_lead_", "wsprof_n_", "wsprof_capacity_"
# The tile-loop iterations this thread has begun, and its events' tile, already shifted into place in the high half
# of their first word (which holds the phase and the tile: profile_isa's layout puts the phase at bit 32).
_TILES, _TILE_FIELD = "wsprof_tiles_", "wsprof_tile_"
assert PHASE_SHIFT == 32 and TILE_SHIFT > PHASE_SHIFT


def _timer(site: int) -> str:
    return f"wsprof_t{site}_"


def _read(register: str, what: str) -> str:
    return f'asm volatile("mov.u64 %0, %%{what};" : "=l"({register}) :: "memory");'


@emits(ProfileSetup, TARGET)
def _emit_ProfileSetup(gen: CodeGenerator, s: ProfileSetup) -> None:
    recorders, blocks = len(s.recorders), s.sampled
    choose = "".join(f"warp == {t // 32} ? {r} : " for r, t in enumerate(s.recorders)) + "-1"
    x, y, z = (gen.cexpr(ir.Special(f"blockIdx.{axis}")) for axis in "xyz")
    gen.line(f"// profile: {recorders} recording thread(s) per block, the first {blocks} block(s) that run on SM "
             f"{s.sm}")
    gen.line(f"unsigned long long *{_RECORD} = nullptr;")
    gen.line(f"const bool {_LEAD} = threadIdx.x % 32 == 0;")
    gen.line(f"unsigned {_COUNT} = 0;")
    gen.line(f"const unsigned {_CAPACITY} = {s.capacity}u;")
    gen.line(f"unsigned {_TILES} = 0, {_TILE_FIELD} = 0;")
    gen.line("{")
    gen.indent += 1
    gen.line(f"const int recorder_ = {choose};")
    gen.line('unsigned smid_; asm volatile("mov.u32 %0, %%smid;" : "=r"(smid_));')
    # The whole recording warp runs this at the block's start; its first lane takes the slot for all of it.
    gen.line(f"if (recorder_ >= 0 && smid_ == {s.sm}u) {{")
    gen.indent += 1
    gen.line(f"u64 *const counters_ = reinterpret_cast<u64 *>({gen.name_of(s.buffer)});")
    gen.line("u64 slot_ = 0;")
    # A counter is this launch's when its tag is the launch's %gridid: the launch's first block on the SM claims
    # it with a compare-and-swap, the others add to it, so every launch (timed ones too) records from slot 0.
    gen.line(f"if ({_LEAD}) {{")
    gen.indent += 1
    gen.line("u64 grid_;")
    gen.line(_read("grid_", "gridid"))
    gen.line(f"grid_ &= {hex(GRID_TAG_MASK)}ull;")
    gen.line("u64 *const counter_ = counters_ + recorder_;")
    gen.line("u64 old_ = *reinterpret_cast<volatile u64 *>(counter_);")
    gen.line(f"while ((old_ >> {COUNT_BITS}) != grid_) {{")
    gen.line(f"  const u64 seen_ = atomicCAS(counter_, old_, (grid_ << {COUNT_BITS}) | 1ull);")
    gen.line("  if (seen_ == old_) break;")
    gen.line("  old_ = seen_;")
    gen.line("}")
    gen.line(f"slot_ = (old_ >> {COUNT_BITS}) == grid_ ? atomicAdd(counter_, 1ull) & {hex(COUNT_MASK)}ull : 0ull;")
    gen.indent -= 1
    gen.line("}")
    gen.line("slot_ = __shfl_sync(0xffffffffu, slot_, 0);")
    gen.line(f"if (slot_ < {blocks}ull) {{")
    gen.indent += 1
    gen.line(f"{_RECORD} = counters_ + {recorders}ull + (slot_ * {recorders}ull + recorder_) * "
             f"{array_words(s.capacity)}ull;")
    gen.line(f"if ({_LEAD}) {{")
    gen.indent += 1
    gen.line("u64 ns_, clock_;")
    gen.line(_read("ns_", "globaltimer"))
    gen.line(_read("clock_", "clock64"))
    gen.line(f"{_RECORD}[{SMID}] = smid_;")
    gen.line(f"{_RECORD}[{BLOCK}] = static_cast<u64>({x}) | (static_cast<u64>({y}) << 21) | "
             f"(static_cast<u64>({z}) << 42);")
    gen.line(f"{_RECORD}[{START_NS}] = ns_;")
    gen.line(f"{_RECORD}[{START_CLOCK}] = clock_;")
    for _ in range(3):
        gen.indent -= 1
        gen.line("}")
    gen.indent -= 1
    gen.line("}")
    if s.sites:
        gen.line(f"u64 {', '.join(f'{_timer(i)} = 0' for i in range(s.sites))};")


@emits(ProfileStart, TARGET)
def _emit_ProfileStart(gen: CodeGenerator, s: ProfileStart) -> None:
    # Only recording warps read the clock: the blocks not sampled pay a predicate per site, nothing more.
    gen.line(f"if ({_RECORD} != nullptr) {_read(_timer(s.site), 'clock64')}")


@emits(ProfileEnd, TARGET)
def _emit_ProfileEnd(gen: CodeGenerator, s: ProfileEnd) -> None:
    index = gen.cexpr(s.index)
    # The first word packs the event's fields (profile_isa's layout): the site and the index in its low half, the
    # wait's phase and the tile (kept in place by ProfileNextTile) in its high half.
    high = _TILE_FIELD if s.phase is None else f"({_TILE_FIELD} | (static_cast<unsigned>({gen.cexpr(s.phase)}) & 1u))"
    word = (f"(static_cast<u64>({high}) << 32) | {s.site}u | ((static_cast<unsigned>({index}) & "
            f"{hex((1 << INDEX_BITS) - 1)}u) << {INDEX_SHIFT})")
    # Inside single_thread the one thread that runs the site records it; elsewhere the warp's first thread does,
    # and every lane of the warp counts it.
    writer = "" if gen.single_depth else f"{_LEAD} && "
    gen.line(f"if ({_RECORD} != nullptr) {{")
    gen.indent += 1
    gen.line("u64 wsprof_end_;")
    gen.line(_read("wsprof_end_", "clock64"))
    gen.line(f"if ({writer}{_COUNT} < {_CAPACITY}) {{  // past the capacity an event is counted, not written")
    gen.line(f"  u64 *const wsprof_event_ = {_RECORD} + {HEADER_WORDS} + {EVENT_WORDS} * {_COUNT};")
    gen.line(f"  wsprof_event_[0] = {word};")
    gen.line(f"  wsprof_event_[1] = {_timer(s.site)};")
    gen.line("  wsprof_event_[2] = wsprof_end_;")
    gen.line("}")
    gen.line(f"++{_COUNT};")
    gen.indent -= 1
    gen.line("}")


@emits(ProfileNextTile, TARGET)
def _emit_ProfileNextTile(gen: CodeGenerator, s: ProfileNextTile) -> None:
    # Every thread counts (an add costs what a predicate would): the recording lane of any warp has the count. The
    # tile is the iteration begun last, the first's before any (bits past TILE_BITS drop out of the word).
    gen.line(f"{_TILE_FIELD} = {_TILES}++ << {TILE_SHIFT - PHASE_SHIFT};")


@emits(ProfileJoin, TARGET)
def _emit_ProfileJoin(gen: CodeGenerator, s: ProfileJoin) -> None:
    # Lanes agreed before the single thread's body, and only its thread counted since: the maximum is its count.
    gen.line(f'if ({_RECORD} != nullptr) asm volatile("redux.sync.max.u32 %0, %0, 0xffffffff;" : "+r"({_COUNT}));')


@emits(ProfileFinish, TARGET)
def _emit_ProfileFinish(gen: CodeGenerator, s: ProfileFinish) -> None:
    gen.line(f"if ({_RECORD} != nullptr && {_LEAD}) {{")
    gen.indent += 1
    gen.line("u64 ns_, clock_;")
    gen.line(_read("clock_", "clock64"))
    gen.line(_read("ns_", "globaltimer"))
    gen.line(f"{_RECORD}[{COUNT}] = {_COUNT};")
    gen.line(f"{_RECORD}[{END_NS}] = ns_;")
    gen.line(f"{_RECORD}[{END_CLOCK}] = clock_;")
    gen.line(f"{_RECORD}[{WRITTEN}] = 1;")
    gen.indent -= 1
    gen.line("}")
