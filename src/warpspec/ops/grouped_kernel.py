"""The grouped GEMM behind ``warpspec.ops.grouped_matmul``: ``C[rows of g] = A[rows of g] @ B[g]`` for every group g
of a mixture-of-experts layer, in one persistent launch.

A is [total_M, K] with the groups' rows one after another (group g is rows ``offs[g-1] ... offs[g]``, ``offs[-1]``
being 0), B is [G, K, N] (row-major, ``b_k_major`` False) or the transposed view of [G, N, K] expert weights
(``b_k_major`` True), C is [total_M, N]. ``offs`` stays on the GPU: the kernel reads each group's end with
``load_scalar``, so a call needs no host synchronisation for its schedule.

It is ``warpspec.ops.kernels``' GEMM (a TMA producer warpgroup, one or two consumer warpgroups, a ring of stages,
the TMA-store epilogue left in flight under the next tile) walking (group, tile) pairs: the groups' tiles are
numbered one group after another (group g has ``cdiv(M_g, block_m) · cdiv(N, block_n)`` of them, in V6's grouped
rasterization within the group) and block b takes tiles ``b, b + gridDim.x, ...`` of that numbering. Every block
walks the groups in order and, inside each, its own tiles of it, so the group lookup costs one scalar load per
group and block, not a search per tile. An empty group has no tiles. Equal groups (``uniform``: a batched product)
number their tiles the same way but need no walk: a tile's group is its index divided by a group's tiles.

A tile's rows start at its group's first row. Its last rows may be the next group's (or, past total_M, TMA's
zeros): they are multiplied by this group's B and never stored. A tile wholly inside its group leaves through
shared memory and a TMA store; the group's last tile, when it ends inside the group, is stored from registers with
``store_global``'s ``row_end`` at the group's end, since a TMA box would also write the next group's rows. B's
groups are a 3-D view ([G, K, N] or [G, N, K] with the group pitch as its leading stride), so a box never reaches
into the next group's matrix and K past the last K-tile reads as zeros.

Few tiles (``max_split`` > 1): every block first counts the groups' tiles; where they fill at most half the grid,
block b takes part b % s of tile b // s, its K range split between s blocks, and the tile's last block adds the
others' partial sums (a workspace slot per block, a count per tile: ``ops.matmul``'s split-K hand-off) before
storing it from registers.
"""

from __future__ import annotations

from warpspec.dtypes import bfloat16, float16, float32, int32
from warpspec.errors import CompileError
from warpspec.frontend.interpreter import cdiv
from warpspec.ops.kernels import (NUM_SMS, PRODUCER_REGISTERS, PRODUCER_THREADS, CONSUMER_REGISTERS, WARPGROUP,
                                  _Gemm)
from warpspec.ops.naming import typed_kernel_name
from warpspec.pipeline import Pipeline
from warpspec.script import autotune

#: The tilings of the schedule space, (block_m, block_n, max_split): 64-row tiles for groups of a few rows
#: (decode-sized batches spread over many experts; 64 columns where one or two groups hold them all, so that more
#: SMs stream the weights), 128-row ones for large groups. ``max_split`` is the most blocks one tile's K range is
#: split between when the groups' tiles fill at most half of the launch's blocks (1: never split); the split is
#: decided at run time from the device's offsets (``_GroupedGemm.splits_for``): a decode step whose tokens went to
#: one or two experts has a dozen tiles, which whole would stream their weights through a dozen SMs. A split tile
#: adds the others' partial sums in registers beside its accumulator, which 64 × 256 tiles (one warpgroup: 128 +
#: 128 registers per thread) cannot hold.
MAX_SPLIT = 8
GROUPED_TILINGS = ((64, 64, 1), (64, 64, MAX_SPLIT), (64, 128, 1), (64, 128, MAX_SPLIT), (64, 256, 1),
                   (128, 128, 1), (128, 128, MAX_SPLIT), (128, 256, 1))
