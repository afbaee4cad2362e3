"""Flags in global memory: one block publishes its global writes, a later block waits for them (release/acquire).

``self.flag.signal(flags, index, value)``, ``self.flag.add(flags, index, value)`` and ``self.flag.wait(flags, index,
value)`` on a 1-D int32 global view,
their IR statements and their emulation. They are how blocks of one launch hand data to each other through global
memory (a stream-K GEMM's partial tiles): the writer stores with ``store_global``, synchronises its threads, and
one thread signals; the reader's thread waits for the value, synchronises, and its threads read with
``load_global``. The CUDA emission is ``warpspec.cuda.sm90.flag``.

Thread blocks are not guaranteed to run at the same time, and the GPU starts them in launch order (blockIdx.x
fastest, as the emulator runs them; the CUDA programming guide promises no order, and CUB's decoupled look-back
relies on this one too), so a block may wait only for a flag set by a block launched before it or by its own
threads: a wait on a later block may never end. The emulator runs blocks one after another, so such a wait
is a ``DeadlockError`` there, at the wait's line. A wait that passes on a value a signal of another block wrote
orders that block's generic global writes before the signal (``store_global``; not TMA stores, whose writes are
in the async proxy) before this block's reads after the wait: those reads are not races. How the emulator tracks
this is ``warpspec.emulator.global_memory``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from warpspec.dtypes import int32
from warpspec.isa.base import LanguageObject, language_call
from warpspec.isa.contracts import BuildContext, EmulationMachine, EmulationTask, Steps
from warpspec.isa.registry import WRITES_GLOBAL, declare, declare_timeline, emulates
from warpspec.isa.timeline_facts import NOT_SHOWN, STATEMENT
from warpspec.isa.values import TensorValue, describe
from warpspec.ir import nodes as ir

# ------------------------------------------------------------------------------------------------------- IR


@dataclass(frozen=True, eq=False)
class FlagSignal(ir.Instruction):
    """Each executing thread makes its global writes, and those ordered before it, visible, then stores ``value``
    into element ``index`` of the 1-D int32 global view ``flags``."""

    flags: ir.TensorRef
    index: ir.Expr
    value: ir.Expr


@dataclass(frozen=True, eq=False)
class FlagAdd(ir.Instruction):
    """Each executing thread makes its global writes, and those ordered before it, visible, then atomically adds
    ``value`` to element ``index`` of the 1-D int32 global view ``flags``."""

    flags: ir.TensorRef
    index: ir.Expr
    value: ir.Expr


@dataclass(frozen=True, eq=False)
class FlagWait(ir.Instruction):
    """Each executing thread blocks until element ``index`` of the 1-D int32 global view ``flags`` holds
    ``value``, with acquire semantics."""

    flags: ir.TensorRef
    index: ir.Expr
    value: ir.Expr


# ------------------------------------------------------------------------------------------------ language


def _flag_operands(b: BuildContext, flags, index, value, what: str) -> tuple[ir.TensorRef, ir.Expr, ir.Expr]:
    """The view, index and value of a flag operation, or a CompileError naming ``what``'s argument."""
    if not isinstance(flags, TensorValue) or flags.kind != ir.GLOBAL:
        raise b.error(f"{what} flags must be a global view (self.global_view of an int32 pointer), got "
                      f"{describe(flags)}")
    if flags.dtype != int32 or len(flags.shape) != 1:
        raise b.error(f"{what} flags must be a 1-D int32 global view; {flags.name} is {flags.dtype.name} with "
                      f"{len(flags.shape)} dimensions")
    return flags.ref, b.to_index(index, f"{what} index"), b.to_integer(value, int32, f"{what} value")


