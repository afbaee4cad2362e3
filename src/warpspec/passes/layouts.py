"""Register-layout inference: which layout (``warpspec.layout.registers``) every register tensor of a kernel has,
from its uses, and the checks that follow from it. Both back ends run the inference (the emulator to refuse what the
GPU code could not do, the CUDA back end to generate the per-thread code).
"""

from __future__ import annotations

import math
from dataclasses import fields

from warpspec.errors import CompileError
from warpspec.isa.elementwise import Arithmetic, Cast, TileIndex, broadcast_axis
from warpspec.isa.reduction import ReduceRows
from warpspec.isa.memory import AllocRegister, LoadGlobal, LoadShared, StoreElement, StoreGlobal, StoreShared
from warpspec.isa.roles import ThreadGroup
from warpspec.isa.wgmma import WgmmaMma
from warpspec.ir import nodes as ir
from warpspec.ir.rewrite import map_exprs
from warpspec.layout.fragments import AccumulatorLayout
from warpspec.layout.registers import (AFragment, Accumulator, Blocked, Replicated, Slice, describe, same_registers,
                                       slice_of)
from warpspec.target import Target

#: Largest register tensor every thread may hold whole, in elements.
MAX_REPLICATED = 256


def infer_layouts(kernel: ir.Kernel, target: Target) -> dict[int, object]:
    """The layout of every register tensor of ``kernel`` (by decl uid), from its uses: WGMMA operands fix
    fragment layouts, elementwise operations share their operands' layout in both directions, loads not otherwise
    constrained get a Blocked layout over their thread group, and small remaining tensors are replicated."""
    layouts: dict[int, object] = {}
    statements: list[tuple[ir.Stmt, tuple[int, int]]] = []

    def visit(body, group):
        for stmt in body:
            statements.append((stmt, group))
            if isinstance(stmt, ThreadGroup):
                visit(stmt.body, (stmt.begin, stmt.count))
            else:
                for child in ir.children(stmt):
                    visit(child, group)

    visit(kernel.body, (0, kernel.num_threads))

    def assign(decl: ir.TensorDecl, layout, stmt: ir.Stmt) -> bool:
        previous = layouts.get(decl.uid)
        if previous is None:
            layouts[decl.uid] = layout
            return True
        if not same_registers(previous, layout):
            raise CompileError(f"register tensor {decl.name} would need two layouts ({describe(previous)} and "
                               f"{describe(layout)}); convert through shared memory (store_shared, sync, "
                               f"load_shared)", str(stmt.loc))
        return False

    for stmt, _ in statements:
        if isinstance(stmt, WgmmaMma):
            m, n = stmt.d.shape
            warpgroups = stmt.threads[1] // target.warpgroup_threads
            assign(stmt.d.decl, Accumulator(AccumulatorLayout(m, n, warpgroups=warpgroups), stmt.threads[0]), stmt)
            if stmt.a.kind == ir.REGISTER:
                assign(stmt.a.decl, AFragment(m, stmt.a.shape[1], warpgroups, stmt.threads[0],
                                              target.warpgroup_threads), stmt)

    def same_layout_sets():
        """Per elementwise statement, the tensors that share one layout (its result and same-shaped operands),
        and the broadcast vectors among its operands with their axis."""
        for stmt, _ in statements:
            if isinstance(stmt, TileIndex):
                yield stmt, [stmt.decl, stmt.like.decl], []
            if isinstance(stmt, (Cast, Arithmetic)):
                refs = [o for o in ((stmt.src,) if isinstance(stmt, Cast) else stmt.operands)
                        if isinstance(o, ir.TensorRef)]
                yield (stmt, [stmt.decl] + [o.decl for o in refs if o.decl.shape == stmt.decl.shape],
                       [(o.decl, broadcast_axis(o.decl.shape, stmt.decl.shape)) for o in refs
                        if o.decl.shape != stmt.decl.shape])

    # Broadcast vectors, and the tensors computed with them, take their layout from the 2-D tensor they are
    # combined with (or are replicated with it), never a load's default Blocked layout.
    vectors = {decl.uid for _, _, broadcast in same_layout_sets() for decl, _ in broadcast}
    grown = True
    while grown:
        grown = False
        for _, shared, _ in same_layout_sets():
            if any(d.uid in vectors for d in shared) and not all(d.uid in vectors for d in shared):
                vectors |= {d.uid for d in shared}
                grown = True

    def propagate():
        changed = True
        while changed:
            changed = False
            for stmt, tensors, broadcast in same_layout_sets():
                known = [layouts[d.uid] for d in tensors if d.uid in layouts]
                if known:
                    for decl in tensors:
                        changed |= assign(decl, known[0], stmt)
                    for decl, axis in broadcast:
                        changed |= assign(decl, slice_of(known[0], axis, decl.shape), stmt)
            for stmt, _ in statements:
                if isinstance(stmt, ReduceRows) and stmt.src.decl.uid in layouts:
                    changed |= assign(stmt.decl, _row_slice(stmt, layouts[stmt.src.decl.uid]), stmt)

    propagate()
    for stmt, group in statements:
        if isinstance(stmt, (LoadGlobal, LoadShared)) and stmt.decl.uid not in layouts.keys() | vectors:
            shape = stmt.decl.shape
            if len(shape) > 2:
                what = "load_global" if isinstance(stmt, LoadGlobal) else "load_shared"
                raise CompileError(f"{what} into registers takes 1-D or 2-D tiles", str(stmt.loc))
            elem = stmt.decl.dtype.nbytes
            vector = max(1, 16 // elem)
            while shape[-1] % vector:
                vector //= 2
            layouts[stmt.decl.uid] = Blocked(tuple(shape), group[0], group[1], vector)
    propagate()
    for stmt, group in statements:
        if isinstance(stmt, (AllocRegister, ir.DefineTensor)) and stmt.decl.uid not in layouts:
            size = math.prod(stmt.decl.shape)
            if size > MAX_REPLICATED:
                raise CompileError(f"register tensor {stmt.decl.name} ({size} elements) is not a wgmma operand, "
                                   f"not loaded, and too large to replicate in every thread (at most "
                                   f"{MAX_REPLICATED} elements)", str(stmt.loc))
            layouts[stmt.decl.uid] = Replicated(tuple(stmt.decl.shape))
    propagate()  # a vector replicated above must match its replicated 2-D tensor
    return layouts


def _row_slice(stmt: ReduceRows, layout) -> Slice:
    """The layout of a row reduction's result: the row slice of its accumulator operand, which every thread
    holding the accumulator computes (the quad's shuffles need them all); a CompileError otherwise."""
    name = stmt.src.decl.name
    if not isinstance(layout, Accumulator):
        raise CompileError(f"reduce_{stmt.op} of {name} needs wgmma accumulator fragments (each row held by the four "
                           f"lanes of a quad), but {name} is {describe(layout)}", str(stmt.loc))
    if tuple(stmt.threads) != tuple(layout.owners):
        begin, count = layout.owners
        raise CompileError(f"reduce_{stmt.op} of {name} is executed by threads [{stmt.threads[0]}, "
                           f"{stmt.threads[0] + stmt.threads[1]}), but {name} is held by threads [{begin}, "
                           f"{begin + count}): every one of those threads must execute it", str(stmt.loc))
    return Slice(layout, 1)


def check_stores(kernel: ir.Kernel, layouts: dict) -> None:
    """Refuse a store of a distributed register tensor by threads other than exactly those holding it: each thread
    stores only the elements it holds, so a subset (a single thread, one of two warpgroups) would write part of
    the tile on the GPU while the whole tile is the kernel's meaning."""
    for stmt in ir.walk(kernel.body):
        if not isinstance(stmt, (StoreGlobal, StoreShared)):
            continue
        layout = layouts.get(stmt.src.decl.uid)
        owners = getattr(layout, "owners", None)
        if owners is None or tuple(stmt.threads) == tuple(owners):
            continue
        begin, count = stmt.threads
        who = "a single thread (single_thread)" if count == 1 else f"threads [{begin}, {begin + count})"
        what = "store_global" if isinstance(stmt, StoreGlobal) else "store_shared"
        raise CompileError(f"{what} of {stmt.src.decl.name} is executed by {who}, but {stmt.src.decl.name} is held "
                           f"as {describe(layout)} by threads [{owners[0]}, {owners[0] + owners[1]}), each holding "
                           f"part of it: every one of those threads must execute the store (and no other)",
                           str(stmt.loc))


def check_element_access(kernel: ir.Kernel, layouts: dict) -> None:
    """Refuse element reads (``t[i]``) and writes of a register tensor that is spread over threads (fragments,
    blocked tiles): a thread holds only some elements, so an element index names a value it may not have."""
    def refuse(decl: ir.TensorDecl, stmt: ir.Stmt, verb: str) -> None:
        layout = layouts.get(decl.uid)
        if layout is not None and not isinstance(layout, Replicated):
            raise CompileError(f"elements of {decl.name} are spread over threads ({describe(layout)}); {verb} them "
                               f"with tensor operations, not by index", str(stmt.loc))

    for stmt in ir.walk(kernel.body):
        if isinstance(stmt, StoreElement):
            refuse(stmt.tensor.decl, stmt, "write")
        for f in fields(stmt):
            if f.name not in type(stmt).blocks:
                map_exprs(getattr(stmt, f.name), lambda e, stmt=stmt: _check_load(e, stmt, refuse))


def _check_load(expr: ir.Expr, stmt: ir.Stmt, refuse) -> ir.Expr:
    if isinstance(expr, ir.Load):
        refuse(expr.tensor.decl, stmt, "read")
    return expr
