"""Instrumentation for GPU timelines (``warpspec.profile``): a copy of a kernel with timestamps around what its
roles spend time in, and the table of sites that says what each timestamp pair was.

``instrument`` is an IR → IR transform run only for instrumented builds; plain builds never see it. It puts a
``ProfileStart``/``ProfileEnd`` pair (``warpspec.timeline.profile_isa``) around

- every ``mbarrier.wait`` ("wait", named "wait full_barriers[2]" with the barrier's RUNTIME index),
- every TMA issue, load or store ("tma", "tma ga -> sa[1]"),
- every run of ``wgmma.mma`` up to its ``commit_group`` ("wgmma"),
- every ``wgmma.wait_group`` and ``tma.wait_group`` ("wgmma_wait", "tma_wait") and ``self.sync()`` ("sync"),
- a consumer role's epilogue ("epilogue"): in the statement list holding its K loop (the innermost loop around
  its last ``wgmma.mma``: the role's body, or a persistent kernel's tile loop body), from after the last statement
  holding a ``wgmma.wait_group`` to the list's end,

and adds the record buffer as a last ``int64`` pointer parameter, set up at the kernel's start and finished at
its end. A site's role is its innermost thread group (the whole block for statements outside every group); the
role's first thread records its events, except inside ``single_thread``, where the thread that runs the body (the
lane ``elect.sync`` chose, in a one-warp group) records them: every lane of the first warp keeps the role's event
count, and a ``ProfileJoin`` after the body brings them level again.

Besides its site and times, every event carries its tile, stage and phase. The CPU timing model
(``warpspec.timeline.model_timing``) gives its events the same three by the functions below, so that both back ends
agree on what an event is:

- **tile**: a *tile loop* is a runtime loop (``self.range``) that no other runtime loop encloses and whose body
  holds a runtime loop holding a site (``tile_loops``): a persistent kernel's walk over its output tiles, whose
  body holds the K loop (examples/matmul_v6.py, ``warpspec.ops`` Gemm's persistent schedules), or stream-K's walk
  over its pieces of tiles. Each thread counts the tile-loop iterations it has begun (a ``ProfileNextTile`` heads
  every tile loop's body); an event's tile is that count minus one, and 0 before the first. So tile t is the
  role's t-th tile-loop iteration from 0, in program order over its tile loops (stream-K's pieces are numbered on
  from its whole tiles); what a role does after a tile loop (a producer's drain, the last ``tma.wait_group``)
  belongs to the last tile it walked. A block that computes one tile has tile 0 throughout: in V3 (whose
  outermost loop is the K loop itself), the split-K Gemm schedules and the attention kernel (whose K/V loop is
  outermost) there is no tile loop, and the one-tile-per-block Gemm schedule walks its tile loop once. Each role
  numbers the tiles it walks: V6 ping-pong's consumer warpgroups deal the block's tiles out in turn, so warpgroup
  w's tile t is the producer's tile 2t + w.
- **stage**: the flat index (row-major over the indexed leading dimensions, as the event's name shows it) of the
  barrier a wait waits on (``wait full_barriers[2]``: 2), of the shared tile a TMA load fills (``tma ga ->
  sa[1]``: 1) and of the B operand of a WGMMA run's first ``wgmma.mma`` (the shared tile the K loop rings; A may
  be registers, or a tile of its own like attention's Q), evaluated where the event ends (``stage_index``). None
  for everything else: TMA stores (they read an output buffer, not a stage), wait_groups, syncs, epilogues, and
  operands without an index. Every indexed barrier counts, so V6 ping-pong's ``turns[w]`` waits have stage w.
- **phase**: the parity a wait waited for, its ``phase`` operand as it evaluated when the wait ran (0 or 1;
  ``wait_phase``); None for every other event.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from warpspec.dtypes import PointerType, int32, int64
from warpspec.errors import CompileError
from warpspec.isa.roles import SingleThread, ThreadGroup
from warpspec.isa.timeline_facts import Instrumentation
from warpspec.ir import nodes as ir
from warpspec.timeline.facts import fields_of, instrumentation
from warpspec.timeline.profile_isa import (INDEX_BITS, SITE_BITS, ProfileEnd, ProfileFinish, ProfileJoin,
                                           ProfileNextTile, ProfileSetup, ProfileStart)

#: The name of the record buffer's kernel parameter in instrumented builds.
PARAMETER = "warpspec_profile"


@dataclass(frozen=True)
class Site:
    """One instrumented place of the kernel: what it is (``kind``, one of ``warpspec.timeline.events.KINDS``),
    its name with ``{index}`` where the runtime index goes, the barrier it waits on (a "wait"), its kernel line,
    its role (a ``ThreadGroup``), the extents of the leading dimensions its index runs over (the recorded
    index is their flat, row-major index), whether that index is the event's stage (see the module docstring)
    and, for a wait_group, the groups it leaves in flight (``Event.pending``)."""

    kind: str
    name: str
    barrier: str | None
    loc: ir.Loc
    group: ThreadGroup
    shape: tuple[int, ...] = ()
    staged: bool = False
    pending: int | None = None

    def render(self, index: int) -> tuple[str, str | None]:
        """The event's name and barrier for recorded ``index``: "wait full_barriers[2]", "full_barriers[2]"."""
        digits = []
        for extent in reversed(self.shape):
            digits.append(index % extent)
            index //= extent
        text = ", ".join(str(d) for d in reversed(digits))
        return self.name.format(index=text), None if self.barrier is None else self.barrier.format(index=text)


