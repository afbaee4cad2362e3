"""What a timeline needs to know of each statement type, declared by the statement's family beside it: its cost in
the CPU timing model (``registry.TIMING_COST``: a ``TimingCost``) and how timelines show it (``registry.INSTRUMENT``:
an ``Instrumentation``). ``warpspec.timeline.model_timing`` and ``warpspec.timeline.instrument`` read these
instead of testing node classes, and ``tests/isa/test_registry.py`` fails for a statement type declaring neither.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: What a statement spends in the timing model (``TimingCost.kind``), and what ``TimingCost.measure`` returns:
#:
#: - "statement": a scalar statement's time (``Costs.statement_ns``); nothing measured;
#: - "arrive": an mbarrier arrive (``arrive_ns``);
#: - "wait": an mbarrier wait: one try_wait (``wait_ns``), then the wake-up latency after its phase completes;
#: - "sync": nothing until every member arrived, then the barrier's latency (``sync_ns``);
#: - "tma": issuing one asynchronous copy (``tma_issue_ns``; issued by a group of threads outside
#:   ``single_thread``, one lane is elected for it as for "elect"); measured: the bytes it moves through the SM's
#:   memory share;
#: - "wgmma": issuing into the open WGMMA group; measured: ``(m, n, k, a dtype, b dtype)`` of the whole statement;
#: - "wgmma_commit": a scalar statement's time, and the open group's tensor-core work is queued;
#: - "registers": elementwise work per thread; measured: the shape of the register tile worked on;
#: - "global_load", "global_store": a register tile moved to or from global memory; measured: the register
#:   tensor's declaration (its shape and dtype);
#: - "elect": a body run by one lane of its warp (``single_thread``): ``elect_ns`` to elect it, branch and
#:   reconverge the warp after it;
#: - "record", "record_join": an instrumented build's writing of one event (``record_ns``) and its recording warp
#:   agreeing on its event count after a ``single_thread`` body (``record_join_ns``); only the timing model's
#:   "as recorded" runs meet them (``warpspec.timeline.model.model_launch``).
COST_KINDS = ("statement", "arrive", "wait", "sync", "tma", "wgmma", "wgmma_commit", "registers", "global_load",
              "global_store", "elect", "record", "record_join")


@dataclass(frozen=True)
class TimingCost:
    """What one execution of a statement costs the CPU timing model: ``kind`` (one of ``COST_KINDS``) and, where
    the kind says so, ``measure(stmt)``: how much of it."""

    kind: str
    measure: Callable[[Any], Any] | None = None

    def __post_init__(self):
        if self.kind not in COST_KINDS:
            raise ValueError(f"timing cost kind {self.kind!r} is not one of {', '.join(COST_KINDS)}")


#: A scalar statement's cost: what a statement with nothing of its own to model costs.
STATEMENT = TimingCost("statement")


@dataclass(frozen=True)
class Instrumentation:
    """How timelines show a statement: as an event of ``kind`` (``warpspec.timeline.events.KINDS``; None: not
    shown) named by the template ``name`` over the statement's fields (``"tma {src} -> {dst}"``).

    ``indexed``: the field (a barrier or a shared tile) whose runtime index a GPU record carries, shown with that
    index; ``barrier``: the field naming the barrier the event is about (on the GPU, where the one index a record
    holds names it: the indexed field, a single barrier, or one indexed as the indexed field is); ``run``:
    consecutive statements of this type make one event, from the first to the statement that ``closes`` the kind
    (WGMMA issues up to their commit); ``stage``:
    the field (a barrier or a shared tile) whose index is the pipeline stage the event concerns (a wait's barrier,
    a TMA load's destination, an mma's B operand: the tile the K loop rings); ``phase``: the field holding the
    parity a wait waits for (``warpspec.timeline.instrument`` says what events carry of both); ``pending``: the
    field (a compile-time integer) holding how many of the role's most recent asynchronous groups a wait leaves in
    flight (``wgmma.wait_group``'s n: which groups its end shows complete)."""

    kind: str | None
    name: str = ""
    indexed: str | None = None
    barrier: str | None = None
    run: bool = False
    closes: str | None = None
    stage: str | None = None
    phase: str | None = None
    pending: str | None = None


#: A statement timelines do not show.
NOT_SHOWN = Instrumentation(None)
