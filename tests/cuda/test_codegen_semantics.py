"""The generated CUDA computes what the emulator computes, for the operations whose C++ spelling once differed from
the emulator's semantics: ``min``/``max`` with a NaN or zeros of both signs (register tensors and runtime scalars),
and ``cdiv`` of runtime integers. On the CPU each test checks the generated source and the emulator's values (and
that NVRTC builds the source); its GPU twin compares the GPU with the emulator."""

import re

import numpy as np
import pytest

import warpspec
from warpspec import cdiv, float16, float32, int32, uint32
from warpspec.cuda.codegen import generate
from warpspec.cuda.launch import compile_kernel
from warpspec.runtime import kernel_for

NAN = float("nan")


class MinMaxNaN(warpspec.Script):
    """``min``/``max`` of float32 and float16 register tiles with each other, with a constant and with runtime
    scalars, one 64-row band of ``dst`` (float32) or ``half_dst`` (float16) each."""

    def __call__(self, a_ptr: ~float32, b_ptr: ~float32, h_ptr: ~float16, dst_ptr: ~float32,
                 half_dst_ptr: ~float16, s: float32, t: float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        a = self.load_global(self.global_view(a_ptr, dtype=float32, shape=[64, 64]), offsets=[0, 0], shape=[64, 64])
        b = self.load_global(self.global_view(b_ptr, dtype=float32, shape=[64, 64]), offsets=[0, 0], shape=[64, 64])
        h = self.load_global(self.global_view(h_ptr, dtype=float16, shape=[64, 64]), offsets=[0, 0], shape=[64, 64])
        dst = self.global_view(dst_ptr, dtype=float32, shape=[6 * 64, 64])
        half_dst = self.global_view(half_dst_ptr, dtype=float16, shape=[64, 64])
        self.store_global(dst, min(a, b), offsets=[0, 0])
        self.store_global(dst, max(a, b), offsets=[64, 0])
        self.store_global(dst, max(a, 0.0), offsets=[128, 0])
        self.store_global(dst, min(0.0, a), offsets=[192, 0])
        self.store_global(dst, a + min(s, t), offsets=[256, 0])
        self.store_global(dst, a + max(s, t), offsets=[320, 0])
        self.store_global(half_dst, max(h, 0.0), offsets=[0, 0])


def _min_max_inputs():
    """Tiles whose first columns pair a NaN with a number both ways round, and zeros of opposite signs both ways."""
    a = np.ones((64, 64), np.float32)
    b = np.full((64, 64), 2.0, np.float32)
    a[:, 0], b[:, 0] = NAN, 1.0
    a[:, 1], b[:, 1] = 1.0, NAN
    a[:, 2], b[:, 2] = -0.0, 0.0
    a[:, 3], b[:, 3] = 0.0, -0.0
    h = np.ones((64, 64), np.float16)
    h[:, 0] = NAN
    return a, b, h


#: Runtime scalar pairs (s, t) for ``min(s, t)``/``max(s, t)``: the emulator's Python ``min(s, t)`` is ``s`` unless
#: ``t < s``, so a NaN ``s`` gives NaN and a NaN ``t`` gives ``s``.
SCALAR_PAIRS = [(NAN, 1.0), (1.0, NAN)]


def _min_max_expected(a, b, h, s, t):
    """The emulator's bands: numpy's minimum and maximum (a NaN from either side; a tie gives the second operand),
    and Python's min and max on the scalars."""
    bands = [np.minimum(a, b), np.maximum(a, b), np.maximum(a, np.float32(0.0)), np.minimum(np.float32(0.0), a),
             a + np.float32(min(s, t)), a + np.float32(max(s, t))]
    return np.concatenate(bands), np.maximum(h.astype(np.float32), np.float32(0.0)).astype(np.float16)


def _run_min_max(backend, s, t, device=None):
    a, b, h = _min_max_inputs()
    dst, half_dst = np.zeros((6 * 64, 64), np.float32), np.zeros((64, 64), np.float16)
    if device is not None:
        torch = pytest.importorskip("torch")
        a, b, h, dst, half_dst = (torch.from_numpy(x).to(device) for x in (a, b, h, dst, half_dst))
    with warpspec.use_backend(backend):
        MinMaxNaN()(a, b, h, dst, half_dst, s, t)
    if device is not None:
        torch.cuda.synchronize()
        dst, half_dst = dst.cpu().numpy(), half_dst.cpu().numpy()
    return dst, half_dst


def _assert_same(got, expected):
    """Equal values, NaN where NaN, and the same sign on every zero."""
    np.testing.assert_array_equal(got, expected)
    assert np.array_equal(np.signbit(got), np.signbit(expected))


def test_min_max_of_float_tensors_propagate_nan_as_on_the_emulator():
    """A float tensor min/max tests its first operand for NaN: ``(a < b ? a : b)`` alone gave ``b`` for a NaN
    ``a``, so ``max(x, 0.0)`` (ReLU) turned a NaN into 0 on the GPU where numpy's maximum, the emulator's, keeps it."""
    source = generate(kernel_for(MinMaxNaN(), {})).source
    selections = [line for line in source.splitlines()
                  if "for (int i = 0; i < 32; ++i) { tmp" in line and " ? " in line and "(t " not in line]
    assert len(selections) == 5  # the four float32 tensor bands and the float16 one
    for line in selections:
        assert re.search(r"\(\((.+) [<>] .+ \|\| \1 != \1\) \? \1 : ", line), line
    a, b, h = _min_max_inputs()
    for s, t in SCALAR_PAIRS:
        dst, half_dst = _run_min_max("emulator", s, t)
        expected, half_expected = _min_max_expected(a, b, h, s, t)
        _assert_same(dst, expected)
        _assert_same(half_dst, half_expected)
    # The emulator's bands, spelled out for the first columns: NaN from either side, the second of tied zeros.
    dst, half_dst = _run_min_max("emulator", *SCALAR_PAIRS[0])
    assert np.isnan(dst[0, :2]).all() and np.isnan(dst[64, :2]).all() and np.isnan(dst[128, 0])
    assert np.isnan(dst[192, 0]) and np.isnan(half_dst[0, 0])
    assert list(np.signbit(dst[0, 2:4])) == [False, True] and list(np.signbit(dst[64, 2:4])) == [False, True]


def test_min_max_of_runtime_scalars_pick_the_operand_python_does():
    """A runtime scalar ``min(s, t)`` is emitted as Python's: ``s`` unless ``t < s``. ``(s < t ? s : t)`` gave
    ``t`` for a NaN ``s`` and ``NaN`` for a NaN ``t``, the opposite of the emulator on both."""
    source = generate(kernel_for(MinMaxNaN(), {})).source
    assert "(t < s ? t : s)" in source and "(t > s ? t : s)" in source
    assert "(s < t ? s : t)" not in source and "(s > t ? s : t)" not in source
    for s, t in SCALAR_PAIRS:
        dst, _ = _run_min_max("emulator", s, t)
        assert np.isnan(dst[256:384, 4:]).all() == np.isnan(s)
        assert np.isnan(dst[256:384, 4:]).any() == np.isnan(s)
        if not np.isnan(s):
            assert np.all(dst[256:384, 4:] == np.float32(2.0))


def test_min_max_kernel_builds():
    """NVRTC compiles the NaN-aware selections."""
    compile_kernel(kernel_for(MinMaxNaN(), {}))


@pytest.mark.gpu
@pytest.mark.parametrize("s, t", SCALAR_PAIRS)
def test_gpu_min_max_propagate_nan_as_on_the_emulator(s, t):
    """The GPU's bands are the emulator's, NaNs and signs of zeros included."""
    dst, half_dst = _run_min_max("cuda", s, t, device="cuda")
    expected, half_expected = _run_min_max("emulator", s, t)
    _assert_same(dst, expected)
    _assert_same(half_dst, half_expected)


class CeilingDivision(warpspec.Script):
    """``cdiv`` of runtime int32 and uint32 arguments by each other and by a constant, stored from replicated
    register tensors."""

    def __call__(self, dst_ptr: ~int32, udst_ptr: ~uint32, n: int32, d: int32, u: uint32, v: uint32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        out = self.register_tensor(dtype=int32, shape=[2], init=0)
        out[0] = cdiv(n, d)
        out[1] = cdiv(n, 64)
        uout = self.register_tensor(dtype=uint32, shape=[1], init=0)
        uout[0] = cdiv(u, v)
        self.store_global(self.global_view(dst_ptr, dtype=int32, shape=[2]), out, offsets=[0])
        self.store_global(self.global_view(udst_ptr, dtype=uint32, shape=[1]), uout, offsets=[0])


#: (n, d, u, v) and the emulator's (cdiv(n, d), cdiv(n, 64), cdiv(u, v)): the exact ceiling, for negative operands
#: and for numerators where n + d - 1 overflows.
CDIV_CASES = [((200, 64, 200, 64), (4, 4, 4)),
              ((-4, 3, 4294967295, 2), (-1, 0, 2147483648)),
              ((7, -2, 4294967294, 4294967295), (-3, 1, 1)),
              ((2147483647, 2, 0, 7), (1073741824, 33554432, 0)),
              ((-7, -2, 1, 1), (4, 0, 1))]


def _run_integer_kernel(kernel, backend, ints, args, device=None):
    """``kernel``'s outputs, an int32 array of ``ints`` elements and a uint32 one of one, after a launch with the
    scalar ``args`` on ``backend`` (on ``device``'s tensors for the GPU), as Python ints."""
    dst, udst = np.zeros(ints, np.int32), np.zeros(1, np.uint32)
    if device is not None:
        torch = pytest.importorskip("torch")
        # torch.uint32 for the ~uint32 parameter, which takes no other element type
        dst, udst = torch.from_numpy(dst).to(device), torch.from_numpy(udst).to(device)
    with warpspec.use_backend(backend):
        kernel(dst, udst, *args)
    if device is not None:
        torch.cuda.synchronize()
        dst, udst = dst.cpu().numpy(), udst.cpu().numpy()
    return tuple(int(x) for x in dst) + (int(udst[0]),)


def _run_cdiv(backend, args, device=None):
    return _run_integer_kernel(CeilingDivision(), backend, 2, args, device)


def test_cdiv_of_runtime_integers_is_the_exact_ceiling_as_on_the_emulator():
    """``cdiv`` is the exact ceiling, as the emulator's: by a positive constant, ``(n - 1) / 64 + 1`` for a
    positive ``n`` (the truncated quotient otherwise); by a runtime divisor, the truncated quotient plus one when
    inexact with a positive quotient. ``(n + d - 1) / d`` gave 0 for cdiv(-4, 3) where the emulator gives -1, and
    overflowed for cdiv(2**31 - 1, 2)."""
    source = generate(kernel_for(CeilingDivision(), {})).source
    assert "(n / d + (n % d != 0 && (n < 0) == (d < 0)))" in source
    assert "(u / v + (u % v != 0))" in source
    assert "(n > 0 ? (n - 1) / 64 + 1 : n / 64)" in source
    assert not re.search(r"\+ (d|v|64) - 1\)", source)
    for args, expected in CDIV_CASES:
        assert _run_cdiv("emulator", args) == expected, args


def test_cdiv_kernel_builds():
    """NVRTC compiles the three ceilings."""
    compile_kernel(kernel_for(CeilingDivision(), {}))


@pytest.mark.gpu
@pytest.mark.parametrize("args, expected", CDIV_CASES)
def test_gpu_cdiv_of_runtime_integers_is_the_emulators(args, expected):
    """The GPU's ceilings are the emulator's."""
    assert _run_cdiv("cuda", args, device="cuda") == _run_cdiv("emulator", args) == expected


class FloatToInteger(warpspec.Script):
    """A float32 argument converted to an int32 and to a uint32 scalar, each stored from a replicated register
    tensor."""

    def __call__(self, dst_ptr: ~int32, udst_ptr: ~uint32, s: float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        n: int32 = int32(s)
        u: uint32 = uint32(s)
        held = self.register_tensor(dtype=int32, shape=[1], init=0)
        held[0] = n
        uheld = self.register_tensor(dtype=uint32, shape=[1], init=0)
        uheld[0] = u
        self.store_global(self.global_view(dst_ptr, dtype=int32, shape=[1]), held, offsets=[0])
        self.store_global(self.global_view(udst_ptr, dtype=uint32, shape=[1]), uheld, offsets=[0])


#: Floats whose conversion Python's int() refuses (NaN, infinities) or a C cast leaves undefined (out of range),
#: beside plain ones, and what the GPU's cvt.rzi (the CUDA back end's static_cast), and so the emulator, makes of
#: them as int32 and as uint32.
CONVERSIONS = [(NAN, 0, 0), (3e9, 2**31 - 1, 3000000000), (-1e10, -2**31, 0), (float("inf"), 2**31 - 1, 2**32 - 1),
               (-float("inf"), -2**31, 0), (-2.7, -2, 0), (2.7, 2, 2), (5e9, 2**31 - 1, 2**32 - 1)]


def _run_float_to_integer(backend, s, device=None):
    return _run_integer_kernel(FloatToInteger(), backend, 1, (s,), device)


def test_float_scalars_become_integers_truncated_and_saturated_as_on_the_gpu():
    """The emulator converts a float scalar to a 32-bit integer as cvt.rzi does: toward zero, saturated to the
    type's range, NaN to 0. It wrapped out-of-range values instead, and a NaN or an infinity raised Python's own
    ValueError or OverflowError instead of a result."""
    for s, as_int32, as_uint32 in CONVERSIONS:
        assert _run_float_to_integer("emulator", s) == (as_int32, as_uint32), s


@pytest.mark.gpu
@pytest.mark.parametrize("s, as_int32, as_uint32", CONVERSIONS)
def test_gpu_float_scalars_become_integers_as_on_the_emulator(s, as_int32, as_uint32):
    assert _run_float_to_integer("cuda", s, device="cuda") == (as_int32, as_uint32)


class RowScale(warpspec.Script):
    """``a = a * factors`` in place, ``factors`` a [64, 1] column vector of ``s``; then ``b = a * factors`` into a
    new tensor. Both bands of ``dst``."""

    def __call__(self, a_ptr: ~float32, dst_ptr: ~float32, s: float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        a = self.load_global(self.global_view(a_ptr, dtype=float32, shape=[64, 64]), offsets=[0, 0], shape=[64, 64])
        factors = self.register_tensor(dtype=float32, shape=[64, 1], init=1.0) * s
        a = a * factors
        b = a * factors
        dst = self.global_view(dst_ptr, dtype=float32, shape=[128, 64])
        self.store_global(dst, a, offsets=[0, 0])
        self.store_global(dst, b, offsets=[64, 0])


def _row_scale_inputs(s):
    a = np.random.default_rng(0).uniform(-1.0, 1.0, (64, 64)).astype(np.float32)
    a[40, 0], a[41, 1] = -0.0, NAN
    once = a * np.float32(s)
    return a, np.concatenate([once, once * np.float32(s)])


@pytest.mark.parametrize("s", [1.0, 0.5])
def test_an_in_place_row_rescale_is_skipped_by_warps_whose_factors_are_all_one(s):
    """The in-place product by a column vector is emitted behind a warp vote (a warp whose factors are all 1 keeps
    its values, which x · 1 is), the product into a new tensor is not; the emulator's values are numpy's
    products, a negative zero and a NaN kept."""
    source = generate(kernel_for(RowScale(), {})).source
    assert source.count("__any_sync(__activemask(), ") == 1
    compile_kernel(kernel_for(RowScale(), {}))  # NVRTC takes the vote
    a, expected = _row_scale_inputs(s)
    dst = np.zeros((128, 64), np.float32)
    with warpspec.use_backend("emulator"):
        RowScale()(a, dst, s)
    _assert_same(dst, expected)


@pytest.mark.gpu
@pytest.mark.parametrize("s", [1.0, 0.5])
def test_gpu_row_rescale_is_the_emulators(s):
    """On the GPU a warp that skips (factors 1) and one that multiplies give the emulator's values."""
    torch = pytest.importorskip("torch")
    a, expected = _row_scale_inputs(s)
    dst = torch.zeros((128, 64), dtype=torch.float32, device="cuda")
    with warpspec.use_backend("cuda"):
        RowScale()(torch.from_numpy(a).cuda(), dst, s)
    torch.cuda.synchronize()
    _assert_same(dst.cpu().numpy(), expected)
