"""An array whose shape is known must have the shape of the kernel's first view of it: a numpy array or torch
tensor of as many dimensions as the view and another shape (B as [K, N] where the kernel views [N, K]) is an
ArgumentError naming the argument and both shapes, on the emulator and on the GPU, before anything runs. A flat
one-dimensional buffer, and an array of another rank (a deliberate reshape), keep the size rule."""

import inspect

import numpy as np
import pytest

import warpspec
from warpspec import cdiv, float32, int32
from warpspec.errors import ArgumentError


class CopyRows(warpspec.Script):
    """out = x over [m, n] arrays, one [16, 64] register tile per block."""

    def __call__(self, m_size: int32, n_size: int32, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = [cdiv(m_size, 16), cdiv(n_size, 64)]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[m_size, n_size])  # x's view
        out = self.global_view(out_ptr, dtype=float32, shape=[m_size, n_size])
        offsets = [16 * self.blockIdx.x, 64 * self.blockIdx.y]
        self.store_global(out, self.load_global(x, offsets=offsets, shape=[16, 64]), offsets=offsets)


X_LINE = next(number for number, line in enumerate(inspect.getsource(CopyRows).splitlines(), 1)
              if "# x's view" in line) + inspect.getsourcelines(CopyRows)[1] - 1
M, N = 32, 64


def data(shape=(M, N)):
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape)


def test_a_transposed_array_is_refused_naming_it_and_both_shapes():
    with pytest.raises(ArgumentError) as caught:
        CopyRows()(M, N, data((N, M)), np.zeros((M, N), np.float32))
    assert str(caught.value) == (f"argument 'x_ptr' has shape [{N}, {M}], but the kernel views it as x of shape "
                                 f"[{M}, {N}] (line {X_LINE}); pass an array of that shape (a transpose is not a "
                                 f"reshape), or a flat one-dimensional buffer")


def test_a_larger_output_of_the_view_rank_is_refused():
    with pytest.raises(ArgumentError, match=r"argument 'out_ptr' has shape \[64, 64\], but the kernel views it as "
                                            r"out of shape \[32, 64\]"):
        CopyRows()(M, N, data(), np.zeros((64, N), np.float32))


