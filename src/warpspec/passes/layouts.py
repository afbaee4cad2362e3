"""Register-layout inference: which layout (``warpspec.layout.registers``) every register tensor of a kernel has,
from its uses, and the checks that follow from it. Both back ends run the inference (the emulator to refuse what the
GPU code could not do, the CUDA back end to generate the per-thread code).
"""

from __future__ import annotations

import math
from dataclasses import fields

from warpspec.errors import CompileError
from warpspec.isa import registry
from warpspec.ir import nodes as ir
from warpspec.ir.rewrite import map_exprs
from warpspec.layout.registers import Blocked, LayoutRule, Replicated, describe_layout, same_registers, slice_of
from warpspec.target import Target

#: Largest register tensor every thread may hold whole, in elements.
MAX_REPLICATED = 256


def layout_rules(kernel: ir.Kernel, target: Target) -> list[tuple[ir.Stmt, tuple[int, int], LayoutRule]]:
    """Every statement of ``kernel`` that declares a layout rule (``registry.LAYOUT_RULE``), in program order,
    with the threads ``(begin, count)`` that run it and its rule."""
    rules = []

    def visit(body, group):
        for stmt in body:
            rule = registry.fact_of(registry.LAYOUT_RULE, type(stmt))
            if rule is not None:
                rules.append((stmt, group, rule(stmt, target)))
            narrowed = registry.fact_of(registry.BODY_THREADS, type(stmt))
            for child in ir.children(stmt):
                visit(child, group if narrowed is None else narrowed(stmt))

    visit(kernel.body, (0, kernel.num_threads))
    return rules


def infer_layouts(rules: list) -> dict[int, object]:
    """The layout of every register tensor of a kernel (by decl uid), from its statements' ``layout_rules``:
    WGMMA operands fix fragment layouts, elementwise operations share their operands' layout in both directions,
    loads not otherwise constrained get a Blocked layout over their thread group, as do stored tensors too large to
    replicate that nothing else constrains, and small remaining tensors are replicated."""
    layouts: dict[int, object] = {}

    def assign(decl: ir.TensorDecl, layout, stmt: ir.Stmt) -> bool:
        previous = layouts.get(decl.uid)
        if previous is None:
            layouts[decl.uid] = layout
            return True
        if not same_registers(previous, layout):
            raise CompileError(f"register tensor {decl.name} would need two layouts ({describe_layout(previous)} and "
                               f"{describe_layout(layout)}); convert through shared memory (store_shared, sync, "
                               f"load_shared)", str(stmt.loc))
        return False

    for stmt, _, rule in rules:
        for decl, layout in rule.fixed:
            assign(decl, layout, stmt)

    # Broadcast vectors, and the tensors computed with them, take their layout from the 2-D tensor they are
    # combined with (or are replicated with it), never a load's default Blocked layout.
    alike = [(stmt, rule) for stmt, _, rule in rules if rule.alike]
    vectors = {decl.uid for _, rule in alike for decl, _ in rule.broadcast}
    grown = True
    while grown:
        grown = False
        for _, rule in alike:
            if any(d.uid in vectors for d in rule.alike) and not all(d.uid in vectors for d in rule.alike):
                vectors |= {d.uid for d in rule.alike}
                grown = True

    def propagate():
        changed = True
        while changed:
            changed = False
            for stmt, rule in alike:
                known = [layouts[d.uid] for d in rule.alike if d.uid in layouts]
                if known:
                    for decl in rule.alike:
                        changed |= assign(decl, known[0], stmt)
                    for decl, axis in rule.broadcast:
                        changed |= assign(decl, slice_of(known[0], axis, decl.shape), stmt)
            for stmt, _, rule in rules:
                if rule.derived is not None:
                    decl, source, derive = rule.derived
                    if source.uid in layouts:
                        changed |= assign(decl, derive(layouts[source.uid]), stmt)

    propagate()
    for stmt, group, rule in rules:
        decl = rule.defines
        if rule.blocked and decl.uid not in layouts.keys() | vectors:
            if len(decl.shape) > 2:
                raise CompileError(f"{rule.call} into registers takes 1-D or 2-D tiles", str(stmt.loc))
            layouts[decl.uid] = _blocked(decl, group)
    propagate()
    # A tile that is only filled and stored (a zero tile written into an output) and too large for every thread to
    # hold whole: blocked over the threads that define it, as a load would be, so each stores its own part.
    stored = {rule.stored.uid for _, _, rule in rules if rule.stored is not None}
    for stmt, group, rule in rules:
        decl = rule.defines
        if decl is not None and decl.uid in stored and decl.uid not in layouts.keys() | vectors \
                and len(decl.shape) <= 2 and math.prod(decl.shape) > MAX_REPLICATED:
            layouts[decl.uid] = _blocked(decl, group)
    propagate()
    for stmt, _, rule in rules:
        decl = rule.defines
        if decl is not None and decl.uid not in layouts:
            size = math.prod(decl.shape)
            if size > MAX_REPLICATED:
                raise CompileError(f"register tensor {decl.name} ({size} elements) is not a wgmma operand, "
                                   f"not loaded or stored, and too large to replicate in every thread (at most "
                                   f"{MAX_REPLICATED} elements)", str(stmt.loc))
            layouts[decl.uid] = Replicated(tuple(decl.shape))
    propagate()  # a vector replicated above must match its replicated 2-D tensor
    return layouts


