"""The library GEMM behind ``warpspec.ops.matmul``: C = epilogue(A @ B) as one warp-specialized Script.

The structure is examples/matmul_v5.py's: a TMA producer (one elected thread of a producer warpgroup) fills a ring of
shared-memory stages, one or two consumer warpgroups multiply them with WGMMA keeping one group in flight, and the epilogue works on the float32
accumulators in registers before a ``store_global`` that clips the ragged edges. What V5 fixes, this kernel takes
as compile-time choices:

* the element types: one Script class per (input dtype, output dtype) pair, because pointer parameters carry their
  dtype in the annotation (``GEMM_KERNELS`` lists them);
* B's layout (constructor argument ``b_k_major``): K-major B is the transposed view of a tile stored [N, K] (a
  linear layer's ``w.T``, the only layout float8 WGMMA reads); N-major B is a row-major [K, N] tile, read by the
  transposable 16-bit forms as stored;
* the epilogue (``has_bias``, ``activation``) and, for float8 inputs, the per-tensor scale;
* the schedule (stages and tiles), tuned per shape bucket (``tune_key``).

Runtime scalars are the sizes and the row pitches (in elements) of A, B and C, so strided views of larger tensors
work without a copy. Per-element data that the epilogue needs at every accumulator element (the bias row, the
scale) is read through views with stride 0 along the broadcast axes: a [M, N] view of the bias whose row stride is
0, and of the one-element scale whose strides are both 0. ``load_global`` then gives a tile in the accumulator's own
register layout, so the epilogue is elementwise; the scale is read on the GPU, never by the host, which keeps a
call free of host synchronisation (CUDA graphs, ``torch.compile``).
"""

from __future__ import annotations

from warpspec.dtypes import bfloat16, float8_e4m3, float16, float32, int32
from warpspec.frontend.builder import cdiv
from warpspec.pipeline import Pipeline
from warpspec.script import Script, autotune

#: The epilogue activations, by the name ``ops.matmul`` takes (None: none).
ACTIVATIONS = (None, "relu", "gelu", "silu")
WARPGROUP = 128
#: The producer is a whole warpgroup so that ``setmaxnreg`` can move registers to the consumers: ptxas allots a
#: WGMMA kernel's registers per warpgroup, so without budgets a 288-thread block gets 168 per thread (65536 / 384)
#: and a 256-row tile's epilogue spills. 40 + 2 · 232 per warpgroup lane fits the 65536 of an SM.
PRODUCER_THREADS = WARPGROUP
PRODUCER_REGISTERS = 40
CONSUMER_REGISTERS = 232


