"""Small kernels that exercise the register-tensor math of ``warpspec.isa.elementwise`` (unary functions,
broadcasting) on both back ends. Lines that tests name carry a ``# <<< marker`` comment."""

from tests.kernels import feature_kernels as fk
import warpspec
from tests.support.markers import marker_line as _marker_line
from warpspec import cdiv, float16, float32, int32

#: log2(e): softmax by exp2 scales the logits by it.
LOG2_E = 1.4426950408889634


def marker_line(name: str) -> int:
    """The line of this file carrying ``# <<< name``."""
    return _marker_line(__file__, name)


class Unary(warpspec.Script):
    """out = function(x) for a float32 [m, 64] array, by [16, 64] tiles through registers."""

    def __init__(self, function="exp2"):
        super().__init__()
        self.function = function

    def __call__(self, m_size: int32, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = [cdiv(m_size, 16)]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[m_size, 64])
        out = self.global_view(out_ptr, dtype=float32, shape=[m_size, 64])
        tile = self.load_global(x, offsets=[16 * self.blockIdx.x, 0], shape=[16, 64])
        if self.function == "exp2":
            y = self.exp2(tile)
        elif self.function == "exp":
            y = self.exp(tile)
        elif self.function == "tanh":
            y = self.tanh(tile)
        elif self.function == "log2":
            y = self.log2(tile)
        else:
            y = self.sqrt(tile)
        self.store_global(out, y, offsets=[16 * self.blockIdx.x, 0])


class MatmulBiasEpilogue(fk._Matmul):
    """C = (A·Bᵀ) * scale[m] + bias[n] in float16: a column vector [block_m, 1] and a row vector [1, block_n]
    loaded from global views [m, 1] and [1, n] and broadcast against the float32 accumulator."""

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, a_ptr: ~float16, b_ptr: ~float16,
                 scale_ptr: ~float32, bias_ptr: ~float16, c_ptr: ~float16):
        ga, gb, sa, sb, pipe = self.setup(m_size, n_size, k_size, a_ptr, b_ptr, float16)
        acc = self.register_tensor(dtype=float32, shape=[self.block_m, self.block_n], init=0.0)
        scales = self.global_view(scale_ptr, dtype=float32, shape=[m_size, 1])
        biases = self.global_view(bias_ptr, dtype=float16, shape=[1, n_size])
        with self.thread_group(thread_begin=128, num_threads=32):
            self.produce(pipe, ga, gb, sa, sb, k_size)
        with self.thread_group(thread_begin=0, num_threads=128):
            self.consume(pipe, sa, sb, acc, k_size)
            offset_m: int32 = self.block_m * self.blockIdx.x
            offset_n: int32 = self.block_n * self.blockIdx.y
            scale = self.load_global(scales, offsets=[offset_m, 0], shape=[self.block_m, 1])
            bias = self.load_global(biases, offsets=[0, offset_n], shape=[1, self.block_n])
            out = acc * scale + self.cast(bias, float32)  # <<< bias-epilogue
            gc = self.global_view(c_ptr, dtype=float16, shape=[m_size, n_size])
            self.store_global(gc, self.cast(out, float16), offsets=[offset_m, offset_n])


class BlockedBias(warpspec.Script):
    """out = x + bias[n] - x[:, :1] ... for a float32 [m, 64] array: vectors broadcast against a blocked tile."""

    def __call__(self, m_size: int32, x_ptr: ~float32, bias_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = [cdiv(m_size, 16)]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[m_size, 64])
        biases = self.global_view(bias_ptr, dtype=float32, shape=[1, 64])
        out = self.global_view(out_ptr, dtype=float32, shape=[m_size, 64])
        tile = self.load_global(x, offsets=[16 * self.blockIdx.x, 0], shape=[16, 64])
        bias = self.load_global(biases, offsets=[0, 0], shape=[1, 64])
        self.store_global(out, bias * 2.0 + tile, offsets=[16 * self.blockIdx.x, 0])


