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
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from warpspec.dtypes import PointerType, int32, int64
from warpspec.errors import CompileError
from warpspec.isa.roles import SingleThread, ThreadGroup
from warpspec.isa.timeline_facts import Instrumentation
from warpspec.ir import nodes as ir
from warpspec.timeline.facts import fields_of, instrumentation
from warpspec.timeline.profile_isa import ProfileEnd, ProfileFinish, ProfileJoin, ProfileSetup, ProfileStart

#: The name of the record buffer's kernel parameter in instrumented builds.
PARAMETER = "warpspec_profile"


@dataclass(frozen=True)
class Site:
    """One instrumented place of the kernel: what it is (``kind``, one of ``warpspec.timeline.events.KINDS``),
    its name with ``{index}`` where the runtime index goes, the barrier it waits on (a "wait"), its kernel line,
    its role (a ``ThreadGroup``) and the extents of the leading dimensions its index runs over (the recorded
    index is their flat, row-major index)."""

    kind: str
    name: str
    barrier: str | None
    loc: ir.Loc
    group: ThreadGroup
    shape: tuple[int, ...] = ()

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
    walker = _Walker()
    body = walker.role(whole_block)
    buffer = ir.Var(PARAMETER, PointerType(int64))
    recorders = tuple(sorted({site.group.begin for site in walker.sites}))
    setup = ProfileSetup(kernel.loc, buffer, recorders, blocks, capacity, len(walker.sites), sm)
    instrumented = replace(kernel, params=kernel.params + (ir.Param(PARAMETER, buffer.type, buffer),),
                           body=(setup,) + body + (ProfileFinish(kernel.loc),))
    return Instrumented(instrumented, tuple(walker.sites), recorders, blocks, capacity, sm)


class _Walker:
    """Rebuilds statement lists with the timestamp pairs, numbering sites in program order."""

    def __init__(self):
        self.sites: list[Site] = []
        self.epilogue = None  # the statement list of the current consumer role whose tail is its epilogue

    def site(self, kind: str, name: str, loc: ir.Loc, group: ThreadGroup, shape=(), barrier=None) -> int:
        self.sites.append(Site(kind, name, barrier, loc, group, tuple(shape)))
        return len(self.sites) - 1

    def body(self, body: tuple[ir.Stmt, ...], group: ThreadGroup) -> tuple[ir.Stmt, ...]:
        if body is self.epilogue:
            self.epilogue = None  # marked once: the lists inside it are walked without it
            marked = self.epilogue_marked(body, group)
            if marked is not None:
                return marked
        out: list[ir.Stmt] = []
        run = None  # the site of a wgmma run not committed yet
        run_end = 0  # where in ``out`` that run's last mma ends
        for stmt in body:
            shown = instrumentation(stmt)
            if shown.run:
                if run is None:
                    run = self.site(shown.kind, shown.name, stmt.loc, group)
                    out.append(ProfileStart(stmt.loc, run))
                out.append(stmt)
                run_end = len(out)
                continue
            out.extend(self.statement(stmt, group))
            if shown.closes is not None and run is not None:
                out.append(ProfileEnd(stmt.loc, run, _zero()))
                run = None
        if run is not None:  # a run without its closing statement in this list: the run ends with its last one
            out.insert(run_end, ProfileEnd(out[run_end - 1].loc, run, _zero()))
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
            name, shape, index, barrier = _named(stmt, shown)
            return _wrapped(stmt, self.site(shown.kind, name, stmt.loc, group, shape, barrier), index)
        blocks = {name: self.body(getattr(stmt, name), group) for name in type(stmt).blocks}
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


def _wrapped(stmt: ir.Stmt, site: int, index: ir.Expr) -> list[ir.Stmt]:
    return [ProfileStart(stmt.loc, site), stmt, ProfileEnd(stmt.loc, site, index)]


def _zero() -> ir.Const:
    return ir.Const(0, int32)


def _named(stmt: ir.Stmt, shown: Instrumentation) -> tuple[str, tuple[int, ...], ir.Expr, str | None]:
    """A site's name template ("tma ga -> sa[{index}]"), the extents its recorded index runs over, the expression
    of that index and its barrier's template (only where the barrier is the indexed field: a record holds one
    index)."""
    fields, shape, index, barrier = {}, (), _zero(), None
    for field in fields_of(shown.name):
        value = getattr(stmt, field)
        if field == shown.indexed:
            fields[field], shape, index = _indexed(value)
            if field == shown.barrier:
                barrier = fields[field]
        else:
            fields[field] = value.decl.name if isinstance(value, ir.TensorRef) else str(value)
    return shown.name.format(**fields), shape, index, barrier


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