@dataclass(frozen=True)
class Instrumented:
    """An instrumented build's kernel and what decoding its records needs: the sites (by site id), the recording
    threads (by recorder number), the most blocks it records, the events each recorder has room for and the SM
    whose blocks record."""

    kernel: ir.Kernel
    sites: tuple[Site, ...]
    recorders: tuple[int, ...]
    blocks: int
    capacity: int
    sm: int = 0


def instrument(kernel: ir.Kernel, blocks: int, capacity: int, sm: int = 0) -> Instrumented:
    """``kernel`` with timestamps around its sites (see the module docstring), recording the first ``blocks``
    blocks that run on SM ``sm`` with room for ``capacity`` events per recording thread."""
    if any(p.name == PARAMETER for p in kernel.params):
        raise CompileError(f"kernel parameter {PARAMETER!r} is reserved for profiling builds: rename it",
                           str(kernel.loc))
    whole_block = ThreadGroup(kernel.loc, 0, kernel.num_threads, kernel.body)
    walker = _Walker(tile_loops(kernel.body))
    body = walker.role(whole_block)
    buffer = ir.Var(PARAMETER, PointerType(int64))
    recorders = tuple(sorted({site.group.begin for site in walker.sites}))
    setup = ProfileSetup(kernel.loc, buffer, recorders, blocks, capacity, len(walker.sites), sm)
    instrumented = replace(kernel, params=kernel.params + (ir.Param(PARAMETER, buffer.type, buffer),),
                           body=(setup,) + body + (ProfileFinish(kernel.loc),))
    return Instrumented(instrumented, tuple(walker.sites), recorders, blocks, capacity, sm)