def _blocked(decl: ir.TensorDecl, group: tuple[int, int]) -> Blocked:
    """A Blocked layout of 1-D or 2-D ``decl`` over thread group ``group`` (begin, count): runs of up to 16 bytes
    of a row per thread, the run a divisor of the row."""
    vector = max(1, 16 // decl.dtype.nbytes)
    while decl.shape[-1] % vector:
        vector //= 2
    return Blocked(tuple(decl.shape), group[0], group[1], vector)


def check_stores(rules: list, layouts: dict) -> None:
    """Refuse a store of a distributed register tensor by threads other than exactly those holding it: each thread
    stores only the elements it holds, so a subset (a single thread, one of two warpgroups) would write part of
    the tile on the GPU while the whole tile is the kernel's meaning."""
    for stmt, _, rule in rules:
        if rule.stored is None:
            continue
        layout = layouts.get(rule.stored.uid)
        owners = getattr(layout, "owners", None)
        if owners is None or tuple(stmt.threads) == tuple(owners):
            continue
        begin, count = stmt.threads
        who = "a single thread (single_thread)" if count == 1 else f"threads [{begin}, {begin + count})"
        name = rule.stored.name
        raise CompileError(f"{rule.call} of {name} is executed by {who}, but {name} is held as "
                           f"{describe_layout(layout)} by threads [{owners[0]}, {owners[0] + owners[1]}), each "
                           f"holding part of it: every one of those threads must execute the store (and no other)",
                           str(stmt.loc))


def check_element_access(kernel: ir.Kernel, rules: list, layouts: dict) -> None:
    """Refuse element reads (``t[i]``) and writes of a register tensor that is spread over threads (fragments,
    blocked tiles): a thread holds only some elements, so an element index names a value it may not have."""
    def refuse(decl: ir.TensorDecl, stmt: ir.Stmt, verb: str) -> None:
        layout = layouts.get(decl.uid)
        if layout is not None and not isinstance(layout, Replicated):
            raise CompileError(f"elements of {decl.name} are spread over threads ({describe_layout(layout)}); {verb} "
                               f"them with tensor operations, not by index", str(stmt.loc))

    indexed = {id(stmt): rule.indexed for stmt, _, rule in rules if rule.indexed is not None}
    for stmt in ir.walk(kernel.body):
        if id(stmt) in indexed:
            refuse(indexed[id(stmt)], stmt, "write")
        for f in fields(stmt):
            if f.name not in type(stmt).blocks:
                map_exprs(getattr(stmt, f.name), lambda e, stmt=stmt: _check_load(e, stmt, refuse))


def _check_load(expr: ir.Expr, stmt: ir.Stmt, refuse) -> ir.Expr:
    if isinstance(expr, ir.Load):
        refuse(expr.tensor.decl, stmt, "read")
    return expr
