"""Matmul kernels that exercise one language feature each, on both back ends.

All compute C = A·Bᵀ (A [M, K], B [N, K]) with one TMA producer warp and WGMMA consumers, through a Pipeline.
"""

import warpspec
from warpspec import bfloat16, cdiv, float8_e4m3, float8_e5m2, float16, float32, int32


class _Matmul(warpspec.Script):
    """Shared structure: the producer and the launch shape; subclasses write the consumer."""

    consumer_threads = 128
    warps = 5

    def __init__(self, num_stages=2, block_m=128, block_n=64, block_k=64):
        super().__init__()
        self.num_stages = num_stages
        self.block_m = block_m
        self.block_n = block_n
        self.block_k = block_k

    swizzle = None  # the shared tiles' swizzle: the widest possible unless a subclass chooses

    def setup(self, m_size, n_size, k_size, a_ptr, b_ptr, dtype):
        self.attrs.blocks = [cdiv(m_size, self.block_m), cdiv(n_size, self.block_n)]
        self.attrs.warps = self.warps
        ga = self.global_view(a_ptr, dtype=dtype, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=dtype, shape=[n_size, k_size])
        sa = self.shared_tensor(dtype=dtype, shape=[self.num_stages, self.block_m, self.block_k],
                                swizzle=self.swizzle)
        sb = self.shared_tensor(dtype=dtype, shape=[self.num_stages, self.block_n, self.block_k],
                                swizzle=self.swizzle)
        pipe = warpspec.Pipeline(self.num_stages, consumer_arrivals=self.consumer_threads)
        return ga, gb, sa, sb, pipe

    def produce(self, pipe, ga, gb, sa, sb, k_size, k_from=0):
        """The producer warp: the block's A and B tiles of K ``k_from`` ... ``k_size`` through the ring."""
        offset_m: int32 = self.block_m * self.blockIdx.x
        offset_n: int32 = self.block_n * self.blockIdx.y
        for offset_k in self.range(k_from, k_size, self.block_k, unroll=self.num_stages):
            pipe.producer_acquire()
            with self.single_thread():
                stage = pipe.producer_stage
                self.mbarrier.arrive_and_expect_tx(pipe.producer_barrier(), sa[stage].nbytes + sb[stage].nbytes)
                self.tma.global_to_shared(src=ga, dst=sa[stage], offsets=[offset_m, offset_k],
                                          mbarrier=pipe.producer_barrier())
                self.tma.global_to_shared(src=gb, dst=sb[stage], offsets=[offset_n, offset_k],
                                          mbarrier=pipe.producer_barrier())
            pipe.producer_advance()


    def consume(self, pipe, sa, sb, acc, k_size, k_from=0):
        """One consumer warpgroup: ``acc`` += each ring stage's A·Bᵀ, K ``k_from`` ... ``k_size``."""
        for offset_k in self.range(k_from, k_size, self.block_k, unroll=self.num_stages):
            pipe.consumer_acquire()
            self.wgmma.fence()
            self.wgmma.mma(sa[pipe.consumer_stage], sb[pipe.consumer_stage].transpose(), acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            pipe.consumer_release()
            pipe.consumer_advance()

    def plain_matmul(self, m_size, n_size, k_size, a_ptr, b_ptr, c_ptr, dtype, out_dtype=None):
        """Producer warp 4, one consumer warpgroup, float32 accumulators, cast to ``out_dtype`` (by default the
        inputs' ``dtype``) on store."""
        ga, gb, sa, sb, pipe = self.setup(m_size, n_size, k_size, a_ptr, b_ptr, dtype)
        acc = self.register_tensor(dtype=float32, shape=[self.block_m, self.block_n], init=0.0)
        with self.thread_group(thread_begin=128, num_threads=32):
            self.produce(pipe, ga, gb, sa, sb, k_size)
        with self.thread_group(thread_begin=0, num_threads=128):
            self.consume(pipe, sa, sb, acc, k_size)
            self.store_tile(c_ptr, m_size, n_size, acc, out_dtype or dtype)

    def store_tile(self, c_ptr, m_size, n_size, acc, dtype):
        gc = self.global_view(c_ptr, dtype=dtype, shape=[m_size, n_size])
        self.store_global(gc, self.cast(acc, dtype),
                          offsets=[self.block_m * self.blockIdx.x, self.block_n * self.blockIdx.y])


class MatmulSplitKReduce(_Matmul):
    """C += A·Bᵀ (float32 C) with K split over grid z: each block multiplies its part of K and adds its float32
    tile into C with ``store_global(..., reduce="add")``, so the parts of one tile land in any order."""

    def __init__(self, splits=3, **schedule):
        super().__init__(**schedule)
        self.splits = splits

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, a_ptr: ~float16, b_ptr: ~float16,
                 c_ptr: ~float32):
        ga, gb, sa, sb, pipe = self.setup(m_size, n_size, k_size, a_ptr, b_ptr, float16)
        self.attrs.blocks = [cdiv(m_size, self.block_m), cdiv(n_size, self.block_n), self.splits]
        part: int32 = cdiv(cdiv(k_size, self.block_k), self.splits) * self.block_k
        k_from: int32 = part * self.blockIdx.z
        k_to: int32 = min(k_size, k_from + part)
        acc = self.register_tensor(dtype=float32, shape=[self.block_m, self.block_n], init=0.0)
        with self.thread_group(thread_begin=128, num_threads=32):
            self.produce(pipe, ga, gb, sa, sb, k_to, k_from)
        with self.thread_group(thread_begin=0, num_threads=128):
            self.consume(pipe, sa, sb, acc, k_to, k_from)
            gc = self.global_view(c_ptr, dtype=float32, shape=[m_size, n_size])
            self.store_global(gc, acc, offsets=[self.block_m * self.blockIdx.x, self.block_n * self.blockIdx.y],
                              reduce="add")


