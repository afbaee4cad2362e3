"""Generic rewriting of IR: every statement of any instruction family may hold Exprs, TensorRefs (whose indices
are Exprs) and tuples of them in its dataclass fields, and nested statement lists in the fields named by
``type(stmt).blocks``; these functions rebuild them field by field, so new families need nothing here.
"""

from __future__ import annotations

from dataclasses import fields, replace

from warpspec.ir import nodes as ir


def map_exprs(value, function):
    """``value`` with ``function`` applied bottom-up to every Expr in it: an Expr (its operands first), a
    TensorRef's indices, the items of a tuple. Anything else (a TensorDecl, a Loc, ints) is returned as is; parts
    that do not change keep their identity."""
    if isinstance(value, ir.Expr):
        changes = {}
        for f in fields(value):
            old = getattr(value, f.name)
            new = map_exprs(old, function)
            if new is not old:
                changes[f.name] = new
        return function(replace(value, **changes) if changes else value)
    if isinstance(value, ir.TensorRef):
        index = map_exprs(value.index, function)
        return value if index is value.index else replace(value, index=index)
    if isinstance(value, tuple):
        items = tuple(map_exprs(item, function) for item in value)
        return value if all(new is old for new, old in zip(items, value)) else items
    return value


def rewrite_stmt(stmt: ir.Stmt, expr_function, block_function) -> ir.Stmt:
    """``stmt`` rebuilt with ``map_exprs(field, expr_function)`` for its fields and ``block_function(block)`` for
    its nested statement lists (``type(stmt).blocks``); ``stmt`` itself when nothing changes."""
    changes = {}
    for f in fields(stmt):
        old = getattr(stmt, f.name)
        new = block_function(old) if f.name in type(stmt).blocks else map_exprs(old, expr_function)
        if new is not old:
            changes[f.name] = new
    return replace(stmt, **changes) if changes else stmt




def replace_uses(stmt: ir.Stmt, old, new) -> ir.Stmt:
    """``stmt`` with every use of ``old`` made a use of ``new``: a tensor (``old`` a TensorDecl: its TensorRefs, in
    any field) or a runtime variable (``old`` an ir.Var: the expressions it appears in), in nested statement lists
    too; ``stmt`` itself when it uses no ``old``."""

    def value_of(value):
        if value is old:
            return new
        if isinstance(value, ir.TensorRef):
            index = value_of(value.index)
            if value.decl is old:
                return replace(value, decl=new, index=index)
            return value if index is value.index else replace(value, index=index)
        if isinstance(value, ir.Expr):
            changes = {f.name: value_of(getattr(value, f.name)) for f in fields(value)}
            changes = {key: item for key, item in changes.items() if item is not getattr(value, key)}
            return replace(value, **changes) if changes else value
        if isinstance(value, tuple):
            items = tuple(value_of(item) for item in value)
            return value if all(a is b for a, b in zip(items, value)) else items
        return value

    changes = {}
    for f in fields(stmt):
        before = getattr(stmt, f.name)
        if f.name in type(stmt).blocks:
            after = tuple(replace_uses(s, old, new) for s in before)
            after = before if all(a is b for a, b in zip(after, before)) else after
        else:
            after = value_of(before)
        if after is not before:
            changes[f.name] = after
    return replace(stmt, **changes) if changes else stmt
