"""warpspec.cuda.driver: argument checks that run before any driver call (no GPU needed), and one end-to-end
TMA launch that runs only on a Hopper GPU."""

from __future__ import annotations

import ctypes
import sys

import numpy as np
import pytest

from warpspec import dtypes
from warpspec.cuda import driver
from warpspec.errors import ArgumentError

GOOD = dict(dtype=dtypes.bfloat16, global_address=0x7F0000000000, global_shape=(64, 40),
            global_strides_bytes=(128,), box=(64, 64), swizzle_bytes=128, l2_promotion=128)


def test_valid_tensor_map_arguments_are_normalised():
    spec = driver.check_tiled_tensor_map(**{**GOOD, "global_shape": [np.int64(64), 40], "box": [64, np.int32(64)]})
    assert spec.global_shape == (64, 40) and spec.box == (64, 64) and spec.global_strides_bytes == (128,)
    assert all(type(value) is int for value in spec.global_shape + spec.box)
    assert spec.dtype is dtypes.bfloat16 and spec.swizzle_bytes == 128 and spec.l2_promotion == 128
    # A box larger than the tensor is allowed (out-of-bounds rows load as zero), and so is rank 1.
    assert driver.check_tiled_tensor_map(dtypes.float8_e4m3, 0x1000, (4096,), (), (256,)).box == (256,)
    # Equal arguments give equal specs: that is what the tensor map cache keys on.
    assert driver.check_tiled_tensor_map(**GOOD) == driver.check_tiled_tensor_map(**GOOD)


@pytest.mark.parametrize("change, message", [
    (dict(global_address=0x7F0000000008), "global_address 0x7f0000000008 must be a non-null device address aligned "
                                          "to 16 bytes (it is 8 bytes past"),
    (dict(global_address=0), "global_address 0x0 must be a non-null"),
    (dict(global_address=1.5), "global_address must be an integer"),
    (dict(dtype=dtypes.boolean), "dtype boolean cannot be loaded by TMA"),
    (dict(global_shape=(64, 40, 1, 1, 1, 1), global_strides_bytes=(128,) * 5, box=(64,) * 6),
     "global_shape has 6 dimensions; TMA supports 1 to 5"),
    (dict(global_shape=(64, 0)), "global_shape[1] = 0 must be in [1, 2^32]"),
    (dict(global_strides_bytes=(120,)), "global_strides_bytes[0] = 120 (stride of dimension 1) must be a positive "
                                        "multiple of 16"),
    (dict(global_strides_bytes=(2**40,)), "below 2^40"),
    (dict(global_strides_bytes=(128, 8192)), "global_strides_bytes has 2 values for a rank-2 tensor; expected 1"),
    (dict(box=(64,)), "box has 1 values for a rank-2 tensor; expected 2"),
    (dict(box=(64, 257)), "box[1] = 257 must be in [1, 256]"),
    (dict(box=(64, 0)), "box[1] = 0 must be in [1, 256]"),
    (dict(box=(4, 64), swizzle_bytes=0), "box[0] * 2 bytes (bfloat16) = 8 bytes must be a multiple of 16; use box[0] "
                                         "a multiple of 8"),
    (dict(box=(128, 64), global_shape=(128, 40), global_strides_bytes=(256,)),
     "box[0] * 2 bytes = 256 bytes exceeds the 128-byte swizzle span; use box[0] <= 64"),
    (dict(box=(64, 64), swizzle_bytes=64), "box[0] * 2 bytes = 128 bytes exceeds the 64-byte swizzle span; use "
                                           "box[0] <= 32"),
    (dict(swizzle_bytes=16), "swizzle_bytes = 16 must be one of 0, 32, 64, 128"),
    (dict(l2_promotion=32), "l2_promotion = 32 must be one of 0, 64, 128, 256"),
])
def test_tensor_map_rules_are_checked_before_the_driver(change, message):
    with pytest.raises(ArgumentError) as raised:
        driver.check_tiled_tensor_map(**{**GOOD, **change})
    assert message in str(raised.value)
    # encode_tiled_tensor_map runs the same check first, so it fails the same way without a GPU.
    with pytest.raises(ArgumentError) as raised_by_encode:
        driver.encode_tiled_tensor_map(**{**GOOD, **change})
    assert str(raised_by_encode.value) == str(raised.value)


