"""warpspec.isa.fence (``self.fence_proxy_async()``): ordinary shared-memory stores become visible to the async proxy
(a TMA store here) only after the fence. The emulator's result against numpy, the one misuse the family checks (an
async read of shared memory stored to with no fence in between: a RaceError at the read), the fence in the machine
code, and a ``gpu``-marked run against numpy."""

import numpy as np
import pytest

import warpspec
from tests.support.markers import markers_of
from warpspec import RaceError, float16
from warpspec.cuda import sass
from warpspec.cuda.codegen import generate
from warpspec.cuda.launch import compile_kernel
from warpspec.runtime import kernel_for

marker_line = markers_of(__file__)
TILE = [64, 64]


class StoreThroughShared(warpspec.Script):
    """dst = src for one 64x64 tile: registers -> store_shared -> (fence) -> sync -> one TMA store."""

    def __init__(self, fence=True):
        super().__init__()
        self.fence = fence

    def __call__(self, src_ptr: ~float16, dst_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        src = self.global_view(src_ptr, dtype=float16, shape=TILE)
        dst = self.global_view(dst_ptr, dtype=float16, shape=TILE)
        tile = self.shared_tensor(dtype=float16, shape=TILE)
        self.store_shared(tile, self.load_global(src, offsets=[0, 0], shape=TILE))
        if self.fence:
            self.fence_proxy_async()
        self.sync()
        with self.single_thread():
            self.tma.shared_to_global(src=tile, dst=dst, offsets=[0, 0])  # <<< async-read
            self.tma.commit_group()
            self.tma.wait_group(0)


def _tile():
    return np.random.default_rng(0).standard_normal(TILE).astype(np.float16)


def test_a_fenced_store_reaches_the_tma_store():
    src, dst = _tile(), np.full(TILE, np.nan, dtype=np.float16)
    with warpspec.use_backend("emulator"):
        StoreThroughShared()(src, dst)
    np.testing.assert_array_equal(dst, src)


def test_an_async_read_after_unfenced_stores_is_a_race_at_the_read():
    with warpspec.use_backend("emulator"), pytest.raises(RaceError) as caught:
        StoreThroughShared(fence=False)(_tile(), np.zeros(TILE, np.float16))
    assert caught.value.location == f"{__file__}:{marker_line('async-read')}"
    assert "through the async proxy after ordinary stores to it with no fence_proxy_async() in between" \
        in str(caught.value)


def test_the_cuda_build_has_the_proxy_fence():
    kernel = kernel_for(StoreThroughShared(), {})
    assert generate(kernel).source.count("fence.proxy.async.shared::cta;") == 1
    counts = sass.count_instructions(sass.disassemble(compile_kernel(kernel).module.cubin), ["FENCE.VIEW.ASYNC.S", "UTMASTG"])
    assert counts["FENCE.VIEW.ASYNC.S"] >= 1 and counts["UTMASTG"] == 1


@pytest.mark.gpu
def test_gpu_a_fenced_store_reaches_the_tma_store():
    torch = pytest.importorskip("torch")
    src = _tile()
    dst = torch.full(TILE, float("nan"), device="cuda", dtype=torch.float16)
    with warpspec.use_backend("cuda"):
        StoreThroughShared()(torch.from_numpy(src).cuda(), dst)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(dst.cpu().numpy(), src)
