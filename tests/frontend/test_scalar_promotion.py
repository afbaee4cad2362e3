"""The type two runtime scalar operands meet in (``warpspec.frontend.context.common_type``), and int8 arithmetic in
32 bits: the emulator and the generated CUDA compute the same values, and those are numpy's where numpy's rule
applies.

Before, an int8 or 16-bit float operand outranked float32 and int32 (the ranking left them out): ``v * 0.5`` of an
int8 ``v`` multiplied by 0, ``v + h`` of an int8 and a float16 truncated ``h``, and ``v + n`` with an int32 ``n``
wrapped to 8 bits on the emulator while the C++ computed it in 32."""

import numpy as np
import pytest

import warpspec
from warpspec import bfloat16, float16, float32, int32
from warpspec.cuda.codegen import generate
from warpspec.cuda.launch import compile_kernel
from warpspec.dtypes import boolean, float8_e4m3, float8_e5m2, int8, int64, uint32
from warpspec.frontend.context import common_type
from warpspec.runtime import kernel_for


class MixedScalars(warpspec.Script):
    """Scalars read from int8, float16 and bfloat16 register elements, combined with each other, with the int32
    and float32 arguments and with Python constants; every result stored as float32."""

    def __call__(self, dst_ptr: ~float32, s: float32, n: int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        held = self.register_tensor(dtype=int8, shape=[1], init=0)
        held[0] = n
        half = self.register_tensor(dtype=float16, shape=[1], init=0.0)
        half[0] = s
        brain = self.register_tensor(dtype=bfloat16, shape=[1], init=0.0)
        brain[0] = s
        v = held[0]
        h = half[0]
        g = brain[0]
        out = self.register_tensor(dtype=float32, shape=[8], init=0.0)
        out[0] = 1.0 if v + 100 > 0 else -1.0
        out[1] = v * 0.5
        out[2] = h * s
        out[3] = v + h
        out[4] = v + n
        out[5] = -v
        out[6] = abs(v) + 0.0
        out[7] = h + g
        self.store_global(self.global_view(dst_ptr, dtype=float32, shape=[8]), out, offsets=[0])


#: (s, n) and what numpy computes for each of ``MixedScalars``' results, with ``v = int8(n)`` and ``h``, ``g`` the
#: float16 and bfloat16 of ``s``: sums and comparisons of int8 values are not wrapped to 8 bits.
CASES = [((2.25, 100), [1.0, 50.0, 5.0625, 102.25, 200.0, -100.0, 100.0, 4.5]),
         ((-1.5, -128), [-1.0, -64.0, 2.25, -129.5, -256.0, 128.0, 128.0, -3.0])]


def _run(backend, s, n, device=None):
    dst = np.zeros(8, np.float32)
    if device is not None:
        torch = pytest.importorskip("torch")
        dst = torch.from_numpy(dst).to(device)
    with warpspec.use_backend(backend):
        MixedScalars()(dst, s, n)
    if device is not None:
        torch.cuda.synchronize()
        dst = dst.cpu().numpy()
    return [float(x) for x in dst]


@pytest.mark.parametrize("args, expected", CASES)
def test_mixed_scalars_on_the_emulator_are_numpys(args, expected):
    assert _run("emulator", *args) == expected


def test_int8_arithmetic_is_32_bit_in_the_generated_code():
    """An int8 operand is widened before arithmetic and comparison, as the emulator computes it; a float operand
    makes the other side float."""
    source = generate(kernel_for(MixedScalars(), {})).source
    assert "(add_wrap(static_cast<int>(v), 100) > 0)" in source
    assert "(static_cast<float>(v) * 0.5f)" in source
    assert "static_cast<signed char>(h)" not in source and "static_cast<signed char>(n))" not in source
    compile_kernel(kernel_for(MixedScalars(), {}))


@pytest.mark.parametrize("a, b, common", [
    (int8, float32, float32), (float16, float32, float32), (int32, int8, int32), (int64, uint32, int64),
    (float16, bfloat16, float32), (float8_e4m3, float8_e5m2, float32), (float8_e4m3, float16, float16),
    (boolean, int8, int8), (int64, float16, float16), (uint32, uint32, uint32)])
def test_common_type_ranks_every_scalar_type(a, b, common):
    assert common_type(a, b) == common_type(b, a) == common


@pytest.mark.gpu
@pytest.mark.parametrize("args, expected", CASES)
def test_gpu_mixed_scalars_are_the_emulators(args, expected):
    assert _run("cuda", *args, device="cuda") == _run("emulator", *args) == expected