def test_unswizzled_box_may_be_wider_than_128_bytes():
    spec = driver.check_tiled_tensor_map(**{**GOOD, "box": (256, 8), "global_shape": (256, 40),
                                            "global_strides_bytes": (512,), "swizzle_bytes": 0})
    assert spec.box == (256, 8)


def test_numpy_array_is_rejected_as_cpu_memory_with_its_name():
    with pytest.raises(ArgumentError) as raised:
        driver.as_device_array(np.zeros((4, 8), np.float32), "a_ptr")
    assert "argument 'a_ptr' is a CPU array (ndarray), not GPU memory" in str(raised.value)


def test_object_without_array_interface_is_rejected_with_its_name():
    with pytest.raises(ArgumentError, match=r"argument 'scale': list object is not a GPU array"):
        driver.as_device_array([1.0, 2.0], "scale")


class _CudaArrayInterface:
    def __init__(self, typestr: str):
        self.__cuda_array_interface__ = {"shape": (4, 8), "typestr": typestr, "data": (0x7F0000000000, False),
                                         "strides": None, "version": 3}


def test_untyped_bfloat16_cuda_array_interface_is_rejected():
    with pytest.raises(ArgumentError) as raised:
        driver.as_device_array(_CudaArrayInterface("<V2"), "k")
    assert "argument 'k' has __cuda_array_interface__ typestr '<V2'" in str(raised.value)
    assert "pass a torch tensor or a DLPack producer" in str(raised.value)
    with pytest.raises(ArgumentError, match="typestr '<f8'"):
        driver.as_device_array(_CudaArrayInterface("<f8"), "k")


class _PretendCudaDLPack:
    """Forwards numpy's DLPack capsule but reports a CUDA device, to test the capsule parsing without a GPU."""

    def __init__(self, array: np.ndarray):
        self.array = array

    def __dlpack__(self):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return (2, 3)  # kDLCUDA, device 3


def test_dlpack_capsule_gives_pointer_shape_strides_and_dtype():
    base = np.arange(4 * 8, dtype=np.int32).reshape(4, 8)
    view = base[1:, ::2]
    array = driver.as_device_array(_PretendCudaDLPack(view), "x")
    assert array == driver.DeviceArray(view.ctypes.data, (3, 4), (8, 2), "int32", 3)
    assert array.dtype is dtypes.int32
    contiguous = driver.as_device_array(_PretendCudaDLPack(np.zeros((2, 3), np.float16)), "y")
    assert (contiguous.shape, contiguous.strides_elements, contiguous.dtype_name) == ((2, 3), (3, 1), "float16")
    with pytest.raises(ArgumentError, match=r"argument 'z' has DLPack dtype \(code 2, 64 bits, 1 lanes\)"):
        driver.as_device_array(_PretendCudaDLPack(np.zeros(3, np.float64)), "z")


def test_kernel_params_point_at_typed_values():
    tensor = driver.DeviceArray(0x7F0000000100, (4,), (1,), "float32", 0)
    pointers, _values = driver._kernel_params([0x7F0000000000, tensor, ctypes.c_int32(-5), ctypes.c_float(2.5)])
    assert ctypes.c_uint64.from_address(pointers[0]).value == 0x7F0000000000
    assert ctypes.c_uint64.from_address(pointers[1]).value == 0x7F0000000100
    assert ctypes.c_int32.from_address(pointers[2]).value == -5
    assert ctypes.c_float.from_address(pointers[3]).value == 2.5


