"""Pointer parameters typed by the instance (``x_ptr: ~self.dtype``): one Script class for every element type, each
instance building its own kernel, tuning keys that keep the types apart, and kernels that keep names by type."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import warpspec
from warpspec import ArgumentError, CompileError, bfloat16, float16, float32, int32
from warpspec.dtypes import PointerType
from warpspec.frontend.kernel import InstancePointer, bind_arguments, parameters, script_parameters
from warpspec.ops import attention_kernel, kernels
from warpspec.runtime import kernel_for


class Doubled(warpspec.Script):
    """out = 2 x over 8 elements of ``self.dtype``."""

    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype

    def __call__(self, n: int32, x_ptr: ~self.dtype, out_ptr: ~self.dtype):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=self.dtype, shape=[n])
        out = self.global_view(out_ptr, dtype=self.dtype, shape=[n])
        self.store_global(out, self.cast(self.load_global(x, offsets=[0], shape=[8]) * 2.0, self.dtype), offsets=[0])


class DoubledF16(Doubled):
    """A subclass defined elsewhere: its kernel keeps the class's name."""

    def kernel_name(self) -> str:
        return "DoubledF16"


@pytest.mark.parametrize("dtype, numpy_type", [(float16, np.float16), (bfloat16, ml_dtypes.bfloat16),
                                               (float32, np.float32)])
def test_each_instance_runs_the_kernel_of_its_own_dtype(dtype, numpy_type):
    x = np.arange(8).astype(numpy_type)
    out = np.zeros(8, numpy_type)
    Doubled(dtype)(8, x, out)
    np.testing.assert_array_equal(out.astype(np.float32), 2 * np.arange(8, dtype=np.float32))
    assert [p.type for p in kernel_for(Doubled(dtype), {}).params][1:] == [PointerType(dtype)] * 2


def test_the_class_parameters_name_the_attribute_and_an_instance_resolves_it():
    assert [p.annotation for p in parameters(Doubled)][1:] == [InstancePointer("dtype")] * 2
    assert all(p.runtime and p.pointer for p in parameters(Doubled)[1:])
    assert [p.annotation for p in script_parameters(Doubled(bfloat16))][1:] == [PointerType(bfloat16)] * 2


def test_an_array_of_another_dtype_is_refused():
    with pytest.raises(ArgumentError, match="float16"):
        Doubled(float16)(8, np.zeros(8, np.float32), np.zeros(8, np.float32))


def test_an_attribute_that_is_no_dtype_is_a_compile_error_naming_it():
    with pytest.raises(CompileError, match=r"Doubled: parameter 'x_ptr' is annotated ~self.dtype, but self.dtype "
                                           r"is 'half', not a dtype"):
        Doubled("half")(8, np.zeros(8, np.float16), np.zeros(8, np.float16))


def test_kernels_are_named_by_their_types_and_subclasses_by_their_own_name():
    gemm = {"b_k_major": True, "has_bias": False, "activation": None, "persistent": False, "stream_k": False,
            "num_stages": 2, "block_m": 64, "block_n": 64}
    assert kernel_for(kernels.Gemm(bfloat16, float32, **gemm), {}).name == "GemmBF16F32"
    assert kernel_for(kernels.Gemm(float16, float16, **gemm), {}).name == "GemmF16"
    assert kernel_for(kernels.ScaledGemm(warpspec.float8_e4m3, bfloat16, **gemm), {}).name == "GemmE4M3BF16"
    schedule = {"block_n": 64, "num_stages": 2, "unroll": 1}
    assert kernel_for(attention_kernel.Attention(bfloat16, 64, False, **schedule), {}).name == "AttentionBF16"
    assert kernel_for(Doubled(float16), {}).name == "Doubled"
    assert kernel_for(DoubledF16(float16), {}).name == "DoubledF16"


def test_the_kernels_refuse_types_they_do_not_take():
    gemm = {"b_k_major": True, "has_bias": False, "activation": None, "persistent": False, "stream_k": False,
            "num_stages": 2, "block_m": 64, "block_n": 64}
    with pytest.raises(ArgumentError, match="^Gemm takes inputs of float16 or bfloat16, got 'float8_e4m3'$"):
        kernels.Gemm(warpspec.float8_e4m3, bfloat16, **gemm)
    with pytest.raises(ArgumentError, match="^Gemm: float16 inputs give float16 or float32 outputs, got 'bfloat16'$"):
        kernels.Gemm(float16, bfloat16, **gemm)
    with pytest.raises(ArgumentError, match="^the attention kernels take float16 or bfloat16 operands, got "
                                            "'float32'$"):
        attention_kernel.Attention(float32, head_dim=64, causal=False, block_n=64, num_stages=2, unroll=1)


def test_a_tuning_key_holds_the_dtypes():
    """The stored winner of one dtype is never found for another: the constructor's dtypes are in the key."""
    from warpspec.tune import cache, tuner

    identity = {"gpu": "Fake H200", "compute_capability": "9.0", "driver": 13000}
    args = (256, 256, 256, 256, 256, 256) + (None,) * 6
    keys = set()
    for dtype in (float16, bfloat16):
        tuned = kernels.Gemm(dtype, dtype, b_k_major=True, has_bias=False, activation=None)
        runtime, compile_time = bind_arguments(tuned.cls, args, {})
        keys.add(cache.entry_key(tuner.tuning_material(tuned, runtime, compile_time, identity)))
    assert len(keys) == 2


def test_the_tuner_finds_the_first_array_among_instance_typed_pointers():
    """A tuned call launches on its first array's GPU: a ``~self.in_dtype`` pointer is an array parameter."""
    from warpspec.tune import tuner

    tuned = kernels.Gemm(bfloat16, bfloat16, b_k_major=True, has_bias=False, activation=None)
    assert tuner._first_array(tuned, 12) == (6, "a_ptr")
    assert tuner._first_array(tuned, 6) is None