class MatmulBF16(_Matmul):
    """bfloat16 inputs and output, float32 accumulators."""

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, a_ptr: ~bfloat16, b_ptr: ~bfloat16,
                 c_ptr: ~bfloat16):
        self.plain_matmul(m_size, n_size, k_size, a_ptr, b_ptr, c_ptr, bfloat16)


class MatmulSwizzle32(_Matmul):
    """The plain float16 matmul with 32-byte swizzled tiles chosen by the author."""

    swizzle = 32

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, a_ptr: ~float16, b_ptr: ~float16,
                 c_ptr: ~float16):
        self.plain_matmul(m_size, n_size, k_size, a_ptr, b_ptr, c_ptr, float16)


class MatmulF16Accumulator(_Matmul):
    """float16 accumulators (wgmma .f16 D), stored without a cast."""

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, a_ptr: ~float16, b_ptr: ~float16,
                 c_ptr: ~float16):
        ga, gb, sa, sb, pipe = self.setup(m_size, n_size, k_size, a_ptr, b_ptr, float16)
        acc = self.register_tensor(dtype=float16, shape=[self.block_m, self.block_n], init=0.0)
        with self.thread_group(thread_begin=128, num_threads=32):
            self.produce(pipe, ga, gb, sa, sb, k_size)
        with self.thread_group(thread_begin=0, num_threads=128):
            self.consume(pipe, sa, sb, acc, k_size)
            gc = self.global_view(c_ptr, dtype=float16, shape=[m_size, n_size])
            self.store_global(gc, acc, offsets=[self.block_m * self.blockIdx.x, self.block_n * self.blockIdx.y])


class MatmulRegisterA(_Matmul):
    """A read from shared memory into registers (WGMMA A fragments), B from shared memory."""

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, a_ptr: ~float16, b_ptr: ~float16,
                 c_ptr: ~float16):
        ga, gb, sa, sb, pipe = self.setup(m_size, n_size, k_size, a_ptr, b_ptr, float16)
        acc = self.register_tensor(dtype=float32, shape=[self.block_m, self.block_n], init=0.0)
        with self.thread_group(thread_begin=128, num_threads=32):
            self.produce(pipe, ga, gb, sa, sb, k_size)
        with self.thread_group(thread_begin=0, num_threads=128):
            for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
                pipe.consumer_acquire()
                a_regs = self.load_shared(sa[pipe.consumer_stage])
                self.wgmma.fence()
                self.wgmma.mma(a_regs, sb[pipe.consumer_stage].transpose(), acc)
                self.wgmma.commit_group()
                self.wgmma.wait_group(0)
                pipe.consumer_release()
                pipe.consumer_advance()
            self.store_tile(c_ptr, m_size, n_size, acc, float16)


class MatmulSharedEpilogue(_Matmul):
    """The epilogue goes through shared memory: store_shared, fence_proxy_async, sync, then one TMA store."""

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, a_ptr: ~float16, b_ptr: ~float16,
                 c_ptr: ~float16):
        ga, gb, sa, sb, pipe = self.setup(m_size, n_size, k_size, a_ptr, b_ptr, float16)
        sc = self.shared_tensor(dtype=float16, shape=[self.block_m, self.block_n])
        acc = self.register_tensor(dtype=float32, shape=[self.block_m, self.block_n], init=0.0)
        with self.thread_group(thread_begin=128, num_threads=32):
            self.produce(pipe, ga, gb, sa, sb, k_size)
        with self.thread_group(thread_begin=0, num_threads=128):
            self.consume(pipe, sa, sb, acc, k_size)
            self.store_shared(sc, self.cast(acc, float16))
            self.fence_proxy_async()
            self.sync()
            gc = self.global_view(c_ptr, dtype=float16, shape=[m_size, n_size])
            with self.single_thread():
                self.tma.shared_to_global(src=sc, dst=gc,
                                          offsets=[self.block_m * self.blockIdx.x, self.block_n * self.blockIdx.y])
                self.tma.commit_group()
                self.tma.wait_group(0)


