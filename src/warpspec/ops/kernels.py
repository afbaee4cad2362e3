"""The library GEMM behind ``warpspec.ops.matmul``: C = epilogue(A @ B) as one warp-specialized Script.

The structure is examples/matmul_v5.py's, with examples/matmul_v6.py's tile walk as an option: a TMA producer (one
elected thread of a producer warpgroup with a 40-register budget) fills a ring of shared-memory stages, one or two
consumer warpgroups (232 registers each) multiply them with WGMMA keeping one group in flight, and the epilogue
works on the float32 accumulators in registers. What V5 fixes, this kernel takes as compile-time choices:

* the element types (constructor arguments ``in_dtype``, ``out_dtype``; ``OUTPUT_DTYPES`` lists the pairs): the
  pointer parameters are annotated ``~self.in_dtype`` and ``~self.out_dtype``, so one class serves every pair.
  float8 inputs take the ``ScaledGemm`` class, whose kernel has one more parameter (the scale);
* B's layout (constructor argument ``b_k_major``): K-major B is the transposed view of a tile stored [N, K] (a
  linear layer's ``w.T``, the only layout float8 WGMMA reads); N-major B is a row-major [K, N] tile, read by the
  transposable 16-bit forms as stored;
* A's layout (``a_k_major``, 16-bit types only for M-major): K-major A is a row-major [M, K] tile; M-major A
  (column-major, the transposed view of a [K, M] tensor such as ``x.T`` in a weight gradient) is loaded as the
  [K, M] tile it is stored as and given to WGMMA transposed (its ``imm-trans-a`` form);
* the epilogue (``has_bias``, ``activation``) and, for float8 inputs, the per-tensor scale;
* the schedule, tuned per shape bucket (``tune_key``): stages, tiles, ``persistent`` and ``stream_k``. Every block
  walks the tiles ``blockIdx.x, blockIdx.x + gridDim.x, ...`` in V6's grouped rasterization (bands of ``GROUP_M``
  tile rows, so blocks running together share A and B tiles in L2). Not persistent: one block per tile, each
  walking one, storing with ``store_global`` (which clips the ragged edges). Persistent: at most one block per SM
  (``num_sms``), the producer filling the next tile's stages while the consumers finish the current one, and a
  TMA-store epilogue through a shared buffer left in flight under the next tile's main loop (V6's cooperative
  variant). Stream-K (persistent only): a partial last wave's tiles split by K between blocks (``StreamK``), which
  hand partial sums on through a float32 workspace and int32 flags (``ws_ptr``, ``flags_ptr``:
  ``warpspec.ops.workspace``);
* for few output tiles, the split family (``SplitGemm``, ``ScaledSplitGemm``: ``SPLIT_TILES``, ``SPLITS``,
  ``SPLIT_STAGES``): one block per tile part, each tile's K range split between ``split_k`` consecutive blocks that
  leave their partial sums in the same workspace and count them on the tile's flag, the last part waiting once for
  the count and adding them, and with ``swap_ab`` the product computed transposed
  (Cᵀ = Bᵀ·Aᵀ, stored through a view of C with strides (1, ldc)), so a small M is WGMMA's narrow N side.

Runtime scalars are the sizes and the row pitches (in elements) of A, B and C, so strided views of larger tensors
work without a copy. The epilogue broadcasts vectors against the accumulator: the bias is a [1, block_n] row of a
[1, n] view, and the one-element scale a [block_m, 1] column of an [m, 1] view whose strides are 0, so every row
reads the same value; each thread loads just the columns (rows) it holds. The scale is read on the GPU, never by the
host, which keeps a call free of host synchronisation (CUDA graphs, ``torch.compile``).
"""

from __future__ import annotations

from warpspec.dtypes import DType, bfloat16, float8_e4m3, float16, float32, int32
from warpspec.errors import ArgumentError, CompileError
from warpspec.frontend.interpreter import cdiv
from warpspec.ops.naming import typed_kernel_name
from warpspec.pipeline import Pipeline
from warpspec.script import Class, Script, autotune

#: The epilogue activations, by the name ``ops.matmul`` takes (None: none).
ACTIVATIONS = (None, "relu", "gelu", "silu")
GELU_SCALE = 0.7978845608028654  # sqrt(2 / pi)
WARPGROUP = 128
#: The producer is a whole warpgroup so that ``setmaxnreg`` can move registers to the consumers: ptxas allots a
#: WGMMA kernel's registers per warpgroup, so without budgets a 288-thread block gets 168 per thread (65536 / 384)
#: and a 256-row tile's epilogue spills. 40 + 2 · 232 per warpgroup lane fits the 65536 of an SM.
PRODUCER_THREADS = WARPGROUP
PRODUCER_REGISTERS = 40
CONSUMER_REGISTERS = 232
GROUP_M = 8  # tile rows per rasterization band
ROW_BYTES = 128  # of each A and B row per stage: K per stage is 64 16-bit or 128 float8 elements
NUM_SMS = 132  # the H200's SMs: the default of the kernels' num_sms (ops.matmul passes the device's count)


