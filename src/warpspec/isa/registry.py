"""Which code runs each IR statement on each back end.

Every statement type is registered once for the emulator (``@emulates(Node)``: ``fn(machine, task, stmt)``,
returning None or a generator that yields while the task waits) and once per CUDA target that claims it
(``@emits(Node, target)``: ``fn(generator, stmt)``). A target may refuse a node deliberately with
``unsupported(Node, target, reason)``, which becomes a CompileError at the kernel line. ``tests/isa/test_registry.py``
walks every statement type and fails when one lacks an emulation or an emitter. A family whose emulation keeps
state on the task (``task.family_state(...)``) checks it when the block ends with ``@at_exit``:
``fn(machine, task)``, raising a KernelError. The types of these functions' arguments are the Protocols of
``warpspec.isa.contracts`` (emulations) and ``warpspec.cuda.contracts`` (emitters).

Other facts about a statement type are registered beside it the same way, by name: ``declare(FACT, Node, value)``
or ``@fact(FACT, Node)`` on a function, read by the pass that needs them with ``fact_of(FACT, type(stmt))``, so a
central pass asks the family instead of testing node classes. ``REQUIRED`` names the facts every concrete
statement deriving from a base must declare; the registry test reports a statement type lacking one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from warpspec.errors import CompileError
from warpspec.ir import nodes as ir
from warpspec.isa.timeline_facts import NOT_SHOWN, STATEMENT

Function = TypeVar("Function", bound=Callable[..., Any])

_EMULATIONS: dict[type, Any] = {}
_EMITTERS: dict[tuple[type, str], Any] = {}
_EXIT_CHECKS: list[Any] = []
_FACTS: dict[str, dict[type, Any]] = {}

#: ``fn(stmt, target) -> layout.registers.LayoutRule``: what a statement says about the layouts of the register
#: tensors it defines, reads or stores (``passes.layouts`` combines them).
LAYOUT_RULE = "layout rule"
#: ``fn(stmt) -> (begin, count)``: the threads that run the nested bodies of a statement that narrows them.
BODY_THREADS = "body threads"
#: Present (True) on statement types whose completion is each warpgroup's own (WGMMA): the emulator runs a group
#: issuing them as one partition per warpgroup.
PER_WARPGROUP = "per warpgroup"
#: ``fn(stmt) -> ir.TensorRef``: the global view a statement writes (a store, a TMA store, a flag's signal), so a
#: launch knows which arrays the kernel writes.
WRITES_GLOBAL = "writes global"
#: ``isa.timeline_facts.TimingCost``: what one execution of a statement costs the CPU timing model
#: (``warpspec.timeline.model_timing``).
TIMING_COST = "timing cost"
#: ``isa.timeline_facts.Instrumentation``: whether and how timelines show a statement (the GPU instrumentation,
#: ``warpspec.timeline.instrument``, brackets it; the timing model records its interval).
INSTRUMENT = "instrumentation decision"
#: Fact -> the statement base whose every concrete subclass must declare it.
REQUIRED: dict[str, type] = {LAYOUT_RULE: ir.DefineTensor, TIMING_COST: ir.Stmt, INSTRUMENT: ir.Stmt}


def emulates(node: type) -> Callable[[Function], Function]:
    """Register the decorated function as the emulator's semantics of statement type ``node``."""
    def register(function: Function) -> Function:
        if node in _EMULATIONS:
            raise RuntimeError(f"{node.__name__} already has an emulation: {_EMULATIONS[node].__qualname__}")
        _EMULATIONS[node] = function
        return function
    return register


def emits(node: type, target: str) -> Callable[[Function], Function]:
    """Register the decorated function as the CUDA emitter of statement type ``node`` for ``target``."""
    def register(function: Function) -> Function:
        key = (node, target)
        if key in _EMITTERS:
            raise RuntimeError(f"{node.__name__} already has an emitter for {target}")
        _EMITTERS[key] = function
        return function
    return register


def unsupported(node: type, target: str, reason: str) -> None:
    """Declare that ``target``'s back end refuses ``node``: compiling a kernel that uses it is a CompileError at the
    statement's line saying ``reason``."""
    def refuse(generator: Any, stmt: ir.Stmt) -> None:
        raise CompileError(f"{reason} (not supported by the CUDA back end for {target} yet)", str(stmt.loc))
    refuse.unsupported = reason  # type: ignore[attr-defined]
    emits(node, target)(refuse)


def declare(name: str, node: type, value) -> None:
    """Register ``value`` as fact ``name`` of statement type ``node``."""
    table = _FACTS.setdefault(name, {})
    if node in table:
        raise RuntimeError(f"{node.__name__} already declares its {name}")
    table[node] = value


def fact(name: str, node: type):
    """Register the decorated function as fact ``name`` of statement type ``node``."""
    def register(function):
        declare(name, node, function)
        return function
    return register


def fact_of(name: str, node: type, default=None):
    """Fact ``name`` of statement type ``node``, or ``default`` when it declares none."""
    return _FACTS.get(name, {}).get(node, default)


def facts(name: str) -> dict[type, object]:
    """Every statement type declaring fact ``name``, with its value."""
    return dict(_FACTS.get(name, {}))


def declare_timeline(node: type, cost, shown) -> None:
    """Declare statement type ``node``'s ``TIMING_COST`` and ``INSTRUMENT`` facts (``isa.timeline_facts``)."""
    declare(TIMING_COST, node, cost)
    declare(INSTRUMENT, node, shown)


def at_exit(check: Function) -> Function:
    """Register ``check(machine, task)``, run for every task of a block when the block ends (in the order the
    family modules register them): a family's state on the task that must be empty by then."""
    _EXIT_CHECKS.append(check)
    return check


def exit_checks() -> tuple[Any, ...]:
    """Every registered end-of-block check, in registration order."""
    return tuple(_EXIT_CHECKS)


def emulation(node: type) -> Any:
    """The emulation function of statement type ``node``."""
    try:
        return _EMULATIONS[node]
    except KeyError:
        raise CompileError(f"the emulator has no semantics for {node.__name__}") from None


def emitter(node: type, target: str) -> Any:
    """The emitter of statement type ``node`` for ``target``."""
    try:
        return _EMITTERS[(node, target)]
    except KeyError:
        raise CompileError(f"the CUDA back end for {target} has no emitter for {node.__name__}") from None


def emulations() -> dict[type, Any]:
    """Every registered emulation, by statement type."""
    return dict(_EMULATIONS)


def emitters(target: str) -> dict[type, Any]:
    """Every registered emitter of ``target``, by statement type."""
    return {node: fn for (node, name), fn in _EMITTERS.items() if name == target}


def statement_types() -> list[type]:
    """Every concrete IR statement type: subclasses of ``ir.Stmt`` that are not abstract bases."""
    found: list[type] = []
    pending: list[type] = [ir.Stmt]
    while pending:
        cls = pending.pop()
        subclasses: list[type] = cls.__subclasses__()
        for sub in subclasses:
            pending.append(sub)
            if not sub.__dict__.get("abstract", False):
                found.append(sub)
    return sorted(set(found), key=lambda c: (c.__module__, c.__name__))


# The core statements of ``warpspec.ir`` belong to no family: a loop iteration, a branch or a scalar assignment
# costs a scalar statement's time, and timelines show none of them.
for _core in (ir.Assign, ir.Declare, ir.For, ir.If):
    declare_timeline(_core, STATEMENT, NOT_SHOWN)