class RowStatistics(fk._Matmul):
    """Row maximum and row sum of the float32 accumulator of A·Bᵀ, stored to [m, 1] views (m64 blocks of two
    warpgroups when ``consumer_threads`` is 256)."""

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, a_ptr: ~float16, b_ptr: ~float16,
                 max_ptr: ~float32, sum_ptr: ~float32):
        ga, gb, sa, sb, pipe = self.setup(m_size, n_size, k_size, a_ptr, b_ptr, float16)
        acc = self.register_tensor(dtype=float32, shape=[self.block_m, self.block_n], init=0.0)
        with self.thread_group(thread_begin=self.consumer_threads, num_threads=32):
            self.produce(pipe, ga, gb, sa, sb, k_size)
        with self.thread_group(thread_begin=0, num_threads=self.consumer_threads):
            self.consume(pipe, sa, sb, acc, k_size)
            offsets = [self.block_m * self.blockIdx.x, self.blockIdx.y]
            maxima = self.global_view(max_ptr, dtype=float32, shape=[m_size, cdiv(n_size, self.block_n)])
            sums = self.global_view(sum_ptr, dtype=float32, shape=[m_size, cdiv(n_size, self.block_n)])
            self.store_global(maxima, self.reduce_max(acc), offsets=offsets)
            self.store_global(sums, self.reduce_sum(acc, axis=1), offsets=offsets)


class TwoWarpgroupRowStatistics(RowStatistics):
    """RowStatistics with two consumer warpgroups, each reducing its 64-row half."""

    consumer_threads = 256
    warps = 9


class ReducedByOneOfTwoWarpgroups(TwoWarpgroupRowStatistics):
    """A mistake: the first of the two warpgroups holding the accumulator reduces it alone."""

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, a_ptr: ~float16, b_ptr: ~float16,
                 max_ptr: ~float32, sum_ptr: ~float32):
        ga, gb, sa, sb, pipe = self.setup(m_size, n_size, k_size, a_ptr, b_ptr, float16)
        acc = self.register_tensor(dtype=float32, shape=[self.block_m, self.block_n], init=0.0)
        with self.thread_group(thread_begin=256, num_threads=32):
            self.produce(pipe, ga, gb, sa, sb, k_size)
        with self.thread_group(thread_begin=0, num_threads=256):
            self.consume(pipe, sa, sb, acc, k_size)
        with self.thread_group(thread_begin=0, num_threads=128):
            self.reduce_max(acc)  # <<< reduce-by-half


