"""Where each shared tensor and mbarrier lives in the block's shared memory, checked against the target's limit.

Both back ends run this pass, so a kernel that needs more shared memory than a block has is refused before it runs
on either, at the ``shared_tensor`` line that crossed the limit. Each tile is laid out as TMA writes it
(``warpspec.layout.choose_shared_layout``) and padded to the 1 KB alignment TMA's swizzles need; the mbarriers
follow the tiles, 8 bytes each.
"""

from __future__ import annotations

from dataclasses import dataclass

from warpspec.errors import CompileError
from warpspec.isa.mbarrier import AllocBarriers
from warpspec.isa.memory import AllocShared
from warpspec.ir import nodes as ir
from warpspec.layout.shared import SharedTileLayout, choose_shared_layout
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
    fit (the error's ``shared_bytes`` says how much the kernel needs)."""
    tiles, counts, offset = {}, {}, 0
    barrier_bytes = sum(8 * len(s.counts) for s in ir.walk(kernel.body) if isinstance(s, AllocBarriers))
    for stmt in ir.walk(kernel.body):
        if isinstance(stmt, AllocShared):
            decl = stmt.decl
            if len(decl.shape) < 2:
                raise CompileError(f"shared tensor {decl.name} needs at least 2 dimensions (rows, columns)",
                                   str(stmt.loc))
            rows, cols = decl.shape[-2:]
            try:
                tile = choose_shared_layout(decl.dtype, rows, cols, stmt.swizzle)
            except ValueError as error:
                raise CompileError(f"shared tensor {decl.name}: {error}", str(stmt.loc)) from None
            stride = _round_up(tile.nbytes, target.shared_alignment)
            count = 1
            for extent in decl.shape[:-2]:
                count *= extent
            tiles[decl.uid] = SharedPlacement(offset, tile, stride, tuple(decl.shape[:-2]))
            offset += stride * count
            if offset + barrier_bytes > target.shared_limit:
                error = CompileError(
                    f"shared tensor {decl.name} brings the block's shared memory to {offset + barrier_bytes} bytes "
                    f"(tiles with their {target.shared_alignment}-byte alignment, and mbarriers); at most "
                    f"{target.shared_limit} fit in a block on {target.name} (227 KB less the alignment reserve)",
                    str(stmt.loc))
                error.shared_bytes = _total(kernel, target, barrier_bytes)
                raise error
        elif isinstance(stmt, AllocBarriers):
            counts[stmt.decl.uid] = stmt.counts
    barrier_offsets = {}
    for uid, barrier_counts in counts.items():
        barrier_offsets[uid] = offset
        offset += 8 * len(barrier_counts)
    return SharedPlan(tiles, barrier_offsets, counts, offset, target.shared_limit)


def _total(kernel: ir.Kernel, target: Target, barrier_bytes: int) -> int:
    """The whole kernel's shared bytes, for a plan that does not fit (the tuner reports it)."""
    total = barrier_bytes
    for stmt in ir.walk(kernel.body):
        if isinstance(stmt, AllocShared) and len(stmt.decl.shape) >= 2:
            try:
                tile = choose_shared_layout(stmt.decl.dtype, *stmt.decl.shape[-2:], stmt.swizzle)
            except ValueError:
                continue
            count = 1
            for extent in stmt.decl.shape[:-2]:
                count *= extent
            total += _round_up(tile.nbytes, target.shared_alignment) * count
    return total


def _round_up(value: int, multiple: int) -> int:
    return (value + multiple - 1) // multiple * multiple