class _Walker:
    """Rebuilds statement lists with the timestamp pairs, numbering sites in program order."""

    def __init__(self, tiles: tuple[ir.For, ...]):
        self.sites: list[Site] = []
        self.epilogue: tuple[ir.Stmt, ...] | None = None  # the current consumer role's list ending in its epilogue
        self.tiles = {id(loop) for loop in tiles}  # the tile loops, whose bodies count the tiles

    def site(self, kind: str, name: str, loc: ir.Loc, group: ThreadGroup, shape=(), barrier=None,
             staged=False, pending=None) -> int:
        # The record's first word holds the site and the index in a few bits each (profile_isa's layout).
        if len(self.sites) == 1 << SITE_BITS:
            raise CompileError(f"a profiling build records at most {1 << SITE_BITS} sites, and this kernel has more",
                               str(loc))
        if math.prod(shape) > 1 << INDEX_BITS:
            raise CompileError(f"a profiling build records indices into arrays of at most {1 << INDEX_BITS} "
                               f"barriers or tiles, and this {kind} indexes one of {math.prod(shape)}", str(loc))
        self.sites.append(Site(kind, name, barrier, loc, group, tuple(shape), staged, pending))
        return len(self.sites) - 1

    def body(self, body: tuple[ir.Stmt, ...], group: ThreadGroup) -> tuple[ir.Stmt, ...]:
        if body is self.epilogue:
            self.epilogue = None  # marked once: the lists inside it are walked without it
            marked = self.epilogue_marked(body, group)
            if marked is not None:
                return marked
        out: list[ir.Stmt] = []
        run = None  # the site of a wgmma run not committed yet
        run_stage: ir.Expr = _zero()  # the stage its first mma reads
        run_end = 0  # where in ``out`` that run's last mma ends
        for stmt in body:
            shown = instrumentation(stmt)
            if shown.run:
                if run is None:
                    stage = _indexed_stage(stmt)
                    extents, run_stage = ((), _zero()) if stage is None else stage
                    run = self.site(shown.kind, shown.name, stmt.loc, group, extents, staged=stage is not None)
                    out.append(ProfileStart(stmt.loc, run))
                out.append(stmt)
                run_end = len(out)
                continue
            out.extend(self.statement(stmt, group))
            if shown.closes is not None and run is not None:
                out.append(ProfileEnd(stmt.loc, run, run_stage))
                run = None
        if run is not None:  # a run without its closing statement in this list: the run ends with its last one
            out.insert(run_end, ProfileEnd(out[run_end - 1].loc, run, run_stage))
        return tuple(out)

    def statement(self, stmt: ir.Stmt, group: ThreadGroup) -> list[ir.Stmt]:
        if isinstance(stmt, ThreadGroup):
            return [replace(stmt, body=self.role(stmt))]
        if isinstance(stmt, SingleThread):
            before = len(self.sites)
            single = replace(stmt, body=self.body(stmt.body, group))
            return [single, ProfileJoin(stmt.loc)] if len(self.sites) > before else [single]
        shown = instrumentation(stmt)
        if shown.kind is not None:
            # A site's stage, where it has one, is its indexed field's index (a wait's barrier, a TMA load's tile).
            name, shape, index, barrier = _named(stmt, shown)
            site = self.site(shown.kind, name, stmt.loc, group, shape, barrier,
                             staged=_indexed_stage(stmt) is not None, pending=wait_pending(stmt))
            return [ProfileStart(stmt.loc, site), stmt, ProfileEnd(stmt.loc, site, index, wait_phase(stmt))]
        blocks = {name: self.body(getattr(stmt, name), group) for name in type(stmt).blocks}
        if id(stmt) in self.tiles:
            blocks["body"] = (ProfileNextTile(stmt.loc),) + blocks["body"]
        return [replace(stmt, **blocks) if blocks else stmt]

    def role(self, group: ThreadGroup) -> tuple[ir.Stmt, ...]:
        """A thread group's body (the whole block's outside every group), with a consumer's (one that issues WGMMA
        itself) epilogue marked."""
        if not _holds(group.body, _ISSUES_WGMMA):
            return self.body(group.body, group)
        saved, self.epilogue = self.epilogue, _k_loop_list(group.body) or group.body
        try:
            return self.body(group.body, group)
        finally:
            self.epilogue = saved

    def epilogue_marked(self, body: tuple[ir.Stmt, ...], group: ThreadGroup) -> tuple[ir.Stmt, ...] | None:
        """``body`` with its epilogue marked when it is the list holding the role's K loop: from after its last
        statement holding a ``wgmma.wait_group`` to its end (None when it has no such tail)."""
        waits = [i for i, stmt in enumerate(body) if _holds((stmt,), _WAITS_WGMMA)]
        if not waits or waits[-1] == len(body) - 1:
            return None
        head, tail = body[:waits[-1] + 1], body[waits[-1] + 1:]
        out = self.body(head, group)  # sites before the epilogue's are numbered first
        site = self.site("epilogue", "epilogue", tail[0].loc, group)
        return out + (ProfileStart(tail[0].loc, site),) + self.body(tail, group) + \
            (ProfileEnd(tail[-1].loc, site, _zero()),)


#: The events that make a role a consumer (it issues WGMMA itself) and end its K loop (its last WGMMA wait).
_ISSUES_WGMMA, _WAITS_WGMMA = "wgmma", "wgmma_wait"


def _holds(body, kind: str) -> bool:
    """Whether ``body`` holds a statement shown as a ``kind`` event of its own role: nested thread groups are roles
    of their own."""
    for stmt in body:
        if instrumentation(stmt).kind == kind:
            return True
        if not isinstance(stmt, ThreadGroup) and any(_holds(child, kind) for child in ir.children(stmt)):
            return True
    return False


def _k_loop_list(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...] | None:
    """The statement list holding the innermost loop around the last ``wgmma.mma`` of ``body`` (the K loop): the
    role's body for V3, a persistent kernel's tile loop body for V6; None when no loop holds an mma."""
    for stmt in reversed(body):
        if not _holds((stmt,), _ISSUES_WGMMA):
            continue
        for child in ir.children(stmt):
            found = _k_loop_list(child)
            if found is not None:
                return found
        return body if isinstance(stmt, ir.For) else None
    return None


