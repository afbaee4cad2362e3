"""Rules that reject a schedule before anything is compiled, each with the reason it cannot work.

A schedule is pruned when

- its IR does not build: the front end already enforces WGMMA's shape rules (M a multiple of 64 per consumer
  warpgroup, N a multiple of 8 up to 256, K in 16-byte steps) and TMA's 16-byte inner box rule, so the reason is
  the front end's ``CompileError`` message;
- its shared memory (every stage of every tile, with the 1 KB alignment padding TMA's swizzles need, plus the
  mbarriers) exceeds what one block may use: the size is the CUDA back end's own plan, not an estimate;
- a tile has no shared-memory layout that both TMA and WGMMA can use (TMA box limits, swizzle/tile combinations):
  the layout chooser's reason;
- the WGMMA accumulators one consumer thread holds at once leave fewer than ``RESERVED_REGISTERS`` of its
  register budget (its ``setmaxnreg`` value, or its share of the SM's registers) for everything else.

Nothing here needs a GPU or a compiler: it takes milliseconds per schedule.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from warpspec.errors import CompileError
from warpspec.isa.roles import ThreadGroup
from warpspec.isa.wgmma import WgmmaMma
from warpspec.ir import nodes as ir
from warpspec.target import DEFAULT

#: Registers a consumer thread needs besides the WGMMA accumulators it holds at one point (descriptors, addresses,
#: loop and phase state, fragments being converted). Measured with NVRTC's ptxas: V3 with 192x136 tiles (204
#: accumulator registers in a 255-register thread) builds in 230 without spilling and 192x160 (240) spills; the
#: attention backward's dK/dV kernel at D 128 holds 192 at once within its 240 (``setmaxnreg``) without spilling.
RESERVED_REGISTERS = 48


@dataclass(frozen=True)
class ResourceEstimate:
    """The shared memory and registers a kernel needs, as the CUDA back end will plan them, without generating
    code."""

    shared_bytes: int  # tiles and mbarriers; the launch adds the 1 KB alignment reserve on top
    limit_bytes: int  # the most a block may use, on the same terms
    accumulator_registers: dict[str, int]  # f32 registers per thread of each WGMMA accumulator, by tensor name
    #: The most accumulator registers one consumer thread holds at once (over its thread group's program points), in
    #: the thread group where that leaves the fewest registers for the rest; ``live`` names them at that point.
    registers_per_thread: int
    live: tuple[tuple[str, int], ...] = ()
    register_budget: int = 0  # that thread group's registers per thread (setmaxnreg, or the block's share)

    @property
    def register_limit(self) -> int:
        """The most accumulator registers that thread group may hold at once."""
        return self.register_budget - RESERVED_REGISTERS


@dataclass(frozen=True)
class PruneVerdict:
    """The outcome of pruning one schedule: ``reason`` is None when it is worth compiling."""

    reason: str | None
    kernel: ir.Kernel | None = None  # None when the IR did not build
    plan: ResourceEstimate | None = None  # None when planning failed
    shared_bytes: int | None = None  # planned shared memory (tiles and barriers), when the plan got that far

    @property
    def pruned(self) -> bool:
        """Whether the schedule cannot work."""
        return self.reason is not None


def plan_kernel(kernel: ir.Kernel) -> ResourceEstimate:
    """What the analysis passes decided for ``kernel`` (its ``facts``: register layouts, shared memory), in the
    numbers the pruning rules read."""
    facts = kernel.facts
    liveness = _Liveness(DEFAULT.entry_registers(kernel.num_threads))
    liveness.visit(kernel.body, liveness.entry_budget)
    accumulators = {decl.name: facts.layouts[decl.uid].registers for decl, _, _ in liveness.accumulators.values()}
    groups = {group for _, group, _ in liveness.accumulators.values()}
    # (registers at the peak, live there, budget) of the group that leaves the fewest registers for the rest
    peak, live, budget = max((liveness.peak(group, facts.layouts) for group in groups),
                             key=lambda found: found[0] - found[2], default=(0, (), liveness.entry_budget))
    return ResourceEstimate(facts.shared.total_bytes, facts.shared.limit_bytes, accumulators, peak, live, budget)


class _Liveness:
    """Where each WGMMA accumulator is live: statements numbered in program order, a tensor live from its first
    reference to its last, and through every loop it is referenced in that starts after its first reference (its
    value goes around that loop's back edge), each with the register budget of the thread group issuing its
    WGMMAs."""

    def __init__(self, entry_budget: int):
        self.entry_budget = entry_budget
        self.position = 0
        self.references: dict[int, list[int]] = {}  # tensor uid -> statement positions
        self.loops: list[tuple[int, int]] = []  # (first, last) statement position of each loop
        self.accumulators: dict[int, tuple] = {}  # uid -> (decl, issuing thread group, its register budget)

    def visit(self, body, budget: int) -> None:
        """Number ``body``'s statements (and their nested ones) on from ``position``, noting each tensor's
        references, each loop's extent and each accumulator's issuing group; ``budget`` is the enclosing thread
        group's registers per thread."""
        for stmt in body:
            self.position += 1
            here = self.position
            found: set[int] = set()
            for name in (f.name for f in dataclasses.fields(stmt)):
                if name != "loc" and name not in type(stmt).blocks:
                    _tensor_uids(getattr(stmt, name), found)
            for uid in found:
                self.references.setdefault(uid, []).append(here)
            if isinstance(stmt, WgmmaMma) and stmt.d.decl.uid not in self.accumulators:
                self.accumulators[stmt.d.decl.uid] = (stmt.d.decl, stmt.threads, budget)
            inner = stmt.max_registers if isinstance(stmt, ThreadGroup) and stmt.max_registers else budget
            for child in ir.children(stmt):
                self.visit(child, inner)
            if isinstance(stmt, ir.For):
                self.loops.append((here, self.position))

    def interval(self, uid: int) -> tuple[int, int]:
        """The positions from which to which tensor ``uid`` is live."""
        positions = self.references[uid]
        first_reference = first = min(positions)
        last = max(positions)
        for start, end in self.loops:
            if start > first_reference and any(start < p <= end for p in positions):
                first, last = min(first, start), max(last, end)
        return first, last

    def peak(self, group, layouts) -> tuple[int, tuple[tuple[str, int], ...], int]:
        """(the most registers the accumulators of thread group ``group`` hold at once, the live ones there by
        name, the group's register budget)."""
        spans = [(*self.interval(uid), decl.name, layouts[uid].registers, budget)
                 for uid, (decl, issuing, budget) in self.accumulators.items() if issuing == group]
        best, live = 0, ()
        for first, _, _, _, _ in spans:  # the sum only rises where an interval begins
            here = [(name, registers) for start, end, name, registers, _ in spans if start <= first <= end]
            total = sum(registers for _, registers in here)
            if total > best:
                best, live = total, tuple(here)
        return best, live, min(budget for *_, budget in spans)


def _tensor_uids(value, found: set[int]) -> None:
    """Add the uid of every tensor ``value`` (a statement field: a reference, declaration, expression or tuple of
    them) names to ``found``."""
    if isinstance(value, ir.TensorRef):
        found.add(value.decl.uid)
        _tensor_uids(value.index, found)
    elif isinstance(value, ir.TensorDecl):
        found.add(value.uid)
    elif isinstance(value, (tuple, list)):
        for item in value:
            _tensor_uids(item, found)
    elif isinstance(value, ir.Expr):
        for field in dataclasses.fields(value):
            _tensor_uids(getattr(value, field.name), found)


def prune(script, compile_time: dict) -> PruneVerdict:
    """Decide whether the pinned Script ``script`` can work for these compile-time arguments, before compiling.

    Builds the IR and runs the analysis passes (``kernel_for``, so the launch reuses it); the verdict's reason says
    which rule rejected the schedule, with the numbers.
    """
    from warpspec.runtime import kernel_for

    try:
        kernel = kernel_for(script, compile_time)
    except CompileError as error:
        needed = getattr(error, "shared_bytes", None)
        if needed is not None:
            return PruneVerdict(f"needs {needed} bytes of shared memory (tiles and barriers); a block has at most "
                           f"{DEFAULT.shared_limit}; the shared_tensor at {error.location} crosses it",
                           shared_bytes=needed)
        return PruneVerdict(str(error))
    plan = plan_kernel(kernel)
    if plan.registers_per_thread > plan.register_limit:
        names = " + ".join(f"{name} {count}" for name, count in plan.live)
        return PruneVerdict(f"WGMMA accumulators need {plan.registers_per_thread} f32 registers per thread at once "
                            f"({names}); more than {plan.register_limit} leave too few of its "
                            f"{plan.register_budget} for the rest of the kernel", kernel, plan, plan.shared_bytes)
    return PruneVerdict(None, kernel, plan, plan.shared_bytes)