class _Gemm(Script):
    """Shared body; subclasses fix the element types through their ``__call__`` annotations."""

    #: Only the problem sizes choose the schedule: the pitches follow them for contiguous tensors.
    tune_key = ("m_size", "n_size", "k_size")
    in_dtype = float16
    out_dtype = float16
    scaled = False  # float8 kernels multiply by the per-tensor scale read from ``scale_ptr``

    def __init__(self, b_k_major, has_bias, activation, num_stages, block_m, block_n, block_k):
        super().__init__()
        self.b_k_major = b_k_major
        self.has_bias = has_bias
        self.activation = activation
        self.num_stages = num_stages
        self.block_m = block_m
        self.block_n = block_n
        self.block_k = block_k
        # 64 rows per warpgroup per WGMMA: tiles of 64 rows take one consumer warpgroup, taller tiles two.
        self.consumer_threads = WARPGROUP if block_m == 64 else 2 * WARPGROUP

    def gemm(self, m_size, n_size, k_size, lda, ldb, ldc, a_ptr, b_ptr, c_ptr, bias_ptr, scale_ptr):
        """The kernel: C[m, n] = act(scale · sum_k A[m, k] B[k, n] + bias[n]) (scale only when ``self.scaled``)."""
        self.attrs.blocks = [cdiv(m_size, self.block_m), cdiv(n_size, self.block_n)]
        self.attrs.warps = (self.consumer_threads + PRODUCER_THREADS) // 32
        block_m, block_n, block_k, stages = self.block_m, self.block_n, self.block_k, self.num_stages
        offset_m: int32 = block_m * self.blockIdx.x
        offset_n: int32 = block_n * self.blockIdx.y

        ga = self.global_view(a_ptr, dtype=self.in_dtype, shape=[m_size, k_size], strides=[lda, 1])
        sa = self.shared_tensor(dtype=self.in_dtype, shape=[stages, block_m, block_k])
        if self.b_k_major:
            gb = self.global_view(b_ptr, dtype=self.in_dtype, shape=[n_size, k_size], strides=[ldb, 1])
            sb = self.shared_tensor(dtype=self.in_dtype, shape=[stages, block_n, block_k])
        else:
            gb = self.global_view(b_ptr, dtype=self.in_dtype, shape=[k_size, n_size], strides=[ldb, 1])
            sb = self.shared_tensor(dtype=self.in_dtype, shape=[stages, block_k, block_n])
        acc = self.register_tensor(dtype=float32, shape=[block_m, block_n], init=0.0)
        pipe = Pipeline(stages, producer_arrivals=1, consumer_arrivals=self.consumer_threads)

        with self.thread_group(thread_begin=self.consumer_threads, num_threads=PRODUCER_THREADS,
                               max_registers=PRODUCER_REGISTERS):
            for offset_k in self.range(0, k_size, block_k, unroll=stages):
                pipe.producer_acquire()
                stage = pipe.producer_stage
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(pipe.producer_barrier(),
                                                       transaction_bytes=sa[stage].nbytes + sb[stage].nbytes)
                    self.tma.global_to_shared(src=ga, dst=sa[stage], offsets=[offset_m, offset_k],
                                              mbarrier=pipe.producer_barrier())
                    if self.b_k_major:
                        self.tma.global_to_shared(src=gb, dst=sb[stage], offsets=[offset_n, offset_k],
                                                  mbarrier=pipe.producer_barrier())
                    else:
                        self.tma.global_to_shared(src=gb, dst=sb[stage], offsets=[offset_k, offset_n],
                                                  mbarrier=pipe.producer_barrier())
                pipe.producer_advance()
            # Stay until the consumers released every stage that was filled, so their arrivals never target a
            # barrier whose waiter has exited.
            for _ in self.range(min(stages, cdiv(k_size, block_k))):
                pipe.producer_acquire()
                pipe.producer_advance()

        with self.thread_group(thread_begin=0, num_threads=self.consumer_threads, max_registers=CONSUMER_REGISTERS):
            for offset_k in self.range(0, k_size, block_k, unroll=stages):
                pipe.consumer_acquire()
                self.wgmma.fence()
                if self.b_k_major:
                    self.wgmma.mma(sa[pipe.consumer_stage], sb[pipe.consumer_stage].transpose(), acc)
                else:
                    self.wgmma.mma(sa[pipe.consumer_stage], sb[pipe.consumer_stage], acc)
                self.wgmma.commit_group()
                self.wgmma.wait_group(1)  # the previous K-tile's group is done reading its stage: release that one
                if offset_k > 0:
                    self.mbarrier.arrive(pipe.empty_barriers[self.previous(pipe.consumer_stage)])
                pipe.consumer_advance()
            self.wgmma.wait_group(0)
            self.mbarrier.arrive(pipe.empty_barriers[self.previous(pipe.consumer_stage)])
            self.epilogue(acc, m_size, n_size, ldc, c_ptr, bias_ptr, scale_ptr, offset_m, offset_n)

    def epilogue(self, acc, m_size, n_size, ldc, c_ptr, bias_ptr, scale_ptr, offset_m, offset_n):
        """Scale, bias, activation, cast and store of the accumulator tile at (offset_m, offset_n)."""
        offsets = [offset_m, offset_n]
        tile = [self.block_m, self.block_n]
        result = acc
        if self.scaled:
            scale = self.global_view(scale_ptr, dtype=float32, shape=[m_size, n_size], strides=[0, 0])
            result = result * self.load_global(scale, offsets=offsets, shape=tile)
        if self.has_bias:
            bias = self.global_view(bias_ptr, dtype=self.out_dtype, shape=[m_size, n_size], strides=[0, 1])
            bias_tile = self.load_global(bias, offsets=offsets, shape=tile)
            result = result + (bias_tile if self.out_dtype == float32 else self.cast(bias_tile, dtype=float32))
        if self.activation == "relu":
            result = max(result, 0.0)
        gc = self.global_view(c_ptr, dtype=self.out_dtype, shape=[m_size, n_size], strides=[ldc, 1])
        self.store_global(gc, result if self.out_dtype == float32 else self.cast(result, dtype=self.out_dtype),
                          offsets=offsets)

    def previous(self, stage):
        """The stage before ``stage`` in the ring."""
        return (stage + self.num_stages - 1) % self.num_stages


def _sixteen_bit_schedules(cls):
    """The schedules of the fp16/bf16 kernels: 64-row tiles for small problems, V5's tiles for large ones."""
    cls = autotune("block_k", [32, 64])(cls)
    cls = autotune("block_m, block_n", [[64, 64], [64, 128], [128, 64], [128, 128], [128, 256], [256, 128]])(cls)
    return autotune("num_stages", [2, 3, 4, 5])(cls)


