"""WGMMA: warpgroup matrix multiply-accumulate on the tensor cores (PTX ``wgmma.*``).

The language methods (``self.wgmma.fence/mma/commit_group/wait_group``), their IR statements and their emulation:
an mma joins the warpgroup's open group; a committed group is an asynchronous event that updates the
accumulator when it completes, and its shared operands stay "being read" until ``wait_group`` observes it. Which
A/B/D types and K steps exist is the target's table (``warpspec.target.WGMMA_FORMS``). The CUDA emission is
``warpspec.cuda.sm90.wgmma``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from warpspec import dtypes
from warpspec.errors import KernelError
from warpspec.isa.base import LanguageObject, language_call
from warpspec.isa.contracts import EmulationMachine, EmulationTask, Steps
from warpspec.isa.registry import (LAYOUT_RULE, PER_WARPGROUP, at_exit, declare, declare_timeline, emulates,
                                   fact)
from warpspec.isa.timeline_facts import NOT_SHOWN, STATEMENT, Instrumentation, TimingCost
from warpspec.ir import nodes as ir
from warpspec.ir.printer import format_expr
from warpspec.layout.fragments import AccumulatorLayout
from warpspec.layout.registers import AFragment, Accumulator, LayoutRule

# ------------------------------------------------------------------------------------------------------- IR


@dataclass(frozen=True, eq=False)
class WgmmaFence(ir.Instruction):
    """Order register accesses before the following ``wgmma.mma_async``."""


@dataclass(frozen=True, eq=False)
class WgmmaMma(ir.Instruction):
    """``d += a @ b`` asynchronously: a [M, K] (shared or register), b [K, N] shared, d [M, N] register."""

    a: ir.TensorRef
    b: ir.TensorRef
    d: ir.TensorRef


@dataclass(frozen=True, eq=False)
class WgmmaCommit(ir.Instruction):
    """Close the warpgroup's uncommitted mma_async into one group."""


@dataclass(frozen=True, eq=False)
class WgmmaWait(ir.Instruction):
    """Wait until at most ``n`` of the warpgroup's wgmma groups are pending."""

    n: int


# ------------------------------------------------------------------------------------------------ language


