"""Array arguments on the emulator: arrays of the exact dtype (ml_dtypes for bfloat16 and fp8) give the bits the GPU
gives, and a wrong array is an ArgumentError naming it before anything runs (float32 data for a bfloat16 pointer,
a read-only output, an ndarray subclass such as np.matrix). The torch tests skip where torch is not installed."""

import ml_dtypes
import numpy as np
import pytest

from tests.kernels import feature_kernels as fk
import warpspec
from tma_copy import TmaCopy
from warpspec import bfloat16, cdiv, dtypes, float8_e4m3, float8_e5m2, float32, int32
from warpspec.cli.inputs import pointer_arrays
from warpspec.emulator.host import written_pointers
from warpspec.frontend.kernel import parameters
from warpspec.runtime import kernel_for



class _Tiles(warpspec.Script):
    """2-D kernels over [m, n] arrays, one [16, 64] register tile per block (load_global / store_global)."""

    def tiles(self, m_size, n_size, x_ptr, out_ptr, in_dtype, out_dtype):
        self.attrs.blocks = [cdiv(m_size, 16), cdiv(n_size, 64)]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=in_dtype, shape=[m_size, n_size])
        out = self.global_view(out_ptr, dtype=out_dtype, shape=[m_size, n_size])
        offsets = [16 * self.blockIdx.x, 64 * self.blockIdx.y]
        return self.load_global(x, offsets=offsets, shape=[16, 64]), out, offsets


class ScaleBF16(_Tiles):
    """out = 3·x + 1 in bfloat16: two roundings, one per operation."""

    def __call__(self, m_size: int32, n_size: int32, x_ptr: ~bfloat16, out_ptr: ~bfloat16):
        tile, out, offsets = self.tiles(m_size, n_size, x_ptr, out_ptr, bfloat16, bfloat16)
        self.store_global(out, tile * 3.0 + 1.0, offsets=offsets)


class CopyBF16(_Tiles):
    def __call__(self, m_size: int32, n_size: int32, x_ptr: ~bfloat16, out_ptr: ~bfloat16):
        tile, out, offsets = self.tiles(m_size, n_size, x_ptr, out_ptr, bfloat16, bfloat16)
        self.store_global(out, tile, offsets=offsets)


class CopyE4M3(_Tiles):
    def __call__(self, m_size: int32, n_size: int32, x_ptr: ~float8_e4m3, out_ptr: ~float8_e4m3):
        tile, out, offsets = self.tiles(m_size, n_size, x_ptr, out_ptr, float8_e4m3, float8_e4m3)
        self.store_global(out, tile, offsets=offsets)


class DoubleE4M3(_Tiles):
    def __call__(self, m_size: int32, n_size: int32, x_ptr: ~float8_e4m3, out_ptr: ~float8_e4m3):
        tile, out, offsets = self.tiles(m_size, n_size, x_ptr, out_ptr, float8_e4m3, float8_e4m3)
        self.store_global(out, tile + tile, offsets=offsets)


class CastToE4M3(_Tiles):
    def __call__(self, m_size: int32, n_size: int32, x_ptr: ~float32, out_ptr: ~float8_e4m3):
        tile, out, offsets = self.tiles(m_size, n_size, x_ptr, out_ptr, float32, float8_e4m3)
        self.store_global(out, self.cast(tile, float8_e4m3), offsets=offsets)


class FillE5M2(warpspec.Script):
    def __call__(self, n_size: int32, out_ptr: ~float8_e5m2):
        self.attrs.blocks = [cdiv(n_size, 64)]
        self.attrs.warps = 4
        out = self.global_view(out_ptr, dtype=float8_e5m2, shape=[n_size])
        regs = self.register_tensor(float8_e5m2, [64], init=1e6)
        regs[1] = -1e6
        self.store_global(out, regs, offsets=[64 * self.blockIdx.x])


@pytest.fixture(autouse=True)
def emulator():
    with warpspec.use_backend("emulator"):
        yield


def raw(array: np.ndarray) -> np.ndarray:
    return array.view(f"u{array.dtype.itemsize}")


# ------------------------------------------------------------------------------------------------ values


