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
group and block, not a search per tile. An empty group has no tiles.

A tile's rows start at its group's first row. Its last rows may be the next group's (or, past total_M, TMA's
zeros): they are multiplied by this group's B and never stored. A tile wholly inside its group leaves through
shared memory and a TMA store; the group's last tile, when it ends inside the group, is stored from registers with
``store_global``'s ``row_end`` at the group's end, since a TMA box would also write the next group's rows. B's
groups are a 3-D view ([G, K, N] or [G, N, K] with the group pitch as its leading stride), so a box never reaches
into the next group's matrix and K past the last K-tile reads as zeros.
"""

from __future__ import annotations

from warpspec.dtypes import bfloat16, float16, float32, int32
from warpspec.frontend.interpreter import cdiv
from warpspec.ops.kernels import NUM_SMS, PRODUCER_REGISTERS, PRODUCER_THREADS, CONSUMER_REGISTERS, _Gemm
from warpspec.ops.naming import typed_kernel_name
from warpspec.pipeline import Pipeline
from warpspec.script import autotune

#: The output tiles (block_m, block_n) of the schedule space: 64-row tiles for groups of a few rows (decode-sized
#: batches spread over many experts; 64 columns where one or two groups hold them all, so that more SMs stream the
#: weights), 128-row ones for large groups.
GROUPED_TILES = ((64, 64), (64, 128), (64, 256), (128, 128), (128, 256))
GROUPED_STAGES = (3, 4, 5)
#: The columns of each zero slice written to the rows past the last group.
ZERO_COLUMNS = 16


class _GroupedGemm(_Gemm):
    """The grouped kernel's body: ``_Gemm``'s producer, main loop and epilogue over (group, tile) pairs."""

    input_dtypes = (float16, bfloat16)
    #: Only the sizes choose the schedule; ``groups`` with total_M says how many rows a group has on average.
    tune_key = ("total_m", "n_size", "k_size", "groups")

    def __init__(self, in_dtype, out_dtype, b_k_major, num_stages, block_m, block_n):
        super().__init__(in_dtype, out_dtype, b_k_major, False, None, True, False, num_stages, block_m, block_n)

    def kernel_name(self) -> str:
        """``GroupedGemm`` and the element types: the input's, then the output's where it differs."""
        dtypes = (self.in_dtype,) if self.out_dtype == self.in_dtype else (self.in_dtype, self.out_dtype)
        return typed_kernel_name(self, GroupedGemm, "GroupedGemm", dtypes)

    def grouped_gemm(self, groups, total_m, n_size, k_size, lda, ldb, group_pitch, ldc, offs_ptr, a_ptr, b_ptr,
                     c_ptr, num_sms):
        """The kernel: for every group g, C[rows of g] = A[rows of g] @ B[g]."""
        block_m, block_n, block_k, stages = self.block_m, self.block_n, self.block_k, self.num_stages
        tiles_n = cdiv(n_size, block_n)
        k_tiles = cdiv(k_size, block_k)
        # The groups' tiles number at most cdiv(total_M, block_m) + groups row bands (each group adds at most one
        # partial band): one block per SM, fewer only for a problem smaller than that bound.
        self.attrs.blocks = [min(num_sms, (cdiv(total_m, block_m) + groups) * tiles_n)]
        self.attrs.warps = (self.consumer_threads + PRODUCER_THREADS) // 32

        ga = self.operand_view(a_ptr, lda, total_m, k_size, True)
        b_shape = [groups, n_size, k_size] if self.b_k_major else [groups, k_size, n_size]
        gb = self.global_view(b_ptr, dtype=self.in_dtype, shape=b_shape, strides=[group_pitch, ldb, 1])
        gc = self.global_view(c_ptr, dtype=self.out_dtype, shape=[total_m, n_size], strides=[ldc, 1])
        ends = self.global_view(offs_ptr, dtype=int32, shape=[groups])
        sa = self.shared_tensor(dtype=self.in_dtype, shape=[stages, block_m, block_k])
        sb_shape = [stages, 1, block_n, block_k] if self.b_k_major else [stages, 1, block_k, block_n]
        sb = self.shared_tensor(dtype=self.in_dtype, shape=sb_shape)
        sc = self.shared_tensor(dtype=self.out_dtype, shape=[block_m, block_n])
        pipe = Pipeline(stages, producer_arrivals=1, consumer_arrivals=self.consumer_threads)

        with self.thread_group(thread_begin=self.consumer_threads, num_threads=PRODUCER_THREADS,
                               max_registers=PRODUCER_REGISTERS):
            filled: int32 = 0  # stages filled, to drain
            before: int32 = 0  # the tiles of the groups walked so far
            start: int32 = 0  # the group's first row
            for group in self.range(groups):
                end = self.group_end(ends, group, start, total_m)
                tiles_m = cdiv(end - start, block_m)
                count = tiles_m * tiles_n
                for tile in self.range(self.first_tile(before), count, self.gridDim.x):
                    offset_m, offset_n = self.tile_offsets(tile, tiles_m, tiles_n)
                    filled = filled + k_tiles
                    self.produce(pipe, ga, gb, sa, sb, start + offset_m, offset_n, 0, k_size, group=group)
                before = before + count
                start = end
            # Stay until the consumers released every stage that was filled, so their arrivals never target a
            # barrier whose waiter has exited.
            for _ in self.range(min(stages, filled)):
                pipe.producer_acquire()
                pipe.producer_advance()

        with self.thread_group(thread_begin=0, num_threads=self.consumer_threads, max_registers=CONSUMER_REGISTERS):
            before: int32 = 0
            start: int32 = 0
            for group in self.range(groups):
                end = self.group_end(ends, group, start, total_m)
                tiles_m = cdiv(end - start, block_m)
                count = tiles_m * tiles_n
                for tile in self.range(self.first_tile(before), count, self.gridDim.x):
                    offset_m, offset_n = self.tile_offsets(tile, tiles_m, tiles_n)
                    acc = self.consume(pipe, sa, sb, 0, k_size)
                    result = self.epilogue(acc, total_m, n_size, None, None, start + offset_m, offset_n)
                    self.store_tile(result, sc, gc, start + offset_m, offset_n, end)
                before = before + count
                start = end
            # The rows past the last group belong to none: they are written as zeros, so that nothing downstream
            # reads uninitialised memory (a NaN there survives a zero routing weight).
            tiles_m = cdiv(total_m - start, block_m)
            for tile in self.range(self.first_tile(before), tiles_m * tiles_n, self.gridDim.x):
                offset_m, offset_n = self.tile_offsets(tile, tiles_m, tiles_n)
                # A tile wholly past C's last row reads as zeros and touches no memory; in narrow column slices,
                # which take few registers each.
                zeros = self.load_global(gc, offsets=[total_m, 0], shape=[block_m, ZERO_COLUMNS])
                for column in range(0, block_n, ZERO_COLUMNS):
                    self.store_global(gc, zeros, offsets=[start + offset_m, offset_n + column])
            with self.single_thread():
                self.tma.wait_group(0)  # the last store's shared source must stay valid until it was read

    def store_tile(self, result, sc, gc, row, offset_n, end):
        """A tile's result at (``row``, ``offset_n``) of C, in a group that ends at row ``end``: through shared
        memory and a TMA store when the tile lies inside the group, else from registers up to ``end`` (the next
        group's rows stay unwritten: its own tiles write them)."""
        if row + self.block_m <= end:
            self.store_through_shared(result, sc, gc, row, offset_n)
        else:
            self.store_global(gc, result, offsets=[row, offset_n], row_end=end)

    def group_end(self, ends, group, start, total_m):
        """Group ``group``'s end row, clamped to [``start``, total_M] (``start`` its first row): offsets the host did
        not check (a CUDA tensor) can make groups empty but never reach outside A and C."""
        return min(max(self.load_scalar(ends, [group]), start), total_m)

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
    """The schedule space: ``GROUPED_TILES`` × ``GROUPED_STAGES``."""
    cls = autotune("block_m, block_n", [list(tile) for tile in GROUPED_TILES])(cls)
    return autotune("num_stages", list(GROUPED_STAGES))(cls)


@_grouped_schedules
class GroupedGemm(_GroupedGemm):
    """16-bit A and B (float16 or bfloat16), C of the input type or float32."""

    def __call__(self, groups: int32, total_m: int32, n_size: int32, k_size: int32, lda: int32, ldb: int32,
                 group_pitch: int32, ldc: int32, offs_ptr: ~int32, a_ptr: ~self.in_dtype, b_ptr: ~self.in_dtype,
                 c_ptr: ~self.out_dtype, num_sms: int32 = NUM_SMS):
        self.grouped_gemm(groups, total_m, n_size, k_size, lda, ldb, group_pitch, ldc, offs_ptr, a_ptr, b_ptr,
                          c_ptr, num_sms)


#: Shared memory a block may take (227 KB on Hopper), less room for the barriers.
SHARED_BUDGET = 227 * 1024 - 1024


def grouped_schedule(total_m: int, groups: int, n_size: int, out_dtype, num_sms: int = NUM_SMS) -> dict:
    """The size rule, set from benchmarks/grouped.py's sweep on the H200 (docs/performance.md), where the deepest
    ring that fits always won:

    * 64-row tiles when the groups average 64 rows or fewer (128-row tiles would mostly multiply other groups' rows
      or nothing), with 256 columns for outputs of 4096 or more (a wider slice of the weight in flight per block);
    * 128-row tiles otherwise, with 256 columns when those tiles fill four waves of the SMs or more (fewer, wider
      tiles leave a larger last wave), 128 where a float32 epilogue buffer leaves too few stages.

    64-column tiles win only where one or two groups hold every row, which the host cannot see in offsets it does
    not read: the rule leaves them to the tuner."""
    if total_m <= 64 * groups:
        return deepest_ring(64, 256 if n_size >= 4096 else 128, out_dtype)
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
            "num_stages": min(max(GROUPED_STAGES), (SHARED_BUDGET - buffer_bytes) // stage_bytes)}