class Wgmma(LanguageObject):
    """``self.wgmma``: warpgroup matrix multiply-accumulate on the tensor cores (PTX ``wgmma.*``)."""

    namespace = "wgmma"

    def _warpgroups(self, name: str) -> tuple[int, int]:
        b = self.b
        begin, count, single = b.group
        size = self.target.warpgroup_threads
        if single or begin % size or count % size or count == 0:
            where = "a single thread" if single else f"threads [{begin}, {begin + count})"
            raise b.error(f"wgmma.{name} must be executed by whole warpgroups: a thread group whose begin and size "
                          f"are multiples of 128, not {where}")
        return (begin, count)

    @language_call
    def fence(self) -> None:
        """Order earlier register accesses (accumulators, A fragments) before the next ``mma``. Executed by every
        thread of the warpgroup(s). PTX: ``wgmma.fence.sync.aligned;``"""
        self.b.emit(WgmmaFence(self.b.loc, self._warpgroups("fence")))

    @language_call
    def mma(self, a, b, d) -> None:
        """Start ``d += a @ b`` on the tensor cores: ``a`` [M, K] in shared memory or registers, ``b`` [K, N] in
        shared memory (``sb[stage].transpose()`` for a B stored [N, K]), ``d`` a [M, N] register tensor.
        Asynchronous: ``commit_group`` then ``wait_group`` before reading ``d`` or reusing ``a``/``b``. Executed by
        whole warpgroups, each computing its 64-row slices of M. The element types pick a row of the target's
        form table: f16/bf16 (``m64nNk16``, any operand major) and e4m3/e5m2 (``m64nNk32``, K-major operands only).
        PTX: ``wgmma.mma_async.sync.aligned.m64nNkK.{f32,f16}.T.T`` with shared-memory descriptors."""
        builder, target = self.b, self.target
        threads = self._warpgroups("mma")
        a = builder.to_tensor(a, "wgmma.mma a", (ir.SHARED, ir.REGISTER))
        b_ = builder.to_tensor(b, "wgmma.mma b", (ir.SHARED,))
        d = builder.to_tensor(d, "wgmma.mma d", (ir.REGISTER,))
        for t, name in ((a, "a"), (b_, "b"), (d, "d")):
            if len(t.shape) != 2:
                raise builder.error(f"wgmma.mma {name} ({t.name}) must be 2-D, got shape {list(t.shape)}")
        (m, k), (k2, n), (m2, n2) = a.shape, b_.shape, d.shape
        if k != k2 or m != m2 or n != n2:
            raise builder.error(f"wgmma.mma shapes do not match: a {a.name}{list(a.shape)} @ b {b_.name}"
                                f"{list(b_.shape)} into d {d.name}{list(d.shape)}")
        form = target.wgmma_form(a.dtype, b_.dtype)
        if form is None:
            forms = ", ".join(f"{f.a.name} x {f.b.name}" for f in target.wgmma_forms)
            raise builder.error(f"wgmma.mma has no form for a {a.dtype.name} and b {b_.dtype.name} on {target.name}; "
                                f"the forms are {forms}")
        if d.dtype not in form.accumulators:
            raise builder.error(f"wgmma.mma with {a.dtype.name} inputs accumulates into "
                                f"{' or '.join(t.name for t in form.accumulators)}, got {d.dtype.name}")
        warpgroups = threads[1] // target.warpgroup_threads
        if m % (target.wgmma_m * warpgroups) or n % target.wgmma_n_step or n > target.wgmma_max_n or k % form.k:
            raise builder.error(f"wgmma.mma needs M a multiple of 64 per warpgroup, N a multiple of 8 up to 256 "
                                f"and K a multiple of {form.k}; got M={m} over {warpgroups} warpgroup(s), N={n}, K={k}")
        if a.kind == ir.REGISTER:
            if not form.register_a:
                raise builder.error(f"wgmma.mma with {a.dtype.name} inputs reads a from shared memory only")
            if a.ref.transposed:
                raise builder.error("wgmma.mma a from registers cannot be transposed")
        if not form.transposable and (a.ref.transposed or not b_.ref.transposed):
            raise builder.error(f"wgmma.mma with {a.dtype.name} inputs reads K-major operands only: a as stored "
                                f"[M, K] and b as the transposed view of a tile stored [N, K] (sb[stage].transpose())")
        builder.emit(WgmmaMma(builder.loc, threads, a.ref, b_.ref, d.ref))

    @language_call
    def commit_group(self) -> None:
        """Close the warpgroup's outstanding ``mma`` operations into one group. PTX:
        ``wgmma.commit_group.sync.aligned;``"""
        self.b.emit(WgmmaCommit(self.b.loc, self._warpgroups("commit_group")))

    @language_call
    def wait_group(self, n) -> None:
        """Wait until at most ``n`` of the warpgroup's mma groups are pending; their results are then in ``d``
        and their shared operands free. PTX: ``wgmma.wait_group.sync.aligned n;``"""
        n = self.b.to_int(n, "wgmma.wait_group n")
        if not 0 <= n <= 7:
            raise self.b.error(f"wgmma.wait_group n must be in [0, 7], got {n}")
        self.b.emit(WgmmaWait(self.b.loc, self._warpgroups("wait_group"), n))


# ----------------------------------------------------------------------------------------------- emulation


@dataclass
class WgmmaState:
    """A task's (a warpgroup's) WGMMAs on the emulator: ``task.family_state(WgmmaState)``."""

    #: The mmas issued since the last commit: (loc, complete, retire, text) each.
    uncommitted: list[tuple[ir.Loc, Callable[[], None], Callable[[], None], str]] = field(default_factory=list)
    groups: deque[Any] = field(default_factory=deque)  # committed groups' events, oldest first, until observed
    fenced: bool = False  # a wgmma.fence since the last register access
    inflight_accumulators: dict[int, int] = field(default_factory=dict)  # register tensor uid -> pending mmas


@emulates(WgmmaFence)
def _fence(machine: EmulationMachine, task: EmulationTask, s: WgmmaFence) -> None:
    task.family_state(WgmmaState).fenced = True


