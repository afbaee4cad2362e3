"""mbarrier: asynchronous barriers in shared memory with phase parity (PTX ``mbarrier.*``).

The language methods (``self.mbarrier.alloc/arrive/arrive_and_expect_tx/wait``), their IR statements and their
emulation. The emulator's barrier model (arrival counts, signed tx-count, parity, the misuse checks) is
``warpspec.emulator.barrier``; the CUDA emission is ``warpspec.cuda.sm90.mbarrier``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from warpspec.dtypes import int32, uint32
from warpspec.errors import BarrierError
from warpspec.isa.base import LanguageObject, barrier_ref, language_call
from warpspec.isa.cluster import check_rank
from warpspec.isa.contracts import EmulationMachine, EmulationTask, Steps
from warpspec.isa.registry import declare_timeline, emulates
from warpspec.isa.timeline_facts import NOT_SHOWN, Instrumentation, TimingCost
from warpspec.isa.values import TensorValue
from warpspec.ir import nodes as ir

# ------------------------------------------------------------------------------------------------------- IR


@dataclass(frozen=True, eq=False)
class AllocBarriers(ir.Stmt):
    """Create ``len(counts)`` mbarriers, barrier i expecting ``counts[i]`` arrivals per phase, visible to every
    thread of the block afterwards."""

    decl: ir.TensorDecl
    counts: tuple[int, ...]

    def text(self, f) -> str:
        return f"{self.decl.name} = mbarrier.alloc(counts={list(self.counts)})"


@dataclass(frozen=True, eq=False)
class MbarrierArrive(ir.Instruction):
    """Each executing thread arrives once on ``barrier``: this block's, or with ``cta`` the same barrier in the
    block of that rank in the cluster."""

    barrier: ir.TensorRef
    cta: ir.Expr | None = None


@dataclass(frozen=True, eq=False)
class MbarrierArriveExpectTx(ir.Instruction):
    """Each executing thread raises ``barrier``'s transaction count by ``nbytes``, then arrives once."""

    barrier: ir.TensorRef
    nbytes: ir.Expr


@dataclass(frozen=True, eq=False)
class MbarrierWait(ir.Instruction):
    """Block until the phase of ``barrier`` with parity ``phase`` has completed."""

    barrier: ir.TensorRef
    phase: ir.Expr


# ------------------------------------------------------------------------------------------------ language


class Mbarrier(LanguageObject):
    """``self.mbarrier``: asynchronous barriers in shared memory with phase parity (PTX ``mbarrier.*``)."""

    namespace = "mbarrier"

    #: The phase a producer first waits on an "empty" barrier with: a fresh barrier passes parity 1 at once.
    producer_initial_phase = 1
    #: The phase a consumer first waits on a "full" barrier with: parity 0 blocks until the first completion.
    consumer_initial_phase = 0

    @language_call
    def alloc(self, counts) -> TensorValue:
        """Create one mbarrier per entry of ``counts``, each expecting that many arrivals per phase.

        Executed by the whole block at the top level of the kernel: one thread runs ``mbarrier.init.shared::cta.b64``
        for each, then ``fence.mbarrier_init.release.cluster`` and a block barrier make them visible to all threads
        and to TMA. Returns a barrier array; index it (``barriers[stage]``) to name one barrier.
        """
        b = self.b
        if b.in_thread_group() or b.depth:
            raise b.error("mbarrier.alloc must be called by the whole block, outside thread groups, loops and "
                          "branches")
        counts = list(counts) if isinstance(counts, (list, tuple)) else [counts]
        if not counts:
            raise b.error("mbarrier.alloc needs at least one count")
        values = tuple(b.to_int(c, "mbarrier.alloc count") for c in counts)
        limit = self.target.mbarrier_max_count
        for count in values:
            if not 1 <= count <= limit:
                raise b.error(f"an mbarrier's arrival count must be in [1, 2^20 - 1], got {count}")
        decl = ir.TensorDecl(b.target_name("barriers"), ir.BARRIER, int32, (len(values),), b.loc)
        b.emit(AllocBarriers(b.loc, decl, values))
        return TensorValue(ir.TensorRef(decl))

    @language_call
    def arrive(self, barrier, cta=None) -> None:
        """Every executing thread arrives once on ``barrier`` (a group of 128 threads gives 128 arrivals; one
        inside ``single_thread``). PTX: ``mbarrier.arrive.shared::cta.b64 _, [bar];`` (release, CTA scope).

        With ``cta`` (an int32 rank in the cluster, compile-time or runtime) the arrivals go to the same barrier in
        the block of that rank (distributed shared memory): PTX ``mapa.shared::cluster.u32`` of the barrier's
        address, then ``mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];``. That block's
        ``mbarrier.alloc`` must be ordered before (``self.cluster_sync()`` after alloc), and it must not exit before
        the arrival (it waits for it, or the kernel ends with ``self.cluster_sync()``)."""
        b = self.b
        ref = barrier_ref(b, barrier, "mbarrier.arrive barrier")
        rank = None
        if cta is not None:
            rank = b.to_integer(cta, int32, "mbarrier.arrive cta")
            if isinstance(rank, ir.Const):
                check_rank(b, cast(int, rank.value), "mbarrier.arrive cta")
        b.emit(MbarrierArrive(b.loc, b.threads(), ref, rank))

    @language_call
    def arrive_and_expect_tx(self, barrier, transaction_bytes) -> None:
        """Every executing thread adds ``transaction_bytes`` to ``barrier``'s transaction count, then arrives once;
        the phase completes when all arrivals are in and the async copies have delivered those bytes.
        PTX: ``mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], bytes;``. Usually inside ``single_thread``."""
        ref = barrier_ref(self.b, barrier, "mbarrier.arrive_and_expect_tx barrier")
        nbytes = self.b.to_integer(transaction_bytes, uint32, "mbarrier.arrive_and_expect_tx transaction_bytes")
        if isinstance(nbytes, ir.Const) and not 0 <= nbytes.value <= self.target.mbarrier_tx_limit:
            raise self.b.error(f"transaction_bytes must be in [0, 2^20 - 1], got {nbytes.value}")
        self.b.emit(MbarrierArriveExpectTx(self.b.loc, self.b.threads(), ref, nbytes))

    @language_call
    def wait(self, barrier, phase) -> None:
        """Block the executing threads until the phase of ``barrier`` with parity ``phase`` (0 or 1) has
        completed. PTX: a loop on ``mbarrier.try_wait.parity.shared::cta.b64 p, [bar], phase;`` (acquire)."""
        ref = barrier_ref(self.b, barrier, "mbarrier.wait barrier")
        parity = self.b.to_integer(phase, uint32, "mbarrier.wait phase")
        if isinstance(parity, ir.Const) and parity.value not in (0, 1):
            raise self.b.error(f"mbarrier.wait phase must be 0 or 1, got {parity.value}")
        self.b.emit(MbarrierWait(self.b.loc, self.b.threads(), ref, parity))


