"""sm_90a emission of the row reductions (``warpspec.isa.reduction``).

Each thread reduces the registers it holds of each of its rows (``max.NaN.f32``, via the prelude's ``max_nan``, so
that a NaN anywhere in a row gives NaN, as numpy's max on the emulator does; ``add.f32``, via ``+``),
then the four lanes of a quad, which hold the rest of those rows (lanes 4r..4r+3 hold row r's columns
2·(lane & 3) + {0, 1} of every 8), combine theirs with two butterfly shuffles,
``shfl.sync.bfly.b32 d, v, 1, 0x1f, 0xffffffff`` and ``... 2 ...``: afterwards every lane of the quad holds the
row's result, as the row slice layout says.
"""

from __future__ import annotations

from warpspec.cuda.contracts import CodeGenerator
from warpspec.isa.reduction import ReduceRows
from warpspec.isa.registry import emits
from warpspec.layout.registers import Slice
from warpspec.target import SM90A

TARGET = SM90A.name


def _combine(op: str, a: str, b: str) -> str:
    return f"max_nan({a}, {b})" if op == "max" else f"({a} + {b})"


@emits(ReduceRows, TARGET)
def _emit_ReduceRows(gen: CodeGenerator, s: ReduceRows) -> None:
    # The source's accumulator fragments (passes.layouts refuses others) say which registers hold which row. The
    # result's own layout may be the row slice of another accumulator (an [M, 1] maximum of S scaling a wider or
    # narrower O holds the same rows in the same registers), whose register count is not the source's.
    rows = Slice(gen.reg_layouts[s.src.decl.uid], 1)
    gen.declare_registers(s.decl)
    parts: dict[int, list[int]] = {}
    for i in range(rows.parent.registers):
        parts.setdefault(rows.parent_register(i), []).append(i)
    for j, registers in sorted(parts.items()):
        value = gen.element(s.src.decl, registers[0])
        for i in registers[1:]:
            value = _combine(s.op, value, gen.element(s.src.decl, i))
        gen.line(gen.set_element(s.decl, j, value))
    for j in sorted(parts):
        own = gen.element(s.decl, j)
        for mask in (1, 2):
            gen.line(f'{{ float other_; asm volatile("shfl.sync.bfly.b32 %0, %1, {mask}, 0x1f, 0xffffffff;" '
                     f': "=f"(other_) : "f"({own})); {gen.set_element(s.decl, j, _combine(s.op, own, "other_"))} }}')
