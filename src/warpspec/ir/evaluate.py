"""Scalar IR expressions evaluated in Python, with the semantics of the generated code: compiled once into closures
over a variable environment for the emulator and the host (grids, views), and used by the code generator to fold
constants.

Integers wrap to their type's width and ``//``/``%`` truncate toward zero, as the generated C++ does, so the emulator
and the GPU compute the same indices; a shift by the width or more gives 0 (``>>`` of a negative value: -1). What
the generated C++ leaves undefined is an error: a division by zero, the smallest value divided by -1, a shift by a
negative amount. Floats are float32 values, each operation's result rounded to float32 as the GPU's float
arithmetic rounds it, with IEEE results where Python would raise (``x / 0.0`` is an infinity or NaN).
"""

from __future__ import annotations

import math
import operator
import struct

from warpspec.dtypes import DType
from warpspec.errors import BoundsError, KernelError
from warpspec.ir import nodes as ir
from warpspec.ir.visit import ExprVisitor


def wrap(value, dtype: DType):
    """``value`` converted to what a variable of ``dtype`` holds: a float scalar of any float type holds a float32
    value (the CUDA back end's ``float``, ``codegen.scalar_ctype``)."""
    if dtype.kind == "float":
        return to_float32(value)
    if dtype.kind == "bool":
        return bool(value)
    value = int(value)
    bits = dtype.nbits
    value &= (1 << bits) - 1
    if dtype.kind == "int" and value >> (bits - 1):
        value -= 1 << bits
    return value


def to_float32(value) -> float:
    """``value`` rounded to the nearest float32 (ties to even; past the largest float32, an infinity), as a float.
    An integer is rounded from its exact value, as ``cvt.rn.f32.s64`` rounds it (not through a float64)."""
    if isinstance(value, int) and abs(value) > 2**53:
        value = _round_integer(value, 24)
    try:
        return _FLOAT32.unpack(_FLOAT32.pack(value))[0]
    except OverflowError:  # rounds to an infinity, which struct refuses to produce from a finite value
        return math.copysign(math.inf, value)


_FLOAT32 = struct.Struct("<f")


def _round_integer(value: int, digits: int) -> int:
    """``value`` rounded to its ``digits`` leading binary digits, ties to even."""
    drop = max(abs(value).bit_length() - digits, 0)
    if not drop:
        return value
    kept, rest = divmod(abs(value), 1 << drop)
    half = 1 << (drop - 1)
    kept += rest > half or (rest == half and kept & 1)
    return int(math.copysign(kept << drop, value))


def float_to_integer(value: float, dtype: DType) -> int:
    """``value`` converted to the integer ``dtype`` (a runtime scalar type: 32 or 64 bits) as the GPU's ``cvt.rzi``
    converts it (and the CUDA back end's ``static_cast`` becomes): truncated toward zero, saturated to the type's
    range, NaN to 0."""
    if value != value:
        return 0
    bits = dtype.nbits
    low, high = (0, (1 << bits) - 1) if dtype.kind == "uint" else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    if value <= low:
        return low
    if value >= high:
        return high
    return math.trunc(value)


