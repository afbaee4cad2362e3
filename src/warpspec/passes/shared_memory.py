"""Where each shared tensor and mbarrier lives in the block's shared memory, checked against the target's limit.

Both back ends run this pass, so a kernel that needs more shared memory than a block has is refused before it runs
on either, at the ``shared_tensor`` line that crossed the limit. Each tile is laid out as TMA writes it
(``warpspec.layout.choose_shared_layout``) and padded to the 1 KB alignment TMA's swizzles need; the mbarriers
follow the tiles, 8 bytes each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from warpspec.errors import CompileError
from warpspec.isa.mbarrier import AllocBarriers
from warpspec.isa.memory import AllocShared
from warpspec.ir import nodes as ir
from warpspec.layout.shared import SharedTileLayout, choose_shared_layout, round_up
from warpspec.target import Target


@dataclass(frozen=True)
class SharedPlacement:
    """Where a shared tensor lives: byte offset in the dynamic buffer, its tile layout and the stride between
    tiles of its leading (stage) dimensions."""

    offset: int
    tile: SharedTileLayout
    tile_stride: int
    lead_shape: tuple[int, ...]


@dataclass(frozen=True)
class SharedPlan:
    """The block's shared memory: tiles by decl uid, barrier offsets and counts by decl uid, total bytes."""

    tiles: dict
    barrier_offsets: dict
    barrier_counts: dict
    total_bytes: int  # tiles and barriers; the launch adds the alignment reserve
    limit_bytes: int


def plan_shared(kernel: ir.Kernel, target: Target) -> SharedPlan:
    """Place every shared tensor and mbarrier array of ``kernel``; CompileError at the allocation that does not
    fit (the error's ``shared_bytes`` says how much the whole kernel needs)."""
    tiles, counts, offset = {}, {}, 0
    barrier_bytes = sum(8 * len(s.counts) for s in ir.walk(kernel.body) if isinstance(s, AllocBarriers))
    overflow = None  # the CompileError of the allocation that crossed the limit, raised once the total is known
    for stmt in ir.walk(kernel.body):
        if isinstance(stmt, AllocShared):
            decl = stmt.decl
            try:
                tile = _tile_layout(stmt)
            except CompileError:
                if overflow is None:
                    raise
                continue  # past the limit: the total reported counts the tiles that have a layout
            stride = round_up(tile.nbytes, target.shared_alignment)
            tiles[decl.uid] = SharedPlacement(offset, tile, stride, tuple(decl.shape[:-2]))
            offset += stride * math.prod(decl.shape[:-2])
            if overflow is None and offset + barrier_bytes > target.shared_limit:
                overflow = CompileError(
                    f"shared tensor {decl.name} brings the block's shared memory to {offset + barrier_bytes} bytes "
                    f"(tiles with their {target.shared_alignment}-byte alignment, and mbarriers); at most "
                    f"{target.shared_limit} fit in a block on {target.name} (227 KB less the alignment reserve)",
                    str(stmt.loc))
        elif isinstance(stmt, AllocBarriers):
            counts[stmt.decl.uid] = stmt.counts
    if overflow is not None:
        overflow.shared_bytes = offset + barrier_bytes
        raise overflow
    barrier_offsets = {}
    for uid, barrier_counts in counts.items():
        barrier_offsets[uid] = offset
        offset += 8 * len(barrier_counts)
    return SharedPlan(tiles, barrier_offsets, counts, offset, target.shared_limit)


def _tile_layout(stmt: AllocShared) -> SharedTileLayout:
    """The layout of one shared tensor's tile; CompileError at its line when it has none."""
    decl = stmt.decl
    if len(decl.shape) < 2:
        raise CompileError(f"shared tensor {decl.name} needs at least 2 dimensions (rows, columns)", str(stmt.loc))
    try:
        return choose_shared_layout(decl.dtype, *decl.shape[-2:], stmt.swizzle)
    except ValueError as error:
        raise CompileError(f"shared tensor {decl.name}: {error}", str(stmt.loc)) from None
