"""Forward constant propagation over the IR: integer and boolean variables whose value is known at a point are
replaced by constants where they are read, expressions over constants are folded, and an ``If`` whose condition is
known is replaced by the branch it takes.

Run after ``warpspec.passes.unroll``, it turns a ring's stage index into a constant in each unrolled copy, so
register arrays and barrier addresses are indexed with constants. Values follow the semantics of
``warpspec.ir.evaluate`` (the emulator's): integers wrap to their type, ``//`` and ``%`` truncate toward zero, and a
division by zero is left for run time to report.

The analysis runs on the IR, one transfer function per statement kind:

- ``Declare``/``Assign`` (the only statements that write scalars besides ``For``) learn or forget their variable.
- ``If``: each branch starts from the values before it; after it, values that agree on both paths stay known.
- ``For``: the values at the loop head are those that reach a fixpoint over the body (iterating the transfer
  function on the body until the head stops changing). A path through the else side of a guard
  ``var + c < stop`` (``0 <= c <= step``, the guards ``unroll`` writes) does not start another trip, so values that
  only hold once every unrolled copy ran stay known. With a known trip count the values after the loop are those
  after its last trip, else those that hold at every exit.
- Any other statement with nested blocks (a thread group, a single thread) runs each block at most once, in the
  order of ``type(stmt).blocks``: a block starts from what holds whether or not the blocks before it ran.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from warpspec.dtypes import DType
from warpspec.ir import nodes as ir
from warpspec.ir.evaluate import OPERATORS, wrap
from warpspec.ir.rewrite import map_exprs, rewrite_stmt
from warpspec.ir.visit import ExprVisitor


class _Unknown:
    """A value not known at compile time (distinct from every int)."""

    def __repr__(self) -> str:
        return "?"


UNKNOWN = _Unknown()


def fold(e: ir.Expr, env: dict | None = None):
    """The value of ``e`` when its variables have the values in ``env`` (Var uid → value; none by default), or
    UNKNOWN. Floating-point arithmetic is never folded: the generated code rounds it as the GPU does."""
    return _Folder(env).visit(e)


class _Folder(ExprVisitor):
    """``fold`` over one environment: specials, element loads and anything else are UNKNOWN."""

    def __init__(self, env: dict | None):
        self.env = env

    def const(self, e):
        return wrap(e.value, e.type)

    def var(self, e):
        return UNKNOWN if self.env is None else self.env.get(e.uid, UNKNOWN)

    def binary(self, e):
        a, b = self.visit(e.a), self.visit(e.b)
        if a is UNKNOWN or b is UNKNOWN or isinstance(a, float) or isinstance(b, float):
            return UNKNOWN
        # What the emulator refuses at run time (a division by zero, the smallest value divided by -1, a shift by a
        # negative amount) is left to it, which names the kernel line: folded, it would raise here or wrap.
        smallest = -(1 << (e.type.nbits - 1)) if e.type.kind == "int" else None
        if e.op in ("//", "%", "cdiv") and (b == 0 or b == -1 and a == smallest):
            return UNKNOWN
        if e.op in ("<<", ">>") and b < 0:
            return UNKNOWN
        return wrap(OPERATORS[e.op](a, b), e.type)

    def unary(self, e):
        a = self.visit(e.a)
        if a is UNKNOWN or isinstance(a, float):
            return UNKNOWN
        return not a if e.op == "not" else wrap(~a if e.op == "~" else -a, e.dtype)

    def convert(self, e):
        a = self.visit(e.a)
        return UNKNOWN if a is UNKNOWN or e.type.is_float else wrap(a, e.type)

    def select(self, e):
        c = self.visit(e.cond)
        return UNKNOWN if c is UNKNOWN else self.visit(e.a if c else e.b)

    def other(self, e):
        return UNKNOWN


def propagate(kernel: ir.Kernel) -> ir.Kernel:
    """``kernel`` with known scalars replaced by constants and branches with known conditions resolved."""
    body, _ = _block(kernel.body, _Flow({}, None), None)
    return replace(kernel, body=body)


# ------------------------------------------------------------------------------------------------ the lattice
#
# An environment maps the uids of variables with a known value to that value; None stands for "no path reaches
# this point". Joining keeps the values both sides agree on.


def _join(a: dict | None, b: dict | None) -> dict | None:
    if a is None:
        return b
    if b is None:
        return a
    return {uid: value for uid, value in a.items()
            if uid in b and b[uid] == value and type(b[uid]) is type(value)}


def _without(env: dict | None, uid: int) -> dict | None:
    return None if env is None else {k: v for k, v in env.items() if k != uid}


@dataclass(frozen=True)
class _Flow:
    """The values on the paths that reach a point of a loop body: ``live`` on paths that may start another trip of
    the innermost loop, ``leaving`` on paths where its next check ends it (past a failed unroll guard)."""

    live: dict | None
    leaving: dict | None

    def joined(self) -> dict | None:
        """What holds on every path."""
        return _join(self.live, self.leaving)

    def map(self, function) -> "_Flow":
        return _Flow(*(None if env is None else function(env) for env in (self.live, self.leaving)))

    def join(self, other: "_Flow") -> "_Flow":
        return _Flow(_join(self.live, other.live), _join(self.leaving, other.leaving))

    def collapsed(self, env: dict | None) -> "_Flow":
        """``env`` as the flow after a statement that merged this one's paths: live unless every path left."""
        return _Flow(None, env) if self.live is None else _Flow(env, None)