class Flags(LanguageObject):
    """``self.flag``: int32 flags in global memory that order one block's global writes before another's reads."""

    namespace = "flag"

    @language_call
    def signal(self, flags, index, value=1) -> None:
        """Every executing thread (usually one, inside ``single_thread``) makes the global writes it made, and every
        write ordered before it by a barrier (``self.sync()`` after the other threads' ``store_global``), visible at
        GPU scope, then sets ``flags[index]`` to ``value``. A block that waits for the value reads those writes.
        PTX: ``fence.acq_rel.gpu; st.relaxed.gpu.global.b32 [flag], value;`` (a release at GPU scope)."""
        ref, index, value = _flag_operands(self.b, flags, index, value, "flag.signal")
        self.b.emit(FlagSignal(self.b.loc, self.b.threads(), ref, index, value))

    @language_call
    def add(self, flags, index, value=1) -> None:
        """Every executing thread (usually one, inside ``single_thread``) releases its global writes as ``signal``
        does, then atomically adds ``value`` to ``flags[index]``: a count several blocks arrive on, so that one
        block waits for all of them with a single ``wait`` for their total (the combine of a split reduction).
        A wait that passes on the total acquires the writes of every block whose add it counts. PTX:
        ``red.release.gpu.global.add.s32 [flag], value;``"""
        ref, index, value = _flag_operands(self.b, flags, index, value, "flag.add")
        self.b.emit(FlagAdd(self.b.loc, self.b.threads(), ref, index, value))

    @language_call
    def wait(self, flags, index, value=1) -> None:
        """Block the executing threads (usually one, inside ``single_thread``, followed by ``self.sync()`` for the
        others) until ``flags[index]`` holds ``value``. The flag must be set by this block or by a block launched
        before it (lower linear blockIdx): a later block may not run until this one ends. PTX: a loop on
        ``ld.acquire.gpu.global.b32`` (debug builds give up after a quarter of a second, as barrier waits do)."""
        ref, index, value = _flag_operands(self.b, flags, index, value, "flag.wait")
        self.b.emit(FlagWait(self.b.loc, self.b.threads(), ref, index, value))


# ----------------------------------------------------------------------------------------------- emulation


def _flag(machine: EmulationMachine, task: EmulationTask, s: FlagSignal | FlagAdd | FlagWait, what: str) -> Any:
    """The flag element ``s`` names in ``task``, as the block's global memory locates it."""
    return machine.global_flag(task, s.flags, machine.ev(task, s.index), what)


@emulates(FlagSignal)
def _signal(machine: EmulationMachine, task: EmulationTask, s: FlagSignal) -> Steps | None:
    flag = _flag(machine, task, s, "flag.signal")
    machine.global_memory.flag_signal(task, flag, machine.ev(task, s.value))
    task.tick()
    return machine.preempt()


@emulates(FlagAdd)
def _add(machine: EmulationMachine, task: EmulationTask, s: FlagAdd) -> Steps | None:
    flag = _flag(machine, task, s, "flag.add")
    machine.global_memory.flag_add(task, flag, machine.ev(task, s.value))
    task.tick()
    return machine.preempt()


@emulates(FlagWait)
def _wait(machine: EmulationMachine, task: EmulationTask, s: FlagWait) -> Steps | None:
    flag = _flag(machine, task, s, "flag.wait")
    memory, value = machine.global_memory, machine.ev(task, s.value)
    held = memory.flag_value(flag)
    text = (f"in flag.wait until {flag.name} == {value} (it holds {held}; only this block or a block launched "
            f"before it can set it: a later block need not run until this one ends)")
    return machine.wait_until(lambda: memory.flag_holds(flag, value), text,
                              after=lambda: memory.flag_acquired(task, flag))


# ---------------------------------------------------------------------------------------------------------- timeline
# What each statement costs the CPU timing model and how timelines show it (``isa.timeline_facts``).
declare_timeline(FlagSignal, STATEMENT, NOT_SHOWN)
declare_timeline(FlagAdd, STATEMENT, NOT_SHOWN)
declare_timeline(FlagWait, STATEMENT, NOT_SHOWN)

declare(WRITES_GLOBAL, FlagSignal, lambda s: s.flags)  # the signal stores its value
declare(WRITES_GLOBAL, FlagAdd, lambda s: s.flags)  # the add stores the new count