@emulates(WgmmaMma)
def _mma(machine: EmulationMachine, task: EmulationTask, s: WgmmaMma) -> Steps:
    state = task.family_state(WgmmaState)
    if not state.fenced:
        raise KernelError(f"wgmma.mma into {s.d.decl.name} without a wgmma.fence() after the last register "
                          f"access; the PTX ISA requires the fence before the first mma_async and after touching "
                          f"its registers")
    operands: list[Any] = []
    for ref, name in ((s.a, "a"), (s.b, "b")):
        if ref.kind == ir.SHARED:
            region = machine.region(task, ref)
            region.check_readable(task, f"wgmma.mma operand {name}", async_proxy=True)
            region.record_read(task)
            region.view("async_readers")[...] += 1
            operands.append(region)
        else:
            operands.append(machine.register(task, ref, "wgmma.mma a"))
            state.fenced = True
    rows = machine.row_share(task, s.threads, s.d.shape[0])
    d_uid = s.d.decl.uid
    state.inflight_accumulators[d_uid] = state.inflight_accumulators.get(d_uid, 0) + 1
    is_region = [ref.kind == ir.SHARED for ref in (s.a, s.b)]
    text = " @ ".join((o.text + (".T" if r.transposed else "")) if shared else format_expr(r)
                      for o, r, shared in zip(operands, (s.a, s.b), is_region))

    def complete() -> None:
        a = operands[0].view("data") if is_region[0] else operands[0]
        b = operands[1].view("data")
        if s.b.transposed:
            b = b.swapaxes(-1, -2)
        if s.a.transposed and is_region[0]:
            a = a.swapaxes(-1, -2)
        a = a[rows[0]:rows[1]].astype(np.float32)
        d = task.env[d_uid]
        product = a @ b.astype(np.float32)
        d[rows[0]:rows[1]] = dtypes.round_to(s.d.decl.dtype, d[rows[0]:rows[1]].astype(np.float32) + product)

    def retire() -> None:
        # The shared operands are free and the accumulator readable only once wait_group observes the group.
        for operand, shared in zip(operands, is_region):
            if shared:
                operand.view("async_readers")[...] -= 1
                operand.record_read(task)  # ordered from here on: a release before this point races
        state.inflight_accumulators[d_uid] -= 1

    state.uncommitted.append((s.loc, complete, retire, f"wgmma {text} -> {s.d.decl.name}"))
    return machine.preempt()


@emulates(WgmmaCommit)
def _commit(machine: EmulationMachine, task: EmulationTask, s: WgmmaCommit) -> None:
    state = task.family_state(WgmmaState)
    mmas = state.uncommitted
    state.uncommitted = []

    def complete() -> None:
        for _, fn, _, _ in mmas:
            fn()

    def retire() -> None:
        for _, _, fn, _ in mmas:
            fn()

    text = "; ".join(t for _, _, _, t in mmas) or "empty wgmma group"
    loc = mmas[0][0] if mmas else s.loc
    state.groups.append(machine.new_event("wgmma", task, loc, complete, text, retire))


@emulates(WgmmaWait)
def _wait(machine: EmulationMachine, task: EmulationTask, s: WgmmaWait) -> Steps:
    groups = task.family_state(WgmmaState).groups

    def ready() -> bool:
        return sum(not e.done for e in groups) <= s.n

    def observe() -> None:
        while groups and groups[0].done and len(groups) > s.n:
            groups.popleft().retire()

    return machine.wait_until(ready, f"in wgmma.wait_group({s.n})", after=observe)


@at_exit
def _uncommitted_mmas(machine: EmulationMachine, task: EmulationTask) -> None:
    uncommitted = task.family_state(WgmmaState).uncommitted
    if uncommitted:
        raise KernelError(f"{task.name} issued wgmma.mma that was never committed (wgmma.commit_group)",
                          str(uncommitted[0][0]), machine.describe_tasks())


# --------------------------------------------------------------------------------------------------- facts

@fact(LAYOUT_RULE, WgmmaMma)
def _mma_layouts(stmt: WgmmaMma, target) -> LayoutRule:
    """D is held in accumulator fragments over the executing warpgroups, a register A in A fragments of them."""
    m, n = stmt.d.shape
    warpgroups = stmt.threads[1] // target.warpgroup_threads
    accumulator = Accumulator(AccumulatorLayout(m, n, warpgroups=warpgroups), stmt.threads[0])
    fixed: list[tuple[ir.TensorDecl, object]] = [(stmt.d.decl, accumulator)]
    if stmt.a.kind == ir.REGISTER:
        fixed.append((stmt.a.decl, AFragment(m, stmt.a.shape[1], warpgroups, stmt.threads[0],
                                             target.warpgroup_threads)))
    return LayoutRule(fixed=tuple(fixed))


declare(PER_WARPGROUP, WgmmaMma, True)  # each warpgroup's wgmma.wait_group says nothing of the other's


# ---------------------------------------------------------------------------------------------------------- timeline
# What each statement costs the CPU timing model and how timelines show it (``isa.timeline_facts``).
# A run of mma up to its commit is one event: the tensor cores work on the group once it is committed.
declare_timeline(WgmmaFence, STATEMENT, NOT_SHOWN)
declare_timeline(WgmmaMma, TimingCost("wgmma", lambda s: (s.a.shape[0], s.b.shape[1], s.a.shape[1],
                                                            s.a.decl.dtype, s.b.decl.dtype)),
                 Instrumentation("wgmma", "wgmma", run=True, stage="b"))
declare_timeline(WgmmaCommit, TimingCost("wgmma_commit"), Instrumentation(None, closes="wgmma"))
declare_timeline(WgmmaWait, STATEMENT, Instrumentation("wgmma_wait", "wgmma.wait_group({n})",
                                                                pending="n"))
