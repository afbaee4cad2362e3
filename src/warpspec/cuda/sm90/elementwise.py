"""sm_90a emission of the elementwise family (``warpspec.isa.elementwise``): conversions and arithmetic
element register by element register, in f32 for floats."""

from __future__ import annotations

from warpspec.isa.elementwise import Arithmetic, Cast
from warpspec.ir import nodes as ir
from warpspec.isa.registry import emits
from warpspec.target import SM90A

TARGET = SM90A.name


def _operand(gen, s, o, layout) -> str:
    """C++ for element register ``i`` of a tensor operand (floats as f32), or for a scalar operand."""
    integer = not s.decl.dtype.is_float
    if isinstance(o, ir.TensorRef):
        if gen.reg_layouts.get(o.decl.uid) != layout:
            raise gen.error(f"{o.decl.name} and {s.decl.name} have different register layouts", s.loc)
        bits = gen.element(o.decl, "i")
        return bits if integer and not o.decl.dtype.is_float else gen.to_f32(bits, o.decl.dtype)
    return gen.cexpr(o) if integer else gen.to_f32(gen.cexpr(o), o.dtype)


def _store_elements(gen, s, value: str, layout) -> None:
    stored = value if not s.decl.dtype.is_float else gen.to_storage(value, s.decl.dtype)
    gen.line("#pragma unroll")
    gen.line(f"for (int i = 0; i < {layout.registers}; ++i) {{ {gen.set_element(s.decl, 'i', stored)} }}")


@emits(Cast, TARGET)
def _emit_Cast(gen, s: Cast) -> None:
    layout = gen.reg_layouts[s.decl.uid]
    gen.declare_registers(s.decl)
    _store_elements(gen, s, _operand(gen, s, s.src, layout), layout)


@emits(Arithmetic, TARGET)
def _emit_Arithmetic(gen, s: Arithmetic) -> None:
    layout = gen.reg_layouts[s.decl.uid]
    gen.declare_registers(s.decl)
    values = [_operand(gen, s, o, layout) for o in s.operands]
    if s.op == "neg":
        value = f"(-{values[0]})"
    elif s.op in ("min", "max"):
        a, b = values
        value = f"({a} {'<' if s.op == 'min' else '>'} {b} ? {a} : {b})"
    else:
        value = f"({values[0]} {s.op} {values[1]})"
    _store_elements(gen, s, value, layout)