@pytest.mark.parametrize("param, message", [
    (1.5, "kernel parameter 1: float 1.5 cannot be passed"),
    (True, "kernel parameter 1: bool True cannot be passed"),
    (-1, "kernel parameter 1: -1 is not a device pointer"),
    (np.float32(1.0), "kernel parameter 1: float32 "),
])
def test_ambiguous_kernel_params_are_refused(param, message):
    with pytest.raises(ArgumentError) as raised:
        driver._kernel_params([0x7F0000000000, param])
    assert message in str(raised.value)


def test_launch_shapes_are_checked_before_the_driver():
    with pytest.raises(ArgumentError, match=r"grid.x = 3 is not a multiple of cluster.x = 2"):
        driver.launch(None, (3, 1, 1), (128, 1, 1), 0, [], cluster=(2, 1, 1))
    with pytest.raises(ArgumentError, match=r"block must be three positive integers"):
        driver.launch(None, (1, 1, 1), (128, 1), 0, [])


def test_has_hopper_gpu_is_false_when_the_driver_cannot_load(monkeypatch):
    def missing_driver(flags):
        raise RuntimeError("Failed to dlopen libcuda.so.1")

    monkeypatch.setattr(driver, "_initialised", False)
    monkeypatch.setattr(driver, "_contexts", {})
    monkeypatch.setattr(driver.cu, "cuInit", missing_driver)
    assert driver.has_hopper_gpu() is False
    with pytest.raises(driver.CudaError, match="could not be loaded"):
        driver.context()


def test_check_raises_cuda_error_with_the_error_name():
    with pytest.raises(driver.CudaError) as raised:
        driver.check((driver.cu.CUresult.CUDA_ERROR_INVALID_VALUE,), "launching k")
    assert str(raised.value).startswith("launching k: CUDA_ERROR_INVALID_VALUE")
    assert raised.value.code == driver.cu.CUresult.CUDA_ERROR_INVALID_VALUE
    assert driver.check((driver.cu.CUresult.CUDA_SUCCESS, 7)) == 7
    assert driver.check((driver.cu.CUresult.CUDA_SUCCESS, 7, 8)) == (7, 8)
    assert driver.check((driver.cu.CUresult.CUDA_SUCCESS,)) is None


def test_launch_structures_have_cuda_h_layouts():
    """The ctypes CUlaunchConfig and CUlaunchAttribute a launch plan fills hold the same bytes as cuda-bindings'
    structures (which mirror cuda.h) with the same fields."""
    reference = driver.cu.CUlaunchConfig()
    reference.gridDimX, reference.gridDimY, reference.gridDimZ = 3, 4, 5
    reference.blockDimX, reference.blockDimY, reference.blockDimZ = 160, 1, 1
    reference.sharedMemBytes, reference.hStream, reference.numAttrs = 9000, driver.cu.CUstream(0x1234), 1
    ours = driver.LaunchConfig(3, 4, 5, 160, 1, 1, 9000, 0x1234, 0, 1)
    assert ctypes.sizeof(ours) == 56
    assert bytes(ours) == ctypes.string_at(reference.getPtr(), 56)
    attribute = driver.cu.CUlaunchAttribute()
    attribute.id = driver.cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attribute.value.clusterDim.x, attribute.value.clusterDim.y, attribute.value.clusterDim.z = 2, 3, 4
    mine = driver.LaunchAttribute()
    mine.id = driver.CLUSTER_DIMENSION
    mine.value[0], mine.value[1] = 2 | 3 << 32, 4  # how a plan writes clusterDim.x, .y (one word) and .z
    assert ctypes.sizeof(mine) == 72 and bytes(mine) == ctypes.string_at(attribute.getPtr(), 72)


def test_error_names_and_the_default_stream_without_pytorch_cuda():
    assert driver.error_name(1).startswith("CUDA_ERROR_INVALID_VALUE")
    assert driver.error_name(987654) == "CUresult 987654"
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        assert driver.default_stream(0) == 0 and driver.default_device() == 0


# ------------------------------------------------------------------------------------------ on a Hopper GPU

