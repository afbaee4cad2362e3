"""Constant folding (``warpspec.passes.constants.fold``) leaves to the emulator what the emulator refuses at run
time, so that the refusal names the kernel line: folded at code generation, a shift by a negative amount raised
Python's own ValueError, and the smallest int32 divided by -1 wrapped."""

import numpy as np
import pytest

import warpspec
from warpspec import int32
from warpspec.cuda.codegen import generate
from warpspec.errors import KernelError
from warpspec.ir import nodes as ir
from warpspec.passes.constants import UNKNOWN, fold
from warpspec.runtime import kernel_for


class NegativeShift(warpspec.Script):
    """A shift whose operands constant propagation knows, by a negative amount."""

    def __call__(self, dst_ptr: ~int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        value: int32 = 8
        amount: int32 = -1
        out = self.register_tensor(dtype=int32, shape=[1], init=0)
        out[0] = value << amount
        self.store_global(self.global_view(dst_ptr, dtype=int32, shape=[1]), out, offsets=[0])


def _constant(value):
    return ir.Const(value, int32)


@pytest.mark.parametrize("op, a, b", [("<<", 8, -1), (">>", 8, -3), ("//", -2**31, -1), ("%", -2**31, -1),
                                      ("cdiv", -2**31, -1), ("//", 5, 0)])
def test_what_the_emulator_refuses_is_not_folded(op, a, b):
    assert fold(ir.Binary(op, _constant(a), _constant(b), int32)) is UNKNOWN


def test_what_it_computes_is_folded():
    assert fold(ir.Binary("<<", _constant(1), _constant(40), int32)) == 0
    assert fold(ir.Binary("//", _constant(-7), _constant(2), int32)) == -3


def test_a_known_negative_shift_is_generated_and_refused_by_the_emulator_at_its_line():
    source = generate(kernel_for(NegativeShift(), {})).source
    assert "shl_wrap(8, -1)" in source
    with pytest.raises(KernelError, match="shift by a negative amount") as caught:
        with warpspec.use_backend("emulator"):
            NegativeShift()(np.zeros(1, np.int32))
    assert f"{__file__}:" in str(caught.value)
