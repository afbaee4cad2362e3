"""Two Hopper GPUs: ops, Script calls, tuning and CUDA graphs on cuda:1 while the current device is 0, checked
against torch; the same GPU tests with the two devices' order swapped (CUDA_VISIBLE_DEVICES); and the two
``torchrun --nproc-per-node 2`` jobs of this folder (a tensor-parallel MLP and attention block, forward, backward
and a CUDA graph per rank) against one-GPU references. Marked ``gpu2``: skipped unless two GPUs are visible."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import warpspec
from warpspec import ops

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.gpu2]

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
TOLERANCE = 1e-2  # relative error of a 16-bit GEMM against float32


def relative_error(value, expected) -> float:
    expected = expected.float()
    return ((value.float() - expected).norm() / expected.norm()).item()


def on_one(*shape, dtype=torch.float16, scale=1.0):
    return (torch.randn(*shape, device="cuda:1") * scale).to(dtype)


def test_matmul_on_cuda_1_while_the_current_device_is_0():
    assert torch.cuda.current_device() == 0
    a, w, bias = on_one(512, 256), on_one(384, 256), on_one(384)
    c = ops.matmul(a, w.T, bias=bias, activation="relu")
    assert c.device == torch.device("cuda:1") and torch.cuda.current_device() == 0
    assert relative_error(c, torch.relu(a.float() @ w.float().T + bias.float())) < TOLERANCE
    out = torch.empty(512, 384, device="cuda:1", dtype=torch.float16)
    ops.matmul(a, w.T, out=out)
    # A deep, narrow problem: where its schedule splits K (stream-K), the workspace is device 1's.
    skinny_a, skinny_b = on_one(128, 8192), on_one(8192, 128)
    skinny = ops.matmul(skinny_a, skinny_b)
    torch.cuda.synchronize(1)
    assert relative_error(out, a.float() @ w.float().T) < TOLERANCE
    assert relative_error(skinny, skinny_a.float() @ skinny_b.float()) < TOLERANCE
    # The same call on cuda:0 gives the same result as on cuda:1 (one kernel, the same schedule on two H200s).
    assert torch.equal(ops.matmul(a.to("cuda:0"), w.T.to("cuda:0")).cpu(), ops.matmul(a, w.T).cpu())
    assert torch.cuda.current_device() == 0


def test_matmul_backward_on_cuda_1():
    a = on_one(256, 128).requires_grad_()
    b = on_one(128, 192).requires_grad_()
    dz = on_one(256, 192, dtype=torch.float32)
    (ops.matmul(a, b, activation="gelu").float() * dz).sum().backward()
    a32, b32 = a.detach().float().requires_grad_(), b.detach().float().requires_grad_()
    (torch.nn.functional.gelu(a32 @ b32, approximate="tanh") * dz).sum().backward()
    assert a.grad.device == torch.device("cuda:1") and torch.cuda.current_device() == 0
    assert relative_error(a.grad, a32.grad) < 2 * TOLERANCE and relative_error(b.grad, b32.grad) < 2 * TOLERANCE


def test_tensors_on_two_gpus_are_an_argument_error_naming_both():
    a, w = on_one(128, 64), on_one(96, 64)
    with pytest.raises(warpspec.ArgumentError, match="b is on cuda:0 but a is on cuda:1"):
        ops.matmul(a, w.T.to("cuda:0"))
    q = on_one(1, 2, 128, 64)
    with pytest.raises(warpspec.ArgumentError, match="v is on cuda:0 but q is on cuda:1"):
        ops.attention(q, q, q.to("cuda:0"))


def attention_reference(q, k, v):
    logits = q.float() @ k.float().transpose(-1, -2) * q.shape[-1] ** -0.5
    mask = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril(k.shape[2] - q.shape[2])
    return torch.softmax(logits.masked_fill(~mask, float("-inf")), -1) @ v.float()


def test_attention_forward_and_backward_on_cuda_1_while_the_current_device_is_0():
    q, k, v = (on_one(2, 4, 256, 128, dtype=torch.bfloat16).requires_grad_() for _ in range(3))
    out = ops.attention(q, k, v, causal=True)
    assert out.device == torch.device("cuda:1") and torch.cuda.current_device() == 0
    assert (out.float() - attention_reference(q, k, v)).abs().max().item() < 4e-2
    dout = on_one(2, 4, 256, 128, dtype=torch.bfloat16)
    out.backward(dout)
    refs = [t.detach().float().requires_grad_() for t in (q, k, v)]
    attention_reference(*refs).backward(dout.float())
    for name, tensor, ref in zip("qkv", (q, k, v), refs):
        assert tensor.grad.device == torch.device("cuda:1")
        assert relative_error(tensor.grad, ref.grad) < 3e-2, name


def test_a_script_call_and_a_tuned_call_on_cuda_1():
    from tma_copy import TmaCopy

    source = torch.arange(300 * 256, device="cuda:1", dtype=torch.float32).reshape(300, 256).to(torch.float16)
    for kernel in (TmaCopy(tile_m=64, tile_n=64), TmaCopy()):  # pinned, then tuned on GPU 1
        destination = torch.zeros_like(source)
        kernel(300, 256, source, destination)
        kernel(300, 256, source, destination)  # the plan entry (the winner's guard) of GPU 1
        torch.cuda.synchronize(1)
        assert torch.equal(destination, source) and torch.cuda.current_device() == 0
    with pytest.raises(warpspec.ArgumentError, match="argument 'dst_ptr' is on GPU 0 but argument 'src_ptr' is on "
                                                     "GPU 1"):
        TmaCopy(tile_m=64, tile_n=64)(300, 256, source, torch.zeros_like(source, device="cuda:0"))


def test_a_cuda_graph_captured_on_cuda_1():
    a, w = on_one(512, 256), on_one(384, 256)
    q = on_one(1, 4, 256, 64, dtype=torch.bfloat16)
    with torch.cuda.device(1):
        ops.matmul(a, w.T)
        ops.attention(q, q, q, causal=True)  # builds the kernels outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            c = ops.matmul(a, w.T)
            out = ops.attention(q, q, q, causal=True)
        a.copy_(torch.randn_like(a))
        graph.replay()
        torch.cuda.synchronize()
    assert relative_error(c, a.float() @ w.float().T) < TOLERANCE
    assert (out.float() - attention_reference(q, q, q)).abs().max().item() < 4e-2


def environment() -> dict:
    """The environment of a child process: warpspec's sources and examples importable."""
    paths = [str(ROOT / "src"), str(ROOT / "examples"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))


@pytest.mark.skipif(os.environ.get("WARPSPEC_DEVICE_ORDER") == "swapped", reason="runs in the swapped order itself")
def test_the_gpu_tests_pass_with_the_devices_swapped():
    """``pytest -m gpu`` on this file and the op tests, with CUDA_VISIBLE_DEVICES ordering the GPUs the other way."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0,1").split(",")
    env = dict(environment(), CUDA_VISIBLE_DEVICES=",".join(reversed(visible[:2])),
               WARPSPEC_DEVICE_ORDER="swapped")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "gpu",
                             str(HERE / "test_two_gpus.py"), str(ROOT / "tests" / "ops" / "test_matmul_gpu.py"),
                             str(ROOT / "tests" / "ops" / "test_attention_gpu.py")],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]


@pytest.mark.parametrize("script", ["tp_mlp.py", "tp_attention.py"])
def test_a_tensor_parallel_torchrun_job_matches_one_gpu(script):
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                             str(HERE / script)], cwd=ROOT, env=environment(), capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    for rank in (0, 1):
        assert f"rank {rank}: forward, backward and graph match" in result.stdout