def _fp8_schedules(cls):
    """The schedules of the float8 kernels: K per tile twice the 16-bit kernels' (the same bytes per stage)."""
    cls = autotune("block_k", [64, 128])(cls)
    cls = autotune("block_m, block_n", [[64, 64], [64, 128], [128, 64], [128, 128], [128, 256], [256, 128]])(cls)
    return autotune("num_stages", [2, 3, 4, 5])(cls)


@_sixteen_bit_schedules
class GemmF16(_Gemm):
    """float16 A and B, float16 C (and bias)."""

    in_dtype, out_dtype = float16, float16

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, lda: int32, ldb: int32, ldc: int32,
                 a_ptr: ~float16, b_ptr: ~float16, c_ptr: ~float16, bias_ptr: ~float16):
        self.gemm(m_size, n_size, k_size, lda, ldb, ldc, a_ptr, b_ptr, c_ptr, bias_ptr, None)


@_sixteen_bit_schedules
class GemmF16F32(_Gemm):
    """float16 A and B, float32 C (and bias)."""

    in_dtype, out_dtype = float16, float32

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, lda: int32, ldb: int32, ldc: int32,
                 a_ptr: ~float16, b_ptr: ~float16, c_ptr: ~float32, bias_ptr: ~float32):
        self.gemm(m_size, n_size, k_size, lda, ldb, ldc, a_ptr, b_ptr, c_ptr, bias_ptr, None)


@_sixteen_bit_schedules
class GemmBF16(_Gemm):
    """bfloat16 A and B, bfloat16 C (and bias)."""

    in_dtype, out_dtype = bfloat16, bfloat16

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, lda: int32, ldb: int32, ldc: int32,
                 a_ptr: ~bfloat16, b_ptr: ~bfloat16, c_ptr: ~bfloat16, bias_ptr: ~bfloat16):
        self.gemm(m_size, n_size, k_size, lda, ldb, ldc, a_ptr, b_ptr, c_ptr, bias_ptr, None)


@_sixteen_bit_schedules
class GemmBF16F32(_Gemm):
    """bfloat16 A and B, float32 C (and bias)."""

    in_dtype, out_dtype = bfloat16, float32

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, lda: int32, ldb: int32, ldc: int32,
                 a_ptr: ~bfloat16, b_ptr: ~bfloat16, c_ptr: ~float32, bias_ptr: ~float32):
        self.gemm(m_size, n_size, k_size, lda, ldb, ldc, a_ptr, b_ptr, c_ptr, bias_ptr, None)


@_fp8_schedules
class GemmE4M3BF16(_Gemm):
    """float8_e4m3 A and B with a per-tensor scale (scale_a · scale_b, one float32), bfloat16 C (and bias)."""

    in_dtype, out_dtype, scaled = float8_e4m3, bfloat16, True

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, lda: int32, ldb: int32, ldc: int32,
                 a_ptr: ~float8_e4m3, b_ptr: ~float8_e4m3, c_ptr: ~bfloat16, bias_ptr: ~bfloat16,
                 scale_ptr: ~float32):
        self.gemm(m_size, n_size, k_size, lda, ldb, ldc, a_ptr, b_ptr, c_ptr, bias_ptr, scale_ptr)


@_fp8_schedules
class GemmE4M3F16(_Gemm):
    """float8_e4m3 A and B with a per-tensor scale, float16 C (and bias)."""

    in_dtype, out_dtype, scaled = float8_e4m3, float16, True

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, lda: int32, ldb: int32, ldc: int32,
                 a_ptr: ~float8_e4m3, b_ptr: ~float8_e4m3, c_ptr: ~float16, bias_ptr: ~float16,
                 scale_ptr: ~float32):
        self.gemm(m_size, n_size, k_size, lda, ldb, ldc, a_ptr, b_ptr, c_ptr, bias_ptr, scale_ptr)


@_fp8_schedules
class GemmE4M3F32(_Gemm):
    """float8_e4m3 A and B with a per-tensor scale, float32 C (and bias)."""

    in_dtype, out_dtype, scaled = float8_e4m3, float32, True

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, lda: int32, ldb: int32, ldc: int32,
                 a_ptr: ~float8_e4m3, b_ptr: ~float8_e4m3, c_ptr: ~float32, bias_ptr: ~float32,
                 scale_ptr: ~float32):
        self.gemm(m_size, n_size, k_size, lda, ldb, ldc, a_ptr, b_ptr, c_ptr, bias_ptr, scale_ptr)


#: (input dtype name, output dtype name) -> kernel class.
GEMM_KERNELS = {(cls.in_dtype.name, cls.out_dtype.name): cls
                for cls in (GemmF16, GemmF16F32, GemmBF16, GemmBF16F32, GemmE4M3BF16, GemmE4M3F16, GemmE4M3F32)}
