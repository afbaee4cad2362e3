"""sm_90a emission of the elementwise family (``warpspec.isa.elementwise``): conversions, arithmetic and unary
functions element register by element register, in f32 for floats.

The unary functions are the multi-function unit's approximations (bounds in docs/language.md): ``exp2`` is
``ex2.approx.ftz.f32``, ``exp(x)`` is ``ex2.approx.ftz.f32`` of ``x * log2(e)``, ``tanh`` is ``tanh.approx.f32``,
``log2`` is ``lg2.approx.ftz.f32``; ``sqrt`` is the correctly rounded ``sqrt.rn.f32``. A broadcast vector operand
is read at the register of its slice layout that holds the element's column (row). Comparisons and ``where``
are C++ comparisons and selections on the f32 (or integer) values; ``row_index``/``col_index`` are the layout's
coordinate expressions over the thread index. A float32 tensor scaled in place by a column vector (``acc = acc *
factors``) is multiplied only by warps holding a factor other than 1 (``__any_sync``, ``vote.sync.any``): the same
values, and the online softmax's O rescale, whose factors are mostly 1, costs a vote instead of a multiply a
register.
"""

from __future__ import annotations

from warpspec.cuda.codegen import SIGNED_HELPERS
from warpspec.cuda.contracts import CodeGenerator
from warpspec.isa.elementwise import Arithmetic, Cast, TileIndex, broadcast_axis
from warpspec.ir import nodes as ir
from warpspec.isa.registry import emits
from warpspec.layout.registers import broadcast_register, same_registers, slice_of
from warpspec.target import SM90A

TARGET = SM90A.name

#: PTX of each unary function on an f32 register ``%0`` (in place); exp scales by log2(e) first.
_UNARY_PTX = {
    "exp2": "ex2.approx.ftz.f32 %0, %0;",
    "exp": "mul.f32 %0, %0, 0f3FB8AA3B; ex2.approx.ftz.f32 %0, %0;",  # 0f3FB8AA3B = log2(e) in f32
    "tanh": "tanh.approx.f32 %0, %0;",
    "log2": "lg2.approx.ftz.f32 %0, %0;",
    "sqrt": "sqrt.rn.f32 %0, %0;",
}


def _operand(gen: CodeGenerator, s, o, layout, i) -> str:
    """C++ for element register ``i`` (an int or the C++ loop index) of a tensor operand (floats as f32), or for a
    scalar operand."""
    if isinstance(o, ir.TensorRef):
        axis = broadcast_axis(o.decl.shape, s.decl.shape)
        expected = layout if axis is None else slice_of(layout, axis, o.decl.shape)
        if not same_registers(gen.reg_layouts.get(o.decl.uid), expected):
            raise gen.error(f"{o.decl.name} and {s.decl.name} have different register layouts", s.loc)
        register = i if axis is None else broadcast_register(layout, expected, axis, i)
        bits = gen.element(o.decl, register)
        return gen.to_f32(bits, o.decl.dtype) if o.decl.dtype.is_float else bits  # conditions stay bool
    # A scalar is its value in the C++ whatever its dtype (codegen.scalar_ctype), as the emulator computes with it:
    # converting it as a half's bits would read 1.0 as the half 0x0001.
    return gen.cexpr(o)


def _stored(gen: CodeGenerator, s, value: str) -> str:
    return value if not s.decl.dtype.is_float else gen.to_storage(value, s.decl.dtype)


def _store_elements(gen: CodeGenerator, s, value: str, layout) -> None:
    store = gen.set_element(s.decl, "i", _stored(gen, s, value))
    gen.line("#pragma unroll")
    gen.line(f"for (int i = 0; i < {layout.registers}; ++i) {{ {store} }}")


@emits(Cast, TARGET)
def _emit_Cast(gen: CodeGenerator, s: Cast) -> None:
    layout = gen.reg_layouts[s.decl.uid]
    gen.declare_registers(s.decl)
    _store_elements(gen, s, _operand(gen, s, s.src, layout, "i"), layout)