@dataclass(frozen=True)
class _Guard:
    """The innermost loop, whose exit guards ``var + c < stop`` (``0 <= c <= step``) end it when they fail: its
    variable is written only by the loop and ``stop`` (the loop's own Expr) reads nothing the body writes."""

    var: int
    step: int
    stop: ir.Expr

    def ends_loop_when_false(self, cond: ir.Expr) -> bool:
        if not (isinstance(cond, ir.Binary) and cond.op == "<" and cond.b is self.stop):
            return False
        left, offset = cond.a, 0
        if isinstance(left, ir.Binary) and left.op == "+" and isinstance(left.b, ir.Const):
            left, offset = left.a, left.b.value
        return isinstance(left, ir.Var) and left.uid == self.var and 0 <= offset <= self.step


def _tracked(var: ir.Var) -> bool:
    return isinstance(var.type, DType) and var.type.kind in ("int", "uint", "bool")


# --------------------------------------------------------------------------------------------- transfer functions


def _rewrite(value, env: dict):
    """``value`` (an Expr, a TensorRef, a tuple of them) with known variables replaced by constants and
    expressions over constants folded."""
    return map_exprs(value, _visitor(env))


def _visitor(env: dict):
    """The rewrite of one Expr node under ``env``, its operands already rewritten."""
    def visit(e: ir.Expr) -> ir.Expr:
        if isinstance(e, ir.Var):
            known = env.get(e.uid, UNKNOWN)
            return e if known is UNKNOWN else ir.Const(known, e.type)
        if isinstance(e, ir.Select) and isinstance(e.cond, ir.Const):
            return e.a if e.cond.value else e.b
        if isinstance(e, (ir.Binary, ir.Unary, ir.Convert)):
            known = fold(e)  # its operands are constants wherever they are known
            if known is not UNKNOWN:
                return ir.Const(known, e.dtype)
        return e

    return visit


def _block(body, flow: _Flow, guard: _Guard | None) -> tuple[tuple[ir.Stmt, ...], _Flow]:
    out = []
    for stmt in body:
        stmts, flow = _statement(stmt, flow, guard)
        out.extend(stmts)
    return tuple(out), flow


