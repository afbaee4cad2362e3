"""warpspec.isa.roles (``self.thread_group(...)`` with ``max_registers``, ``self.single_thread()``, ``self.sync()``):
which threads run which part of a block. The emulator's result against numpy (each role writes its own rows), one
planted misuse per check the family makes (exact error class, the kernel's ``file:line``, a message fragment), the
setmaxnreg and barrier instructions in the machine code, and a ``gpu``-marked run against numpy."""

import numpy as np
import pytest

import warpspec
from tests.support.markers import markers_of
from warpspec import CompileError, float32
from warpspec.cuda import sass
from warpspec.cuda.codegen import generate
from warpspec.cuda.launch import compile_kernel
from warpspec.runtime import kernel_for

marker_line = markers_of(__file__)


class TwoRoles(warpspec.Script):
    """out[0:64] = x[0:64] + 1 by warpgroup 0 (setmaxnreg 232), out[64:128] = x[64:128] * 2 by warpgroup 1
    (setmaxnreg 40), then after a block-wide sync out[128:192] = 3 by one thread's row of four."""

    def __call__(self, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 8
        x = self.global_view(x_ptr, dtype=float32, shape=[192, 4])
        out = self.global_view(out_ptr, dtype=float32, shape=[192, 4])
        with self.thread_group(thread_begin=0, num_threads=128, max_registers=232):
            self.store_global(out, self.load_global(x, offsets=[0, 0], shape=[64, 4]) + 1.0, offsets=[0, 0])
        with self.thread_group(thread_begin=128, num_threads=128, max_registers=40):
            self.store_global(out, self.load_global(x, offsets=[64, 0], shape=[64, 4]) * 2.0, offsets=[64, 0])
        self.sync()
        with self.single_thread():
            for row in range(64):
                self.store_global(out, self.register_tensor(float32, [1, 4], init=3.0), offsets=[128 + row, 0])


class Misuse(warpspec.Script):
    """One roles call that breaks one rule, chosen by ``mistake``."""

    def __init__(self, mistake):
        super().__init__()
        self.mistake = mistake

    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 8
        if self.mistake == "nested-in-single":
            with self.single_thread():
                with self.thread_group(thread_begin=0, num_threads=32):  # <<< nested-in-single
                    pass
        if self.mistake == "partial-warp":
            with self.thread_group(thread_begin=0, num_threads=16):  # <<< partial-warp
                pass
        if self.mistake == "outside":
            with self.thread_group(thread_begin=224, num_threads=64):  # <<< outside
                pass
        if self.mistake == "registers":
            with self.thread_group(thread_begin=0, num_threads=128, max_registers=100):  # <<< registers
                pass
        if self.mistake == "registers-warp":
            with self.thread_group(thread_begin=0, num_threads=32, max_registers=40):  # <<< registers-warp
                pass
        if self.mistake == "sync-in-single":
            with self.single_thread():
                self.sync()  # <<< sync-in-single
        if self.mistake == "named-barriers":
            for warp in range(8):
                for width in range(1, 9 - warp):
                    with self.thread_group(thread_begin=32 * warp, num_threads=32 * width):
                        self.sync()  # <<< named-barriers


MISUSES = [
    ("nested-in-single", "thread_group cannot be nested inside single_thread"),
    ("partial-warp", "thread_group needs whole warps"),
    ("outside", "is outside the enclosing threads"),
    ("registers", "max_registers must be a multiple of 8 in [24, 256], got 100"),
    ("registers-warp", "max_registers (setmaxnreg) needs a thread group of whole warpgroups"),
    ("sync-in-single", "self.sync() inside single_thread would wait for threads that never arrive"),
    # 35 distinct groups of whole warps sync; Hopper's 16 named barriers leave 15 for groups
    ("named-barriers", "th distinct thread group to sync"),
]


def _expected(x):
    return np.concatenate([x[:64] + 1, x[64:128] * 2, np.full((64, 4), 3, np.float32)])


def _input():
    return np.random.default_rng(0).standard_normal((192, 4)).astype(np.float32)


def test_each_role_writes_its_rows():
    x, out = _input(), np.full((192, 4), np.nan, np.float32)
    with warpspec.use_backend("emulator"):
        TwoRoles()(x, out)
    np.testing.assert_array_equal(out, _expected(x))


@pytest.mark.parametrize("mistake, fragment", MISUSES, ids=[m[0] for m in MISUSES])
def test_each_misuse_is_a_compile_error_at_its_line(mistake, fragment):
    with warpspec.use_backend("emulator"), pytest.raises(CompileError) as caught:
        Misuse(mistake)(np.zeros(1, np.float32))
    assert caught.value.location == f"{__file__}:{marker_line(mistake)}"
    assert fragment in str(caught.value)


def test_the_cuda_build_sets_each_groups_register_budget():
    kernel = kernel_for(TwoRoles(), {})
    source = generate(kernel).source
    # Both budgets are at most what 256 threads start with, so both groups lower theirs.
    assert "setmaxnreg.dec.sync.aligned.u32 232;" in source and "setmaxnreg.dec.sync.aligned.u32 40;" in source
    counts = sass.count_instructions(sass.disassemble(compile_kernel(kernel).module.cubin), ["USETMAXREG", "BAR.SYNC"])
    assert counts["USETMAXREG"] == 2 and counts["BAR.SYNC"] >= 1


@pytest.mark.gpu
def test_gpu_each_role_writes_its_rows():
    torch = pytest.importorskip("torch")
    x = _input()
    out = torch.full((192, 4), float("nan"), device="cuda")
    with warpspec.use_backend("cuda"):
        TwoRoles()(torch.from_numpy(x).cuda(), out)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(out.cpu().numpy(), _expected(x))
