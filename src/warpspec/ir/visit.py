"""The one way to translate an expression: a visitor that dispatches on the ``ir.Expr`` node class.

A translation (to text, to C++, to Python source, to a closure, to a folded value) subclasses ``ExprVisitor`` and
defines one method per expression kind it handles, named after the kind (``const``, ``var``, ``special``,
``binary``, ``unary``, ``select``, ``convert``, ``load``); ``visit(e)`` calls the method of ``type(e)``, and
``other(e)`` for anything else: a kind the translation leaves out, or a value that is not an Expr (a TensorRef, a
tuple). Recursion is the subclass's, so it may cache, fold or check at every level as it needs.
"""

from __future__ import annotations

from warpspec.ir import nodes as ir

#: The method that handles each expression kind.
METHODS: dict[type, str] = {
    ir.Const: "const",
    ir.Var: "var",
    ir.Special: "special",
    ir.Binary: "binary",
    ir.Unary: "unary",
    ir.Select: "select",
    ir.Convert: "convert",
    ir.Load: "load",
}


class ExprVisitor:
    """Translates an expression by its node class; subclasses define the methods of ``METHODS`` they handle."""

    _dispatch: dict[type, object] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # One table per subclass, built once: node class -> the function that handles it.
        cls._dispatch = {kind: getattr(cls, name) for kind, name in METHODS.items() if hasattr(cls, name)}

    def visit(self, e):
        """The translation of ``e``: the method of its node class, or ``other(e)``."""
        method = self._dispatch.get(type(e))
        return self.other(e) if method is None else method(self, e)

    def other(self, e):
        """The translation of a value no method handles; by default a TypeError."""
        raise TypeError(f"{type(self).__name__} cannot translate {type(e).__name__}")
