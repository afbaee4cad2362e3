"""The expression visitor: every expression kind has a method name, and dispatch goes by node class."""

import pytest

from warpspec.dtypes import int32
from warpspec.ir import nodes as ir
from warpspec.ir.printer import format_expr
from warpspec.ir.visit import METHODS, ExprVisitor


def test_every_expression_kind_has_a_method():
    kinds = {cls for cls in vars(ir).values() if isinstance(cls, type) and issubclass(cls, ir.Expr)} - {ir.Expr}
    assert kinds == set(METHODS)


class _Leaves(ExprVisitor):
    def const(self, e):
        return [e.value]

    def binary(self, e):
        return self.visit(e.a) + self.visit(e.b)


def test_a_kind_without_a_method_goes_to_other():
    three = ir.Binary("+", ir.Const(1, int32), ir.Const(2, int32), int32)
    assert _Leaves().visit(three) == [1, 2]
    with pytest.raises(TypeError, match="_Leaves cannot translate Var"):
        _Leaves().visit(ir.Binary("+", ir.Const(1, int32), ir.Var("n", int32), int32))


def test_the_printer_translates_through_it():
    n = ir.Var("n", int32)
    e = ir.Select(ir.Binary("<", n, ir.Const(4, int32), int32), ir.Unary("-", n),
                  ir.Binary("cdiv", n, ir.Const(8, int32), int32))
    assert format_expr(e) == "((- n) if (n < 4) else cdiv(n, 8))"
    assert format_expr((n, 3)) == "[n, 3]"