GROUPED_STAGES = (3, 4, 5)
#: The columns of each zero slice written to the rows past the last group.
ZERO_COLUMNS = 16
#: The fewest K-tiles of each part of a split tile.
MIN_PART_K_TILES = 4
#: The scans that count the groups' tiles and find a split part's tile load this many groups' ends at once (the
#: walks ``WALK_BATCH``), each batch before any of them is used; a walk takes each group's end from the batch's
#: registers by a chain of selects (``pick``), so its main loops are not copied. Loading one end per group, or an
#: ``unroll=`` copy's end behind that copy's bound check, made every group a serial round trip: at 64 experts 2 × 64
#: of them before a split tile's first load, 64 in a walk. 64-row tiles (one consumer warpgroup) load
#: ``WIDE_GROUP_BATCH`` at once, in a producer of ``WIDE_PRODUCER_REGISTERS``: 64 experts' ends in one round trip.
GROUP_BATCH = 16
#: The scans' batch where the tiles have 64 rows: the register file has room for a producer holding 64 ends beside
#: one consumer warpgroup of ``CONSUMER_REGISTERS`` (at 96 registers the batch spilled 128 bytes).
WIDE_GROUP_BATCH = 64
WIDE_PRODUCER_REGISTERS = 128
#: A split tile's last part loads this many registers' worth of the other parts' sums at once: 4 partials of a
#: 64 × 64 tile, 2 of 64 × 128 or 128 × 128 (3 spilled 68 and 108 bytes), beside the accumulator and nothing else
#: (no bias, no activation). At one partial per round trip, a decode step's 12 tiles split eight ways waited seven.
GROUPED_PARTIAL_REGISTERS = 128
#: The walks' batch, smaller: it stays in registers beside a 64 × 256 tile's accumulator (16 ends spilled 12 bytes).
WALK_BATCH = 8