def tile_loops(body: tuple[ir.Stmt, ...]) -> tuple[ir.For, ...]:
    """The tile loops of ``body`` (see the module docstring): its runtime loops inside no other runtime loop whose
    body holds a runtime loop holding a site, in program order."""
    found: list[ir.For] = []
    for stmt in body:
        if isinstance(stmt, ir.For):
            if any(isinstance(inner, ir.For) and _holds_site(inner.body) for inner in ir.walk(stmt.body)):
                found.append(stmt)
            continue
        for child in ir.children(stmt):
            found += tile_loops(child)
    return tuple(found)


def _holds_site(body: tuple[ir.Stmt, ...]) -> bool:
    return any(instrumentation(stmt).kind is not None for stmt in ir.walk(body))


def stage_index(stmt: ir.Stmt) -> ir.Expr | None:
    """The expression of the stage statement ``stmt`` concerns (see the module docstring): the flat index of a
    wait's barrier, of a TMA load's destination or of an mma's B operand; None when it concerns none."""
    stage = _indexed_stage(stmt)
    return None if stage is None else stage[1]


def _indexed_stage(stmt: ir.Stmt) -> tuple[tuple[int, ...], ir.Expr] | None:
    """The extents the stage ``stmt`` concerns runs over and the expression of its flat index: those of an mma's B
    tile, or of the indexed field of a statement that hands a stage over on a barrier (a wait, a TMA load; a TMA
    store names no barrier); None when that operand has no index, or the statement no such operand."""
    field = instrumentation(stmt).stage
    if field is None:
        return None
    ref = getattr(stmt, field)
    if not ref.index:
        return None
    _, extents, flat = _indexed(ref)
    return extents, flat


def wait_phase(stmt: ir.Stmt) -> ir.Expr | None:
    """The phase parity operand of an mbarrier wait; None for any other statement."""
    field = instrumentation(stmt).phase
    return None if field is None else getattr(stmt, field)


def wait_pending(stmt: ir.Stmt) -> int | None:
    """How many of its role's most recent groups a wait_group leaves in flight; None for any other statement."""
    field = instrumentation(stmt).pending
    return None if field is None else getattr(stmt, field)


def _zero() -> ir.Const:
    return ir.Const(0, int32)


def _named(stmt: ir.Stmt, shown: Instrumentation) -> tuple[str, tuple[int, ...], ir.Expr, str | None]:
    """A site's name template ("tma ga -> sa[{index}]"), the extents its recorded index runs over, the expression
    of that index and its barrier's template (``_barrier_template``)."""
    fields, shape, index = {}, (), _zero()
    for field in fields_of(shown.name):
        value = getattr(stmt, field)
        if field == shown.indexed:
            fields[field], shape, index = _indexed(value)
        else:
            fields[field] = value.decl.name if isinstance(value, ir.TensorRef) else str(value)
    return shown.name.format(**fields), shape, index, _barrier_template(stmt, shown, shape, index)


def _barrier_template(stmt: ir.Stmt, shown: Instrumentation, shape: tuple[int, ...], index: ir.Expr) -> str | None:
    """The template of the barrier a site's event is about: a record holds one index, so the barrier is named where
    that index names it too. That is when the barrier is the indexed field, when it is a single barrier (no index),
    or when it is indexed alike (the same extents and index expression: a TMA load into ``sa[stage]`` completing
    on ``full[stage]``, as every ring's loads do, so that a GPU summary sees which stage a load fills). None
    otherwise."""
    if shown.barrier is None:
        return None
    ref = getattr(stmt, shown.barrier)
    if not ref.index:
        return ref.decl.name
    template, extents, flat = _indexed(ref)
    return template if (extents, flat) == (shape, index) else None


def _indexed(ref: ir.TensorRef) -> tuple[str, tuple[int, ...], ir.Expr]:
    """The name template of ``ref`` ("sa[{index}]"), the extents of its indexed leading dimensions and the
    expression of its flat index over them."""
    if not ref.index:
        return ref.decl.name, (), _zero()
    shape = tuple(ref.decl.shape[:len(ref.index)])
    flat = ref.index[0]
    for index, extent in zip(ref.index[1:], shape[1:]):
        flat = ir.Binary("+", ir.Binary("*", flat, ir.Const(extent, int32), int32), index, int32)
    return ref.decl.name + "[{index}]", shape, flat
