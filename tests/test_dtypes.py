"""bfloat16 and fp8 as ml_dtypes arrays: ``round_to`` against the CUDA conversions bit for bit, the raw bits of
``layout.bits_of`` / ``values_of``, and the bit-exact bridge to torch (skipped where torch is not installed)."""

import ml_dtypes
import numpy as np
import pytest

from warpspec import dtypes
from warpspec.layout.shared import bits_of, values_of


def f32(*patterns: int) -> np.ndarray:
    """float32 values given by their bit patterns."""
    return np.array(patterns, dtype=np.uint32).view(np.float32)


def bits(array: np.ndarray) -> list[int]:
    return array.view(f"u{array.dtype.itemsize}").tolist()


def test_numpy_types_are_the_ml_dtypes_types():
    assert dtypes.bfloat16.numpy == np.dtype(ml_dtypes.bfloat16)
    assert dtypes.float8_e4m3.numpy == np.dtype(ml_dtypes.float8_e4m3fn)
    assert dtypes.float8_e5m2.numpy == np.dtype(ml_dtypes.float8_e5m2)
    assert dtypes.float16.numpy == np.float16 and dtypes.int32.numpy == np.int32


def test_ml_dtypes_casts_out_of_range_fp8_to_nan_or_infinity():
    """Why round_to clips before casting: ml_dtypes' own casts do not saturate, cvt.rn.satfinite does."""
    wide = np.array([480.0, 1e6, np.inf], dtype=np.float32)
    assert bits(wide.astype(ml_dtypes.float8_e4m3fn)) == [0x7F, 0x7F, 0x7F]  # NaN: e4m3fn has no infinity
    assert bits(np.array([61440.0, np.inf], np.float32).astype(ml_dtypes.float8_e5m2)) == [0x7C, 0x7C]  # +inf
    # and it keeps the sign and payload of a NaN, where NVIDIA's conversions give one canonical NaN
    assert bits(f32(0xFFC00000).astype(ml_dtypes.float8_e5m2)) == [0xFE]
    assert bits(f32(0x7FC00000).astype(ml_dtypes.bfloat16)) == [0x7FC0]


BFLOAT16_CASES = [
    (0x3F800000, 0x3F80),  # 1.0
    (0x3F808000, 0x3F80),  # halfway between 0x3F80 and 0x3F81: ties to even (down)
    (0x3F818000, 0x3F82),  # halfway between 0x3F81 and 0x3F82: ties to even (up)
    (0x3F808001, 0x3F81),  # just above halfway
    (0x80000000, 0x8000),  # -0.0 keeps its sign
    (0x00010000, 0x0001),  # smallest bfloat16 subnormal
    (0x7F7FFFFF, 0x7F80),  # float32 max rounds to +inf: cvt.rn.bf16.f32 does not saturate
    (0xFF800000, 0xFF80),  # -inf
    (0x7FC00000, 0x7FFF),  # NaN -> the canonical NaN
    (0xFFC00000, 0x7FFF),  # -NaN too
    (0x7F800001, 0x7FFF),  # a signalling NaN payload too
]


def test_bfloat16_rounds_to_nearest_even():
    inputs, expected = zip(*BFLOAT16_CASES)
    out = dtypes.round_to(dtypes.bfloat16, f32(*inputs))
    assert out.dtype == ml_dtypes.bfloat16
    assert [hex(b) for b in bits(out)] == [hex(b) for b in expected]


E4M3_CASES = [
    (1.0, 0x38), (-1.0, 0xB8),
    (1.0625, 0x38),  # halfway between 1 and 1.125: ties to even
    (1.1875, 0x3A),  # halfway between 1.125 and 1.25: ties to even (up)
    (448.0, 0x7E), (-448.0, 0xFE),  # the largest finite value
    (464.0, 0x7E), (465.0, 0x7E), (1e6, 0x7E), (-1e6, 0xFE),  # beyond it: saturated
    (np.inf, 0x7E), (-np.inf, 0xFE),  # satfinite saturates infinities too
    (2.0**-9, 0x01),  # smallest subnormal
    (2.0**-10, 0x00),  # half of it: ties to even (zero)
    (-(2.0**-10) * 1.01, 0x81),
    (-(2.0**-12), 0x80),  # underflow keeps the sign
    (np.nan, 0x7F), (-np.nan, 0x7F),
]
E5M2_CASES = [
    (1.0, 0x3C), (1.125, 0x3C), (1.375, 0x3E),  # ties to even both ways
    (57344.0, 0x7B), (-57344.0, 0xFB),  # the largest finite value
    (61440.0, 0x7B),  # halfway to the next power of two: RNE alone would give inf
    (1e6, 0x7B), (np.inf, 0x7B), (-np.inf, 0xFB),  # saturated, infinities included
    (2.0**-16, 0x01), (2.0**-17, 0x00), (-(2.0**-17) * 1.01, 0x81),
    (np.nan, 0x7F), (-np.nan, 0x7F),  # NaN -> 0x7F, where ml_dtypes would keep 0x7E / 0xFE
]


