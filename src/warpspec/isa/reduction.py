"""Row reductions of register tensors: ``self.reduce_max(x, axis=1)`` and ``self.reduce_sum(x, axis=1)``.

The row maximum and row sum of a float32 WGMMA accumulator tile [M, N] (FlashAttention's softmax statistics),
giving a column vector [M, 1] in the accumulator's row slice (``warpspec.layout.registers.Slice``), ready to be
broadcast back against the tile. A thread holds each of its rows' values in N/4 registers, and the four lanes of a
quad hold the rest of those rows, so the reduction runs in the thread, then across the quad with two butterfly
shuffles; the CUDA emission is ``warpspec.cuda.sm90.reduction``. The layout pass refuses any other layout.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from warpspec.dtypes import float32
from warpspec.errors import CompileError
from warpspec.isa.base import LanguageObject, language_call
from warpspec.isa.contracts import BuildContext, EmulationMachine, EmulationTask
from warpspec.isa.registry import LAYOUT_RULE, declare_timeline, emulates, fact
from warpspec.isa.timeline_facts import NOT_SHOWN, STATEMENT
from warpspec.isa.values import TensorValue
from warpspec.ir import nodes as ir
from warpspec.layout.registers import Accumulator, LayoutRule, Slice, describe_layout

#: The reductions, with their numpy function.
REDUCTIONS: dict[str, Callable[..., Any]] = {"max": np.max, "sum": np.sum}

# ------------------------------------------------------------------------------------------------------- IR


@dataclass(frozen=True, eq=False)
class ReduceRows(ir.DefineTensor):
    """``decl`` [M, 1] = ``op`` over each row of ``src`` [M, N], executed by threads ``threads`` (begin, count)."""

    op: str
    src: ir.TensorRef
    threads: tuple[int, int]

    def text(self, f) -> str:
        return f"{self.decl.name} = reduce_{self.op}({f(self.src)}, axis=1)"


# ------------------------------------------------------------------------------------------------ language


class Reductions(LanguageObject):
    """``self.reduce_max`` and ``self.reduce_sum``."""

    @language_call
    def reduce_max(self, x, axis=1) -> TensorValue:
        """The maximum of each row of float32 register tensor ``x`` [M, N] held as WGMMA accumulator fragments:
        a [M, 1] column vector in the accumulator's row slice. Executed by all the threads holding ``x`` (whole
        warpgroups); PTX ``max.NaN.f32`` in each thread, then ``shfl.sync.bfly.b32`` with lane masks 1 and 2 across
        each quad of lanes. A NaN anywhere in a row makes the row's maximum NaN, as numpy's ``max`` does."""
        return _reduce(self.b, "max", x, axis)

    @language_call
    def reduce_sum(self, x, axis=1) -> TensorValue:
        """The sum of each row of float32 register tensor ``x`` [M, N] held as WGMMA accumulator fragments: a
        [M, 1] column vector in the accumulator's row slice. Executed by all the threads holding ``x``; PTX
        ``add.f32`` in each thread, then ``shfl.sync.bfly.b32`` with lane masks 1 and 2 across each quad."""
        return _reduce(self.b, "sum", x, axis)


def _reduce(b: BuildContext, op: str, x, axis) -> TensorValue:
    what = f"self.reduce_{op}"
    x = b.to_tensor(x, f"{what} x", (ir.REGISTER,))
    axis = b.to_int(axis, f"{what} axis")
    if len(x.shape) != 2:
        raise b.error(f"{what} takes a 2-D tensor; {x.name} has shape {list(x.shape)}")
    if axis != 1:
        raise b.error(f"{what} reduces along rows only (axis=1, the columns of each row, held by one quad of "
                      f"lanes); axis={axis} is not supported")
    if x.dtype != float32:
        raise b.error(f"{what} takes a float32 tensor (an accumulator); {x.name} is {x.dtype.name}")
    begin, count, single = b.group
    if single:
        raise b.error(f"{what} inside single_thread: the threads holding {x.name} exchange values with shfl.sync, "
                      f"so all of them must execute it")
    decl = b.new_register_tensor(f"{x.name}_{op}", float32, (x.shape[0], 1))
    b.emit(ReduceRows(b.loc, decl, op, x.ref, (begin, count)))
    return TensorValue(ir.TensorRef(decl))


# ----------------------------------------------------------------------------------------------- emulation


@emulates(ReduceRows)
def _reduce_rows(machine: EmulationMachine, task: EmulationTask, s: ReduceRows) -> None:
    src = machine.register(task, s.src, f"reduce_{s.op}").astype(np.float32)
    machine.define_register(task, s.decl, REDUCTIONS[s.op](src, axis=1, keepdims=True))


# --------------------------------------------------------------------------------------------------- facts

@fact(LAYOUT_RULE, ReduceRows)
def _reduction_layout(stmt: ReduceRows, target) -> LayoutRule:
    """The result is the row slice of the accumulator it reduces."""
    return LayoutRule(derived=(stmt.decl, stmt.src.decl, lambda layout: _row_slice(stmt, layout)), defines=stmt.decl)


def _row_slice(stmt: ReduceRows, layout) -> Slice:
    """The layout of a row reduction's result: the row slice of its accumulator operand, which every thread
    holding the accumulator computes (the quad's shuffles need them all); a CompileError otherwise."""
    name = stmt.src.decl.name
    if not isinstance(layout, Accumulator):
        raise CompileError(f"reduce_{stmt.op} of {name} needs wgmma accumulator fragments (each row held by the four "
                           f"lanes of a quad), but {name} is {describe_layout(layout)}", str(stmt.loc))
    if tuple(stmt.threads) != tuple(layout.owners):
        begin, count = layout.owners
        raise CompileError(f"reduce_{stmt.op} of {name} is executed by threads [{stmt.threads[0]}, "
                           f"{stmt.threads[0] + stmt.threads[1]}), but {name} is held by threads [{begin}, "
                           f"{begin + count}): every one of those threads must execute it", str(stmt.loc))
    return Slice(layout, 1)


# ---------------------------------------------------------------------------------------------------------- timeline
# What each statement costs the CPU timing model and how timelines show it (``isa.timeline_facts``).
declare_timeline(ReduceRows, STATEMENT, NOT_SHOWN)
