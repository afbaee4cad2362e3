"""Roles: which threads run a block of the kernel, and barriers among them.

``self.thread_group(...)`` (with ``max_registers``: ``setmaxnreg``), ``self.single_thread()`` and ``self.sync()``,
their IR statements and their emulation: each thread partition is one emulator task, which runs a group's body
only if its threads lie inside the group. The CUDA emission is ``warpspec.cuda.sm90.roles``.
"""

from __future__ import annotations

from dataclasses import dataclass

from warpspec.isa.base import LanguageObject, language_call
from warpspec.isa.contracts import BuildContext, EmulationMachine, EmulationTask, Steps
from warpspec.isa.registry import BODY_THREADS, declare_timeline, emulates, fact
from warpspec.isa.timeline_facts import NOT_SHOWN, STATEMENT, Instrumentation, TimingCost
from warpspec.ir import nodes as ir

# ------------------------------------------------------------------------------------------------------- IR


@dataclass(frozen=True, eq=False)
class ThreadGroup(ir.Stmt):
    """Run ``body`` on threads ``[begin, begin + count)`` of the block only."""

    begin: int
    count: int
    body: tuple[ir.Stmt, ...]
    max_registers: int | None = None
    blocks = ("body",)

    def text(self, f) -> str:
        regs = f", max_registers={self.max_registers}" if self.max_registers else ""
        return f"thread_group(begin={self.begin}, count={self.count}{regs}):"


@dataclass(frozen=True, eq=False)
class SingleThread(ir.Stmt):
    """Run ``body`` on one elected thread (the first) of the enclosing group ``[begin, begin + count)``."""

    begin: int
    count: int
    body: tuple[ir.Stmt, ...]
    blocks = ("body",)

    def text(self, f) -> str:
        return "single_thread():"


@dataclass(frozen=True, eq=False)
class Sync(ir.Stmt):
    """Barrier over threads ``[begin, begin + count)``: the block (``bar.sync 0``) or a thread group (named)."""

    begin: int
    count: int

    def text(self, f) -> str:
        return f"sync(threads {self.begin}..{self.begin + self.count - 1})"


# ------------------------------------------------------------------------------------------------ language


class _Group(LanguageObject):
    """The context of ``with self.thread_group(...)`` / ``with self.single_thread()``."""

    def __init__(self, context: BuildContext, begin: int, count: int, single: bool, max_registers=None):
        super().__init__(context)
        self.begin, self.count, self.single, self.max_registers = begin, count, single, max_registers

    def build_block(self, build_body) -> None:
        b = self.b
        loc = b.loc
        with b.enter_thread_group(self.begin, self.count, self.single):
            body = b.nested(build_body)
        if self.single:
            b.emit(SingleThread(loc, self.begin, self.count, body))
        else:
            b.emit(ThreadGroup(loc, self.begin, self.count, body, self.max_registers))


