"""The facts the timeline reads of a statement, as its family declared them (``warpspec.isa.timeline_facts``):
its cost in the CPU timing model and how timelines show it. A statement type declaring neither is a CompileError
at its line here (and a failure of ``tests/isa/test_registry.py`` before that)."""

from __future__ import annotations

import string

from warpspec.errors import CompileError
from warpspec.isa import registry
from warpspec.isa.timeline_facts import Instrumentation, TimingCost
from warpspec.ir import nodes as ir


def timing_cost(stmt: ir.Stmt) -> TimingCost:
    """What ``stmt`` costs the model: its family's ``registry.TIMING_COST`` declaration."""
    cost = registry.fact_of(registry.TIMING_COST, type(stmt))
    if cost is None:
        raise CompileError(f"the timing model has no cost for {type(stmt).__name__}: its family declares no "
                           f"registry.TIMING_COST", str(stmt.loc))
    return cost


def instrumentation(stmt: ir.Stmt) -> Instrumentation:
    """How timelines show ``stmt``: its family's ``registry.INSTRUMENT`` declaration."""
    shown = registry.fact_of(registry.INSTRUMENT, type(stmt))
    if shown is None:
        raise CompileError(f"timelines do not know whether to show {type(stmt).__name__}: its family declares no "
                           f"registry.INSTRUMENT", str(stmt.loc))
    return shown


def fields_of(template: str) -> list[str]:
    """The statement fields an event name's template names: "tma {src} -> {dst}" -> ["src", "dst"]."""
    return [field for _, field, _, _ in string.Formatter().parse(template) if field]