class Attention(warpspec.Script):
    """out = softmax(Q·Kᵀ / sqrt(d)) · V for one head (Q [seq_q, d], K and V [seq_kv, d], float16), FlashAttention
    style: per block 64 query rows, K/V tiles of ``block_n`` rows through a 2-stage TMA pipeline, the running row
    maximum and sum as [64, 1] vectors (reduce_max, reduce_sum), the probabilities cast to float16 and fed to the
    second mma from registers. Columns past ``seq_kv`` (the last tile of a ragged length) are masked with
    col_index/where, and with ``causal`` so are keys after the query (col + offset_n > row + offset_m)."""

    def __init__(self, head_dim=64, block_n=64, causal=False):
        super().__init__()
        self.head_dim = head_dim
        self.block_n = block_n
        self.causal = causal

    def __call__(self, seq_q: int32, seq_kv: int32, q_ptr: ~float16, k_ptr: ~float16, v_ptr: ~float16,
                 out_ptr: ~float16):
        d, block_n = self.head_dim, self.block_n
        self.attrs.blocks = [cdiv(seq_q, 64)]
        self.attrs.warps = 5
        gq = self.global_view(q_ptr, dtype=float16, shape=[seq_q, d])
        gk = self.global_view(k_ptr, dtype=float16, shape=[seq_kv, d])
        gv = self.global_view(v_ptr, dtype=float16, shape=[seq_kv, d])
        sq = self.shared_tensor(dtype=float16, shape=[64, d])
        sk = self.shared_tensor(dtype=float16, shape=[2, block_n, d])
        sv = self.shared_tensor(dtype=float16, shape=[2, block_n, d])
        q_loaded = self.mbarrier.alloc(counts=[1])
        pipe = warpspec.Pipeline(2, consumer_arrivals=128)
        offset_m: int32 = 64 * self.blockIdx.x
        with self.thread_group(thread_begin=128, num_threads=32):
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(q_loaded[0], sq.nbytes)
                self.tma.global_to_shared(src=gq, dst=sq, offsets=[offset_m, 0], mbarrier=q_loaded[0])
            for offset_n in self.range(0, seq_kv, block_n, unroll=2):
                pipe.producer_acquire()
                with self.single_thread():
                    stage = pipe.producer_stage
                    self.mbarrier.arrive_and_expect_tx(pipe.producer_barrier(), sk[stage].nbytes + sv[stage].nbytes)
                    self.tma.global_to_shared(src=gk, dst=sk[stage], offsets=[offset_n, 0],
                                              mbarrier=pipe.producer_barrier())
                    self.tma.global_to_shared(src=gv, dst=sv[stage], offsets=[offset_n, 0],
                                              mbarrier=pipe.producer_barrier())
                pipe.producer_advance()
        with self.thread_group(thread_begin=0, num_threads=128):
            scale = LOG2_E / d ** 0.5
            row_max = self.register_tensor(dtype=float32, shape=[64, 1], init=float("-inf"))
            row_sum = self.register_tensor(dtype=float32, shape=[64, 1], init=0.0)
            acc_o = self.register_tensor(dtype=float32, shape=[64, d], init=0.0)
            self.mbarrier.wait(q_loaded[0], phase=0)
            for offset_n in self.range(0, seq_kv, block_n, unroll=2):
                pipe.consumer_acquire()
                acc_s = self.register_tensor(dtype=float32, shape=[64, block_n], init=0.0)
                self.wgmma.fence()
                self.wgmma.mma(sq, sk[pipe.consumer_stage].transpose(), acc_s)
                self.wgmma.commit_group()
                self.wgmma.wait_group(0)
                cols = self.col_index(acc_s) + offset_n
                keep = cols < seq_kv  # <<< attention-tail
                if self.causal:
                    keep = keep & (cols <= self.row_index(acc_s) + offset_m)  # <<< attention-causal
                s = self.where(keep, acc_s, float("-inf"))
                new_max = max(row_max, self.reduce_max(s) * scale)  # <<< attention-max
                p = self.exp2(s * scale - new_max)
                correction = self.exp2(row_max - new_max)
                row_sum = row_sum * correction + self.reduce_sum(p)  # <<< attention-sum
                row_max = max(row_max, new_max)
                acc_o = acc_o * correction
                p16 = self.cast(p, float16)  # <<< attention-cast
                self.wgmma.fence()
                self.wgmma.mma(p16, sv[pipe.consumer_stage], acc_o)
                self.wgmma.commit_group()
                self.wgmma.wait_group(0)
                pipe.consumer_release()
                pipe.consumer_advance()
            gout = self.global_view(out_ptr, dtype=float16, shape=[seq_q, d])
            self.store_global(gout, self.cast(acc_o / row_sum, float16), offsets=[offset_m, 0])