#: The output types each input type gives (its own, float32, and for float8 either 16-bit type).
OUTPUT_DTYPES = {float16: (float16, float32), bfloat16: (bfloat16, float32),
                 float8_e4m3: (bfloat16, float16, float32)}
#: The output tiles (block_m, block_n) of the schedule space. The 176- and 192-column tiles divide a weight's rows
#: into a whole number of waves where 128 and 256 leave a partial one (1024 × 14336: 656 tiles of 128 × 176 are
#: 4.97 waves of 132, 448 of 128 × 256 are 3.4), as cuBLAS's 176- and 192-row tiles do there; persistent, they took
#: 1024 × 14336 × 4096 from 0.876× to 0.926× cuBLAS and 1024 × 6144 × 4096 from 0.899× to 0.958× on the H100
#: (docs/performance.md, twelfth session).
#: 128 × 224 makes 14336 weight rows one wave at M = 256 (2 × 64 tiles): 60.8 µs against 62.4 for 128 × 256.
TILES = ((64, 64), (64, 128), (128, 64), (128, 128), (128, 176), (128, 192), (128, 224), (128, 256), (256, 128))
#: Stream-K: the most blocks that share one tile of the last wave (its owner adds the others' partial sums one
#: after another); the fewest K-tiles a tile must have to be split, and the largest share of the grid the left-over
#: tiles may fill, in percent. A split costs each shared tile a partial tile's store and load and its blocks a
#: pipeline ramp: it paid at 8192³ (68 tiles left over on 132 SMs, 128 K-tiles: +1.7%) and lost at 4096³ (116
#: left over, the last wave nearly full: -4.5%) and at K = 1024 (16 K-tiles: -4%), docs/performance.md run 25.
MAX_SPLIT = 4
MIN_SPLIT_K_TILES = 32
MAX_LEFT_PERCENT = 60
#: The split family (``SplitGemm``): its tiles as (swap_ab, block_m, block_n) — with swap_ab a tile's rows run over
#: N and its 8 to 64 columns over M —, the blocks a tile's K range is split between, and its stage counts (deeper
#: rings than the tile walk's: a block streams a weight whose every byte it reads once). The narrow tiles give a
#: grid of about one block per SM without splitting K where wider ones need a split (64 × 32 over a 4096-row weight:
#: 128 blocks), and a ring of 12 or 16 stages keeps 100–200 KB of it in flight per SM; a 96-column tile fills the
#: SMs at M = 256 over 6144 rows. Each won its shapes on the H100 (docs/performance.md, twelfth session): 4096 × 4096
#: at M = 64 22.6 µs against 25.1 for 64 × 64 split in two, 256 × 6144 × 4096 32.2 against 36.2.
SPLIT_TILES = ((False, 64, 32), (False, 64, 64), (False, 64, 128), (False, 128, 64), (False, 128, 96),
               (False, 128, 128), (True, 64, 8), (True, 64, 16), (True, 128, 8), (True, 128, 16), (True, 128, 32),
               (True, 128, 64))
SPLITS = (1, 2, 4, 8)
#: Split-K's fold: registers a thread may give to the partial tiles it loads at once (``parts_at_once``).
PARTIAL_REGISTERS = 32
SPLIT_STAGES = (6, 8, 12, 16)


