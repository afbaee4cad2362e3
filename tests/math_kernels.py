"""Small kernels that exercise the register-tensor math of ``warpspec.isa.elementwise`` (unary functions,
broadcasting) on both back ends. Lines that tests name carry a ``# <<< marker`` comment."""

import feature_kernels as fk
import warpspec
from markers import marker_line as _marker_line
from warpspec import cdiv, float16, float32, int32


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
        elif self.case == "two-layouts":
            taller = self.load_global(x, offsets=[0, 0], shape=[32, 64])
            self.store_global(out, taller - row, offsets=[0, 0])
            tile = tile + row  # <<< two-layouts
        self.store_global(out, tile, offsets=[0, 0])