def _value(gen: CodeGenerator, s: Arithmetic, values: list[str]) -> str:
    if s.decl.dtype.kind == "int" and s.op in ("neg", "+", "-", "*"):
        # Signed elements wrap, as numpy's (the emulator's) do: C++ leaves their overflow undefined.
        return f"{'neg_wrap' if s.op == 'neg' else SIGNED_HELPERS[s.op]}({', '.join(values)})"
    if s.op == "neg":
        return f"(-{values[0]})"
    if s.op in ("min", "max"):
        a, b = values
        chosen = f"{a} {'<' if s.op == 'min' else '>'} {b}"
        if s.decl.dtype.is_float:
            # numpy's minimum and maximum (the emulator's) give a NaN from either side, a tie the second operand;
            # the comparison alone gives b for a NaN a, so max(x, 0.0) turned a NaN x into 0.
            chosen = f"{chosen} || {a} != {a}"
        return f"(({chosen}) ? {a} : {b})"
    if s.op == "where":
        return f"({values[0]} ? {values[1]} : {values[2]})"
    return f"({values[0]} {s.op} {values[1]})"


@emits(Arithmetic, TARGET)
def _emit_Arithmetic(gen: CodeGenerator, s: Arithmetic) -> None:
    layout = gen.reg_layouts[s.decl.uid]
    gen.declare_registers(s.decl)
    if s.op in _UNARY_PTX:
        operand = _operand(gen, s, s.operands[0], layout, "i")
        gen.line("#pragma unroll")
        gen.line(f"for (int i = 0; i < {layout.registers}; ++i) {{ float v_ = {operand}; "
                 f'asm("{_UNARY_PTX[s.op]}" : "+f"(v_)); {gen.set_element(s.decl, "i", _stored(gen, s, "v_"))} }}')
        return
    broadcast = any(isinstance(o, ir.TensorRef) and o.decl.shape != s.decl.shape for o in s.operands)
    if not broadcast:
        _store_elements(gen, s, _value(gen, s, [_operand(gen, s, o, layout, "i") for o in s.operands]), layout)
        return
    factors = _row_factors(gen, s, layout)
    if factors:
        # Rows scaled in place by a column vector (the online softmax's O rescaled to a new maximum): where every
        # factor the warp holds is 1, the product is its operand exactly, so the warp keeps its values as they are.
        gen.line(f"if (__any_sync(__activemask(), {' || '.join(f'{f} != 1.0f' for f in factors)})) {{")
        for i in range(layout.registers):
            value = _value(gen, s, [_operand(gen, s, o, layout, i) for o in s.operands])
            gen.line("  " + gen.set_element(s.decl, i, _stored(gen, s, value)))
        gen.line("}")
        return
    # A vector operand's register depends on the element's place in the layout: one line per register.
    for i in range(layout.registers):
        value = _value(gen, s, [_operand(gen, s, o, layout, i) for o in s.operands])
        gen.line(gen.set_element(s.decl, i, _stored(gen, s, value)))


#: Registers a thread holds of a tensor scaled by a column vector from which ``_row_factors`` checks its factors
#: for 1 first (a vote and a compare per factor, against a multiply per register).
ROW_SCALE_SKIP_REGISTERS = 16


def _row_factors(gen: CodeGenerator, s: Arithmetic, layout) -> list[str]:
    """The f32 values of a column vector [M, 1] by which ``s`` multiplies a float32 tensor [M, N] of at least
    ``ROW_SCALE_SKIP_REGISTERS`` registers a thread (each a register the thread holds of the vector, once), or []
    for any other statement."""
    if s.op != "*" or s.decl.dtype.name != "float32" or layout.registers < ROW_SCALE_SKIP_REGISTERS:
        return []
    tensors = [o for o in s.operands if isinstance(o, ir.TensorRef)]
    vectors = [o for o in tensors if broadcast_axis(o.decl.shape, s.decl.shape) == 1]
    if len(tensors) != 2 or len(vectors) != 1 or vectors[0].decl.dtype.name != "float32":
        return []
    tensor = next(o for o in tensors if o is not vectors[0])
    if gen.element(tensor.decl, 0) != gen.element(s.decl, 0):
        return []  # only where the product replaces its operand in place (``acc = acc * factors``): no copy to make
    values = [_operand(gen, s, vectors[0], layout, i) for i in range(layout.registers)]
    return list(dict.fromkeys(values))


@emits(TileIndex, TARGET)
def _emit_TileIndex(gen: CodeGenerator, s: TileIndex) -> None:
    gen.declare_registers(s.decl)

    def body(i, row, col, valid):
        gen.line(gen.set_element(s.decl, i, f"({(row, col)[s.axis]})"))

    gen.element_loop(gen.reg_layouts[s.decl.uid], body)
