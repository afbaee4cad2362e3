"""``store_shared`` into a transposed view (``tile.transpose()``): element (r, c) of the register tensor lands at
(c, r) of the tile, on the emulator and in the generated CUDA alike: a WGMMA accumulator (whose column pairs are no
longer adjacent there, so it is stored an element at a time) and a loaded tile, each in two column windows, then
TMA-stored, give the transpose of what was computed. The GPU twin compares the GPU with the emulator."""

import ml_dtypes
import numpy as np
import pytest

import warpspec
from warpspec import bfloat16, float32
from warpspec.cuda.codegen import generate
from warpspec.runtime import kernel_for


class TransposedStores(warpspec.Script):
    """acc = I·X (a [64, 128] WGMMA accumulator equal to X) and Y (a [64, 128] float32 tile loaded into registers),
    each cast to bfloat16 and stored through the transposes of two [64, 64] shared tiles (columns 0-63, then 64-127),
    which TMA stores write as Xᵀ into ``out_x`` and Yᵀ into ``out_y`` ([128, 64] each)."""

    def __call__(self, eye_ptr: ~bfloat16, x_ptr: ~bfloat16, y_ptr: ~float32, out_x_ptr: ~bfloat16,
                 out_y_ptr: ~bfloat16):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        geye = self.global_view(eye_ptr, dtype=bfloat16, shape=[64, 64])
        gx = self.global_view(x_ptr, dtype=bfloat16, shape=[64, 128])
        gy = self.global_view(y_ptr, dtype=float32, shape=[64, 128])
        out_x = self.global_view(out_x_ptr, dtype=bfloat16, shape=[128, 64])
        out_y = self.global_view(out_y_ptr, dtype=bfloat16, shape=[128, 64])
        seye = self.shared_tensor(dtype=bfloat16, shape=[64, 64])
        sx = self.shared_tensor(dtype=bfloat16, shape=[64, 128])
        tx = self.shared_tensor(dtype=bfloat16, shape=[2, 64, 64])
        ty = self.shared_tensor(dtype=bfloat16, shape=[2, 64, 64])
        loaded = self.mbarrier.alloc(counts=[1])
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(loaded[0], transaction_bytes=seye.nbytes + sx.nbytes)
            self.tma.global_to_shared(src=geye, dst=seye, offsets=[0, 0], mbarrier=loaded[0])
            self.tma.global_to_shared(src=gx, dst=sx, offsets=[0, 0], mbarrier=loaded[0])
        self.mbarrier.wait(loaded[0], phase=0)
        acc = self.register_tensor(dtype=float32, shape=[64, 128], init=0.0)
        self.wgmma.fence()
        self.wgmma.mma(seye, sx, acc)
        self.wgmma.commit_group()
        self.wgmma.wait_group(0)
        x16 = self.cast(acc, bfloat16)
        y16 = self.cast(self.load_global(gy, offsets=[0, 0], shape=[64, 128]), bfloat16)
        for h in range(2):
            self.store_shared(tx[h].transpose(), x16, column=64 * h)
            self.store_shared(ty[h].transpose(), y16, column=64 * h)
        self.fence_proxy_async()
        self.sync()
        with self.single_thread():
            for h in range(2):
                self.tma.shared_to_global(src=tx[h], dst=out_x, offsets=[64 * h, 0])
                self.tma.shared_to_global(src=ty[h], dst=out_y, offsets=[64 * h, 0])
            self.tma.commit_group()
            self.tma.wait_group(0)


def _inputs():
    rng = np.random.default_rng(0)
    eye = np.eye(64, dtype=np.float32).astype(ml_dtypes.bfloat16)
    x = rng.standard_normal((64, 128)).astype(ml_dtypes.bfloat16)
    y = rng.standard_normal((64, 128)).astype(np.float32)
    return eye, x, y


def _expected(x, y):
    return x.T.astype(np.float32), y.astype(ml_dtypes.bfloat16).T.astype(np.float32)


def test_a_store_through_a_transposed_view_lands_transposed_on_the_emulator():
    eye, x, y = _inputs()
    out_x, out_y = np.zeros((128, 64), ml_dtypes.bfloat16), np.zeros((128, 64), ml_dtypes.bfloat16)
    with warpspec.use_backend("emulator"):
        TransposedStores()(eye, x, y, out_x, out_y)
    expected_x, expected_y = _expected(x, y)
    np.testing.assert_array_equal(out_x.astype(np.float32), expected_x)
    np.testing.assert_array_equal(out_y.astype(np.float32), expected_y)


def test_the_generated_stores_swap_the_coordinates_and_leave_the_accumulator_s_pairs_apart():
    """Into a transposed view every element is its own 16-bit store (no 32-bit pair of the accumulator), at the
    tile offset of (column, row); NVRTC builds it. Per thread: the accumulator's 64 elements once (each column
    window's test folds for a fragment), the loaded tile's 64 once per window (a predicate each)."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import count_instructions, disassemble

    kernel = kernel_for(TransposedStores(), {})
    source = generate(kernel).source
    assert "<unsigned short *>(smem_ptr" in source and "<unsigned *>(smem_ptr" not in source
    counts = count_instructions(disassemble(compile_kernel(kernel).module.cubin), ["STS.U16", "STS"])
    assert counts == {"STS.U16": 64 + 2 * 64, "STS": 64 + 2 * 64}, counts


@pytest.mark.gpu
def test_gpu_stores_through_a_transposed_view_are_the_emulator_s():
    torch = pytest.importorskip("torch")
    eye, x, y = _inputs()
    out_x = torch.zeros((128, 64), dtype=torch.bfloat16, device="cuda")
    out_y = torch.zeros((128, 64), dtype=torch.bfloat16, device="cuda")
    as_bf16 = [torch.from_numpy(a.view(np.uint16).copy()).view(torch.bfloat16).cuda() for a in (eye, x)]
    with warpspec.use_backend("cuda"):
        TransposedStores()(*as_bf16, torch.from_numpy(y).cuda(), out_x, out_y)
    torch.cuda.synchronize()
    expected_x, expected_y = _expected(x, y)
    np.testing.assert_array_equal(out_x.float().cpu().numpy(), expected_x)
    np.testing.assert_array_equal(out_y.float().cpu().numpy(), expected_y)