def test_bfloat16_results_are_the_bits_of_one_rounding_per_operation():
    x = dtypes.round_to(bfloat16, np.random.default_rng(0).standard_normal((40, 100)) * 10)
    out = np.full(x.shape, np.nan, dtype=ml_dtypes.bfloat16)
    ScaleBF16()(40, 100, x, out)
    tripled = dtypes.round_to(bfloat16, x.astype(np.float32) * 3)
    np.testing.assert_array_equal(raw(out), raw(dtypes.round_to(bfloat16, tripled.astype(np.float32) + 1)))


def test_a_cast_to_fp8_saturates():
    x = np.array([[1.0, 500.0, -1e6, np.inf, 0.3] + [0.0] * 59] * 16, dtype=np.float32)
    out = np.zeros(x.shape, dtype=ml_dtypes.float8_e4m3fn)
    CastToE4M3()(16, 64, x, out)
    assert raw(out)[0, :5].tolist() == [0x38, 0x7E, 0xFE, 0x7E, 0x2A]  # 1, 448, -448, 448, 0.3125


def test_fp8_arithmetic_saturates():
    x = np.full((16, 64), 300, dtype=ml_dtypes.float8_e4m3fn)
    out = np.zeros_like(x)
    DoubleE4M3()(16, 64, x, out)
    assert set(raw(out).ravel().tolist()) == {0x7E}  # 600 -> 448, as cvt.rn.satfinite gives


def test_fp8_register_initialisers_and_element_stores_saturate():
    out = np.zeros(64, dtype=ml_dtypes.float8_e5m2)
    FillE5M2()(64, out)
    assert raw(out).tolist() == [0x7B, 0xFB] + [0x7B] * 62  # ±1e6 -> ±57344


# ---------------------------------------------------------------------------------------------- refusals


def test_float32_data_for_a_bfloat16_pointer_is_refused_with_the_conversion():
    x = np.zeros((16, 64), dtype=np.float32)
    out = np.zeros((16, 64), dtype=ml_dtypes.bfloat16)
    with pytest.raises(warpspec.ArgumentError, match=r"argument 'x_ptr': expected dtype bfloat16 for a ~bfloat16 "
                                                     r"parameter, got float32; convert it with "
                                                     r"x_ptr\.astype\(ml_dtypes\.bfloat16\)"):
        ScaleBF16()(16, 64, x, out)


def test_float32_data_for_an_fp8_pointer_is_refused_with_the_saturating_conversion():
    x = np.zeros((16, 64), dtype=ml_dtypes.float8_e4m3fn)
    out = np.zeros((16, 64), dtype=np.float32)
    with pytest.raises(warpspec.ArgumentError, match=r"argument 'out_ptr': expected dtype float8_e4m3fn for a "
                                                     r"~float8_e4m3 parameter, got float32; convert it with "
                                                     r"warpspec\.dtypes\.round_to\(warpspec\.float8_e4m3, out_ptr\)"):
        CopyE4M3()(16, 64, x, out)


def test_a_read_only_array_the_kernel_stores_to_is_refused_before_the_run():
    x = np.ones((16, 64), dtype=np.float32)
    x.flags.writeable = False  # read-only inputs are fine
    out = np.zeros((16, 64), dtype=np.float32)
    out.flags.writeable = False
    with pytest.raises(warpspec.ArgumentError, match=r"argument 'out_ptr': the kernel writes this array, but it is "
                                                     r"read-only \(pass a writeable copy, e\.g\. out_ptr\.copy\(\)\)"):
        fk.ScaleRows()(16, 64, x, out)
    out = np.zeros((16, 64), dtype=np.float32)
    fk.ScaleRows()(16, 64, x, out)
    np.testing.assert_array_equal(out, np.full((16, 64), 3.0, np.float32))


def test_a_read_only_destination_of_a_tma_store_is_refused():
    src = np.ones((64, 64), dtype=np.float16)
    src.flags.writeable = False
    dst = np.zeros((64, 64), dtype=np.float16)
    dst.flags.writeable = False
    with pytest.raises(warpspec.ArgumentError, match="argument 'dst_ptr': the kernel writes this array, but it is "
                                                     "read-only"):
        TmaCopy(tile_m=64, tile_n=64)(64, 64, src, dst)


