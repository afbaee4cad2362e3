"""What ``self`` offers inside a Script's kernel body and helper methods: the launch shape (``self.attrs``), the
launch indices, runtime loops, and every instruction family of ``warpspec.isa``."""

from __future__ import annotations

from warpspec.dtypes import int32
from warpspec.isa import FAMILIES
from warpspec.isa.base import LanguageObject, language_call
from warpspec.isa.values import RuntimeRange
from warpspec.ir import nodes as ir


class Attrs(LanguageObject):
    """``self.attrs``: launch shape. ``blocks`` (1–3 sizes over runtime parameters), ``warps`` (compile-time),
    ``cluster_blocks`` (compile-time, 1–3 sizes)."""

    def __init__(self, builder):
        super().__init__(builder)
        self.blocks = None
        self.warps = None
        self.cluster_blocks = (1, 1, 1)
        self.set_at: dict[str, ir.Loc] = {}  # attribute -> the line that set it, where a missing partner is named

    def describe(self) -> str:
        return "self.attrs"

    def set_attribute(self, name: str, value) -> None:
        b = self.b
        if b.depth or b.in_thread_group():
            raise b.error(f"self.attrs.{name} must be set at the top level of the kernel, outside thread groups, "
                          f"loops and branches")
        self.set_at.setdefault(name, b.loc)
        if name == "blocks":
            sizes = list(value) if isinstance(value, (list, tuple)) else [value]
            if not 1 <= len(sizes) <= 3:
                raise b.error(f"self.attrs.blocks takes 1 to 3 sizes, got {len(sizes)}")
            self.blocks = tuple(self._grid_size(size) for size in sizes)
        elif name == "warps":
            warps = b.to_int(value, "self.attrs.warps")
            limit = b.target.max_block_threads // b.target.warp_threads
            if not 1 <= warps <= limit:
                raise b.error(f"self.attrs.warps must be in [1, {limit}], got {warps}")
            if self.warps is not None and self.warps != warps:
                raise b.error("self.attrs.warps is set twice")
            self.warps = warps
            b.set_block_threads(warps * b.target.warp_threads)
        elif name == "cluster_blocks":
            sizes = list(value) if isinstance(value, (list, tuple)) else [value]
            sizes = [b.to_int(s, "self.attrs.cluster_blocks") for s in sizes]
            if not 1 <= len(sizes) <= 3 or any(s < 1 for s in sizes):
                raise b.error(f"self.attrs.cluster_blocks takes 1 to 3 positive sizes, got {sizes}")
            total = 1
            for s in sizes:
                total *= s
            if total > b.target.max_cluster_blocks:
                raise b.error(f"a cluster holds at most {b.target.max_cluster_blocks} blocks "
                              f"({b.target.portable_cluster_blocks} portably), got {total}")
            self.cluster_blocks = tuple(sizes + [1] * (3 - len(sizes)))
        else:
            raise b.error(f"self.attrs has no attribute {name!r}; use blocks, warps or cluster_blocks")

    def _grid_size(self, size) -> ir.Expr:
        """One grid size as an Expr over kernel parameters only, computed on the host before the launch: top-level
        locals (``tiles = cdiv(m_size, bm)``) are replaced by their current values; a CompileError naming the
        variable when the host cannot know one."""
        b = self.b
        value = b.host_value(b.to_integer(size, int32, "self.attrs.blocks"))
        if isinstance(value, str):
            raise b.error(f"self.attrs.blocks may only use kernel parameters and compile-time values (the grid is "
                          f"computed on the host before any block runs), but this size depends on {value}")
        return value


class Dim3(LanguageObject):
    """``self.blockIdx`` / ``self.gridDim``: ``.x``, ``.y``, ``.z`` as runtime int32 values, alike in all threads."""

    def __init__(self, builder, name):
        super().__init__(builder)
        self.name = name

    def get_attribute(self, name: str):
        if name not in ("x", "y", "z"):
            raise self.b.error(f"self.{self.name} has .x, .y and .z, not {name!r}")
        return ir.Special(f"{self.name}.{name}")


class Language(LanguageObject):
    """``self`` inside a Script's kernel body and helper methods."""

    def __init__(self, builder):
        super().__init__(builder)
        self.attrs = Attrs(builder)
        self.blockIdx = Dim3(builder, "blockIdx")
        self.gridDim = Dim3(builder, "gridDim")
        # cluster_rank: the block's rank in its cluster (PTX %cluster_ctarank; 0 without clusters), see isa/cluster.
        self._members = {"attrs": self.attrs, "blockIdx": self.blockIdx, "gridDim": self.gridDim,
                         "cluster_rank": ir.Special("clusterRank"), "range": self.range}
        for family_class in FAMILIES:
            family = family_class(builder)
            if family.namespace:
                self._members[family.namespace] = family
            else:
                for name in family.members():
                    self._members[name] = getattr(family, name)

    def lookup(self, name: str):
        """The language member ``self.<name>``, or None when the language has no such name."""
        if name in ("threadIdx", "thread_idx", "lane_id", "warp_id"):
            raise self.b.error(f"self.{name} is not part of the language: control flow and values must not depend "
                               f"on the thread index; give work to threads with thread_group(...) and "
                               f"single_thread()")
        return self._members.get(name)

    @language_call
    def range(self, start, stop=None, step=1, unroll=1) -> RuntimeRange:
        """A runtime loop ``for i in self.range(start, stop, step, unroll=k)``; ``unroll`` is compile-time. With
        ``unroll`` equal to a pipeline's stage count, stage indices become constants in each unrolled copy.
        ``step`` is a positive compile-time int, or, in a loop that is not unrolled, a runtime integer (a
        persistent kernel's ``self.range(self.blockIdx.x, num_tiles, self.gridDim.x)``), which must be positive
        when the loop starts. ``stop`` and ``step`` are evaluated once, when the loop starts. Each unrolled copy
        runs behind its own bound check, so its loads are not issued before the previous copy's branch: unrolling
        does not put a loop's loads in flight together (docs/cuda.md, ``warpspec.passes.unroll``). Executed by the
        threads of the enclosing group; no instruction of its own."""
        b = self.b
        if stop is None:
            start, stop = 0, start
        unroll = b.to_int(unroll, "self.range unroll")
        if unroll < 1:
            raise b.error(f"self.range unroll must be >= 1, got {unroll}")
        if isinstance(step, ir.Expr):
            if unroll != 1:
                raise b.error(f"self.range with a runtime step cannot be unrolled (unroll={unroll}): the unrolled "
                              f"copies' offsets must be known at compile time")
            step = b.to_integer(step, int32, "self.range step")
        else:
            step = b.to_int(step, "self.range step")
            if step <= 0:
                raise b.error(f"self.range step must be positive, got {step}")
        return RuntimeRange(b.to_integer(start, int32, "self.range start"),
                            b.to_integer(stop, int32, "self.range stop"), step, unroll)
