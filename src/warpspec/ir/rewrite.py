"""Generic rewriting of IR: every statement of any instruction family may hold Exprs, TensorRefs (whose indices
are Exprs) and tuples of them in its dataclass fields, and nested statement lists in the fields named by
``type(stmt).blocks``; these functions rebuild them field by field, so new families need nothing here.
"""

from __future__ import annotations

from dataclasses import fields, replace

from warpspec.ir import nodes as ir


def map_exprs(value, function, ref_function=None):
    """``value`` with ``function`` applied bottom-up to every Expr in it: an Expr (its operands first), a
    TensorRef's indices, the items of a tuple; with ``ref_function``, also applied to every TensorRef once its
    indices are mapped. Anything else (a TensorDecl, a Loc, ints) is returned as is; parts that do not change keep
    their identity."""
    if isinstance(value, ir.Expr):
        changes = {}
        for f in fields(value):
            old = getattr(value, f.name)
            new = map_exprs(old, function, ref_function)
            if new is not old:
                changes[f.name] = new
        return function(replace(value, **changes) if changes else value)
    if isinstance(value, ir.TensorRef):
        index = map_exprs(value.index, function, ref_function)
        value = value if index is value.index else replace(value, index=index)
        return value if ref_function is None else ref_function(value)
    if isinstance(value, tuple):
        items = tuple(map_exprs(item, function, ref_function) for item in value)
        return value if all(new is old for new, old in zip(items, value)) else items
    return value


def rewrite_stmt(stmt: ir.Stmt, expr_function, block_function, ref_function=None) -> ir.Stmt:
    """``stmt`` rebuilt with ``map_exprs(field, expr_function, ref_function)`` for its fields and
    ``block_function(block)`` for its nested statement lists (``type(stmt).blocks``); ``stmt`` itself when nothing
    changes."""
    changes = {}
    for f in fields(stmt):
        old = getattr(stmt, f.name)
        new = block_function(old) if f.name in type(stmt).blocks else map_exprs(old, expr_function, ref_function)
        if new is not old:
            changes[f.name] = new
    return replace(stmt, **changes) if changes else stmt


def replace_uses(stmt: ir.Stmt, old, new) -> ir.Stmt:
    """``stmt`` with every use of ``old`` made a use of ``new``: a tensor (``old`` a TensorDecl: its TensorRefs, in
    any field) or a runtime variable (``old`` an ir.Var: the expressions it appears in), in nested statement lists
    too; ``stmt`` itself when it uses no ``old``."""

    def block(stmts):
        rewritten = tuple(replace_uses(s, old, new) for s in stmts)
        return stmts if all(a is b for a, b in zip(rewritten, stmts)) else rewritten

    return rewrite_stmt(stmt, lambda e: new if e is old else e, block,
                        lambda ref: replace(ref, decl=new) if ref.decl is old else ref)
