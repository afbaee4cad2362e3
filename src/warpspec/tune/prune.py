"""Rules that reject a schedule before anything is compiled, each with the reason it cannot work.

A schedule is pruned when

- its IR does not build: the front end already enforces WGMMA's shape rules (M a multiple of 64 per consumer
  warpgroup, N a multiple of 8 up to 256, K in 16-byte steps) and TMA's 16-byte inner box rule, so the reason is
  the front end's ``CompileError`` message;
- its shared memory (every stage of every tile, with the 1 KB alignment padding TMA's swizzles need, plus the
  mbarriers) exceeds what one block may use: the size is the CUDA back end's own plan, not an estimate;
- a tile has no shared-memory layout that both TMA and WGMMA can use (TMA box limits, swizzle/tile combinations):
  the layout chooser's reason;
- its WGMMA accumulators need more than ``MAX_ACCUMULATOR_REGISTERS`` f32 registers per thread.

Nothing here needs a GPU or a compiler: it takes milliseconds per schedule.
"""

from __future__ import annotations

from dataclasses import dataclass

from warpspec.errors import CompileError
from warpspec.isa.wgmma import WgmmaMma
from warpspec.ir import nodes as ir
from warpspec.target import DEFAULT

#: Most f32 accumulator registers a thread may hold. A thread has at most 255 registers; a warp-specialized WGMMA
#: kernel needs about 90 besides its accumulators (descriptors, addresses, loop and phase state, the epilogue's
#: conversions: V3's 128x64 schedules use 90 registers with 32 accumulators). Past this ptxas spills or serializes
#: the wgmma pipeline, as V3's 128x256 tile (256 accumulator registers) does.
MAX_ACCUMULATOR_REGISTERS = 168


@dataclass(frozen=True)
class ResourceEstimate:
    """The shared memory and registers a kernel needs, as the CUDA back end will plan them, without generating
    code."""

    shared_bytes: int  # tiles and mbarriers; the launch adds the 1 KB alignment reserve on top
    limit_bytes: int  # the most a block may use, on the same terms
    accumulator_registers: dict[str, int]  # f32 registers per thread of each WGMMA accumulator, by tensor name
    registers_per_thread: int  # the largest per-thread total over the consumer thread groups


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
    accumulators: dict[str, int] = {}
    per_group: dict[tuple[int, int], int] = {}
    for stmt in ir.walk(kernel.body):
        if isinstance(stmt, WgmmaMma) and stmt.d.decl.name not in accumulators:
            registers = facts.layouts[stmt.d.decl.uid].registers
            accumulators[stmt.d.decl.name] = registers
            per_group[stmt.threads] = per_group.get(stmt.threads, 0) + registers
    return ResourceEstimate(facts.shared.total_bytes, facts.shared.limit_bytes, accumulators,
                            max(per_group.values(), default=0))


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
    if plan.registers_per_thread > MAX_ACCUMULATOR_REGISTERS:
        names = " + ".join(f"{name} {count}" for name, count in plan.accumulator_registers.items())
        return PruneVerdict(f"WGMMA accumulators need {plan.registers_per_thread} f32 registers per thread ({names}); "
                       f"more than {MAX_ACCUMULATOR_REGISTERS} leave too few for the rest of the kernel", kernel, plan,
                       plan.shared_bytes)
    return PruneVerdict(None, kernel, plan, plan.shared_bytes)
