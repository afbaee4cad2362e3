"""Loop unrolling as an IR → IR transform, built on the generic rewriting of IR fields in ``warpspec.ir.rewrite``.

``self.range(start, stop, step, unroll=k)`` becomes a loop over trips of ``step * k`` whose body holds ``k``
copies of the original body. Copy ``j`` runs the original iteration ``trip + j * step``; it is nested inside copy
``j - 1``, guarded by ``trip + j * step < stop`` (copy 0 needs no guard: the loop condition is its guard)::

    for trip in range(start, stop, step * k):
        var_0 = trip
        <body, copy 0>
        if trip + step < stop:
            var_1 = trip + step
            <body, copy 1>
            if trip + 2 * step < stop:
                ...

Nesting makes the path through all ``k`` copies the only one that reaches the next trip, which is what lets
``warpspec.passes.constants`` keep values that return to their entry value after ``k`` copies (a ring's stage
index) known at the loop head. Each copy declares its own loop variable and renames every variable declared in the
body (fresh uids), so copies are independent and later passes may give each its own constants.

The rewriting is generic over dataclass fields (``warpspec.ir.rewrite``); new families need nothing here.
"""

from __future__ import annotations

from dataclasses import replace

from warpspec.dtypes import boolean
from warpspec.ir import nodes as ir
from warpspec.ir.rewrite import rewrite_stmt


def unroll(kernel: ir.Kernel) -> ir.Kernel:
    """``kernel`` with every ``For`` whose ``unroll`` is above 1 rewritten into guarded copies (see the module
    docstring); inner loops are unrolled first, so a copy of an outer body holds unrolled inner loops."""
    return replace(kernel, body=unroll_body(kernel.body))


def unroll_body(body: tuple[ir.Stmt, ...]) -> tuple[ir.Stmt, ...]:
    """``body`` with its unrolled loops rewritten, at any depth (``body`` itself when it has none)."""
    stmts = tuple(_unroll_stmt(stmt) for stmt in body)
    return body if all(new is old for new, old in zip(stmts, body)) else stmts


def _unroll_stmt(stmt: ir.Stmt) -> ir.Stmt:
    stmt = rewrite_stmt(stmt, _same, unroll_body)
    if isinstance(stmt, ir.For) and stmt.unroll > 1:
        return _unrolled(stmt)
    return stmt


def _same(expr: ir.Expr) -> ir.Expr:
    return expr


def _unrolled(loop: ir.For) -> ir.For:
    # The front end makes an unrolled loop's step a positive compile-time constant (self.range checks it).
    step, var, loc = loop.step.value, loop.var, loop.loc
    trip = ir.Var(f"{var.name}_trip", var.type)
    nested: tuple[ir.Stmt, ...] = ()
    for j in reversed(range(loop.unroll)):
        offset = ir.Binary("+", trip, ir.Const(j * step, var.type), var.type) if j else trip
        copy_var = ir.Var(var.name, var.type)
        copy = (ir.Declare(loc, copy_var, offset),) + rename(loop.body, {var.uid: copy_var}) + nested
        nested = (ir.If(loc, ir.Binary("<", offset, loop.stop, boolean), copy, ()),) if j else copy
    return ir.For(loc, trip, loop.start, loop.stop, ir.Const(step * loop.unroll, var.type), nested)


def rename(body: tuple[ir.Stmt, ...], mapping: dict[int, ir.Var]) -> tuple[ir.Stmt, ...]:
    """A copy of ``body`` whose variables are replaced per ``mapping`` (Var uid → Var) and whose own variables
    (declared or looped over inside it) are fresh Vars of the same name and type."""
    mapping = dict(mapping)
    for stmt in ir.walk(body):
        if isinstance(stmt, (ir.Declare, ir.For)) and stmt.var.uid not in mapping:
            mapping[stmt.var.uid] = ir.Var(stmt.var.name, stmt.var.type)

    def substitute(expr: ir.Expr) -> ir.Expr:
        return mapping.get(expr.uid, expr) if isinstance(expr, ir.Var) else expr

    def block(stmts):
        return tuple(rewrite_stmt(stmt, substitute, block) for stmt in stmts)

    return block(body)
