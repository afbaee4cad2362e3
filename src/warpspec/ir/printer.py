"""A readable text form of the IR, for test failures, ``warpspec build --ir`` and debugging."""

from __future__ import annotations

from warpspec.ir import nodes as ir
from warpspec.ir.visit import ExprVisitor


class _Text(ExprVisitor):
    """Expressions as text."""

    def const(self, e):
        return repr(e.value)

    def var(self, e):
        return e.name

    def special(self, e):
        return e.name

    def binary(self, e):
        if e.op in ("min", "max", "cdiv"):
            return f"{e.op}({self.visit(e.a)}, {self.visit(e.b)})"
        return f"({self.visit(e.a)} {e.op} {self.visit(e.b)})"

    def unary(self, e):
        return f"({e.op} {self.visit(e.a)})"

    def select(self, e):
        return f"({self.visit(e.a)} if {self.visit(e.cond)} else {self.visit(e.b)})"

    def convert(self, e):
        return f"{e.type.name}({self.visit(e.a)})"

    def load(self, e):
        return f"{self.visit(e.tensor)}[{', '.join(self.visit(i) for i in e.indices)}]"

    def other(self, e):
        if isinstance(e, ir.TensorRef):
            text = e.decl.name
            if e.index:
                text += f"[{', '.join(self.visit(i) for i in e.index)}]"
            return text + (".T" if e.transposed else "")
        if isinstance(e, (tuple, list)):
            return "[" + ", ".join(self.visit(x) for x in e) + "]"
        return repr(e)


_TEXT = _Text()


def format_expr(e) -> str:
    """One expression as text (tensor refs and Python values too)."""
    return _TEXT.visit(e)


def format_body(body, indent: int = 0) -> list[str]:
    """The lines of a statement list."""
    lines = []
    pad = "  " * indent
    for s in body:
        lines.append(pad + _head(s))
        for child in ir.children(s):
            if isinstance(s, ir.If) and child is s.orelse:
                if not child:
                    continue
                lines.append(pad + "else:")
            lines.extend(format_body(child, indent + 1))
    return lines


def _head(s) -> str:
    f = format_expr
    if isinstance(s, ir.Declare):
        return f"{s.var.name}: {s.var.type.name} = {f(s.value)}"
    if isinstance(s, ir.Assign):
        return f"{s.var.name} = {f(s.value)}"
    if isinstance(s, ir.For):
        unroll = f", unroll={s.unroll}" if s.unroll != 1 else ""
        return f"for {s.var.name} in range({f(s.start)}, {f(s.stop)}, {f(s.step)}{unroll}):"
    if isinstance(s, ir.If):
        return f"if {f(s.cond)}:"
    text = getattr(s, "text", None)
    if text is not None:  # statements of the instruction families print themselves
        return text(f)
    fields = [k for k in s.__dataclass_fields__ if k not in ("loc", "threads")]
    args = ", ".join(f"{k}={f(getattr(s, k))}" for k in fields)
    return f"{type(s).__name__}({args})"


def format_kernel(kernel: ir.Kernel) -> str:
    """The whole kernel: signature, launch shape and body."""
    params = ", ".join(f"{p.name}: {p.type!r}" for p in kernel.params)
    lines = [f"kernel {kernel.name}({params})",
             f"  grid={format_expr(kernel.grid)} warps={kernel.warps} cluster={list(kernel.cluster)}"]
    lines += format_body(kernel.body, 1)
    return "\n".join(lines)