TMA_COPY = r"""
struct alignas(64) TmaMap { unsigned long long opaque[16]; };

// Each CTA loads the 64x64 bf16 box at (0, row0) into 1024-aligned dynamic shared memory and writes it out as
// float32; ranks[blockIdx.x] records %cluster_ctarank to show the cluster launch took effect.
extern "C" __global__ void __launch_bounds__(128) tma_copy(const __grid_constant__ TmaMap map, float* out,
                                                           int* ranks, int row0) {
    extern __shared__ unsigned char dynamic_smem[];
    __shared__ alignas(8) unsigned long long bar;
    unsigned tile = ((unsigned)__cvta_generic_to_shared(dynamic_smem) + 1023u) & ~1023u;
    unsigned bar_addr = (unsigned)__cvta_generic_to_shared(&bar);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar_addr) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar_addr), "r"(64 * 64 * 2)
                     : "memory");
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3}], [%4];"
                     :: "r"(tile), "l"((unsigned long long)&map), "r"(0), "r"(row0), "r"(bar_addr) : "memory");
    }
    asm volatile("{\n .reg .pred done;\n wait_loop:\n mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
                 " @!done bra wait_loop;\n}\n" :: "r"(bar_addr) : "memory");
    for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x) {
        unsigned short bits;
        asm volatile("ld.shared.u16 %0, [%1];" : "=h"(bits) : "r"(tile + 2 * i));
        out[blockIdx.x * 64 * 64 + i] = __int_as_float(((unsigned)bits) << 16);
    }
    if (threadIdx.x == 0) {
        unsigned rank;
        asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
        ranks[blockIdx.x] = (int)rank;
    }
}
"""


@pytest.mark.gpu
@pytest.mark.skipif(not driver.has_hopper_gpu(), reason="needs an NVIDIA Hopper GPU")
def test_tma_copy_launch_on_gpu(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    from warpspec.cuda.compiler import compile_cuda

    monkeypatch.setenv("WARPSPEC_CACHE_DIR", str(tmp_path))
    source = torch.randn(40, 64, device="cuda").to(torch.bfloat16)  # 40 rows: the 64-row box runs past the end
    out = torch.full((2, 64, 64), -1.0, device="cuda")
    ranks = torch.full((2,), -1, dtype=torch.int32, device="cuda")
    a = driver.as_device_array(source, "source")
    assert (a.shape, a.strides_elements, a.dtype_name, a.device_index) == ((40, 64), (64, 1), "bfloat16", 0)
    # The same tensor through the other two interfaces.
    assert driver.as_device_array(out, "out") == driver.as_device_array(_CudaArrayInterfaceOf(out), "out")
    assert driver.as_device_array(_DLPackOf(source), "source") == a

    function = driver.load_module(compile_cuda(TMA_COPY).cubin).function("tma_copy")
    assert function.num_regs > 0 and function.attributes["num_regs"] == function.num_regs
    tensor_map = driver.encode_tiled_tensor_map(dtypes.bfloat16, a.pointer, (64, 40), (128,), (64, 64))
    assert len(tensor_map.to_bytes()) == 128
    assert driver.encode_tiled_tensor_map(dtypes.bfloat16, a.pointer, (64, 40), (128,), (64, 64)) is tensor_map

    shared = 100 * 1024  # above 48 KiB, so launch must opt in
    driver.launch(function, (2, 1, 1), (128, 1, 1), shared,
                  [tensor_map, driver.as_device_array(out, "out"), ranks.data_ptr(), ctypes.c_int32(8)],
                  cluster=(2, 1, 1))
    torch.cuda.synchronize()
    expected = torch.zeros(64, 64)
    expected[:32] = source[8:40].float().cpu()  # rows 8..39 exist; the rest of the box is zero-filled
    assert torch.equal(out[0].cpu(), expected) and torch.equal(out[1].cpu(), expected)
    assert ranks.tolist() == [0, 1]
    assert function.attributes["max_dynamic_shared_size_bytes"] == shared


class _CudaArrayInterfaceOf:
    def __init__(self, tensor):
        self.__cuda_array_interface__ = tensor.__cuda_array_interface__


class _DLPackOf:
    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack__(self):
        return self.tensor.__dlpack__()

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()
