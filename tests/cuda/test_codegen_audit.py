"""The generated CUDA computes what the emulator computes where C++ or the GPU's instructions once disagreed with it:
signed integer overflow and shifts by the width or more (undefined in C++, wrapping on the emulator), the smallest
int64 constant (an unsigned literal in C++), ``flag.add`` past INT_MAX, accumulator tiles stored at negative
offsets or transposed up to a column end, float32 scalars (held as float64 by the emulator, float on the GPU) and the flush-to-zero of
``ex2.approx.ftz``/``lg2.approx.ftz``. What the C++ leaves undefined and the emulator cannot give a value for (a
negative shift amount, the smallest integer divided by -1, a loop whose counter would wrap past INT_MAX after its
last trip and so never end on the GPU) is an error at the kernel line.

Each CPU test checks the generated source and the emulator's values and fails without its fix; the GPU twin
(``@pytest.mark.gpu``) runs the same kernel on the GPU and compares it with the emulator."""

import warnings

import numpy as np
import pytest

from tests.kernels import feature_kernels as fk
from tests.kernels import math_kernels as mk
from tests.support.markers import marker_line
import warpspec
from warpspec import KernelError, float16, float32, int32, int64, uint32
from warpspec.cuda.codegen import generate
from warpspec.cuda.launch import compile_kernel
from warpspec.runtime import kernel_for

INT_MIN, INT_MAX = -2**31, 2**31 - 1


def _int32(value: int) -> int:
    """``value`` wrapped to int32."""
    return (value - INT_MIN) % 2**32 + INT_MIN


def _on_device(arrays, device):
    """``arrays`` as torch tensors on ``device`` (torch.uint32 for uint32: a ~uint32 parameter takes no other), or as
    they are for the emulator."""
    if device is None:
        return list(arrays)
    torch = pytest.importorskip("torch")
    return [torch.from_numpy(a).to(device) for a in arrays]


def _to_host(tensors, device):
    """The results of a launch as numpy arrays."""
    if device is None:
        return list(tensors)
    import torch

    torch.cuda.synchronize()
    return [t.cpu().numpy() for t in tensors]


# ---------------------------------------------------------------------------------------------- integer scalars