# ----------------------------------------------------------------------------------------------- emulation


@emulates(AllocBarriers)
def _alloc_barriers(machine: EmulationMachine, task: EmulationTask, s: AllocBarriers) -> Steps | None:
    machine.create_barriers(task, s.decl, s.counts)
    # Initialisation is visible to all threads only after a block-wide barrier, which the CUDA back end emits
    # right after init: model it as a sync of the whole block.
    return machine.sync(task, 0, machine.kernel.num_threads,
                        f"in the block-wide barrier after mbarrier.alloc of {s.decl.name}")


@emulates(MbarrierArrive)
def _arrive(machine: EmulationMachine, task: EmulationTask, s: MbarrierArrive) -> Steps | None:
    if s.cta is None:
        bar = machine.barrier(task, s.barrier)
    else:
        rank = machine.ev(task, s.cta)
        bar = machine.cluster.remote_barrier(task, rank, s.barrier, f"mbarrier.arrive(cta={rank})")
    bar.arrive(machine.arrivals(task, s), task.clock, where=str(s.loc))
    task.tick()
    return machine.preempt()


@emulates(MbarrierArriveExpectTx)
def _arrive_expect_tx(machine: EmulationMachine, task: EmulationTask, s: MbarrierArriveExpectTx) -> Steps | None:
    count = machine.arrivals(task, s)
    nbytes = machine.ev(task, s.nbytes)
    machine.barrier(task, s.barrier).arrive(count, task.clock, tx=nbytes * count, where=str(s.loc))
    task.tick()
    return machine.preempt()


@emulates(MbarrierWait)
def _wait(machine: EmulationMachine, task: EmulationTask, s: MbarrierWait) -> Steps | None:
    bar = machine.barrier(task, s.barrier)
    parity = machine.ev(task, s.phase)
    if parity not in (0, 1):
        raise BarrierError(f"mbarrier.wait on {bar.name} with phase {parity}; the phase parity must be 0 or 1")
    if bar.try_wait(task, parity):
        return machine.preempt()
    return machine.wait_until(lambda: task.woken, f"in mbarrier.wait on {bar.name} for phase parity {parity}")


# ---------------------------------------------------------------------------------------------------------- timeline
# What each statement costs the CPU timing model and how timelines show it (``isa.timeline_facts``).
# An arrive costs the same whatever the count; a wait is shown with the barrier it waits on and the index it runs at.
declare_timeline(AllocBarriers, TimingCost("sync"), NOT_SHOWN)
declare_timeline(MbarrierArrive, TimingCost("arrive"), NOT_SHOWN)
declare_timeline(MbarrierArriveExpectTx, TimingCost("arrive"), NOT_SHOWN)
declare_timeline(MbarrierWait, TimingCost("wait"),
                 Instrumentation("wait", "wait {barrier}", indexed="barrier", barrier="barrier",
                                 stage="barrier", phase="phase"))