class Masks(warpspec.Script):
    """For a float32 [m, 64] array by [16, 64] tiles: out = x below the diagonal and left of column ``n_valid``,
    -inf elsewhere, 0.5 where x > 0.5 (a scalar branch of where); index = 100 * row + col of each element."""

    def __call__(self, m_size: int32, n_valid: int32, x_ptr: ~float32, out_ptr: ~float32, index_ptr: ~int32):
        self.attrs.blocks = [cdiv(m_size, 16)]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[m_size, 64])
        out = self.global_view(out_ptr, dtype=float32, shape=[m_size, 64])
        index = self.global_view(index_ptr, dtype=int32, shape=[m_size, 64])
        offsets = [16 * self.blockIdx.x, 0]
        tile = self.load_global(x, offsets=offsets, shape=[16, 64])
        rows = self.row_index(tile) + 16 * self.blockIdx.x
        cols = self.col_index(tile)
        keep = (cols <= rows) & (cols < n_valid)
        masked = self.where(keep, tile, float("-inf"))
        self.store_global(out, self.where(tile > 0.5, 0.5, masked), offsets=offsets)
        if index is not None:  # `is` stays a compile-time comparison of tensors
            self.store_global(index, rows * 100 + cols, offsets=offsets)


class Compare(warpspec.Script):
    """out = where(x OP y, 1, 0) for float32 [16, 64] tiles x and y, and where(x OP 0.25, 1, 0) in a second row
    band: each comparison against a tensor and a scalar."""

    def __init__(self, op="<"):
        super().__init__()
        self.op = op

    def __call__(self, x_ptr: ~float32, y_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        x = self.load_global(self.global_view(x_ptr, dtype=float32, shape=[16, 64]), offsets=[0, 0], shape=[16, 64])
        y = self.load_global(self.global_view(y_ptr, dtype=float32, shape=[16, 64]), offsets=[0, 0], shape=[16, 64])
        out = self.global_view(out_ptr, dtype=float32, shape=[32, 64])
        for band, other in ((0, y), (16, 0.25)):
            if self.op == "<":
                mask = x < other
            elif self.op == "<=":
                mask = x <= other
            elif self.op == ">":
                mask = x > other
            elif self.op == ">=":
                mask = x >= other
            elif self.op == "==":
                mask = x == other
            else:
                mask = x != other
            self.store_global(out, self.where(mask, 1.0, x * 0.0), offsets=[band, 0])


class AccumulatorIndices(fk._Matmul):
    """index = 1000 * row + col of each element of the accumulator tile (plus the tile's offsets), and C = A·Bᵀ
    masked to the lower triangle (-inf above) in float32."""

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, a_ptr: ~float16, b_ptr: ~float16,
                 c_ptr: ~float32, index_ptr: ~int32):
        ga, gb, sa, sb, pipe = self.setup(m_size, n_size, k_size, a_ptr, b_ptr, float16)
        acc = self.register_tensor(dtype=float32, shape=[self.block_m, self.block_n], init=0.0)
        with self.thread_group(thread_begin=128, num_threads=32):
            self.produce(pipe, ga, gb, sa, sb, k_size)
        with self.thread_group(thread_begin=0, num_threads=128):
            self.consume(pipe, sa, sb, acc, k_size)
            offset_m: int32 = self.block_m * self.blockIdx.x
            offset_n: int32 = self.block_n * self.blockIdx.y
            rows = self.row_index(acc) + offset_m
            cols = self.col_index(acc) + offset_n
            gc = self.global_view(c_ptr, dtype=float32, shape=[m_size, n_size])
            gi = self.global_view(index_ptr, dtype=int32, shape=[m_size, n_size])
            self.store_global(gc, self.where(cols > rows, float("-inf"), acc), offsets=[offset_m, offset_n])
            self.store_global(gi, rows * 1000 + cols, offsets=[offset_m, offset_n])