class IntegerEdges(warpspec.Script):
    """int32 and uint32 runtime scalar arithmetic at the edges of the types, each result stored from a replicated
    register tensor: + - * and negation past the range, shifts by runtime and constant amounts up to and past the
    width, and signed division."""

    def __call__(self, dst_ptr: ~int32, udst_ptr: ~uint32, n: int32, s: int32, u: uint32, d: int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        grew: int32 = 0
        if n + 1 > n:
            grew = 1
        out = self.register_tensor(dtype=int32, shape=[11], init=0)
        out[0] = n + 1
        out[1] = grew
        out[2] = n * 3
        out[3] = -n
        out[4] = n - 5
        out[5] = n << 40
        out[6] = n << s  # <<< shift
        out[7] = n >> s
        out[8] = n >> 3
        out[9] = n // d  # <<< divide
        out[10] = n % d
        uout = self.register_tensor(dtype=uint32, shape=[3], init=0)
        uout[0] = u << s
        uout[1] = u >> s
        uout[2] = u >> 3
        self.store_global(self.global_view(dst_ptr, dtype=int32, shape=[11]), out, offsets=[0])
        self.store_global(self.global_view(udst_ptr, dtype=uint32, shape=[3]), uout, offsets=[0])


def _shifted(n: int, s: int, signed: bool = True):
    """Python's ``n << s`` and ``n >> s`` wrapped to int32 (uint32 when not ``signed``): a shift by the width or
    more gives 0 (``>>`` of a negative value: -1)."""
    wrap = _int32 if signed else (lambda v: v % 2**32)
    return wrap(n << s), wrap(n >> s)


def _integer_expected(n, s, u, d):
    left, right = _shifted(n, s)
    uleft, uright = _shifted(u, s, signed=False)
    quotient = abs(n) // abs(d) * (1 if (n < 0) == (d < 0) else -1)
    return ([_int32(n + 1), int(_int32(n + 1) > n), _int32(3 * n), _int32(-n), _int32(n - 5), 0, left, right,
             n >> 3, quotient, n - quotient * d], [uleft, uright, u >> 3])


#: (n, s, u, d): the type's extremes, shift amounts at and past the width.
INTEGER_CASES = [(INT_MAX, 33, 2**32 - 1, 7), (INT_MIN, 32, 5, 3), (-5, 40, 1, -2), (7, 3, 12, -4),
                 (-1000, 31, 2**31, 1000)]


def _run_integer_edges(backend, args, device=None):
    dst, udst = np.zeros(11, np.int32), np.zeros(3, np.uint32)
    tensors = _on_device([dst, udst], device)
    with warpspec.use_backend(backend):
        IntegerEdges()(*tensors, *args)
    dst, udst = _to_host(tensors, device)
    return [int(x) for x in dst], [int(x) for x in udst]


def test_signed_arithmetic_wraps_in_the_generated_code_as_on_the_emulator():
    """Signed + - * and negation go through the prelude's wrapping helpers, and every shift whose amount may reach
    the width through its clamping one: in C++ both are undefined, and NVRTC used that, folding ``n + 1 > n`` to
    true (the emulator, which wraps, says false for INT_MAX) and dropping the store of ``n << 40`` altogether."""
    source = generate(kernel_for(IntegerEdges(), {})).source
    for expression in ("add_wrap(n, 1)", "mul_wrap(n, 3)", "neg_wrap(n)", "sub_wrap(n, 5)", "shl_wrap(n, 40)",
                       "shl_wrap(n, s)", "shr_wrap(n, s)", "shl_wrap(u, static_cast<unsigned>(s))",
                       "shr_wrap(u, static_cast<unsigned>(s))", "if ((add_wrap(n, 1) > n))"):
        assert expression in source, expression
    # A shift by a constant below the width is C++'s own, but a signed << (undefined for negative values)
    assert "(n >> 3)" in source and "(u >> 3u)" in source
    assert "(n + 1)" not in source and "(n << " not in source and "(-n)" not in source
    for args in INTEGER_CASES:
        assert _run_integer_edges("emulator", args) == _integer_expected(*args), args


def test_integer_edges_kernel_builds():
    """NVRTC compiles the helpers (the prelude defines them for int, unsigned and long long)."""
    compile_kernel(kernel_for(IntegerEdges(), {}))


@pytest.mark.gpu
@pytest.mark.parametrize("args", INTEGER_CASES)
def test_gpu_integer_edges_are_the_emulators(args):
    assert _run_integer_edges("cuda", args, device="cuda") == _run_integer_edges("emulator", args)


@pytest.mark.parametrize("args, line, message", [
    ((5, -1, 1, 1), "shift", "shift by a negative amount (-1) in '<<'"),
    ((INT_MIN, 1, 1, -1), "divide", "-2147483648 // -1 overflows int32"),
])
def test_what_the_cpp_leaves_undefined_is_an_error_at_the_kernel_line(args, line, message):
    """A negative shift amount raised Python's own ValueError out of the emulator, and INT_MIN // -1 gave INT_MIN
    where the C++ division is undefined: both are KernelErrors at the kernel's line."""
    with pytest.raises(KernelError) as error, warpspec.use_backend("emulator"):
        IntegerEdges()(np.zeros(11, np.int32), np.zeros(3, np.uint32), *args)
    assert error.value.location == f"{__file__}:{marker_line(__file__, line)}"
    assert message in str(error.value)


class Int64Extremes(warpspec.Script):
    """Comparisons of an int64 argument with the smallest int64 and int32 constants."""

    def __call__(self, dst_ptr: ~int32, m: int64):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        out = self.register_tensor(dtype=int32, shape=[2], init=0)
        if m > -2**63:
            out[0] = 1
        if m > -2**31:
            out[1] = 1
        self.store_global(self.global_view(dst_ptr, dtype=int32, shape=[2]), out, offsets=[0])


def _run_int64_extremes(backend, m, device=None):
    dst = np.zeros(2, np.int32)
    tensors = _on_device([dst], device)
    with warpspec.use_backend(backend):
        Int64Extremes()(*tensors, m)
    return [int(x) for x in _to_host(tensors, device)[0]]


def test_the_smallest_int64_constant_is_an_int64():
    """-2**63 was spelled ``-9223372036854775808ll``: 9223372036854775808 is no long long, so the literal was an
    unsigned long long and ``m > -2**63`` compared unsigned (SASS ``ISETP.GT.U32...EX``), false for every m >= 0
    where the emulator says true."""
    source = generate(kernel_for(Int64Extremes(), {})).source
    assert "(m > (-9223372036854775807ll - 1))" in source and "9223372036854775808" not in source
    assert _run_int64_extremes("emulator", 5) == [1, 1]
    assert _run_int64_extremes("emulator", -2**63) == [0, 0]
    compile_kernel(kernel_for(Int64Extremes(), {}))


@pytest.mark.gpu
@pytest.mark.parametrize("m", [5, -2**63, -2**31, 2**63 - 1])
def test_gpu_int64_extremes_are_the_emulators(m):
    assert _run_int64_extremes("cuda", m, device="cuda") == _run_int64_extremes("emulator", m)


class FlagAdd(warpspec.Script):
    """flag.add of ``v`` to ``flags[0]``."""

    def __call__(self, flags_ptr: ~int32, v: int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        flags = self.global_view(flags_ptr, dtype=int32, shape=[1])
        with self.single_thread():
            self.flag.add(flags, 0, v)


def _run_flag_add(backend, start, v, device=None):
    flags = np.array([start], np.int32)
    tensors = _on_device([flags], device)
    with warpspec.use_backend(backend):
        FlagAdd()(*tensors, v)
    return int(_to_host(tensors, device)[0][0])


def test_flag_add_wraps_as_red_add_does():
    """``red.add.s32`` wraps; the emulator added in numpy's int32 scalar arithmetic, which wraps with a
    RuntimeWarning, an error where warnings are errors."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _run_flag_add("emulator", INT_MAX, 1) == INT_MIN
        assert _run_flag_add("emulator", INT_MIN, -1) == INT_MAX


@pytest.mark.gpu
@pytest.mark.parametrize("start, v", [(INT_MAX, 1), (INT_MIN, -1), (5, 7)])
def test_gpu_flag_add_is_the_emulators(start, v):
    assert _run_flag_add("cuda", start, v, device="cuda") == _run_flag_add("emulator", start, v)


class CountTrips(warpspec.Script):
    """The number of trips of ``self.range(start, stop, 64)``."""

    def __call__(self, dst_ptr: ~int32, start: int32, stop: int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        trips: int32 = 0
        for _ in self.range(start, stop, 64):  # <<< loop
            trips = trips + 1
        out = self.register_tensor(dtype=int32, shape=[1], init=0)
        out[0] = trips
        self.store_global(self.global_view(dst_ptr, dtype=int32, shape=[1]), out, offsets=[0])


def _run_count_trips(backend, start, stop, device=None):
    dst = np.zeros(1, np.int32)
    tensors = _on_device([dst], device)
    with warpspec.use_backend(backend):
        CountTrips()(*tensors, start, stop)
    return int(_to_host(tensors, device)[0][0])


#: Loops ending just short of INT_MAX: the generated loop's last ``+= 64`` still fits.
TRIPS_NEAR_THE_MAXIMUM = [(INT_MAX - 100, INT_MAX - 63, 1), (INT_MAX - 200, INT_MAX - 63, 3), (0, 640, 10)]


def test_a_loop_whose_counter_would_overflow_is_an_error_at_its_line():
    """``for (i = start; i < stop; i += 64)`` steps past the last trip once more: with stop near INT_MAX the
    counter wraps around and the GPU loops for ever, where Python's range ended. The emulator refuses such a loop
    at its line, and runs those whose last step still fits."""
    for start, stop, trips in TRIPS_NEAR_THE_MAXIMUM:
        assert _run_count_trips("emulator", start, stop) == trips
    with pytest.raises(KernelError) as error, warpspec.use_backend("emulator"):
        CountTrips()(np.zeros(1, np.int32), INT_MAX - 100, INT_MAX)
    assert error.value.location == f"{__file__}:{marker_line(__file__, 'loop')}"
    assert f"{INT_MAX - 36} + 64, past the int32 maximum {INT_MAX}" in str(error.value)
    assert f"keep stop at most {INT_MAX - 63}" in str(error.value)


@pytest.mark.gpu
@pytest.mark.parametrize("start, stop, trips", TRIPS_NEAR_THE_MAXIMUM)
def test_gpu_loops_near_the_maximum_are_the_emulators(start, stop, trips):
    assert _run_count_trips("cuda", start, stop, device="cuda") == _run_count_trips("emulator", start, stop) == trips


class IntegerTiles(warpspec.Script):
    """An int32 tile plus, times and minus a runtime scalar, and negated, one 16-row band of ``dst`` each."""

    def __call__(self, src_ptr: ~int32, dst_ptr: ~int32, n: int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        x = self.load_global(self.global_view(src_ptr, dtype=int32, shape=[16, 64]), offsets=[0, 0], shape=[16, 64])
        dst = self.global_view(dst_ptr, dtype=int32, shape=[4 * 16, 64])
        self.store_global(dst, x + n, offsets=[0, 0])
        self.store_global(dst, x * n, offsets=[16, 0])
        self.store_global(dst, x - n, offsets=[32, 0])
        self.store_global(dst, -x, offsets=[48, 0])


INTEGER_TILE = np.array([INT_MAX, INT_MIN, -1, 0, 1, 65536] * 200, np.int32)[:16 * 64].reshape(16, 64)


def _run_integer_tiles(backend, n, device=None):
    dst = np.zeros((64, 64), np.int32)
    tensors = _on_device([INTEGER_TILE, dst], device)
    with warpspec.use_backend(backend):
        IntegerTiles()(*tensors, n)
    return _to_host(tensors[1:], device)[0]


def test_signed_tile_arithmetic_wraps_as_numpy_does():
    """int32 register tiles wrap on the emulator (numpy's int32) and, through the same helpers as scalars, on the
    GPU: ``(a + b)`` of two ints was undefined past INT_MAX."""
    source = generate(kernel_for(IntegerTiles(), {})).source
    for helper in ("add_wrap(", "mul_wrap(", "sub_wrap(", "neg_wrap("):
        assert f"= {helper}" in source, helper
    x = INTEGER_TILE.astype(np.int64)
    expected = np.concatenate([x + 65536, x * 65536, x - 65536, -x])
    np.testing.assert_array_equal(_run_integer_tiles("emulator", 65536), [[_int32(v) for v in row]
                                                                           for row in expected])


@pytest.mark.gpu
def test_gpu_signed_tile_arithmetic_is_the_emulators():
    np.testing.assert_array_equal(_run_integer_tiles("cuda", 65536, device="cuda"),
                                  _run_integer_tiles("emulator", 65536))


# ------------------------------------------------------------------------------------ accumulator tiles, clipped


class _StoredProduct(fk._Matmul):
    """C = A·Bᵀ of one 128 x 64 tile, stored by the consumer warpgroup as float32 (column pairs) and as float16 (the
    quad exchange) through [m_size, n_size] views of ``strides`` at ``offsets``, with ``store_global``'s bounds."""

    def stored_product(self, m_size, n_size, k_size, a_ptr, b_ptr, c_ptr, h_ptr, strides, offsets, row_end=None,
                       col_end=None):
        ga, gb, sa, sb, pipe = self.setup(m_size, n_size, k_size, a_ptr, b_ptr, float16)
        acc = self.register_tensor(dtype=float32, shape=[self.block_m, self.block_n], init=0.0)
        with self.thread_group(thread_begin=128, num_threads=32):
            self.produce(pipe, ga, gb, sa, sb, k_size)
        with self.thread_group(thread_begin=0, num_threads=128):
            self.consume(pipe, sa, sb, acc, k_size)
            gc = self.global_view(c_ptr, dtype=float32, shape=[m_size, n_size], strides=strides)
            gh = self.global_view(h_ptr, dtype=float16, shape=[m_size, n_size], strides=strides)
            self.store_global(gc, acc, offsets=offsets, row_end=row_end, col_end=col_end)
            self.store_global(gh, self.cast(acc, float16), offsets=offsets, row_end=row_end, col_end=col_end)


class AccumulatorAtNegativeOffsets(_StoredProduct):
    """The product stored at ``(-shift_m, -shift_n)``, rows up to ``row_end`` only: what falls before the view's
    first row or column is not written."""

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, a_ptr: ~float16, b_ptr: ~float16,
                 c_ptr: ~float32, h_ptr: ~float16, shift_m: int32, shift_n: int32, row_end: int32):
        self.stored_product(m_size, n_size, k_size, a_ptr, b_ptr, c_ptr, h_ptr, [n_size, 1], [-shift_m, -shift_n],
                            row_end=row_end)


#: (shift_m, shift_n, row_end): columns and rows cut off on the left and the top, and a row_end below 0.
NEGATIVE_OFFSETS = [(3, 5, 128), (0, 9, 100), (70, 1, 128), (2, 0, -4)]


def _matmul_operands():
    rng = np.random.default_rng(0)
    a = rng.integers(-2, 3, (128, 64)).astype(np.float16)
    b = rng.integers(-2, 3, (64, 64)).astype(np.float16)
    return a, b


def _run_negative_offsets(backend, shifts, device=None):
    a, b = _matmul_operands()
    c, h = np.full((128, 64), -7, np.float32), np.full((128, 64), -7, np.float16)
    tensors = _on_device([a, b, c, h], device)
    with warpspec.use_backend(backend):
        AccumulatorAtNegativeOffsets()(128, 64, 64, *tensors, *shifts)
    return _to_host(tensors[2:], device)


@pytest.mark.filterwarnings("ignore::warpspec.UnwrittenOutputWarning")  # the clipped part, by design
def test_accumulator_tiles_at_negative_offsets_skip_what_lies_before_the_view():
    """The emulator clips a tile to the view on every side; the accumulator stores checked only the far sides
    (``r < rows_end_``, ``c < size1``), so a tile at a negative offset wrote before the view's first element. A
    row is now checked on both sides, a column with one unsigned comparison (a negative index is larger than any
    size), and the pair and 16-byte paths require a non-negative first column."""
    source = generate(kernel_for(AccumulatorAtNegativeOffsets(), {})).source
    # float32: 2 m64 blocks x 8 column pairs x 2 row halves; float16: 2 m64 blocks x 2 chunks x 2 row halves
    assert source.count("if (r >= 0 && r < rows_end_)") == 32 + 8
    assert source.count("col0_ >= 0;") == 2  # pairs_ (float32) and vec_ (float16)
    assert source.count("const int cols_end_ = max(gc_size1, 0);") == 1
    assert "static_cast<unsigned>(c + i) < static_cast<unsigned>(cols_end_)" in source
    assert "static_cast<unsigned>(c) < static_cast<unsigned>(cols_end_)" in source
    assert "(r < rows_end_)" not in source
    a, b = _matmul_operands()
    product = a.astype(np.float32) @ b.astype(np.float32).T
    for shift_m, shift_n, row_end in NEGATIVE_OFFSETS:
        c, h = _run_negative_offsets("emulator", (shift_m, shift_n, row_end))
        expected = np.full((128, 64), -7, np.float32)
        rows = max(min(row_end, 128 - shift_m), 0)
        expected[:rows, :64 - shift_n] = product[shift_m:shift_m + rows, shift_n:]
        np.testing.assert_array_equal(c, expected)
        np.testing.assert_array_equal(h, expected.astype(np.float16))


def test_negative_offsets_kernel_builds():
    """NVRTC compiles the clipped stores."""
    compile_kernel(kernel_for(AccumulatorAtNegativeOffsets(), {}))


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore::warpspec.UnwrittenOutputWarning")
@pytest.mark.parametrize("shifts", NEGATIVE_OFFSETS)
def test_gpu_accumulator_tiles_at_negative_offsets_are_the_emulators(shifts):
    for got, expected in zip(_run_negative_offsets("cuda", shifts, device="cuda"),
                             _run_negative_offsets("emulator", shifts)):
        np.testing.assert_array_equal(got, expected)


class AccumulatorTransposed(_StoredProduct):
    """The product stored through a transposed view (element (r, c) at ``c * 128 + r``: the memory holds Cᵀ), no
    column at or past ``col_end`` written: the bound a tile needs whose columns are a sequence's rows."""

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, a_ptr: ~float16, b_ptr: ~float16,
                 c_ptr: ~float32, h_ptr: ~float16, col_end: int32):
        self.stored_product(m_size, n_size, k_size, a_ptr, b_ptr, c_ptr, h_ptr, [1, m_size], [0, 0],
                            col_end=col_end)


#: Column ends: past the tile, inside a column pair and a quad's 8 columns, at 0, below 0.
COLUMN_ENDS = [64, 100, 37, 0, -5]


def _run_transposed(backend, col_end, device=None):
    a, b = _matmul_operands()
    c, h = np.full((64, 128), -7, np.float32), np.full((64, 128), -7, np.float16)
    tensors = _on_device([a, b, c, h], device)
    with warpspec.use_backend(backend):
        AccumulatorTransposed()(128, 64, 64, *tensors, col_end)
    return _to_host(tensors[2:], device)


@pytest.mark.filterwarnings("ignore::warpspec.UnwrittenOutputWarning")  # the columns past col_end, by design
def test_an_accumulator_stored_transposed_stops_at_its_column_end():
    """Through a view whose columns are strided, the pair and 16-byte paths fall back to single elements; columns at
    or past ``col_end`` are not written, as rows at or past ``row_end`` are not."""
    source = generate(kernel_for(AccumulatorTransposed(), {})).source
    assert source.count("const int cols_end_ = max((col_end < gc_size1 ? col_end : gc_size1), 0);") == 1
    assert source.count("const int cols_end_ = max((col_end < gh_size1 ? col_end : gh_size1), 0);") == 1
    a, b = _matmul_operands()
    product = a.astype(np.float32) @ b.astype(np.float32).T
    for col_end in COLUMN_ENDS:
        c, h = _run_transposed("emulator", col_end)
        expected = np.full((64, 128), -7, np.float32)
        cols = max(min(col_end, 64), 0)
        expected[:cols] = product.T[:cols]
        np.testing.assert_array_equal(c, expected)
        np.testing.assert_array_equal(h, expected.astype(np.float16))
    compile_kernel(kernel_for(AccumulatorTransposed(), {}))


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore::warpspec.UnwrittenOutputWarning")
@pytest.mark.parametrize("col_end", COLUMN_ENDS)
def test_gpu_accumulator_tiles_stored_transposed_are_the_emulators(col_end):
    for got, expected in zip(_run_transposed("cuda", col_end, device="cuda"), _run_transposed("emulator", col_end)):
        np.testing.assert_array_equal(got, expected)


# ------------------------------------------------------------------------------------------------ float scalars


class FloatScalars(warpspec.Script):
    """float32 scalar arithmetic the GPU does in float and the emulator did in float64, one 16-row band of ``dst``
    each, added to a zero tile: the part of 1e-8 that survives ``(s + 1e-8) - s``, an int32 converted to float32
    minus 2**24, and a division by zero."""

    def __call__(self, src_ptr: ~float32, dst_ptr: ~float32, s: float32, n: int32, z: float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        x = self.load_global(self.global_view(src_ptr, dtype=float32, shape=[16, 64]), offsets=[0, 0],
                             shape=[16, 64])
        dst = self.global_view(dst_ptr, dtype=float32, shape=[3 * 16, 64])
        nudged: float32 = s + 1e-8
        as_float: float32 = n
        self.store_global(dst, x + (nudged - s), offsets=[0, 0])
        self.store_global(dst, x + (as_float - 16777216.0), offsets=[16, 0])
        self.store_global(dst, x + s / z, offsets=[32, 0])


def _run_float_scalars(backend, args, device=None):
    src, dst = np.zeros((16, 64), np.float32), np.full((48, 64), np.nan, np.float32)
    tensors = _on_device([src, dst], device)
    with warpspec.use_backend(backend):
        FloatScalars()(*tensors, *args)
    return _to_host(tensors[1:], device)[0]


_TENTH = np.float32(0.1)
#: (s, n, z) and the three bands' values: float32 arguments and results, IEEE division by zero.
FLOAT_CASES = [((1.0, 16777217, 0.0), (0.0, 0.0, np.inf)), ((-2.0, 16777219, -0.0), (0.0, 4.0, np.inf)),
               ((0.0, 5, 0.0), (np.float32(1e-8), 5.0 - 16777216.0, np.nan)),
               ((0.1, 3, 1.0), ((_TENTH + np.float32(1e-8)) - _TENTH, 3.0 - 16777216.0, _TENTH))]


def test_float32_scalars_are_float32_values_on_the_emulator():
    """The emulator held float32 scalars, arguments included, as Python's float64: ``(s + 1e-8) - s`` kept 1e-8
    where the GPU's float gives 0 (for s = 0.1, 8.9e-9 where the float32 0.1 gives one ulp, 7.5e-9),
    ``float32(16777217)`` stayed exact where the GPU rounds it to 2**24, and ``s / 0.0`` raised ZeroDivisionError
    where the GPU gives an infinity or NaN."""
    for args, bands in FLOAT_CASES:
        dst = _run_float_scalars("emulator", args)
        for band, value in enumerate(bands):
            np.testing.assert_array_equal(dst[16 * band:16 * (band + 1)], np.full((16, 64), value, np.float32))


@pytest.mark.gpu
@pytest.mark.parametrize("args", [args for args, _ in FLOAT_CASES])
def test_gpu_float32_scalars_are_the_emulators(args):
    np.testing.assert_array_equal(_run_float_scalars("cuda", args, device="cuda"),
                                  _run_float_scalars("emulator", args))


# ---------------------------------------------------------------------------------------------- flush to zero

TINY = np.finfo(np.float32).tiny
#: Inputs the .ftz instructions read or write as zero, and what exp2, exp and log2 make of them on the GPU.
SUBNORMAL_CASES = {
    "exp2": ([-130.0, -149.0, -126.0, 1e-40], [0.0, 0.0, 2.0**-126, 1.0]),
    "exp": ([-100.0, -88.0, -87.0, 1e-40], [0.0, 0.0, np.exp(np.float32(-87.0)), 1.0]),
    "log2": ([1e-40, -1e-40, TINY, 0.0], [-np.inf, -np.inf, -126.0, -np.inf]),
}


def _run_unary(function, values, backend, device=None):
    x = np.ones((16, 64), np.float32)
    x[0, :len(values)] = values
    out = np.full_like(x, np.nan)
    tensors = _on_device([x, out], device)
    with warpspec.use_backend(backend):
        mk.Unary(function)(16, *tensors)
    return _to_host(tensors[1:], device)[0][0, :len(values)]


@pytest.mark.parametrize("function", sorted(SUBNORMAL_CASES))
def test_ftz_functions_flush_subnormals_on_the_emulator(function):
    """exp2, exp and log2 are ``ex2.approx.ftz.f32`` and ``lg2.approx.ftz.f32``, which read and write subnormal
    floats as zero: log2 of a subnormal is -inf on the GPU (the emulator said -132.9) and exp2(-130) is 0 (the
    emulator gave 2**-130)."""
    values, expected = SUBNORMAL_CASES[function]
    np.testing.assert_array_equal(_run_unary(function, values, "emulator"), np.float32(expected))


@pytest.mark.gpu
@pytest.mark.parametrize("function", sorted(SUBNORMAL_CASES))
def test_gpu_ftz_functions_flush_subnormals_as_the_emulator_does(function):
    values, _ = SUBNORMAL_CASES[function]
    got = _run_unary(function, values, "cuda", device="cuda")
    expected = _run_unary(function, values, "emulator")
    # Zeros and infinities exactly; the rest within the approximations' bounds (docs/language.md)
    np.testing.assert_allclose(got, expected, rtol=4e-6, atol=0)
    assert np.array_equal(np.isinf(got), np.isinf(expected)) and np.array_equal(got == 0, expected == 0)