def _trunc_div(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return math.trunc(a / b)
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _trunc_mod(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return math.fmod(a, b)
    return a - _trunc_div(a, b) * b


def _cdiv(a, b):
    return -(-a // b)


def _divide(a, b):
    """Float division with IEEE results for a zero divisor, where Python raises ZeroDivisionError: an infinity of
    the operands' combined sign, NaN for 0 / 0 and NaN / 0. (Quotients of float32 values never overflow a float.)"""
    if b:
        return a / b
    if a != a or not a:
        return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


#: Shifting a value of at most 64 bits by this many places or more leaves nothing of it once wrapped: larger
#: amounts are clamped, so a shift by 2**31 does not build a 2**31-bit Python integer.
_SHIFT_LIMIT = 64


def _shift_left(a, b):
    return a << min(b, _SHIFT_LIMIT)


def _shift_right(a, b):
    return a >> min(b, _SHIFT_LIMIT)


#: The Python function of every binary operator, with C semantics for // and %.
OPERATORS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": _divide, "//": _trunc_div,
    "%": _trunc_mod, "&": operator.and_, "|": operator.or_, "^": operator.xor, "<<": _shift_left,
    ">>": _shift_right, "min": min, "max": max, "cdiv": _cdiv, "<": operator.lt, "<=": operator.le,
    ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne,
    "and": lambda a, b: bool(a) and bool(b), "or": lambda a, b: bool(a) or bool(b),
}


class ExprCompiler(ExprVisitor):
    """Compiles Exprs to ``f(env) -> value`` closures; ``env`` maps Var uids and register tensor uids to values.

    ``specials`` maps ``blockIdx.x`` and friends to their values for the block being run.
    """

    def __init__(self, specials: dict):
        self.specials = specials
        self.cache: dict[int, object] = {}

    def __call__(self, expr: ir.Expr):
        key = id(expr)
        fn = self.cache.get(key)
        if fn is None:
            fn = self.cache[key] = self.visit(expr)
        return fn

    def const(self, e):
        value = wrap(e.value, e.type)
        return lambda env: value

    def var(self, e):
        uid = e.uid
        return lambda env: env[uid]

    def special(self, e):
        value = self.specials[e.name]
        return lambda env: value

    def binary(self, e):
        a, b, op, dtype = self(e.a), self(e.b), OPERATORS[e.op], e.type
        if e.op in ("//", "%", "cdiv"):
            smallest = -(1 << (dtype.nbits - 1)) if dtype.kind == "int" else None

            def checked(env, a=a, b=b):
                divisor = b(env)
                if divisor == 0:
                    raise ZeroDivisionError(f"integer division by zero in {e.op!r}")
                dividend = a(env)
                if divisor == -1 and dividend == smallest:
                    # The quotient does not fit the type: undefined in the generated C++ (for % too)
                    what = f"cdiv({dividend}, -1)" if e.op == "cdiv" else f"{dividend} {e.op} -1"
                    raise KernelError(f"{what} overflows {dtype.name}: the quotient {-dividend} does not fit the "
                                      f"type")
                return wrap(op(dividend, divisor), dtype)
            return checked
        if e.op in ("<<", ">>"):
            def shifted(env, a=a, b=b):
                amount = b(env)
                if amount < 0:
                    # Python raises ValueError; PTX takes the amount as unsigned (so clamps it to the width)
                    raise KernelError(f"shift by a negative amount ({amount}) in {e.op!r}: the amount must be 0 or "
                                      f"more (a shift by the type's width or more gives 0, or -1 for >> of a "
                                      f"negative value)")
                return wrap(op(a(env), amount), dtype)
            return shifted
        if dtype.kind in ("bool",):
            return lambda env: bool(op(a(env), b(env)))
        return lambda env: wrap(op(a(env), b(env)), dtype)

    def unary(self, e):
        a, dtype = self(e.a), e.dtype
        if e.op == "not":
            return lambda env: not a(env)
        if e.op == "~":
            return lambda env: wrap(~a(env), dtype)
        return lambda env: wrap(-a(env), dtype)

    def select(self, e):
        c, a, b = self(e.cond), self(e.a), self(e.b)
        return lambda env: a(env) if c(env) else b(env)

    def convert(self, e):
        a, dtype = self(e.a), e.type
        if dtype.kind in ("int", "uint"):
            if e.a.dtype.is_float:
                return lambda env: float_to_integer(a(env), dtype)
            return lambda env: wrap(math.trunc(a(env)), dtype)
        return lambda env: wrap(a(env), dtype)

    def load(self, e):
        uid, decl = e.tensor.decl.uid, e.tensor.decl
        indices = [self(i) for i in e.tensor.index + e.indices]
        dtype = decl.dtype

        def read(env):
            idx = tuple(i(env) for i in indices)
            check_element_index(decl, idx)
            return wrap(env[uid][idx].item(), dtype)
        return read

    def other(self, e):
        raise TypeError(f"cannot evaluate {type(e).__name__}")


def check_element_index(decl: ir.TensorDecl, idx: tuple) -> None:
    """Raise BoundsError when ``idx`` falls outside ``decl``'s shape."""
    for axis, (i, extent) in enumerate(zip(idx, decl.shape)):
        if not 0 <= i < extent:
            raise BoundsError(f"index {i} is out of bounds for dimension {axis} of {decl.kind} tensor "
                              f"{decl.name} (size {extent})")
