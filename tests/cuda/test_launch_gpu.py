"""Launches on a Hopper GPU: host cost per call, graph capture and replay, streams, devices, custom ops under
torch.compile, and running without PyTorch. (Eager against CUDA-graph speed is a figure, not a test:
``benchmarks/launch.py`` measures it.)"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import warpspec
from warpspec.tune.bench import host_us_per_call

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).parents[2]
PINNED = dict(num_stages=2, block_m=128, block_n=128, block_k=64)
#: A call costs at most this much host time, or (on a machine where even torch.mm takes longer: the H200 machines
#: lent differ by up to 1.8x in torch's own figure) no more than torch.mm measured in the same process.
BOUND_US = 10.0


@pytest.fixture(autouse=True)
def cuda():
    with warpspec.use_backend("cuda"):
        yield


def _matrices(m, n, k, seed=0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16, generator=generator)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16, generator=generator)
    return a, b, torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)


def _relative_error(c, a, b) -> float:
    reference = a.double() @ b.double().T
    return ((c.double() - reference).norm() / reference.norm()).item()


def host_us(*calls, rounds: int = 15) -> list[float]:
    """Host time per call of each of ``calls`` (``host_us_per_call``: loops of 200 calls, never filling the launch
    queue, so the GPU's own time per kernel does not throttle the loop), in ``rounds`` alternating rounds of a few
    loops each, keeping each call's fastest round: other work on the host (the GPU suite runs tests in parallel)
    slows a loop down, never speeds it up, so the least disturbed rounds of two calls timed side by side compare
    what the calls themselves cost."""
    best = [float("inf")] * len(calls)
    for _ in range(rounds):
        for i, call in enumerate(calls):
            best[i] = min(best[i], host_us_per_call(call, torch.cuda.synchronize, repeats=3))
    return best


def assert_host_cost(kernel, what: str) -> None:
    """``kernel`` (V3) at 128x128x64, after a first call (which tunes an autotuned one, or finds its stored winner):
    its host time per call is within the bound, and its result right."""
    a, b, c = _matrices(128, 128, 64)
    kernel(128, 128, 64, a, b, c)
    ours, mm = host_us(lambda: kernel(128, 128, 64, a, b, c), lambda: torch.mm(a, b.T, out=c))
    print(f"\n{what} V3 at 128x128x64: {ours:.1f} us per call (torch.mm: {mm:.1f} us)")
    c.fill_(float("nan"))
    kernel(128, 128, 64, a, b, c)
    assert _relative_error(c, a, b) < 1e-2
    assert ours <= max(BOUND_US, mm), (ours, mm)


def test_a_pinned_call_costs_at_most_10_us_of_host_time():
    from matmul_v3 import MatmulWGMMAV3

    assert_host_cost(MatmulWGMMAV3(**PINNED), "pinned")


def test_an_autotuned_call_costs_at_most_10_us_of_host_time_after_tuning():
    from matmul_v3 import MatmulWGMMAV3

    assert_host_cost(MatmulWGMMAV3(), "autotuned")


def _capture_and_replay(kernel, warm_up: bool):
    a, b, c = _matrices(300, 256, 192)
    stream = torch.cuda.Stream()
    if warm_up:  # as torch.cuda.graph's documentation asks: a call on a side stream before capturing
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            kernel(300, 256, 192, a, b, c)
        torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        kernel(300, 256, 192, a, b, c)
    c.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert _relative_error(c, a, b) < 1e-2
    a.copy_(torch.randn_like(a))  # new data in the captured tensors: the replay computes with it
    graph.replay()
    torch.cuda.synchronize()
    assert _relative_error(c, a, b) < 1e-2


def test_a_call_is_captured_in_a_cuda_graph_and_replayed():
    from matmul_v3 import MatmulWGMMAV3

    _capture_and_replay(MatmulWGMMAV3(**PINNED), warm_up=True)


def test_a_first_call_inside_a_capture_makes_its_plan_there():
    from matmul_v3 import MatmulWGMMAV3

    _capture_and_replay(MatmulWGMMAV3(num_stages=3, block_m=128, block_n=128, block_k=64), warm_up=False)


def test_a_tuned_call_is_captured_after_tuning_and_refused_before(tmp_path, monkeypatch):
    from matmul_v3 import MatmulWGMMAV3

    monkeypatch.setenv("WARPSPEC_CACHE_DIR", str(tmp_path))  # nothing tuned yet
    kernel = MatmulWGMMAV3()
    a, b, c = _matrices(256, 256, 128)
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(warpspec.ArgumentError, match="capturing a CUDA graph; call it once with the same shapes"):
        with torch.cuda.graph(graph):
            kernel(256, 256, 128, a, b, c)
    kernel(256, 256, 128, a, b, c)  # tunes
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernel(256, 256, 128, a, b, c)
    c.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert _relative_error(c, a, b) < 1e-2


def test_a_call_on_a_non_default_stream_runs_on_it():
    """The call goes to the current stream: made under ``torch.cuda.stream(side)`` behind a spin kernel on ``side``,
    the kernel has not run when the default stream reads its output. In a process of its own
    (``tests/support/side_stream_hold.py`` says why)."""
    result = subprocess.run([sys.executable, "-m", "tests.support.side_stream_hold", json.dumps(PINNED)], cwd=ROOT,
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])})
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.splitlines()[-1])
    assert found["held"], "the kernel ran before the spin queued on its stream ended: it was not launched there"
    assert found["error"] < 1e-2


def test_tensor_maps_follow_the_tensors_passed():
    from matmul_v3 import MatmulWGMMAV3

    kernel = MatmulWGMMAV3(**PINNED)
    first, second = _matrices(384, 256, 128, seed=1), _matrices(384, 256, 128, seed=2)
    for a, b, c in (first, second, first, second):
        c.fill_(float("nan"))
        kernel(384, 256, 128, a, b, c)
        torch.cuda.synchronize()
        assert _relative_error(c, a, b) < 1e-2


def _matmul_op():
    import warpspec.torch_ops
    from matmul_v3 import MatmulWGMMAV3

    kernel = MatmulWGMMAV3(**PINNED)

    @warpspec.torch_ops.custom_op("warpspec_gpu_tests::matmul")
    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        c = a.new_empty((a.shape[0], b.shape[0]))
        kernel(a.shape[0], b.shape[0], a.shape[1], a, b, c)
        return c

    return matmul


MATMUL_OP = None


def matmul_op():
    global MATMUL_OP
    MATMUL_OP = MATMUL_OP or _matmul_op()
    return MATMUL_OP


def test_torch_compile_fullgraph_of_a_custom_op_matches_eager():
    matmul = matmul_op()
    a, b, _ = _matrices(512, 384, 256)

    def f(a, b):
        return torch.relu(matmul(a, b)) + 1

    explanation = torch._dynamo.explain(f)(a, b)
    assert explanation.graph_break_count == 0
    compiled = torch.compile(f, fullgraph=True)
    assert torch.equal(compiled(a, b), f(a, b))
    assert _relative_error(matmul(a, b), a, b) < 1e-2
    graph = torch.cuda.CUDAGraph()
    static = compiled(a, b)  # warm-up outside the capture
    with torch.cuda.graph(graph):
        static = compiled(a, b)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static, f(a, b))


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_a_custom_op_runs_on_its_tensors_device_index():
    matmul = matmul_op()
    a, b, _ = _matrices(256, 256, 128)
    a1, b1 = a.to("cuda:1"), b.to("cuda:1")
    assert torch.cuda.current_device() == 0
    c1 = matmul(a1, b1)
    assert c1.device == torch.device("cuda:1")
    assert torch.equal(c1.cpu(), matmul(a, b).cpu())
    from matmul_v3 import MatmulWGMMAV3

    kernel = MatmulWGMMAV3(**PINNED)
    with pytest.raises(warpspec.ArgumentError, match="argument 'b_ptr' is on GPU 0 but argument 'a_ptr' is on GPU 1"):
        kernel(256, 256, 128, a1, b, torch.empty_like(c1))
    c = torch.empty_like(c1)
    kernel(256, 256, 128, a1, b1, c)  # a Script call runs on its tensors' GPU, the current device staying 0
    assert torch.cuda.current_device() == 0
    torch.cuda.synchronize(1)
    assert torch.equal(c.cpu(), c1.cpu())
    with torch.cuda.device(1):
        c = torch.empty_like(c1)
        kernel(256, 256, 128, a1, b1, c)
        torch.cuda.synchronize()
        assert torch.equal(c.cpu(), c1.cpu())


WITHOUT_TORCH = textwrap.dedent("""
    import sys
    sys.modules["torch"] = None  # as on a machine without PyTorch
    sys.path.insert(0, "examples")
    import numpy as np
    import warpspec
    from warpspec.cuda.driver import DeviceBuffer, synchronize
    from tma_copy import TmaCopy

    source = np.random.default_rng(0).standard_normal((300, 200)).astype(np.float16)
    buffers = [DeviceBuffer(source.nbytes) for _ in "ab"]
    buffers[0].upload(source)
    src, dst = (buffer.array(source.shape, warpspec.float16) for buffer in buffers)
    kernel = TmaCopy(tile_m=64, tile_n=64)
    for _ in range(3):
        kernel(300, 200, src, dst)
    synchronize()
    assert np.array_equal(buffers[1].download(np.empty_like(source)), source)
    print("copied")
""")


def test_kernels_run_without_pytorch():
    result = subprocess.run([sys.executable, "-c", WITHOUT_TORCH], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=600)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "copied"


def test_the_main_job_runs_without_pytorch():
    script = ("import runpy, sys; sys.modules['torch'] = None; sys.argv = ['main.py', '--size', '2048']; "
              "runpy.run_path('examples/main.py', run_name='__main__')")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=600)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "backend: cuda" and lines[-1] == "OK"
    assert "V3 2048^3 fp16: " in result.stdout and "cuBLAS" not in result.stdout