class MatmulRegisterBudgets(_Matmul):
    """Two consumer warpgroups and a producer warpgroup with setmaxnreg budgets 232 / 40 (384 threads)."""

    consumer_threads = 256
    warps = 12

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, a_ptr: ~float16, b_ptr: ~float16,
                 c_ptr: ~float16):
        ga, gb, sa, sb, pipe = self.setup(m_size, n_size, k_size, a_ptr, b_ptr, float16)
        acc = self.register_tensor(dtype=float32, shape=[self.block_m, self.block_n], init=0.0)
        with self.thread_group(thread_begin=256, num_threads=128, max_registers=40):
            self.produce(pipe, ga, gb, sa, sb, k_size)
        with self.thread_group(thread_begin=0, num_threads=256, max_registers=232):
            self.consume(pipe, sa, sb, acc, k_size)
            self.store_tile(c_ptr, m_size, n_size, acc, float16)


class ScaleRows(warpspec.Script):
    """out = 2·x + 1, tile by tile through registers (load_global / store_global, no TMA)."""

    def __call__(self, m_size: int32, n_size: int32, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = [cdiv(m_size, 16), cdiv(n_size, 64)]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[m_size, n_size])
        out = self.global_view(out_ptr, dtype=float32, shape=[m_size, n_size])
        offsets = [16 * self.blockIdx.x, 64 * self.blockIdx.y]
        tile = self.load_global(x, offsets=offsets, shape=[16, 64])
        self.store_global(out, tile * 2.0 + 1.0, offsets=offsets)


class BatchedCopy(warpspec.Script):
    """dst = src for a [batch, m, n] float16 tensor with 3-D TMA boxes of [1, 64, 64]; block (x, y) copies row
    band x of batch y through two buffers, like the blog's copy."""

    def __call__(self, batch: int32, m_size: int32, n_size: int32, src_ptr: ~float16, dst_ptr: ~float16):
        self.attrs.blocks = [cdiv(m_size, 64), batch]
        self.attrs.warps = 2
        src = self.global_view(src_ptr, dtype=float16, shape=[batch, m_size, n_size])
        dst = self.global_view(dst_ptr, dtype=float16, shape=[batch, m_size, n_size])
        buffers = self.shared_tensor(dtype=float16, shape=[2, 1, 64, 64])
        pipe = warpspec.Pipeline(2)
        row: int32 = 64 * self.blockIdx.x
        with self.thread_group(thread_begin=0, num_threads=32):
            for tile in self.range(cdiv(n_size, 64)):
                pipe.producer_acquire()
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(pipe.producer_barrier(), buffers[0].nbytes)
                    self.tma.global_to_shared(src=src, dst=buffers[pipe.producer_stage],
                                              offsets=[self.blockIdx.y, row, 64 * tile],
                                              mbarrier=pipe.producer_barrier())
                pipe.producer_advance()
        with self.thread_group(thread_begin=32, num_threads=32):
            for tile in self.range(cdiv(n_size, 64)):
                pipe.consumer_acquire()
                with self.single_thread():
                    self.tma.shared_to_global(src=buffers[pipe.consumer_stage], dst=dst,
                                              offsets=[self.blockIdx.y, row, 64 * tile])
                    self.tma.commit_group()
                    self.tma.wait_group(0)
                    pipe.consumer_release()
                pipe.consumer_advance()


class MatmulFP8(_Matmul):
    """float8_e4m3 inputs (the k32 WGMMA form, K-major operands), float32 accumulators, bfloat16 output."""

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, a_ptr: ~float8_e4m3, b_ptr: ~float8_e4m3,
                 c_ptr: ~bfloat16):
        self.plain_matmul(m_size, n_size, k_size, a_ptr, b_ptr, c_ptr, float8_e4m3, bfloat16)


class MatmulFP8E5M2(_Matmul):
    """float8_e5m2 inputs, float32 accumulators, float16 output."""

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, a_ptr: ~float8_e5m2, b_ptr: ~float8_e5m2,
                 c_ptr: ~float16):
        self.plain_matmul(m_size, n_size, k_size, a_ptr, b_ptr, c_ptr, float8_e5m2, float16)


class GridStrideRows(warpspec.Script):
    """out = x + 1 by 16-row tiles, each of ``blocks`` blocks taking every ``blocks``-th tile: a loop whose step is
    the runtime grid size, as persistent kernels walk their tiles."""

    def __call__(self, m_size: int32, blocks: int32, step_scale: int32, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = [blocks]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[m_size, 64])
        out = self.global_view(out_ptr, dtype=float32, shape=[m_size, 64])
        for tile in self.range(self.blockIdx.x, cdiv(m_size, 16), self.gridDim.x * step_scale):  # <<< grid-stride
            self.store_global(out, self.load_global(x, offsets=[16 * tile, 0], shape=[16, 64]) + 1.0,
                              offsets=[16 * tile, 0])


class UnrolledRuntimeStep(warpspec.Script):
    """A runtime step in an unrolled loop, which the language refuses."""

    def __call__(self, m_size: int32, x_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[m_size, 64])
        for tile in self.range(0, m_size, self.gridDim.x, unroll=2):  # <<< unrolled-runtime-step
            self.store_global(x, self.load_global(x, offsets=[tile, 0], shape=[16, 64]), offsets=[tile, 0])