@pytest.mark.parametrize("dtype, cases", [(dtypes.float8_e4m3, E4M3_CASES), (dtypes.float8_e5m2, E5M2_CASES)],
                         ids=["e4m3", "e5m2"])
def test_fp8_rounds_and_saturates_like_cvt_rn_satfinite(dtype, cases):
    inputs, expected = zip(*cases)
    out = dtypes.round_to(dtype, np.array(inputs, dtype=np.float32))
    assert out.dtype == dtype.numpy
    assert [hex(b) for b in bits(out)] == [hex(b) for b in expected]


@pytest.mark.parametrize("dtype", [dtypes.bfloat16, dtypes.float8_e4m3, dtypes.float8_e5m2], ids=lambda d: d.name)
def test_every_value_survives_float32_and_back(dtype):
    """Every finite bit pattern rounds back to itself; e5m2's infinities saturate (bfloat16 keeps its own); every
    NaN pattern becomes the canonical NaN."""
    patterns = np.arange(2 ** dtype.nbits, dtype=f"u{dtype.nbytes}")
    values = values_of(patterns, dtype)
    wide = values.astype(np.float32)
    again = dtypes.round_to(dtype, wide).view(patterns.dtype)
    finite, nan = np.isfinite(wide), np.isnan(wide)
    np.testing.assert_array_equal(again[finite], patterns[finite])
    infinities = {dtypes.bfloat16: [0x7F80, 0xFF80], dtypes.float8_e4m3: [], dtypes.float8_e5m2: [0x7B, 0xFB]}
    assert again[np.isinf(wide)].tolist() == infinities[dtype]
    assert set(again[nan].tolist()) == {0x7FFF if dtype is dtypes.bfloat16 else 0x7F}
    # bits_of / values_of are views: every pattern, NaN payloads included, comes back unchanged
    np.testing.assert_array_equal(bits_of(values, dtype), patterns)


def test_round_to_goes_through_float32_and_takes_any_numeric_input():
    assert bits(dtypes.round_to(dtypes.bfloat16, np.array([1.0, 2.5]))) == [0x3F80, 0x4020]  # float64 input
    assert bits(dtypes.round_to(dtypes.float8_e4m3, np.array([3], dtype=np.int32))) == [0x44]
    assert bits(dtypes.round_to(dtypes.float8_e5m2, dtypes.round_to(dtypes.bfloat16, [1.75]))) == [0x3F]
    for dtype in (dtypes.bfloat16, dtypes.float8_e4m3, dtypes.float8_e5m2):  # scalars give 0-d arrays
        assert dtypes.round_to(dtype, -1e6).shape == () and np.isnan(dtypes.round_to(dtype, np.nan))
    np.testing.assert_array_equal(dtypes.round_to(dtypes.int32, [1.9, -1.9]), np.array([1, -1], np.int32))


def test_bits_of_refuses_values_the_dtype_does_not_hold_exactly():
    assert bits_of(np.array([0.3125, -448.0], dtype=np.float32), dtypes.float8_e4m3).tolist() == [0x2A, 0xFE]
    with pytest.raises(ValueError, match="0.3 is not exactly representable as float8_e4m3"):
        bits_of(np.array([0.3], dtype=np.float32), dtypes.float8_e4m3)
    with pytest.raises(ValueError, match="1000.0 is not exactly representable as float8_e4m3"):
        bits_of(np.array([1.0, 1000.0]), dtypes.float8_e4m3)  # would be NaN, not 448: bits_of never saturates


# ------------------------------------------------------------------------------------------------------ torch


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3", "float8_e5m2"])
def test_torch_tensors_cross_to_numpy_bit_for_bit(name):
    torch = pytest.importorskip("torch")
    dtype = dtypes.BY_NAME[name]
    torch_dtype = {"bfloat16": torch.bfloat16, "float8_e4m3": torch.float8_e4m3fn,
                   "float8_e5m2": torch.float8_e5m2}[name]
    raw = torch.int16 if dtype.nbytes == 2 else torch.uint8
    # Every bit pattern, NaN payloads and both zeros included: a float round trip would change some.
    tensor = torch.arange(2 ** dtype.nbits, dtype=torch.int32).to(raw).view(torch_dtype)
    array = dtypes.torch_to_numpy(tensor)
    assert array.dtype == dtype.numpy
    np.testing.assert_array_equal(array.view(f"u{dtype.nbytes}"), np.arange(2 ** dtype.nbits))
    back = dtypes.numpy_to_torch(array)
    assert back.dtype == tensor.dtype and torch.equal(back.view(raw), tensor.view(raw))
    array[0] = 1.0  # the array shares the tensor's memory
    assert tensor[0].item() == 1.0
    assert dtypes.of_torch(tensor.dtype) is dtype