def test_flat_buffers_and_arrays_of_another_rank_keep_the_size_rule():
    out = np.zeros(M * N, np.float32)
    CopyRows()(M, N, data().reshape(-1), out)
    np.testing.assert_array_equal(out, data().reshape(-1))
    out = np.zeros((2, M // 2, N), np.float32)  # three dimensions over a two-dimensional view: a reshape
    CopyRows()(M, N, data(), out)
    np.testing.assert_array_equal(out.reshape(M, N), data())
    with pytest.raises(ArgumentError, match="argument 'x_ptr' holds 2047 elements but the kernel views it as x"):
        CopyRows()(M, N, data().reshape(-1)[:-1].copy(), np.zeros(M * N, np.float32))


def test_a_torch_tensor_of_another_shape_is_refused():
    torch = pytest.importorskip("torch")
    with pytest.raises(ArgumentError, match=rf"argument 'x_ptr' has shape \[{N}, {M}\], but the kernel views it "
                                            rf"as x of shape \[{M}, {N}\] \(line {X_LINE}\)"):
        CopyRows()(M, N, torch.from_numpy(data((N, M))), torch.zeros(M, N))
    out = torch.zeros(M, N)
    CopyRows()(M, N, torch.from_numpy(data()), out)
    np.testing.assert_array_equal(out.numpy(), data())


@pytest.mark.gpu
def test_a_cuda_tensor_of_another_shape_is_refused(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("WARPSPEC_BACKEND", "cuda")
    with pytest.raises(ArgumentError, match=rf"argument 'x_ptr' has shape \[{N}, {M}\], but the kernel views it "
                                            rf"as x of shape \[{M}, {N}\] \(line {X_LINE}\)"):
        CopyRows()(M, N, torch.from_numpy(data((N, M))).cuda(), torch.zeros(M, N, device="cuda"))
    out = torch.zeros(M, N, device="cuda")
    CopyRows()(M, N, torch.from_numpy(data()).cuda(), out)  # the launch plan made for a good call checks too
    with pytest.raises(ArgumentError, match=r"argument 'out_ptr' has shape \[64, 64\]"):
        CopyRows()(M, N, torch.from_numpy(data()).cuda(), torch.zeros(64, N, device="cuda"))
    np.testing.assert_array_equal(out.cpu().numpy(), data())
    flat = torch.zeros(M * N, device="cuda")
    CopyRows()(M, N, torch.from_numpy(data()).cuda(), flat)
    np.testing.assert_array_equal(flat.cpu().numpy(), data().reshape(-1))


def test_the_cuda_launch_plan_checks_a_tensors_shape(monkeypatch):
    """The CUDA back end's generated launch code, without a GPU: the fake GPU side of tests/cuda/test_launch_plan.py
    and CPU tensors that report themselves on GPU 0. A good call launches and makes the plan; the plan refuses a
    tensor of another shape as the emulator does, and still takes a flat buffer."""
    torch = pytest.importorskip("torch")
    from tests.cuda.test_launch_plan import FakeSide
    from warpspec.cuda import launch, plan
    from warpspec.cuda.compiler import CompiledModule

    class OnGpu0(torch.Tensor):
        is_cuda = True
        device = torch.device("cuda", 0)

        def get_device(self):
            return 0

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **(kwargs or {}))

    def tensor(*shape):
        return torch.Tensor._make_subclass(OnGpu0, torch.zeros(shape))

    side = FakeSide()
    monkeypatch.setattr(plan, "_default_side", side)
    monkeypatch.setattr(launch, "compile_cuda", lambda source, **options: CompiledModule(b"", "", "fake", False))
    kernel = CopyRows()
    with warpspec.use_backend("cuda"):
        kernel(M, N, tensor(M, N), tensor(M, N))
        assert side.count == 1
        with pytest.raises(ArgumentError, match=rf"argument 'x_ptr' has shape \[{N}, {M}\], but the kernel views it "
                                                rf"as x of shape \[{M}, {N}\] \(line {X_LINE}\)"):
            kernel(M, N, tensor(N, M), tensor(M, N))
        with pytest.raises(ArgumentError, match=r"argument 'out_ptr' has shape \[64, 64\]"):
            kernel(M, N, tensor(M, N), tensor(64, N))
        kernel(M, N, tensor(M * N), tensor(M * N))
        assert side.count == 2


class CopyTransposed(warpspec.Script):
    """out [m, n] = the transpose of x, read through a column-major view of x's row-major [n, m] memory."""

    def __call__(self, m_size: int32, n_size: int32, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = [cdiv(m_size, 16), cdiv(n_size, 64)]
        self.attrs.warps = 4
        xt = self.global_view(x_ptr, dtype=float32, shape=[m_size, n_size], strides=[1, m_size])
        out = self.global_view(out_ptr, dtype=float32, shape=[m_size, n_size])
        offsets = [16 * self.blockIdx.x, 64 * self.blockIdx.y]
        self.store_global(out, self.load_global(xt, offsets=offsets, shape=[16, 64]), offsets=offsets)


def test_an_array_laid_out_as_a_strided_view_covers_it_is_accepted():
    """A view [m, n] with strides [1, m] covers a row-major [n, m] array exactly: that array is what it reads
    (ops.attention's log-sum-exp rows are viewed this way), so it passes, and the view's own shape is refused."""
    out = np.zeros((M, N), np.float32)
    CopyTransposed()(M, N, data((N, M)), out)
    np.testing.assert_array_equal(out, data((N, M)).T)
    with pytest.raises(ArgumentError, match=rf"argument 'x_ptr' has shape \[{M}, {N}\], but the kernel views it"):
        CopyTransposed()(M, N, data((M, N)), out)


def test_axes_of_one_element_do_not_make_the_shapes_differ():
    """A [n, 1] array is the memory of a [1, n] view with strides [1, 1] (the packed attention kernels' head-major
    views of a single head have such tied strides): accepted; a [2, n / 2] array is still refused."""

    class CopyRow(warpspec.Script):
        def __call__(self, n_size: int32, x_ptr: ~float32, out_ptr: ~float32):
            self.attrs.blocks = [cdiv(n_size, 64)]
            self.attrs.warps = 4
            x = self.global_view(x_ptr, dtype=float32, shape=[1, n_size], strides=[1, 1])
            out = self.global_view(out_ptr, dtype=float32, shape=[1, n_size])
            offsets = [0, 64 * self.blockIdx.x]
            self.store_global(out, self.load_global(x, offsets=offsets, shape=[1, 64]), offsets=offsets)

    out = np.zeros((1, N), np.float32)
    with warpspec.use_backend("emulator"):
        CopyRow()(N, data((N, 1)), out)
    np.testing.assert_array_equal(out, data((1, N)))
    with warpspec.use_backend("emulator"), pytest.raises(ArgumentError, match=rf"has shape \[2, {N // 2}\]"):
        CopyRow()(N, data((2, N // 2)), out)