class StreamK(Class):
    """The stream-K split of a persistent walk, computed alike by every block at run time. The walk's whole waves
    stay whole tiles (``blockIdx.x, blockIdx.x + gridDim.x, ...`` below ``whole_tiles``); the K-tiles of the
    ``num_tiles % gridDim.x`` tiles left over, which would leave many SMs idle in a last partial wave, are dealt out
    evenly to ``blocks`` blocks (at most ``MAX_SPLIT`` per tile) as contiguous ranges of K-tiles, when the tiles
    have ``MIN_SPLIT_K_TILES`` K-tiles or more and fill at most ``MAX_LEFT_PERCENT`` of the grid.

    A block walks its range's pieces from the last tile down. A piece that ends inside its tile is the block's
    first, and its sum goes to the workspace (``leave_partial``); every other piece reaches its tile's end, and that
    block finishes the tile: it adds the partial sums of the earlier blocks whose ranges began the tile
    (``add_partial``), waiting for each one's flag, which that block set in its own first piece. So a block waits
    only for blocks before it, as flags require (``warpspec.isa.flag``), and by the time it waits, those blocks did
    their first piece long ago."""

    def __init__(self, num_tiles, k_tiles, block_k: int):
        self.k_tiles = k_tiles
        self.block_k = block_k
        grid = self.gridDim.x
        over = num_tiles % grid
        # Else the last wave stays whole tiles.
        left = over if k_tiles >= MIN_SPLIT_K_TILES and over * 100 <= grid * MAX_LEFT_PERCENT else 0
        self.whole_tiles = num_tiles - left
        self.blocks = max(min(grid, left * MAX_SPLIT), 1)  # at least 1, a divisor: no range has K-tiles then
        self.total = left * k_tiles  # K-tiles to deal out
        block = min(self.blockIdx.x, self.blocks)  # the ranges of blocks from ``self.blocks`` on are empty
        self.begin = block * self.total // self.blocks
        self.end = min(block + 1, self.blocks) * self.total // self.blocks
        self.pieces = (self.end - 1) // k_tiles - self.begin // k_tiles + 1 if self.end > self.begin else 0

    def piece(self, index):
        """(tile among the left-over ones, first K element, end K element) of this block's piece ``index``: the
        pieces from its range's last tile down."""
        tile = (self.end - 1) // self.k_tiles - index
        first = tile * self.k_tiles
        return tile, max(self.begin - first, 0) * self.block_k, min(self.end - first, self.k_tiles) * self.block_k

    def first_contributor(self, tile):
        """The block whose range holds the first K-tile of left-over tile ``tile``: the blocks from it up to the
        finishing one share the tile."""
        # Block b's range begins at floor(b · total / blocks): the largest b whose range begins at x or before.
        return ((tile * self.k_tiles + 1) * self.blocks + self.total - 1) // self.total - 1


