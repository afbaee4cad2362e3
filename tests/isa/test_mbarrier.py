"""warpspec.isa.mbarrier (``self.mbarrier.alloc/arrive/arrive_and_expect_tx/wait``), the template for a family's
tests: the emulator's result against numpy, one planted misuse per check the family makes (its exact error class,
the kernel's ``file:line``, a message fragment), the machine code the CUDA build makes (NVRTC and nvdisasm, no GPU
needed) and a ``gpu``-marked run against numpy.

The barrier model's run-time checks (too many arrivals, bytes delivered after a phase completed, waits that never
pass) are planted in real pipelines in tests/emulator/test_planted_bugs.py.
"""

import numpy as np
import pytest

import warpspec
from tests.support.markers import markers_of
from warpspec import BarrierError, CompileError, float16, uint32
from warpspec.cuda import sass
from warpspec.cuda.launch import compile_kernel
from warpspec.runtime import kernel_for

marker_line = markers_of(__file__)
TILE = [64, 64]


class BarrierCopy(warpspec.Script):
    """dst = src for one 64x64 tile: a TMA load completes a barrier's phase, every thread waits on it, one thread
    stores the tile back; ``phases`` > 1 repeats it, waiting on the barrier's next phase each time."""

    def __init__(self, phases=1):
        super().__init__()
        self.phases = phases

    def __call__(self, src_ptr: ~float16, dst_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        src = self.global_view(src_ptr, dtype=float16, shape=TILE)
        dst = self.global_view(dst_ptr, dtype=float16, shape=TILE)
        tile = self.shared_tensor(dtype=float16, shape=TILE)
        full = self.mbarrier.alloc(counts=[1])
        done = self.mbarrier.alloc(counts=[128])
        for lap in range(self.phases):
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(full[0], transaction_bytes=tile.nbytes)
                self.tma.global_to_shared(src=src, dst=tile, offsets=[0, 0], mbarrier=full[0])
            self.mbarrier.wait(full[0], phase=lap % 2)
            with self.single_thread():
                self.tma.shared_to_global(src=tile, dst=dst, offsets=[0, 0])
                self.tma.commit_group()
                self.tma.wait_group(0)
            self.mbarrier.arrive(done[0])
            self.mbarrier.wait(done[0], phase=lap % 2)


class AllocInsideAGroup(warpspec.Script):
    def __call__(self, x_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        with self.thread_group(thread_begin=0, num_threads=32):
            self.mbarrier.alloc(counts=[1])  # <<< alloc-in-group


class AllocWithoutCounts(warpspec.Script):
    def __call__(self, x_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        self.mbarrier.alloc(counts=[])  # <<< no-counts


class AllocWithCountZero(warpspec.Script):
    def __call__(self, x_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        self.mbarrier.alloc(counts=[1, 0])  # <<< count-zero


class ExpectsTooManyBytes(warpspec.Script):
    def __call__(self, x_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        full = self.mbarrier.alloc(counts=[1])
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(full[0], transaction_bytes=1 << 20)  # <<< too-many-bytes


class WaitsForPhaseTwo(warpspec.Script):
    def __call__(self, x_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        full = self.mbarrier.alloc(counts=[1])
        self.mbarrier.wait(full[0], phase=2)  # <<< phase-two


class WaitsForARuntimePhaseTwo(warpspec.Script):
    def __call__(self, phase: uint32, x_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        full = self.mbarrier.alloc(counts=[1])
        self.mbarrier.wait(full[0], phase=phase)  # <<< runtime-phase


def _tile():
    return np.random.default_rng(0).standard_normal(TILE).astype(np.float16)


@pytest.fixture
def emulator():
    with warpspec.use_backend("emulator"):
        yield


@pytest.mark.parametrize("phases", [1, 3])
def test_each_phase_passes_once_its_load_lands(emulator, phases):
    src = _tile()
    dst = np.full(TILE, np.nan, dtype=np.float16)
    BarrierCopy(phases)(src, dst)
    np.testing.assert_array_equal(dst, src)


COMPILE_MISUSES = [
    (AllocInsideAGroup, "alloc-in-group", "mbarrier.alloc must be called by the whole block"),
    (AllocWithoutCounts, "no-counts", "mbarrier.alloc needs at least one count"),
    (AllocWithCountZero, "count-zero", "an mbarrier's arrival count must be in [1, 2^20 - 1], got 0"),
    (ExpectsTooManyBytes, "too-many-bytes", "transaction_bytes must be in [0, 2^20 - 1], got 1048576"),
    (WaitsForPhaseTwo, "phase-two", "mbarrier.wait phase must be 0 or 1, got 2"),
]


@pytest.mark.parametrize("kernel, marker, fragment", COMPILE_MISUSES, ids=[m[1] for m in COMPILE_MISUSES])
def test_each_misuse_is_a_compile_error_at_its_line(emulator, kernel, marker, fragment):
    with pytest.raises(CompileError) as caught:
        kernel()(np.zeros(1, np.float16))
    assert caught.value.location == f"{__file__}:{marker_line(marker)}"
    assert fragment in str(caught.value)


def test_a_runtime_phase_other_than_0_or_1_is_a_barrier_error_at_the_wait(emulator):
    with pytest.raises(BarrierError) as caught:
        WaitsForARuntimePhaseTwo()(2, np.zeros(1, np.float16))
    assert caught.value.location == f"{__file__}:{marker_line('runtime-phase')}"
    assert "the phase parity must be 0 or 1" in str(caught.value)


def test_the_cuda_build_initialises_arrives_and_waits_with_syncs_instructions():
    cubin = compile_kernel(kernel_for(BarrierCopy(phases=1), {})).module.cubin
    text = sass.disassemble(cubin)
    counts = sass.count_instructions(text, ["SYNCS.EXCH.64", "SYNCS.ARRIVE", "SYNCS.PHASECHK", "LDL", "STL"])
    assert counts["SYNCS.EXCH.64"] >= 2  # mbarrier.init of both barriers
    assert counts["SYNCS.ARRIVE"] >= 2 and counts["SYNCS.PHASECHK"] >= 2
    assert counts["LDL"] == 0 and counts["STL"] == 0


@pytest.mark.gpu
@pytest.mark.parametrize("phases", [1, 3])
def test_gpu_each_phase_passes_once_its_load_lands(phases):
    torch = pytest.importorskip("torch")
    src = _tile()
    dst = torch.full(TILE, float("nan"), device="cuda", dtype=torch.float16)
    with warpspec.use_backend("cuda"):
        BarrierCopy(phases)(torch.from_numpy(src).cuda(), dst)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(dst.cpu().numpy(), src)