def _statement(s: ir.Stmt, flow: _Flow, guard: _Guard | None) -> tuple[list[ir.Stmt], _Flow]:
    env = flow.joined()
    if env is None:  # unreachable: nothing is known here, and nothing needs to be
        return [s], flow
    if isinstance(s, (ir.Declare, ir.Assign)):
        value = _rewrite(s.value, env)
        stmt = s if value is s.value else replace(s, value=value)
        return [stmt], flow.map(lambda e: _learn(e, s.var, s.value))
    if isinstance(s, ir.If):
        return _if(s, flow, env, guard)
    if isinstance(s, ir.For):
        return _for(s, flow, env)
    if not type(s).blocks:
        return [rewrite_stmt(s, _visitor(env), _unchanged)], flow
    state, blocks = env, {}
    for name in type(s).blocks:
        blocks[name], after = _block(getattr(s, name), _Flow(state, None), None)
        state = _join(state, after.joined())  # the block may not have run
    return [replace(rewrite_stmt(s, _visitor(state), _unchanged), **blocks)], flow.collapsed(state)


def _unchanged(block):
    return block


def _learn(env: dict, var: ir.Var, value: ir.Expr) -> dict:
    known = fold(value, env) if _tracked(var) else UNKNOWN
    env = _without(env, var.uid)
    if known is not UNKNOWN:
        env[var.uid] = wrap(known, var.type)
    return env


def _if(s: ir.If, flow: _Flow, env: dict, guard: _Guard | None):
    cond = _rewrite(s.cond, env)
    if isinstance(cond, ir.Const):
        stmts, flow = _block(s.then if cond.value else s.orelse, flow, guard)
        return list(stmts), flow

    def split(component):
        """(the part of ``component`` that takes the then branch, the part that takes the else branch)"""
        if component is None:
            return None, None
        known = fold(s.cond, component)
        if known is UNKNOWN:
            return component, component
        return (component, None) if known else (None, component)

    then_live, else_live = split(flow.live)
    then_leaving, else_leaving = split(flow.leaving)
    if guard is not None and guard.ends_loop_when_false(s.cond):
        else_live, else_leaving = None, _join(else_leaving, else_live)
    then, after_then = _block(s.then, _Flow(then_live, then_leaving), guard)
    orelse, after_else = _block(s.orelse, _Flow(else_live, else_leaving), guard)
    return [replace(s, cond=cond, then=then, orelse=orelse)], after_then.join(after_else)


def _for(s: ir.For, flow: _Flow, env: dict):
    start, stop, step = (fold(e, env) for e in (s.start, s.stop, s.step))
    loop = replace(s, start=_rewrite(s.start, env), stop=_rewrite(s.stop, env), step=_rewrite(s.step, env))
    trips = None
    if UNKNOWN not in (start, stop, step) and step > 0:
        trips = max(0, -(-(stop - start) // step))
    if trips == 0:  # the body never runs
        return [], flow
    uid = s.var.uid
    if trips == 1:
        body, after = _block(s.body, _Flow({**env, uid: start}, None), None)
        return [replace(loop, body=body)], flow.collapsed(_without(after.joined(), uid))
    guard = _exit_guard(s, step)
    head = _without(env, uid)
    while True:
        body, after = _block(s.body, _Flow(head, None), guard)
        next_head = _join(head, _without(after.live, uid)) if after.live is not None else head
        if next_head == head:
            break
        head = next_head
    if trips is not None:  # the loop ends after its last trip, whose variable is known
        _, last = _block(s.body, _Flow({**head, uid: start + (trips - 1) * step}, None), guard)
        exit_env = last.joined()
    else:
        exit_env = _join(head, after.leaving)
    return [replace(loop, body=body)], flow.collapsed(_without(exit_env, uid))


def _exit_guard(s: ir.For, step) -> _Guard | None:
    """The guard rule of loop ``s`` when it is sound: a known positive step, a variable only the loop writes and a
    ``stop`` that the body cannot change (so every guard compares against the value the loop checks)."""
    if step is UNKNOWN or step <= 0:
        return None
    written = {stmt.var.uid for stmt in ir.walk(s.body) if isinstance(stmt, (ir.Declare, ir.Assign, ir.For))}
    for leaf in ir.leaves(s.stop):
        if isinstance(leaf, ir.Load) or (isinstance(leaf, ir.Var) and leaf.uid in written):
            return None
    return None if s.var.uid in written else _Guard(s.var.uid, step, s.stop)