class Roles(LanguageObject):
    """Thread groups, single threads and group barriers, reached on ``self``."""

    @language_call
    def thread_group(self, thread_begin, num_threads, max_registers=None) -> _Group:
        """``with self.thread_group(thread_begin=, num_threads=):`` runs its body on threads
        ``[thread_begin, thread_begin + num_threads)`` of the enclosing group only. Bounds must be compile-time
        multiples of 32 (whole warps). ``max_registers`` sets the group's per-thread register budget
        (PTX ``setmaxnreg.{inc,dec}.sync.aligned.u32``; the group must then be whole warpgroups)."""
        b, target = self.b, self.target
        begin = b.to_int(thread_begin, "thread_group thread_begin")
        count = b.to_int(num_threads, "thread_group num_threads")
        parent_begin, parent_count, single = b.group
        if single:
            raise b.error("thread_group cannot be nested inside single_thread")
        warp = target.warp_threads
        if begin % warp or count % warp or count <= 0:
            raise b.error(f"thread_group needs whole warps: thread_begin and num_threads multiples of 32, got "
                          f"thread_begin={begin}, num_threads={count}")
        if begin < parent_begin or begin + count > parent_begin + parent_count:
            raise b.error(f"thread_group [{begin}, {begin + count}) is outside the enclosing threads "
                          f"[{parent_begin}, {parent_begin + parent_count})")
        registers = None
        if max_registers is not None:
            registers = b.to_int(max_registers, "thread_group max_registers")
            if registers % 8 or not 24 <= registers <= 256:
                raise b.error(f"max_registers must be a multiple of 8 in [24, 256], got {registers}")
            if begin % target.warpgroup_threads or count % target.warpgroup_threads:
                raise b.error("max_registers (setmaxnreg) needs a thread group of whole warpgroups (128 threads)")
        return _Group(b, begin, count, False, registers)

    @language_call
    def single_thread(self) -> _Group:
        """``with self.single_thread():`` runs its body on one thread, the first of the enclosing group (elected
        with ``elect.sync`` in a warp). Instructions inside count once (one arrival)."""
        begin, count, _ = self.b.group
        return _Group(self.b, begin, count, True)

    @language_call
    def sync(self) -> None:
        """Barrier over the threads of the innermost thread group (the whole block outside any group): all of
        them arrive before any continues, and their shared-memory writes become visible to each other.
        PTX: ``bar.sync 0;`` for the block, ``bar.sync id, count;`` (named barrier) for a group. Each distinct group
        that syncs takes one of the target's named barriers besides barrier 0 (15 on Hopper), on both back ends."""
        b, target = self.b, self.target
        begin, count, single = b.group
        if single:
            raise b.error("self.sync() inside single_thread would wait for threads that never arrive")
        if (begin, count) != (0, b.block_threads()):
            syncing = b.claim_named_barrier(begin, count)
            groups = target.named_barriers - 1  # barrier 0 is the whole block's (__syncthreads)
            if syncing > groups:
                raise b.error(f"self.sync() over threads [{begin}, {begin + count}) would be the "
                              f"{syncing}th distinct thread group to sync, but {target.name} has "
                              f"{target.named_barriers} named barriers per block and barrier 0 is the whole "
                              f"block's: at most {groups} thread groups can sync; sync the whole block or fewer "
                              f"distinct groups")
        b.emit(Sync(b.loc, begin, count))


# ----------------------------------------------------------------------------------------------- emulation


@emulates(ThreadGroup)
def _thread_group(machine: EmulationMachine, task: EmulationTask, s: ThreadGroup) -> Steps | None:
    if s.begin <= task.begin and task.end <= s.begin + s.count:
        return machine.exec_body(task, s.body)
    return None


@emulates(SingleThread)
def _single_thread(machine: EmulationMachine, task: EmulationTask, s: SingleThread) -> Steps | None:
    if task.begin <= s.begin < task.end:
        return machine.exec_body(task, s.body)
    return None


@emulates(Sync)
def _sync(machine: EmulationMachine, task: EmulationTask, s: Sync) -> Steps | None:
    return machine.sync(task, s.begin, s.count)


# --------------------------------------------------------------------------------------------------- facts

@fact(BODY_THREADS, ThreadGroup)
def _group_threads(stmt: ThreadGroup) -> tuple[int, int]:
    """A thread group's body runs on its own threads."""
    return stmt.begin, stmt.count


# ---------------------------------------------------------------------------------------------------------- timeline
# What each statement costs the CPU timing model and how timelines show it (``isa.timeline_facts``).
# A role's statements are costed one by one (its body); a barrier costs its latency once every member arrived.
declare_timeline(ThreadGroup, STATEMENT, NOT_SHOWN)
declare_timeline(SingleThread, TimingCost("elect"), NOT_SHOWN)
declare_timeline(Sync, TimingCost("sync"), Instrumentation("sync", "sync"))