class _Gemm(Script):
    """Shared body of ``Gemm`` and ``ScaledGemm``, whose kernels differ in their parameters (the float8 one reads
    a scale). The element types are constructor arguments: the pointer annotations ``~self.in_dtype`` and
    ``~self.out_dtype`` take them, so each instance builds its own kernel."""

    #: Only the problem sizes choose the schedule: the pitches follow them, and num_sms is the device's.
    tune_key = ("m_size", "n_size", "k_size")
    input_dtypes: tuple[DType, ...] = ()  # the input types the subclass's kernel takes
    split_family = False  # True for the classes whose schedules are ``SPLIT_TILES`` (``SplitFamily``)
    #: Split-K's fold: registers a consumer thread may give to the partial tiles it loads at once.
    partial_registers = PARTIAL_REGISTERS

    def __init__(self, in_dtype, out_dtype, b_k_major, has_bias, activation, persistent, stream_k, num_stages,
                 block_m, block_n, group_m=GROUP_M, a_k_major=True, swap_ab=False, split_k=1):
        super().__init__()
        if in_dtype not in self.input_dtypes:
            raise ArgumentError(f"{type(self).__name__} takes inputs of "
                                f"{' or '.join(d.name for d in self.input_dtypes)}, got {getattr(in_dtype, 'name', in_dtype)!r}")
        if out_dtype not in OUTPUT_DTYPES[in_dtype]:
            raise ArgumentError(f"{type(self).__name__}: {in_dtype.name} inputs give "
                                f"{' or '.join(d.name for d in OUTPUT_DTYPES[in_dtype])} outputs, got "
                                f"{getattr(out_dtype, 'name', out_dtype)!r}")
        self.in_dtype = in_dtype
        self.out_dtype = out_dtype
        self.scaled = in_dtype == float8_e4m3  # float8 kernels multiply by the per-tensor scale of ``scale_ptr``
        self.block_k = block_k_for(in_dtype)
        self.a_k_major = a_k_major
        assert persistent or not stream_k, "stream-K splits the last wave of the persistent walk"
        if persistent and (swap_ab or split_k != 1):
            # The transposed output has no unit column stride, which a TMA store needs; a split walks its blocks'
            # own K ranges, not the persistent tile walk.
            raise CompileError(f"{type(self).__name__}: swap_ab and split_k > 1 run one tile (part) per block, not "
                               f"persistent")
        if not isinstance(split_k, int) or isinstance(split_k, bool) or split_k < 1:
            raise CompileError(f"{type(self).__name__}: split_k must be a positive int, got {split_k!r}")
        self.swap_ab = swap_ab
        self.split_k = split_k
        # The operands WGMMA reads as its A (the output tile's rows) and its B (its columns): a and b, or b and a
        # when the product is computed transposed (swap_ab), each K-major or not as stored.
        self.rows_k_major, self.cols_k_major = (b_k_major, a_k_major) if swap_ab else (a_k_major, b_k_major)
        self.group_m = group_m  # tile rows per rasterization band (not tuned: benchmarks/rasterization.py)
        self.b_k_major = b_k_major
        self.has_bias = has_bias
        self.activation = activation
        self.persistent = persistent
        self.stream_k = stream_k
        self.num_stages = num_stages
        self.block_m = block_m
        self.block_n = block_n
        # 64 rows per warpgroup per WGMMA: tiles of 64 rows take one consumer warpgroup, taller tiles two.
        self.consumer_threads = WARPGROUP if block_m == 64 else 2 * WARPGROUP

    def kernel_name(self) -> str:
        """``Gemm`` (``SplitGemm`` for the split family) and the element types: the input's, then the output's
        where it differs (``GemmBF16F32``)."""
        dtypes = (self.in_dtype,) if self.out_dtype == self.in_dtype else (self.in_dtype, self.out_dtype)
        stem = "SplitGemm" if self.split_family else "Gemm"
        return typed_kernel_name(self, gemm_class(self.in_dtype, self.split_family), stem, dtypes)

    def gemm(self, m_size, n_size, k_size, lda, ldb, ldc, a_ptr, b_ptr, c_ptr, bias_ptr, scale_ptr, ws_ptr, flags_ptr,
             num_sms):
        """The kernel: C[m, n] = act(scale · sum_k A[m, k] B[k, n] + bias[n]) (scale only when ``self.scaled``).
        With ``swap_ab`` it computes Cᵀ = Bᵀ·Aᵀ: the output tiles' rows run over N and their columns over M, so a
        small M becomes WGMMA's narrow N side and b's rows (a weight) fill its 64-row A side."""
        block_m, block_n, block_k, stages = self.block_m, self.block_n, self.block_k, self.num_stages
        rows_size, cols_size = (n_size, m_size) if self.swap_ab else (m_size, n_size)
        tiles_m = cdiv(rows_size, block_m)
        tiles_n = cdiv(cols_size, block_n)
        num_tiles = tiles_m * tiles_n
        k_tiles = cdiv(k_size, block_k)
        # Split-K: every tile's K-tiles dealt out to ``splits`` consecutive blocks, each with at least one.
        splits = min(k_tiles, self.split_k) if self.split_k > 1 else 1
        self.attrs.blocks = [min(num_tiles, num_sms) if self.persistent else num_tiles * splits]
        self.attrs.warps = (self.consumer_threads + PRODUCER_THREADS) // 32
        split = StreamK(num_tiles, k_tiles, block_k) if self.stream_k else None
        whole_tiles = num_tiles if split is None else split.whole_tiles

        # The pointers go to the views as they are: a pointer copied into a local is a plain integer.
        if self.swap_ab:
            ga = self.operand_view(b_ptr, ldb, rows_size, k_size, self.rows_k_major)
            gb = self.operand_view(a_ptr, lda, cols_size, k_size, self.cols_k_major)
        else:
            ga = self.operand_view(a_ptr, lda, rows_size, k_size, self.rows_k_major)
            gb = self.operand_view(b_ptr, ldb, cols_size, k_size, self.cols_k_major)
        sa_shape = [stages, block_m, block_k] if self.rows_k_major else [stages, block_k, block_m]
        sa = self.shared_tensor(dtype=self.in_dtype, shape=sa_shape)
        sb_shape = [stages, block_n, block_k] if self.cols_k_major else [stages, block_k, block_n]
        sb = self.shared_tensor(dtype=self.in_dtype, shape=sb_shape)
        if self.swap_ab:  # Cᵀ: its rows are C's columns, one element apart
            gc = self.global_view(c_ptr, dtype=self.out_dtype, shape=[n_size, m_size], strides=[1, ldc])
        else:
            gc = self.global_view(c_ptr, dtype=self.out_dtype, shape=[m_size, n_size], strides=[ldc, 1])
        if split is not None or self.split_k > 1:
            # One partial tile and one flag per block (``warpspec.ops.workspace`` sizes them on the host).
            grid = min(num_tiles, num_sms) if split is not None else num_tiles * splits
            ws = self.global_view(ws_ptr, dtype=float32, shape=[grid * block_m, block_n], scratch=True)
            flags = self.global_view(flags_ptr, dtype=int32, shape=[grid])
        # The persistent kernel's epilogue buffer: the TMA store of one tile reads it under the next's main loop.
        sc = self.shared_tensor(dtype=self.out_dtype, shape=[block_m, block_n]) if self.persistent else None
        pipe = Pipeline(stages, producer_arrivals=1, consumer_arrivals=self.consumer_threads)

        with self.thread_group(thread_begin=self.consumer_threads, num_threads=PRODUCER_THREADS,
                               max_registers=PRODUCER_REGISTERS):
            if self.split_k > 1:
                tile, k_begin, k_end = self.split_part(splits, k_tiles)
                offset_m, offset_n = self.tile_offsets(tile, tiles_m, tiles_n)
                self.produce(pipe, ga, gb, sa, sb, offset_m, offset_n, k_begin, k_end)
                filled = (k_end - k_begin) // block_k
            else:
                filled: int32 = 0  # stages filled, to drain
                for tile in self.range(self.blockIdx.x, whole_tiles, self.gridDim.x):
                    offset_m, offset_n = self.tile_offsets(tile, tiles_m, tiles_n)
                    filled = filled + k_tiles
                    self.produce(pipe, ga, gb, sa, sb, offset_m, offset_n, 0, k_size)
                if split is not None:
                    for piece in self.range(split.pieces):
                        tile, k_begin, k_end = split.piece(piece)
                        offset_m, offset_n = self.tile_offsets(whole_tiles + tile, tiles_m, tiles_n)
                        filled = filled + (k_end - k_begin) // block_k
                        self.produce(pipe, ga, gb, sa, sb, offset_m, offset_n, k_begin, k_end)
            # Stay until the consumers released every stage that was filled, so their arrivals never target a
            # barrier whose waiter has exited.
            for _ in self.range(min(stages, filled)):
                pipe.producer_acquire()
                pipe.producer_advance()

        with self.thread_group(thread_begin=0, num_threads=self.consumer_threads, max_registers=CONSUMER_REGISTERS):
            if self.split_k > 1:
                tile, k_begin, k_end = self.split_part(splits, k_tiles)
                offset_m, offset_n = self.tile_offsets(tile, tiles_m, tiles_n)
                acc = self.consume(pipe, sa, sb, k_begin, k_end)
                part = self.blockIdx.x % splits
                if part < splits - 1:
                    self.count_part(acc, ws, flags, tile)
                else:  # the tile's last part adds the others' sums, in the order of their blocks
                    total = self.add_parts(acc, ws, flags, tile, self.blockIdx.x - part, self.blockIdx.x)
                    self.finish_tile(total, sc, gc, m_size, n_size, bias_ptr, scale_ptr, offset_m, offset_n)
            else:
                for tile in self.range(self.blockIdx.x, whole_tiles, self.gridDim.x):
                    offset_m, offset_n = self.tile_offsets(tile, tiles_m, tiles_n)
                    acc = self.consume(pipe, sa, sb, 0, k_size)
                    self.finish_tile(acc, sc, gc, m_size, n_size, bias_ptr, scale_ptr, offset_m, offset_n)
            if split is not None:
                for piece in self.range(split.pieces):
                    tile, k_begin, k_end = split.piece(piece)
                    offset_m, offset_n = self.tile_offsets(whole_tiles + tile, tiles_m, tiles_n)
                    acc = self.consume(pipe, sa, sb, k_begin, k_end)
                    if k_end < split.k_tiles * block_k:
                        self.leave_partial(acc, ws, flags)
                    else:
                        for contributor in self.range(split.first_contributor(tile), self.blockIdx.x):
                            acc = self.add_partial(acc, ws, flags, contributor)
                        self.finish_tile(acc, sc, gc, m_size, n_size, bias_ptr, scale_ptr, offset_m, offset_n)
            if self.persistent:
                with self.single_thread():
                    self.tma.wait_group(0)  # the last store's shared source must stay valid until it was read

    def operand_view(self, ptr, pitch, extent, k_size, k_major):
        """The global view of an operand with ``extent`` rows (or columns) of K: [extent, K] when K-major, else
        [K, extent], rows ``pitch`` elements apart."""
        shape = [extent, k_size] if k_major else [k_size, extent]
        return self.global_view(ptr, dtype=self.in_dtype, shape=shape, strides=[pitch, 1])

    def split_part(self, splits, k_tiles):
        """Split-K: (tile, first K element, end K element) of this block's part. The ``splits`` consecutive blocks
        of a tile take consecutive ranges of its K-tiles, the last block the range that ends it."""
        part = self.blockIdx.x % splits
        return (self.blockIdx.x // splits, part * k_tiles // splits * self.block_k,
                (part + 1) * k_tiles // splits * self.block_k)

    def produce(self, pipe, ga, gb, sa, sb, offset_m, offset_n, k_begin, k_end, group=None):
        """The producer's loads of one tile's K range ``[k_begin, k_end)`` (elements) into the ring; ``group``
        (a grouped GEMM's) is the leading index of a 3-D B view, one [K, N] or [N, K] matrix per group."""
        for offset_k in self.range(k_begin, k_end, self.block_k, unroll=self.num_stages):
            pipe.producer_acquire()
            stage = pipe.producer_stage
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(pipe.producer_barrier(),
                                                   transaction_bytes=sa[stage].nbytes + sb[stage].nbytes)
                if self.rows_k_major:
                    self.tma.global_to_shared(src=ga, dst=sa[stage], offsets=[offset_m, offset_k],
                                              mbarrier=pipe.producer_barrier())
                else:
                    self.tma.global_to_shared(src=ga, dst=sa[stage], offsets=[offset_k, offset_m],
                                              mbarrier=pipe.producer_barrier())
                self.tma.global_to_shared(src=gb, dst=sb[stage], offsets=self.b_offsets(offset_n, offset_k, group),
                                          mbarrier=pipe.producer_barrier())
            pipe.producer_advance()

    def consume(self, pipe, sa, sb, k_begin, k_end):
        """The consumers' main loop over one tile's K range ``[k_begin, k_end)`` into a fresh accumulator, which it
        returns: one WGMMA group in flight, each stage released once the group after it was issued."""
        acc = self.register_tensor(dtype=float32, shape=[self.block_m, self.block_n], init=0.0)
        for offset_k in self.range(k_begin, k_end, self.block_k, unroll=self.num_stages):
            pipe.consumer_acquire()
            self.wgmma.fence()
            a_tile = sa[pipe.consumer_stage] if self.rows_k_major else sa[pipe.consumer_stage].transpose()
            b_stage = self.b_stage(sb, pipe.consumer_stage)
            b_tile = b_stage.transpose() if self.cols_k_major else b_stage
            self.wgmma.mma(a_tile, b_tile, acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(1)  # the previous K-tile's group is done reading its stage: release it
            if offset_k > k_begin:
                self.mbarrier.arrive(pipe.empty_barriers[self.previous(pipe.consumer_stage)])
            pipe.consumer_advance()
        self.wgmma.wait_group(0)
        self.mbarrier.arrive(pipe.empty_barriers[self.previous(pipe.consumer_stage)])
        return acc

    def b_offsets(self, offset_n, offset_k, group):
        """The offsets of B's box of output columns ``offset_n`` and K-tile ``offset_k`` (``group``: None, as B is
        one matrix)."""
        return [offset_n, offset_k] if self.cols_k_major else [offset_k, offset_n]

    def b_stage(self, sb, stage):
        """The [block_n, block_k] (K-major) or [block_k, block_n] tile of B in ring stage ``stage``."""
        return sb[stage]

    def finish_tile(self, acc, sc, gc, m_size, n_size, bias_ptr, scale_ptr, offset_m, offset_n):
        """The epilogue of a whole tile's sum and its store: through shared memory and TMA when persistent."""
        result = self.epilogue(acc, m_size, n_size, bias_ptr, scale_ptr, offset_m, offset_n)
        if self.persistent:
            self.store_through_shared(result, sc, gc, offset_m, offset_n)
        else:
            self.store_global(gc, result, offsets=[offset_m, offset_n])

    def leave_partial(self, acc, ws, flags):
        """Stream-K: this block's sum over the first part of a tile's K range goes to its workspace slot, and its
        flag says so to the block that finishes the tile (a later one)."""
        self.store_global(ws, acc, offsets=[self.blockIdx.x * self.block_m, 0])
        self.sync()  # every consumer's stores are ordered before the signal
        with self.single_thread():
            self.flag.signal(flags, self.blockIdx.x, 1)

    def count_part(self, acc, ws, flags, tile, rows=None):
        """Split-K: this block's sum over its part of the tile's K range goes to its workspace slot, and the tile's
        flag counts it (``flag.add``) for the tile's last part. ``rows``: where given, only the tile's first rows
        hold output (a grouped GEMM's group of a few rows), and only they are stored."""
        slot = self.blockIdx.x * self.block_m
        self.store_global(ws, acc, offsets=[slot, 0], row_end=None if rows is None else slot + rows)
        self.sync()  # every consumer's stores are ordered before the count
        with self.single_thread():
            self.flag.add(flags, tile, 1)

    def parts_at_once(self) -> int:
        """Split-K: the partial tiles ``add_parts`` loads at once, as many (up to 4) as ``partial_registers``
        registers a thread hold."""
        per_thread = self.block_m * self.block_n // self.consumer_threads
        return max(1, min(4, self.partial_registers // per_thread))

    def add_parts(self, acc, ws, flags, tile, first, end, rows=None):
        """Split-K: ``acc`` plus the partial sums blocks ``first ... end - 1`` (the tile's other parts) left. One
        wait for their count (given back, 0, for the next launch), then ``parts_at_once()`` partials loaded at
        once, so that the parts cost one round trip to memory per group, not a wait and a load each. ``rows``:
        only the partials' first rows, those ``count_part`` stored, are loaded (the rest read as zero)."""
        with self.single_thread():
            self.flag.wait(flags, tile, end - first)
            self.flag.signal(flags, tile, 0)
        self.sync()  # the other consumers' loads come after the wait
        width, block_m, block_n = self.parts_at_once(), self.block_m, self.block_n
        for step in self.range(cdiv(end - first, width)):
            for lane in range(width):  # unrolled: the loads do not wait on each other's sums
                contributor: int32 = first + step * width + lane
                # Past the last contributor, its slot is read again and left out of the sum.
                slot = min(contributor, end - 1) * block_m
                part = self.load_global(ws, offsets=[slot, 0], shape=[block_m, block_n],
                                        row_end=None if rows is None else slot + rows)
                acc = acc + self.where(self.col_index(part) + contributor * block_n < end * block_n, part, 0.0)
        return acc

    def add_partial(self, acc, ws, flags, contributor):
        """Stream-K: ``acc`` plus the partial sum block ``contributor`` (an earlier one) left for this tile."""
        with self.single_thread():
            self.flag.wait(flags, contributor, 1)
            # Each slot is written once per launch and read once, so the flag can be given back its value now:
            # the next launch finds every flag 0.
            self.flag.signal(flags, contributor, 0)
        self.sync()  # the other consumers' loads come after the wait
        return acc + self.load_global(ws, offsets=[contributor * self.block_m, 0], shape=[self.block_m, self.block_n])

    def tile_offsets(self, tile, tiles_m, tiles_n):
        """The output offsets of tile index ``tile`` under grouped rasterization: bands of ``group_m`` tile rows,
        walked column by column, so consecutive tiles reuse one B tile column from L2 (V6's scheduler)."""
        band_tiles = self.group_m * tiles_n
        first_m = tile // band_tiles * self.group_m
        band_rows = min(tiles_m - first_m, self.group_m)  # the last band may be shorter
        in_band = tile % band_tiles
        return self.block_m * (first_m + in_band % band_rows), self.block_n * (in_band // band_rows)

    def epilogue(self, acc, m_size, n_size, bias_ptr, scale_ptr, offset_m, offset_n):
        """Scale, bias and activation of the accumulator tile at (offset_m, offset_n), cast to the output dtype.
        The bias runs along C's N: the tile's columns, or its rows with ``swap_ab``."""
        result = acc
        if self.scaled:
            # One value for every row: a column vector (a few values per thread) of a view whose strides are 0.
            if self.swap_ab:  # the tile's rows run over N
                scale = self.global_view(scale_ptr, dtype=float32, shape=[n_size, 1], strides=[0, 0])
            else:
                scale = self.global_view(scale_ptr, dtype=float32, shape=[m_size, 1], strides=[0, 0])
            result = result * self.load_global(scale, offsets=[offset_m, 0], shape=[self.block_m, 1])
        if self.has_bias:
            if self.swap_ab:  # a [block_m, 1] column of the bias seen as an [N, 1] view
                biases = self.global_view(bias_ptr, dtype=self.out_dtype, shape=[n_size, 1], strides=[1, 0])
                bias = self.load_global(biases, offsets=[offset_m, 0], shape=[self.block_m, 1])
            else:
                biases = self.global_view(bias_ptr, dtype=self.out_dtype, shape=[1, n_size])
                bias = self.load_global(biases, offsets=[0, offset_n], shape=[1, self.block_n])
            result = result + (bias if self.out_dtype == float32 else self.cast(bias, dtype=float32))
        result = self.activate(result)
        return result if self.out_dtype == float32 else self.cast(result, dtype=self.out_dtype)

    def activate(self, x):
        """``self.activation`` applied to float32 tensor ``x``: relu, gelu with the tanh approximation
        0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), or silu x·sigmoid(x) with sigmoid(x) = (1 + tanh(x / 2)) / 2:
        one tanh, as gelu, instead of an exp and a division (fewer instructions and registers; on the GPU both
        are tanh.approx's precision, 2**-11)."""
        if self.activation == "relu":
            return max(x, 0.0)
        if self.activation == "gelu":
            inner = (x + x * x * x * 0.044715) * GELU_SCALE
            return x * (self.tanh(inner) + 1.0) * 0.5
        if self.activation == "silu":
            return x * (self.tanh(x * 0.5) * 0.5 + 0.5)
        return x

    def store_through_shared(self, result, sc, gc, offset_m, offset_n):
        """``result`` -> shared buffer ``sc`` -> one TMA store (clipped at the view's edges), left in flight: it
        is waited for only when ``sc`` is about to be written again, one tile later."""
        with self.single_thread():
            self.tma.wait_group(0)  # the previous tile's store has read sc
        self.sync()  # ... and every writer of sc knows it
        self.store_shared(sc, result)
        self.fence_proxy_async()  # the ordinary stores become visible to the TMA store's async-proxy read
        self.sync()
        with self.single_thread():
            self.tma.shared_to_global(src=sc, dst=gc, offsets=[offset_m, offset_n])
            self.tma.commit_group()

    def previous(self, stage):
        """The stage before ``stage`` in the ring."""
        return (stage + self.num_stages - 1) % self.num_stages


def _schedules(cls):
    """The schedule space: 64-row tiles for small problems up to V5's and V6's tiles for large ones, 2 to 5
    stages, one tile per block or persistent."""
    cls = autotune("persistent, stream_k", [[False, False], [True, False], [True, True]])(cls)
    cls = autotune("block_m, block_n", [list(tile) for tile in TILES])(cls)
    return autotune("num_stages", [2, 3, 4, 5])(cls)


@_schedules
class Gemm(_Gemm):
    """16-bit A and B (float16 or bfloat16), C and bias of the input type or float32."""

    input_dtypes = (float16, bfloat16)

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, lda: int32, ldb: int32, ldc: int32,
                 a_ptr: ~self.in_dtype, b_ptr: ~self.in_dtype, c_ptr: ~self.out_dtype, bias_ptr: ~self.out_dtype,
                 ws_ptr: ~float32, flags_ptr: ~int32, num_sms: int32 = NUM_SMS):
        self.gemm(m_size, n_size, k_size, lda, ldb, ldc, a_ptr, b_ptr, c_ptr, bias_ptr, None, ws_ptr, flags_ptr,
                  num_sms)


@_schedules
class ScaledGemm(_Gemm):
    """float8_e4m3 A and B with a per-tensor scale (scale_a · scale_b, one float32 read from ``scale_ptr``), C and
    bias of float16, bfloat16 or float32."""

    input_dtypes = (float8_e4m3,)

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, lda: int32, ldb: int32, ldc: int32,
                 a_ptr: ~self.in_dtype, b_ptr: ~self.in_dtype, c_ptr: ~self.out_dtype, bias_ptr: ~self.out_dtype,
                 scale_ptr: ~float32, ws_ptr: ~float32, flags_ptr: ~int32, num_sms: int32 = NUM_SMS):
        self.gemm(m_size, n_size, k_size, lda, ldb, ldc, a_ptr, b_ptr, c_ptr, bias_ptr, scale_ptr, ws_ptr, flags_ptr,
                  num_sms)


class SplitFamily:
    """The schedules for few output tiles (a linear layer at a decode or small-batch M): one tile's part per block,
    never persistent, each tile's K range split between ``split_k`` blocks and, with ``swap_ab``, the product
    computed transposed so that M is WGMMA's narrow side. Mixed into ``Gemm`` and ``ScaledGemm`` before them."""

    split_family = True

    def __init__(self, in_dtype, out_dtype, b_k_major, has_bias, activation, swap_ab, split_k, num_stages, block_m,
                 block_n, a_k_major=True):
        super().__init__(in_dtype, out_dtype, b_k_major, has_bias, activation, False, False, num_stages, block_m,
                         block_n, a_k_major=a_k_major, swap_ab=swap_ab, split_k=split_k)


def _split_schedules(cls):
    """The split family's schedule space: ``SPLIT_TILES`` × ``SPLITS`` × ``SPLIT_STAGES``."""
    cls = autotune("swap_ab, block_m, block_n", [list(tile) for tile in SPLIT_TILES])(cls)
    cls = autotune("split_k", list(SPLITS))(cls)
    return autotune("num_stages", list(SPLIT_STAGES))(cls)


@_split_schedules
class SplitGemm(SplitFamily, Gemm):
    """``Gemm``'s kernel in the split family's schedules."""


@_split_schedules
class ScaledSplitGemm(SplitFamily, ScaledGemm):
    """``ScaledGemm``'s kernel in the split family's schedules."""


def gemm_class(in_dtype: DType, split: bool = False):
    """The kernel class for inputs of ``in_dtype``: ``Gemm`` for 16-bit inputs, ``ScaledGemm`` for float8 ones
    (their kernels take the per-tensor scale as one more pointer); their split family with ``split``."""
    if in_dtype == float8_e4m3:
        return ScaledSplitGemm if split else ScaledGemm
    return SplitGemm if split else Gemm


def block_k_for(in_dtype: DType) -> int:
    """K per stage for inputs of ``in_dtype``: 128 bytes of each row (64 16-bit or 128 float8 elements)."""
    return ROW_BYTES // in_dtype.nbytes
