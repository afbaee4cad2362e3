"""warpspec.torch_ops on the CPU (skipped where torch is not installed): custom ops run the emulator on CPU
tensors, trace under torch.compile(fullgraph=True) through their fake implementation, and pass torch's opcheck;
Scripts called on fake or meta tensors compute nothing; launch plans read torch tensors as they should."""

import numpy as np
import pytest

import warpspec

torch = pytest.importorskip("torch")

import warpspec.torch_ops  # noqa: E402
from matmul_v3 import MatmulWGMMAV3  # noqa: E402
from tma_copy import TmaCopy  # noqa: E402

KERNEL = MatmulWGMMAV3(num_stages=2, block_m=128, block_n=64, block_k=32)
COPY = TmaCopy(tile_m=64, tile_n=64)


@warpspec.torch_ops.custom_op("warpspec_tests::matmul")
def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A·Bᵀ in float16 with a pinned V3."""
    c = a.new_empty((a.shape[0], b.shape[0]))
    KERNEL(a.shape[0], b.shape[0], a.shape[1], a, b, c)
    return c


@warpspec.torch_ops.custom_op("warpspec_tests::copy_into", mutates_args=("dst",))
def copy_into(src: torch.Tensor, dst: torch.Tensor) -> None:
    """dst = src, written in place."""
    COPY(src.shape[0], src.shape[1], src, dst)


def _inputs(m=200, n=136, k=96, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return (torch.randn(m, k, generator=generator).half(), torch.randn(n, k, generator=generator).half())


def _relative_error(out, a, b) -> float:
    reference = a.double() @ b.double().T
    return ((out.double() - reference).norm() / reference.norm()).item()


def test_the_op_runs_cpu_tensors_on_the_emulator():
    a, b = _inputs()
    with warpspec.use_backend("cuda"):  # the tensors' device decides, whatever is selected
        c = matmul(a, b)
        assert warpspec.get_backend() == "cuda"
    assert c.shape == (200, 136) and c.dtype == torch.float16 and c.device.type == "cpu"
    assert _relative_error(c, a, b) < 1e-2


def test_an_op_may_write_into_its_arguments():
    src = torch.randn(100, 72).half()
    dst = torch.full_like(src, float("nan"))
    copy_into(src, dst)
    assert torch.equal(dst, src)


def test_torch_compile_fullgraph_traces_through_the_fake_implementation():
    a, b = _inputs(seed=1)

    def f(a, b):
        return matmul(a, b).float() * 2 + 1

    explanation = torch._dynamo.explain(f)(a, b)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(a, b), f(a, b))
    a2, b2 = _inputs(m=136, n=200, seed=2)  # other shapes: traced again (or symbolically), still right
    assert torch.equal(compiled(a2, b2), f(a2, b2))


def test_the_fake_implementation_gives_shapes_dtypes_and_devices():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a = torch.empty(300, 64, dtype=torch.float16)
        b = torch.empty(100, 64, dtype=torch.float16)
        c = matmul(a, b)
    assert c.shape == (300, 100) and c.dtype == torch.float16 and c.device.type == "cpu"
    meta = matmul(torch.empty(64, 32, dtype=torch.float16, device="meta"),
                  torch.empty(48, 32, dtype=torch.float16, device="meta"))
    assert meta.shape == (64, 48) and meta.device.type == "meta"


def test_opcheck_accepts_the_ops():
    a, b = _inputs(m=64, n=64, k=32)
    torch.library.opcheck(matmul, (a, b))
    src = torch.randn(64, 64).half()
    torch.library.opcheck(copy_into, (src, torch.zeros_like(src)))


def test_a_script_called_on_meta_tensors_builds_and_runs_nothing():
    kernel = MatmulWGMMAV3(num_stages=2, block_m=128, block_n=64, block_k=32)
    a = torch.empty(64, 32, dtype=torch.float16, device="meta")
    for backend in ("emulator", "cuda"):
        with warpspec.use_backend(backend):
            assert kernel(64, 64, 32, a, a, a) is None
            assert MatmulWGMMAV3()(64, 64, 32, a, a, a) is None  # autotuned: nothing tuned either
    assert "_warpspec_kernels" not in vars(kernel)


def test_tuning_is_refused_while_the_current_stream_captures(monkeypatch):
    from warpspec.tune import tuner

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(warpspec.ArgumentError) as raised:
        tuner._refuse_capture(MatmulWGMMAV3())
    assert str(raised.value) == ("MatmulWGMMAV3 would have to be tuned for these arguments, but the current stream "
                                 "is capturing a CUDA graph; call it once with the same shapes before the capture "
                                 "(the winner is then reused), or pin a schedule")
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    tuner._refuse_capture(MatmulWGMMAV3())


class PretendCuda(torch.Tensor):
    """A CPU tensor that reports itself as a CUDA tensor on GPU 0 at a fake address, so a launch plan made for
    torch tensors runs on the CPU against a fake GPU side."""

    address = 0x7F0000000000

    @property
    def is_cuda(self):
        return True

    @property
    def device(self):
        return torch.device("cuda", 0)

    def get_device(self):
        return 0

    def data_ptr(self):
        return self.address


def test_a_plan_reads_torch_tensors_shapes_strides_and_addresses(monkeypatch):
    from tests.cuda.test_launch_plan import FakeSide

    from warpspec.cuda import launch, plan
    from warpspec.cuda.compiler import CompiledModule

    side = FakeSide()
    monkeypatch.setattr(plan, "_default_side", side)
    monkeypatch.setattr(launch, "compile_cuda", lambda source, **options: CompiledModule(b"", "", "fake", False))
    src = torch.zeros(300, 200, dtype=torch.float16).as_subclass(PretendCuda)
    dst = torch.zeros(300, 200, dtype=torch.float16).as_subclass(PretendCuda)
    kernel = TmaCopy(tile_m=64, tile_n=64)
    with warpspec.use_backend("cuda"):
        kernel(300, 200, src, dst)
        kernel(300, 200, src, dst)
        assert "v2.dtype is not _D2" in kernel._warpspec_calls[0].source
        with pytest.raises(warpspec.ArgumentError) as raised:
            kernel(300, 200, src.float(), dst)
        assert str(raised.value) == ("argument 'src_ptr': expected float16 elements for a ~float16 parameter, got "
                                     "float32")
        with pytest.raises(warpspec.ArgumentError) as raised:
            kernel(301, 200, src, dst)
        assert "argument 'src_ptr' holds 60000 elements but the kernel views it as src of shape [301, 200]" \
            in str(raised.value)
        # The span of a strided tensor follows its strides: 300 rows of 256 hold the view, 200 rows of 300 not.
        kernel(300, 200, torch.zeros(300, 256, dtype=torch.float16).as_subclass(PretendCuda)[:, :200], dst)
        with pytest.raises(warpspec.ArgumentError) as raised:
            kernel(300, 200, torch.zeros(200, 300, dtype=torch.float16).as_subclass(PretendCuda)[:, :200], dst)
        assert "argument 'src_ptr' holds 59900 elements" in str(raised.value)
    assert len(side.launches) == 3
    assert side.launches[0].slot(2, "Q") == PretendCuda.address and side.launches[0].grid == (5, 1, 1)
    # The view (not the tensor) gives the map its row stride; the same pointer and view reuse the map.
    assert side.encoded == [(PretendCuda.address, (200, 300), (400,), (64, 64), 128)] * 2


def test_the_emulator_results_match_numpy_through_the_op_and_directly():
    a, b = _inputs(m=128, n=64, k=64, seed=3)
    c = np.zeros((128, 64), np.float16)
    with warpspec.use_backend("emulator"):
        KERNEL(128, 64, 64, a.numpy(), b.numpy(), c)
    assert torch.equal(matmul(a, b), torch.from_numpy(c))
