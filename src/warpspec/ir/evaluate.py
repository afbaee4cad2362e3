"""Scalar IR expressions evaluated in Python, with the semantics of the generated code: compiled once into closures
over a variable environment for the emulator and the host (grids, views), and used by the code generator to fold
constants.

Integers wrap to their type's width and ``//``/``%`` truncate toward zero, as the generated C++ does, so the emulator
and the GPU compute the same indices.
"""

from __future__ import annotations

import math
import operator

from warpspec.dtypes import DType
from warpspec.errors import BoundsError
from warpspec.ir import nodes as ir
from warpspec.ir.visit import ExprVisitor


def wrap(value, dtype: DType):
    """``value`` converted to what a variable of ``dtype`` holds."""
    if dtype.kind == "float":
        return float(value)
    if dtype.kind == "bool":
        return bool(value)
    value = int(value)
    bits = dtype.nbits
    value &= (1 << bits) - 1
    if dtype.kind == "int" and value >> (bits - 1):
        value -= 1 << bits
    return value


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


#: The Python function of every binary operator, with C semantics for // and %.
OPERATORS = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "//": _trunc_div,
    "%": _trunc_mod, "&": operator.and_, "|": operator.or_, "^": operator.xor, "<<": operator.lshift,
    ">>": operator.rshift, "min": min, "max": max, "cdiv": _cdiv, "<": operator.lt, "<=": operator.le,
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
            def checked(env, a=a, b=b):
                divisor = b(env)
                if divisor == 0:
                    raise ZeroDivisionError(f"integer division by zero in {e.op!r}")
                return wrap(op(a(env), divisor), dtype)
            return checked
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