def test_written_pointers_are_the_targets_of_stores_and_tma_stores():
    copy = kernel_for(TmaCopy(tile_m=64, tile_n=64), {})
    scale = kernel_for(fk.ScaleRows(), {})
    uids = {kernel: {p.name: p.var.uid for p in kernel.params} for kernel in (copy, scale)}
    assert written_pointers(copy) == {uids[copy]["dst_ptr"]}
    assert written_pointers(scale) == {uids[scale]["out_ptr"]}


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
@pytest.mark.parametrize("wrap", [np.asmatrix, lambda a: np.ma.masked_array(a, mask=a > 1.0)],
                         ids=["matrix", "masked"])
def test_an_ndarray_subclass_with_its_own_indexing_is_refused(wrap):
    x = wrap(np.ones((16, 64), dtype=np.float32))
    out = np.zeros((16, 64), dtype=np.float32)
    with pytest.raises(warpspec.ArgumentError, match=rf"argument 'x_ptr': got a numpy(\.ma)?\.{type(x).__name__}, "
                                                     r"an ndarray subclass that indexes differently from a plain "
                                                     r"array; pass np\.asarray\(x_ptr\) instead"):
        fk.ScaleRows()(16, 64, x, out)


def test_a_memory_mapped_output_is_written(tmp_path):
    x = np.ones((16, 64), dtype=np.float32)
    out = np.memmap(tmp_path / "out.bin", dtype=np.float32, mode="w+", shape=(16, 64))
    fk.ScaleRows()(16, 64, x, out)
    out.flush()
    np.testing.assert_array_equal(np.fromfile(tmp_path / "out.bin", dtype=np.float32), np.full(16 * 64, 3.0))


def test_warpspec_check_inputs_are_arrays_of_the_pointee_type():
    script = fk.MatmulBF16(num_stages=2, block_m=128, block_n=64, block_k=64)
    arrays = pointer_arrays(script, parameters(fk.MatmulBF16), {"m_size": 130, "n_size": 70, "k_size": 64})
    assert {name: array.dtype for name, array in arrays.items()} == dict.fromkeys(
        ["a_ptr", "b_ptr", "c_ptr"], np.dtype(ml_dtypes.bfloat16))
    assert np.std(arrays["a_ptr"].astype(np.float32)) > 0.5  # random normal data, not zeros
    script(130, 70, 64, *arrays.values())  # and the emulator takes them


# ------------------------------------------------------------------------------------------------- torch


@pytest.mark.parametrize("kernel, torch_name", [(CopyBF16, "bfloat16"), (CopyE4M3, "float8_e4m3fn")])
def test_torch_tensors_keep_every_bit_pattern(kernel, torch_name):
    """Every bit pattern (NaN payloads, -0.0) goes through a copy kernel unchanged: no float conversion on the way
    in or back."""
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, torch_name)
    bits = torch.int16 if dtype.itemsize == 2 else torch.uint8
    n = 2 ** (8 * dtype.itemsize)
    x = torch.arange(n, dtype=torch.int32).to(bits).view(dtype).reshape(-1, 256)
    out = torch.zeros_like(x)
    kernel()(x.shape[0], 256, x, out)
    assert torch.equal(out.view(bits), x.view(bits))


def test_bfloat16_results_are_written_back_bit_exactly_into_torch_tensors():
    torch = pytest.importorskip("torch")
    x = torch.randn(40, 100, generator=torch.Generator().manual_seed(0)).bfloat16()
    out = torch.full((40, 100), float("nan")).bfloat16()
    ScaleBF16()(40, 100, x, out)
    expected = np.full((40, 100), np.nan, dtype=ml_dtypes.bfloat16)
    ScaleBF16()(40, 100, dtypes.torch_to_numpy(x).copy(), expected)
    assert out.dtype == torch.bfloat16
    np.testing.assert_array_equal(out.view(torch.int16).numpy(), expected.view(np.int16))


def test_results_are_written_into_a_tensor_that_requires_grad():
    torch = pytest.importorskip("torch")
    x = torch.ones(16, 64)
    out = torch.zeros(16, 64, requires_grad=True)
    fk.ScaleRows()(16, 64, x, out)
    assert torch.equal(out.detach(), torch.full((16, 64), 3.0))