class RowVectorOfTwoWarpgroups(warpspec.Script):
    """out = 2 * v for a [1, 64] row vector held by two warpgroups that the emulator runs as two partitions (the
    nested group splits them)."""

    def __call__(self, v_ptr: ~float32, out_ptr: ~float32, copy_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 8
        v = self.global_view(v_ptr, dtype=float32, shape=[1, 64])
        out = self.global_view(out_ptr, dtype=float32, shape=[1, 64])
        with self.thread_group(thread_begin=0, num_threads=256):
            self.store_global(out, self.load_global(v, offsets=[0, 0], shape=[1, 64]) * 2.0, offsets=[0, 0])
            with self.thread_group(thread_begin=0, num_threads=128):
                copy = self.global_view(copy_ptr, dtype=float32, shape=[1, 64])
                self.store_global(copy, self.load_global(v, offsets=[0, 0], shape=[1, 64]), offsets=[0, 0])


class Misuse(warpspec.Script):
    """One planted mistake per ``case``, each on a line carrying its marker."""

    def __init__(self, case):
        super().__init__()
        self.case = case

    def __call__(self, m_size: int32, x_ptr: ~float32, v_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[m_size, 64])
        rows = self.global_view(v_ptr, dtype=float32, shape=[1, 64])
        flat = self.global_view(v_ptr, dtype=float32, shape=[64])
        out = self.global_view(out_ptr, dtype=float32, shape=[m_size, 64])
        tile = self.load_global(x, offsets=[0, 0], shape=[16, 64])
        ints = self.register_tensor(dtype=int32, shape=[4], init=0)
        row = self.load_global(rows, offsets=[0, 0], shape=[1, 64])
        if self.case == "unary-int":
            self.exp2(ints)  # <<< unary-int
        elif self.case == "unary-scalar":
            self.tanh(2.0)  # <<< unary-scalar
        elif self.case == "no-broadcast":
            half = self.load_global(rows, offsets=[0, 0], shape=[1, 32])
            tile = tile + half  # <<< no-broadcast
        elif self.case == "one-d":
            tile = tile * self.load_global(flat, offsets=[0], shape=[64])  # <<< one-d
        elif self.case == "outer":
            column = self.load_global(x, offsets=[0, 0], shape=[16, 1])
            tile = column + row  # <<< outer
        elif self.case == "reduce-axis-0":
            self.reduce_sum(tile, axis=0)  # <<< reduce-axis-0
        elif self.case == "reduce-blocked":
            self.store_global(out, tile - self.reduce_max(tile), offsets=[0, 0])  # <<< reduce-blocked
        elif self.case == "reduce-int":
            self.reduce_max(self.register_tensor(dtype=int32, shape=[2, 2], init=0))  # <<< reduce-int
        elif self.case == "reduce-1d":
            self.reduce_sum(self.register_tensor(dtype=float32, shape=[4], init=0.0))  # <<< reduce-1d
        elif self.case == "reduce-single-thread":
            with self.single_thread():
                self.reduce_max(tile)  # <<< reduce-single-thread
        elif self.case == "where-float-cond":
            tile = self.where(tile, tile, 0.0)  # <<< where-float-cond
        elif self.case == "where-scalars":
            tile = self.where(tile < 1.0, 1.0, 0.0)  # <<< where-scalars
        elif self.case == "where-dtypes":
            tile = self.where(tile < 1.0, tile, self.cast(tile, float16))  # <<< where-dtypes
        elif self.case == "chained":
            tile = self.where(0.0 < tile < 1.0, tile, 0.0)  # <<< chained
        elif self.case == "mask-arithmetic":
            tile = tile * ((tile < 1.0) + 1)  # <<< mask-arithmetic
        elif self.case == "and-floats":
            tile = tile & tile  # <<< and-floats
        elif self.case == "int-vs-float":
            tile = self.where(self.col_index(tile) < 2.5, tile, 0.0)  # <<< int-vs-float
        elif self.case == "index-1d":
            self.row_index(ints)  # <<< index-1d
        elif self.case == "two-layouts":
            taller = self.load_global(x, offsets=[0, 0], shape=[32, 64])
            self.store_global(out, taller - row, offsets=[0, 0])
            tile = tile + row  # <<< two-layouts
        self.store_global(out, tile, offsets=[0, 0])
