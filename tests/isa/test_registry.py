"""Every IR statement type has an emulation, for each CUDA target an emitter (or a deliberate refusal), and the
facts ``registry.REQUIRED`` asks of it (every statement: its timing cost and instrumentation decision; a register
tensor's definer: its layout rule)."""

import gc
from dataclasses import dataclass

import warpspec
import warpspec.cuda.sm90  # noqa: F401  (registers the sm90a emitters)
import warpspec.emulator.machine  # noqa: F401  (registers the core statements' emulations)
import warpspec.timeline  # noqa: F401  (registers the profiling statements)
from warpspec.isa import registry
from warpspec.ir import nodes as ir
from warpspec.target import SM90A


def missing(target: str) -> list[str]:
    """Statement types lacking an emulation or an emitter for ``target``."""
    emulations, emitters = registry.emulations(), registry.emitters(target)
    gaps = []
    for node in registry.statement_types():
        if node not in emulations:
            gaps.append(f"{node.__module__}.{node.__name__}: no emulation")
        if node not in emitters:
            gaps.append(f"{node.__module__}.{node.__name__}: no emitter for {target}")
        for fact, base in registry.REQUIRED.items():
            if issubclass(node, base) and node not in registry.facts(fact):
                gaps.append(f"{node.__module__}.{node.__name__}: no {fact}")
    return gaps


def test_every_statement_type_is_emulated_and_emitted():
    types = registry.statement_types()
    names = {t.__name__ for t in types}
    # The walk finds the families' statements, not the abstract bases.
    assert {"MbarrierWait", "TmaLoad", "WgmmaMma", "StoreGlobal", "Cast", "ThreadGroup", "For", "If"} <= names
    assert not names & {"Stmt", "Instruction", "DefineTensor"}
    assert missing(SM90A.name) == []


def test_a_new_statement_without_semantics_is_reported():
    @dataclass(frozen=True, eq=False)
    class Unfinished(ir.Instruction):
        """A statement added without an emulation or an emitter."""

    assert f"{__name__}.Unfinished: no emulation" in missing(SM90A.name)
    assert f"{__name__}.Unfinished: no emitter for {SM90A.name}" in missing(SM90A.name)
    assert f"{__name__}.Unfinished: no timing cost" in missing(SM90A.name)
    assert f"{__name__}.Unfinished: no instrumentation decision" in missing(SM90A.name)
    del Unfinished
    gc.collect()
    assert missing(SM90A.name) == []


def test_a_register_tensor_definer_without_a_layout_rule_is_reported():
    @dataclass(frozen=True, eq=False)
    class Unlaid(ir.DefineTensor):
        """A statement defining a register tensor without saying which layout it gives."""

    assert f"{__name__}.Unlaid: no layout rule" in missing(SM90A.name)
    del Unlaid
    gc.collect()
    assert missing(SM90A.name) == []


def test_the_families_declare_their_layout_rules():
    rules = {node.__name__ for node in registry.facts(registry.LAYOUT_RULE)}
    assert {"WgmmaMma", "Cast", "Arithmetic", "TileIndex", "ReduceRows", "LoadGlobal", "LoadShared", "AllocRegister",
            "StoreGlobal", "StoreShared", "StoreElement"} == rules
    assert {node.__name__ for node in registry.facts(registry.BODY_THREADS)} == {"ThreadGroup"}


def test_the_families_declare_what_timelines_show_and_what_the_model_charges():
    shown = {node.__name__: fact.kind for node, fact in registry.facts(registry.INSTRUMENT).items()
             if fact.kind is not None}
    assert shown == {"MbarrierWait": "wait", "TmaLoad": "tma", "TmaStore": "tma", "WgmmaMma": "wgmma",
                     "WgmmaWait": "wgmma_wait", "TmaWait": "tma_wait", "Sync": "sync"}
    charged = {node.__name__: fact.kind for node, fact in registry.facts(registry.TIMING_COST).items()
               if fact.kind != "statement"}
    assert charged == {"AllocBarriers": "sync", "MbarrierArrive": "arrive", "MbarrierArriveExpectTx": "arrive",
                       "MbarrierWait": "wait", "TmaLoad": "tma", "TmaStore": "tma", "WgmmaMma": "wgmma",
                       "WgmmaCommit": "wgmma_commit", "Cast": "registers", "Arithmetic": "registers",
                       "LoadShared": "registers", "StoreShared": "registers", "LoadGlobal": "global_load",
                       "LoadScalar": "global_load", "StoreGlobal": "global_store", "Sync": "sync",
                       "SingleThread": "elect", "ProfileEnd": "record", "ProfileJoin": "record_join"}


def test_an_unsupported_statement_is_refused_at_its_line():
    @dataclass(frozen=True, eq=False)
    class NotOnThisTarget(ir.Instruction):
        """A statement the CUDA back end refuses deliberately."""

    registry.unsupported(NotOnThisTarget, "test-target", "NotOnThisTarget is emulated only")
    refuse = registry.emitter(NotOnThisTarget, "test-target")
    stmt = NotOnThisTarget(ir.Loc("kernel.py", 12), (0, 128))
    try:
        refuse(None, stmt)
    except warpspec.CompileError as error:
        assert error.location == "kernel.py:12"
        assert "NotOnThisTarget is emulated only (not supported by the CUDA back end for test-target yet)" in str(error)
    else:
        raise AssertionError("the refusal did not raise")