class _GroupedGemm(_Gemm):
    """The grouped kernel's body: ``_Gemm``'s producer, main loop and epilogue over (group, tile) pairs."""

    input_dtypes = (float16, bfloat16)
    partial_registers = GROUPED_PARTIAL_REGISTERS
    #: Only the sizes choose the schedule; ``groups`` with total_M says how many rows a group has on average.
    tune_key = ("total_m", "n_size", "k_size", "groups")

    def __init__(self, in_dtype, out_dtype, b_k_major, num_stages, block_m, block_n, max_split=1, uniform=False):
        super().__init__(in_dtype, out_dtype, b_k_major, False, None, True, False, num_stages, block_m, block_n)
        if not isinstance(max_split, int) or isinstance(max_split, bool) or max_split < 1:
            raise CompileError(f"{type(self).__name__}: max_split must be a positive int, got {max_split!r}")
        if not isinstance(uniform, bool):
            raise CompileError(f"{type(self).__name__}: uniform must be True or False, got {uniform!r}")
        self.max_split = max_split
        #: Every group has total_M / G rows (a batched product): a tile's group is its index divided by a group's
        #: tiles, and nothing is loaded. Otherwise every block walks the groups one after another, loading each end
        #: and working out its first tile of the group, whatever its own tiles are: 64 groups took about 20 µs on an
        #: H100 for 64 tiles of work.
        self.uniform = uniform
        one_consumer = self.consumer_threads == WARPGROUP
        #: The groups' ends each scan loads at once (``GROUP_BATCH``), and the producer's registers that hold them.
        self.group_batch = WIDE_GROUP_BATCH if one_consumer else GROUP_BATCH
        self.producer_registers = WIDE_PRODUCER_REGISTERS if one_consumer else PRODUCER_REGISTERS

    def kernel_name(self) -> str:
        """``GroupedGemm`` (``GroupedGemmUniform`` for equal groups) and the element types: the input's, then the
        output's where it differs."""
        dtypes = (self.in_dtype,) if self.out_dtype == self.in_dtype else (self.in_dtype, self.out_dtype)
        return typed_kernel_name(self, GroupedGemm, "GroupedGemmUniform" if self.uniform else "GroupedGemm", dtypes)

    def grouped_gemm(self, groups, total_m, n_size, k_size, lda, ldb, group_pitch, ldc, offs_ptr, a_ptr, b_ptr,
                     c_ptr, ws_ptr, flags_ptr, num_sms):
        """The kernel: for every group g, C[rows of g] = A[rows of g] @ B[g]."""
        block_m, block_n, stages = self.block_m, self.block_n, self.num_stages
        tiles_n = cdiv(n_size, block_n)
        k_tiles = cdiv(k_size, self.block_k)
        grid = self.grid_size(total_m, groups, tiles_n, num_sms)
        self.attrs.blocks = [grid]
        self.attrs.warps = (self.consumer_threads + PRODUCER_THREADS) // 32

        ga = self.operand_view(a_ptr, lda, total_m, k_size, True)
        b_shape = [groups, n_size, k_size] if self.b_k_major else [groups, k_size, n_size]
        gb = self.global_view(b_ptr, dtype=self.in_dtype, shape=b_shape, strides=[group_pitch, ldb, 1])
        gc = self.global_view(c_ptr, dtype=self.out_dtype, shape=[total_m, n_size], strides=[ldc, 1])
        ends = self.global_view(offs_ptr, dtype=int32, shape=[groups])
        if self.max_split > 1:  # a partial tile per block, a count per tile (``warpspec.ops.workspace``)
            ws = self.global_view(ws_ptr, dtype=float32, shape=[grid * block_m, block_n], scratch=True)
            flags = self.global_view(flags_ptr, dtype=int32, shape=[grid])
        sa = self.shared_tensor(dtype=self.in_dtype, shape=[stages, block_m, self.block_k])
        sb_shape = [stages, 1, block_n, self.block_k] if self.b_k_major else [stages, 1, self.block_k, block_n]
        sb = self.shared_tensor(dtype=self.in_dtype, shape=sb_shape)
        sc = self.shared_tensor(dtype=self.out_dtype, shape=[block_m, block_n])
        pipe = Pipeline(stages, producer_arrivals=1, consumer_arrivals=self.consumer_threads)

        with self.thread_group(thread_begin=self.consumer_threads, num_threads=PRODUCER_THREADS,
                               max_registers=self.producer_registers):
            filled: int32 = 0  # stages filled, to drain
            if self.max_split > 1:
                tiles, _, occupied = self.count_tiles(ends, groups, total_m, tiles_n)
                splits = self.splits_for(tiles, k_tiles)
                if splits > 1:
                    filled = self.produce_part(pipe, ga, gb, sa, sb, ends, groups, total_m, tiles_n, k_tiles, tiles,
                                               splits, occupied)
                else:
                    filled = self.produce_walk(pipe, ga, gb, sa, sb, ends, groups, total_m, k_size, tiles_n, k_tiles)
            else:
                filled = self.produce_walk(pipe, ga, gb, sa, sb, ends, groups, total_m, k_size, tiles_n, k_tiles)
            # Stay until the consumers released every stage that was filled, so their arrivals never target a
            # barrier whose waiter has exited.
            for _ in self.range(min(stages, filled)):
                pipe.producer_acquire()
                pipe.producer_advance()

        with self.thread_group(thread_begin=0, num_threads=self.consumer_threads, max_registers=CONSUMER_REGISTERS):
            if self.max_split > 1:
                tiles, last, occupied = self.count_tiles(ends, groups, total_m, tiles_n)
                splits = self.splits_for(tiles, k_tiles)
                if splits > 1:
                    self.consume_part(pipe, sa, sb, gc, ws, flags, ends, groups, total_m, n_size, tiles_n, k_tiles,
                                      tiles, splits, occupied)
                    self.zero_tail(gc, last, tiles, total_m, tiles_n)
                else:
                    self.consume_walk(pipe, sa, sb, sc, gc, ends, groups, total_m, n_size, k_size, tiles_n)
            else:
                self.consume_walk(pipe, sa, sb, sc, gc, ends, groups, total_m, n_size, k_size, tiles_n)
            with self.single_thread():
                self.tma.wait_group(0)  # the last store's shared source must stay valid until it was read

    def grid_size(self, total_m, groups, tiles_n, num_sms):
        """The launch's blocks. The groups' tiles number at most cdiv(total_M, block_m) + groups row bands (each
        group adds at most one partial band) times the column tiles: one block per SM, fewer only for a problem
        smaller than that bound. (Where tiles may split, a grid of every SM was tried: one expert's 12 tiles of 16
        rows, K 4096, then took eight parts each instead of the bound's two, and 20.8 µs instead of 17.1 on an
        H100 when each part handed off all 64 rows of its tile; 17.3-18.0 against 16.5 since parts hand off their
        group's rows alone.)"""
        return min(num_sms, (cdiv(total_m, self.block_m) + groups) * tiles_n)

    def produce_walk(self, pipe, ga, gb, sa, sb, ends, groups, total_m, k_size, tiles_n, k_tiles):
        """The producer's loads of this block's tiles of the walk over every group; returns the stages filled."""
        filled: int32 = 0
        if self.uniform:  # each tile's group by a division: no walk over the groups
            rows, tiles_m, per_group = self.uniform_sizes(groups, total_m, tiles_n)
            for tile in self.range(self.blockIdx.x, groups * per_group, self.gridDim.x):
                group = tile // per_group
                offset_m, offset_n = self.tile_offsets(tile - group * per_group, tiles_m, tiles_n)
                filled = filled + k_tiles
                self.produce(pipe, ga, gb, sa, sb, group * rows + offset_m, offset_n, 0, k_size, group=group)
            return filled
        before: int32 = 0  # the tiles of the groups walked so far
        start: int32 = 0  # the group's first row
        # This block's next tile in the walk's numbering: a group without one costs a comparison, not the two
        # modulos of the grid's size that finding the block's first tile of it takes.
        mine: int32 = self.blockIdx.x
        for first in self.range(0, groups, WALK_BATCH):
            loaded = self.batch_of_ends(ends, groups, first, WALK_BATCH)
            for in_batch in self.range(min(WALK_BATCH, groups - first)):
                group = first + in_batch
                end, tiles_m, count = self.walked_group(loaded, in_batch, start, total_m, tiles_n)
                if mine < before + count:
                    for tile in self.range(mine - before, count, self.gridDim.x):
                        offset_m, offset_n = self.tile_offsets(tile, tiles_m, tiles_n)
                        filled = filled + k_tiles
                        self.produce(pipe, ga, gb, sa, sb, start + offset_m, offset_n, 0, k_size, group=group)
                    mine = self.next_tile_after(mine, before + count)
                before = before + count
                start = end
        return filled

    def consume_walk(self, pipe, sa, sb, sc, gc, ends, groups, total_m, n_size, k_size, tiles_n):
        """The consumers' main loops and epilogues of this block's tiles of the walk, then its zero tiles."""
        if self.uniform:  # each tile's group by a division: no walk over the groups
            rows, tiles_m, per_group = self.uniform_sizes(groups, total_m, tiles_n)
            for tile in self.range(self.blockIdx.x, groups * per_group, self.gridDim.x):
                group = tile // per_group
                offset_m, offset_n = self.tile_offsets(tile - group * per_group, tiles_m, tiles_n)
                start = group * rows
                acc = self.consume(pipe, sa, sb, 0, k_size)
                result = self.epilogue(acc, total_m, n_size, None, None, start + offset_m, offset_n)
                self.store_tile(result, sc, gc, start + offset_m, offset_n, start + rows,
                                offset_m + self.block_m <= rows)
            self.zero_tail(gc, groups * rows, groups * per_group, total_m, tiles_n)
            return
        before: int32 = 0
        start: int32 = 0
        mine: int32 = self.blockIdx.x
        for first in self.range(0, groups, WALK_BATCH):
            loaded = self.batch_of_ends(ends, groups, first, WALK_BATCH)
            for in_batch in self.range(min(WALK_BATCH, groups - first)):
                end, tiles_m, count = self.walked_group(loaded, in_batch, start, total_m, tiles_n)
                if mine < before + count:
                    for tile in self.range(mine - before, count, self.gridDim.x):
                        offset_m, offset_n = self.tile_offsets(tile, tiles_m, tiles_n)
                        acc = self.consume(pipe, sa, sb, 0, k_size)
                        result = self.epilogue(acc, total_m, n_size, None, None, start + offset_m, offset_n)
                        self.store_tile(result, sc, gc, start + offset_m, offset_n, end,
                                        start + offset_m + self.block_m <= end)
                    mine = self.next_tile_after(mine, before + count)
                before = before + count
                start = end
        self.zero_tail(gc, start, before, total_m, tiles_n)

    def count_tiles(self, ends, groups, total_m, tiles_n):
        """(the tiles of every group, the last group's end row, the first group with rows, ``groups`` if none):
        what decides whether tiles are split, and where ``find_tile`` starts."""
        if self.uniform:
            rows, _, per_group = self.uniform_sizes(groups, total_m, tiles_n)
            return groups * per_group, groups * rows, 0
        before: int32 = 0
        start: int32 = 0
        occupied: int32 = groups
        for first in self.range(0, groups, self.group_batch):
            loaded = self.batch_of_ends(ends, groups, first, self.group_batch)
            for j in range(self.group_batch):  # past the last group: its end again, an empty group (see below)
                end = self.clamped_end(loaded[j], start, total_m)
                if occupied == groups:
                    if end > start:
                        occupied = first + j
                before = before + cdiv(end - start, self.block_m) * tiles_n
                start = end
        return before, start, occupied

    def splits_for(self, tiles, k_tiles):
        """The blocks each tile's K range is split between: as many as leave every tile's parts a block of their
        own (at most ``max_split``, each part at least ``MIN_PART_K_TILES`` K-tiles); 1 (the walk) when the tiles
        fill more than half of the launch's blocks."""
        most = min(self.max_split, self.gridDim.x // max(tiles, 1), k_tiles // MIN_PART_K_TILES)
        return max(most, 1)

    def find_tile(self, ends, groups, total_m, tiles_n, wanted, occupied):
        """(group, its first row, its end row, the tile's index in the group, the group's row bands) of tile
        ``wanted`` of the walk's numbering. The search starts at group ``occupied``, the first with rows
        (``count_tiles``): every group before it is empty, so it starts at row 0 with no tiles before it (one
        expert holding a decode step's tokens is found in one batch of ends, not after every empty one)."""
        if self.uniform:
            rows, tiles_m, per_group = self.uniform_sizes(groups, total_m, tiles_n)
            group = wanted // per_group
            return group, group * rows, group * rows + rows, wanted - group * per_group, tiles_m
        found_group: int32 = 0
        found_start: int32 = 0
        found_end: int32 = 0
        found_tile: int32 = 0
        found_bands: int32 = 1
        before: int32 = 0
        start: int32 = 0
        for first in self.range(occupied, groups, self.group_batch):
            loaded = self.batch_of_ends(ends, groups, first, self.group_batch)
            for j in range(self.group_batch):  # past the last group: its end again, an empty group
                end = self.clamped_end(loaded[j], start, total_m)
                bands = cdiv(end - start, self.block_m)
                if wanted >= before:
                    if wanted < before + bands * tiles_n:
                        found_group = first + j
                        found_start = start
                        found_end = end
                        found_tile = wanted - before
                        found_bands = bands
                before = before + bands * tiles_n
                start = end
        return found_group, found_start, found_end, found_tile, found_bands

    def produce_part(self, pipe, ga, gb, sa, sb, ends, groups, total_m, tiles_n, k_tiles, tiles, splits, occupied):
        """Few tiles, split by K: the producer's loads of this block's part (block b: part b % splits of tile
        b // splits); returns the stages filled."""
        filled: int32 = 0
        if self.blockIdx.x < tiles * splits:
            wanted, k_begin, k_end = self.split_part(splits, k_tiles)
            group, start, _, tile, bands = self.find_tile(ends, groups, total_m, tiles_n, wanted, occupied)
            offset_m, offset_n = self.tile_offsets(tile, bands, tiles_n)
            filled = (k_end - k_begin) // self.block_k
            self.produce(pipe, ga, gb, sa, sb, start + offset_m, offset_n, k_begin, k_end, group=group)
        return filled

    def consume_part(self, pipe, sa, sb, gc, ws, flags, ends, groups, total_m, n_size, tiles_n, k_tiles, tiles,
                     splits, occupied):
        """Few tiles, split by K: this block's part of its tile. Every part but the last leaves its sum in its
        block's workspace slot and counts it on the tile's flag (``count_part``); the last part (the tile's highest
        block) waits once for the count and adds the others' sums, several loaded at once, in the order of their
        blocks (``add_parts``: split-K's hand-off, which waited for and loaded each part in turn before), and
        stores the tile from registers up to its group's end. Partial sums hold the tile's rows of its group
        alone."""
        if self.blockIdx.x < tiles * splits:
            wanted, k_begin, k_end = self.split_part(splits, k_tiles)
            _, start, end, tile, bands = self.find_tile(ends, groups, total_m, tiles_n, wanted, occupied)
            offset_m, offset_n = self.tile_offsets(tile, bands, tiles_n)
            acc = self.consume(pipe, sa, sb, k_begin, k_end)
            # The partial sums move only the group's rows of the tile: a decode step's 16 tokens on one expert fill
            # a quarter of a 64-row tile, whose other rows are never stored.
            rows = min(self.block_m, end - start - offset_m)
            part = self.blockIdx.x % splits
            if part < splits - 1:
                self.count_part(acc, ws, flags, wanted, rows)
            else:
                acc = self.add_parts(acc, ws, flags, wanted, self.blockIdx.x - part, self.blockIdx.x, rows)
                result = self.epilogue(acc, total_m, n_size, None, None, start + offset_m, offset_n)
                self.store_global(gc, result, offsets=[start + offset_m, offset_n], row_end=end)

    def zero_tail(self, gc, start, before, total_m, tiles_n):
        """The rows from ``start`` (the last group's end) to total_M belong to no group: they are written as zeros,
        so that nothing downstream reads uninitialised memory (a NaN there survives a zero routing weight). Their
        tiles are numbered on from ``before``, the groups' tiles."""
        tiles_m = cdiv(total_m - start, self.block_m)
        for tile in self.range(self.first_tile(before), tiles_m * tiles_n, self.gridDim.x):
            offset_m, offset_n = self.tile_offsets(tile, tiles_m, tiles_n)
            # A tile wholly past C's last row reads as zeros and touches no memory; in narrow column slices, which
            # take few registers each.
            zeros = self.load_global(gc, offsets=[total_m, 0], shape=[self.block_m, ZERO_COLUMNS])
            for column in range(0, self.block_n, ZERO_COLUMNS):
                self.store_global(gc, zeros, offsets=[start + offset_m, offset_n + column])

    def store_tile(self, result, sc, gc, row, offset_n, end, inside):
        """A tile's result at (``row``, ``offset_n``) of C, in a group that ends at row ``end``: through shared
        memory and a TMA store when the tile lies inside the group (``inside``), else from registers up to ``end``
        (the next group's rows stay unwritten: its own tiles write them). Each walk tests ``inside`` in its own
        form: ptxas serializes the WGMMAs (C7514) of the ragged walk at 128 × 256 and 64 × 256 when it compares the
        tile's offset in its group with the group's rows, and of the uniform walk when it compares the tile's row
        with the group's end."""
        if inside:
            self.store_through_shared(result, sc, gc, row, offset_n)
        else:
            self.store_global(gc, result, offsets=[row, offset_n], row_end=end)

    def uniform_sizes(self, groups, total_m, tiles_n):
        """Equal groups (``uniform``): (rows of a group, its row bands, its tiles). The walk's numbering gives group
        g's tiles the indices g · tiles ... (g + 1) · tiles - 1, so a tile's group is its index divided by that."""
        rows = total_m // groups
        tiles_m = cdiv(rows, self.block_m)
        return rows, tiles_m, tiles_m * tiles_n

    def batch_of_ends(self, ends, groups, first, size):
        """The raw ends of groups ``first`` … ``first + size - 1`` (a list of scalars), loaded together:
        every load is made, an index past the last group reading the last group's end again. The caller clamps
        each (``clamped_end``), which makes such a repeated end an empty group after the last: the scans use every
        item without a bound check, behind which ptxas moved the load of an end used only there (a round trip of
        its own for each of a batch's last groups)."""
        return [self.load_scalar(ends, [min(first + j, groups - 1)]) for j in range(size)]

    def walked_group(self, loaded, in_batch, start, total_m, tiles_n):
        """(end row, row bands, tiles) of the walk's group ``in_batch`` of a batch of ends (``batch_of_ends``),
        which starts at row ``start``."""
        end = self.clamped_end(self.pick(loaded, in_batch), start, total_m)
        tiles_m = cdiv(end - start, self.block_m)
        return end, tiles_m, tiles_m * tiles_n

    def next_tile_after(self, mine, end):
        """This block's first tile at or past tile ``end`` of the walk's numbering, ``mine`` being one of its tiles
        before it (block b takes the tiles congruent to b modulo the grid)."""
        return mine + cdiv(end - mine, self.gridDim.x) * self.gridDim.x

    def pick(self, loaded, index):
        """Item ``index`` (a runtime scalar below ``len(loaded)``) of a batch of ends: a chain of selects, which
        keeps the batch in registers where indexing would not."""
        value = loaded[0]
        for j in range(1, len(loaded)):
            value = loaded[j] if index == j else value
        return value

    def clamped_end(self, value, start, total_m):
        """A group's end row read as ``value``, clamped to [``start``, total_M] (``start`` its first row): offsets
        the host did not check (a CUDA tensor) can make groups empty but never reach outside A and C."""
        return min(max(value, start), total_m)

    def first_tile(self, before):
        """This block's first tile of a group whose tiles are numbered from ``before`` on: the walk gives block b
        the tiles congruent to b modulo the grid."""
        grid = self.gridDim.x
        return (self.blockIdx.x + grid - before % grid) % grid

    def b_offsets(self, offset_n, offset_k, group):
        """The offsets of B's box in group ``group``'s matrix."""
        return [group, offset_n, offset_k] if self.b_k_major else [group, offset_k, offset_n]

    def b_stage(self, sb, stage):
        """B's tile in ring stage ``stage``: the one group's matrix of the 3-D box."""
        return sb[stage][0]


def _grouped_schedules(cls):
    """The schedule space: ``GROUPED_TILINGS`` × ``GROUPED_STAGES``."""
    cls = autotune("block_m, block_n, max_split", [list(tiling) for tiling in GROUPED_TILINGS])(cls)
    return autotune("num_stages", list(GROUPED_STAGES))(cls)


def grouped_workspace(num_sms: int, schedule: dict) -> tuple[int, int]:
    """(float32 elements of partial tiles, int32 flags) a launch of ``schedule`` needs where it may split tiles
    (``max_split`` > 1): a tile per block of a grid of at most ``num_sms`` blocks, and a flag per tile (fewer tiles
    than blocks split); else (0, 0)."""
    if schedule.get("max_split", 1) == 1:
        return 0, 0
    return num_sms * schedule["block_m"] * schedule["block_n"], num_sms


@_grouped_schedules
class GroupedGemm(_GroupedGemm):
    """16-bit A and B (float16 or bfloat16), C of the input type or float32."""

    def __call__(self, groups: int32, total_m: int32, n_size: int32, k_size: int32, lda: int32, ldb: int32,
                 group_pitch: int32, ldc: int32, offs_ptr: ~int32, a_ptr: ~self.in_dtype, b_ptr: ~self.in_dtype,
                 c_ptr: ~self.out_dtype, ws_ptr: ~float32, flags_ptr: ~int32, num_sms: int32 = NUM_SMS):
        self.grouped_gemm(groups, total_m, n_size, k_size, lda, ldb, group_pitch, ldc, offs_ptr, a_ptr, b_ptr,
                          c_ptr, ws_ptr, flags_ptr, num_sms)


#: Shared memory a block may take (227 KB on Hopper), less room for the barriers.
SHARED_BUDGET = 227 * 1024 - 1024


def grouped_schedule(total_m: int, groups: int, n_size: int, out_dtype, num_sms: int = NUM_SMS) -> dict:
    """The size rule, set from benchmarks/grouped.py's sweep on the H200 (docs/performance.md), where the deepest
    ring that fits always won:

    * 64-row tiles when the groups average 64 rows or fewer (128-row tiles would mostly multiply other groups' rows
      or nothing): 64 × 256 for outputs of 4096 or more (a wider slice of the weight in flight per block: up to 15%
      faster than 64 × 128 there), else 64 × 128 split by K where the device's offsets leave fewer tiles than half
      the SMs (``max_split``: a decode step whose tokens went to one or two experts of a narrow output);
    * 128-row tiles otherwise, with 256 columns when those tiles fill four waves of the SMs or more (fewer, wider
      tiles leave a larger last wave), 128 where a float32 epilogue buffer leaves too few stages.

    64-column tiles won only where one or two groups hold every row, which the host cannot see in offsets it does
    not read: the rule leaves them to the tuner."""
    if total_m <= 64 * groups:
        if n_size >= 4096:
            return deepest_ring(64, 256, out_dtype)
        return dict(deepest_ring(64, 128, out_dtype), max_split=MAX_SPLIT)
    wide = total_m // 128 * cdiv(n_size, 256) >= 4 * num_sms
    schedule = deepest_ring(128, 256 if wide else 128, out_dtype)
    if schedule["num_stages"] < min(GROUPED_STAGES):
        schedule = deepest_ring(128, 128, out_dtype)
    return schedule


def deepest_ring(block_m: int, block_n: int, out_dtype) -> dict:
    """The schedule of a block_m × block_n tile with the most stages (at most 5) that fit beside its epilogue
    buffer: each stage holds a K-tile of 64 16-bit elements of A's and of B's rows."""
    stage_bytes = (block_m + block_n) * 64 * 2
    buffer_bytes = block_m * block_n * (4 if out_dtype == float32 else 2)
    return {"block_m": block_m, "block_n": block_n,
            "num_stages": min(max(GROUPED_STAGES), (SHARED_BUDGET - buffer_bytes) // stage_bytes), "max_split": 1}
