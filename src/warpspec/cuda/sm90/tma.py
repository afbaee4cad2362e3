"""sm_90a emission of the TMA family (``warpspec.isa.tma``): the tensor maps the host encodes, and
``cp.async.bulk.tensor`` loads/stores (``cp.reduce.async.bulk.tensor`` reduce-adds) box by box with their bulk
groups."""

from __future__ import annotations

from dataclasses import dataclass

from warpspec.cuda.contracts import CodeGenerator
from warpspec.isa.tma import TmaCommit, TmaLoad, TmaStore, TmaWait
from warpspec.ir import nodes as ir
from warpspec.layout.shared import SharedTileLayout, tma_boxes
from warpspec.isa.registry import emits
from warpspec.target import SM90A

TARGET = SM90A.name


@dataclass(frozen=True)
class TensorMapUse:
    """One tensor map the host encodes at launch: global view ``view`` tiled by the boxes of ``tile``."""

    index: int
    view: ir.TensorDecl
    pointer: str  # the pointer parameter's name
    tile: SharedTileLayout


def plan_tensor_maps(gen: CodeGenerator) -> dict[tuple[int, int], TensorMapUse]:
    """One tensor map per (global view, shared tile) pair that a TMA copy moves between, by (view, tile) uid."""
    maps: dict[tuple[int, int], TensorMapUse] = {}
    for stmt in ir.walk(gen.kernel.body):
        if isinstance(stmt, (TmaLoad, TmaStore)):
            view, tile_ref = (stmt.src, stmt.dst) if isinstance(stmt, TmaLoad) else (stmt.dst, stmt.src)
            key = (view.decl.uid, tile_ref.decl.uid)
            if key not in maps:
                pointer = gen.views[view.decl.uid].pointer.name
                maps[key] = TensorMapUse(len(maps), view.decl, pointer, gen.shared[tile_ref.decl.uid].tile)
    return maps


def _issue_block(gen: CodeGenerator, s) -> tuple[str, str]:
    """Open/close text that makes one thread issue: already one inside single_thread, else elect a lane of the
    (one-warp) group."""
    if gen.single_depth:
        return "{", "}"
    return "if (elect_one()) {", "}"


def _tma_coordinates(gen: CodeGenerator, offsets, box) -> list[str]:
    """PTX coordinates of one box, innermost dimension first: the tile's column and row offsets plus the
    box's place in the tile, then the leading dimensions' offsets."""
    exprs = [gen.cexpr(o) for o in offsets]
    coordinates = [f"{exprs[-1]} + {box.coords[0]}", f"{exprs[-2]} + {box.coords[1]}"]
    return coordinates + exprs[-3::-1]


@emits(TmaLoad, TARGET)
def _emit_TmaLoad(gen: CodeGenerator, s: TmaLoad) -> None:
    use = gen.maps[(s.src.decl.uid, s.dst.decl.uid)]
    dst = gen.tile_address(s.dst, s.loc)
    bar = gen.barrier_address(s.barrier)
    rank = len(s.offsets)
    open_, close = _issue_block(gen, s)
    gen.line(open_)
    gen.line(f"  const unsigned dst_ = {dst}; const unsigned bar_ = {bar};")
    # Multicast: the same box lands at dst_ and completes on bar_ in every block whose bit is set in the mask.
    mask = sum(1 << r for r in s.multicast)
    multicast, mask_slot, mask_operand = ((".multicast::cluster", f", %{3 + rank}", f', "h"((unsigned short){mask}u)')
                                          if s.multicast else ("", "", ""))
    for box in tma_boxes(use.tile):
        coordinates = _tma_coordinates(gen, s.offsets, box)
        slots = ", ".join(f"%{2 + i}" for i in range(rank))
        operands = ", ".join(f'"r"({c})' for c in coordinates)
        gen.line(f'  asm volatile("cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.'
                  f'mbarrier::complete_tx::bytes{multicast} [%0], [%1, {{{slots}}}], [%{2 + rank}]{mask_slot};" :: '
                  f'"r"(dst_ + {box.smem_offset}u), "l"(reinterpret_cast<u64>(&map{use.index})), {operands}, '
                  f'"r"(bar_){mask_operand} : "memory");')
    gen.line(close)


@emits(TmaStore, TARGET)
def _emit_TmaStore(gen: CodeGenerator, s: TmaStore) -> None:
    use = gen.maps[(s.dst.decl.uid, s.src.decl.uid)]
    src = gen.tile_address(s.src, s.loc)
    rank = len(s.offsets)
    open_, close = _issue_block(gen, s)
    gen.line(open_)
    gen.line(f"  const unsigned src_ = {src};")
    # A reduce-add is the same box copy with the reduction named; the element type is the tensor map's.
    mnemonic = (f"cp.reduce.async.bulk.tensor.{rank}d.global.shared::cta.{s.reduce}.tile.bulk_group" if s.reduce
                else f"cp.async.bulk.tensor.{rank}d.global.shared::cta.tile.bulk_group")
    for box in tma_boxes(use.tile):
        coordinates = _tma_coordinates(gen, s.offsets, box)
        slots = ", ".join(f"%{1 + i}" for i in range(rank))
        operands = ", ".join(f'"r"({c})' for c in coordinates)
        gen.line(f'  asm volatile("{mnemonic} [%0, {{{slots}}}], [%{1 + rank}];" :: '
                  f'"l"(reinterpret_cast<u64>(&map{use.index})), {operands}, "r"(src_ + {box.smem_offset}u) '
                  f': "memory");')
    gen.line(close)


@emits(TmaCommit, TARGET)
def _emit_TmaCommit(gen: CodeGenerator, s: TmaCommit) -> None:
    open_, close = _issue_block(gen, s)
    gen.line(f'{open_} asm volatile("cp.async.bulk.commit_group;" ::: "memory"); {close}')


@emits(TmaWait, TARGET)
def _emit_TmaWait(gen: CodeGenerator, s: TmaWait) -> None:
    open_, close = _issue_block(gen, s)
    wait = "cp.async.bulk.wait_group.read" if s.read else "cp.async.bulk.wait_group"
    gen.line(f'{open_} asm volatile("{wait} {s.n};" ::: "memory"); {close}')
    if not gen.single_depth:
        gen.line("__syncwarp();")
