"""Batched ``ops.matmul`` on a Hopper GPU against ``torch.bmm`` (the GPU twin of test_matmul_batched.py): one launch
of the grouped kernel for both layouts of ``b`` at shapes models call, ``out=``, gradients, no host
synchronisation (``torch.cuda.set_sync_debug_mode("error")`` makes one an error), a CUDA graph capture replayed on
new operands, and the per-batch loop's cases."""

import pytest

import warpspec

torch = pytest.importorskip("torch")

from warpspec import ArgumentError, ops  # noqa: E402
from tests.ops.test_matmul_batched import launches  # noqa: E402,F401  (the fixture: launch counts)

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def cuda():
    with warpspec.use_backend("cuda"):
        yield


@pytest.fixture
def no_sync():
    """A host synchronisation inside the block is an error (torch's sync debug mode)."""
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def operands(batches, m, n, k, dtype, layout, seed=0):
    """a [B, M, K] and b [B, K, N]: row-major, or the transposed view of [B, N, K] (``k.transpose(1, 2)``)."""
    generator = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(batches, m, k, device="cuda", generator=generator).to(dtype)
    shape = (batches, k, n) if layout == "row" else (batches, n, k)
    b = torch.randn(shape, device="cuda", generator=generator).to(dtype)
    return a, (b if layout == "row" else b.transpose(1, 2))


def relative_error(found, expected) -> float:
    return ((found.double() - expected.double()).norm() / expected.double().norm()).item()


@pytest.mark.parametrize("batches, m, n, k", [(32, 1024, 1024, 128), (64, 128, 128, 64), (4, 1000, 520, 328),
                                              (2, 4096, 4096, 4096)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["row", "weights"])
def test_one_launch_matches_bmm(batches, m, n, k, dtype, layout, launches):
    a, b = operands(batches, m, n, k, dtype, layout)
    c = ops.matmul(a, b, out_dtype=torch.float32)
    assert c.shape == (batches, m, n) and c.dtype == torch.float32
    assert relative_error(c, torch.bmm(a.float(), b.float())) < 1e-5
    assert relative_error(ops.matmul(a, b), torch.bmm(a.float(), b.float())) < 1e-2
    assert launches == {"grouped": 2, "per_batch": 0}


def test_out_and_later_calls_do_not_wait_for_the_device(launches, no_sync):
    a, b = operands(8, 256, 384, 512, torch.bfloat16, "weights", seed=1)
    expected = torch.bmm(a.float(), b.float())
    out = torch.full((8, 256, 384), float("nan"), device="cuda", dtype=torch.bfloat16)
    for _ in range(2):  # the first call of the description, then its bound launch
        assert ops.matmul(a, b, out=out) is out
        c = ops.matmul(a, b)
    assert launches == {"grouped": 4, "per_batch": 0}
    torch.cuda.set_sync_debug_mode("default")
    assert relative_error(out, expected) < 1e-2 and relative_error(c, expected) < 1e-2


@pytest.mark.parametrize("layout", ["row", "weights"])
def test_gradients_match_torch_without_waiting_for_the_device(layout, launches, no_sync):
    a, b = operands(16, 320, 256, 192, torch.bfloat16, layout, seed=2)
    a.requires_grad_()
    leaf = (b if layout == "row" else b.transpose(1, 2)).detach().requires_grad_()
    grad = torch.randn(16, 320, 256, device="cuda")
    c = ops.matmul(a, leaf if layout == "row" else leaf.transpose(1, 2))
    (c.float() * grad).sum().backward()
    torch.cuda.set_sync_debug_mode("default")
    a32, leaf32 = (t.detach().float().requires_grad_() for t in (a, leaf))
    (torch.bmm(a32, leaf32 if layout == "row" else leaf32.transpose(1, 2)) * grad).sum().backward()
    for found, expected in ((a.grad, a32.grad), (leaf.grad, leaf32.grad)):
        assert found.shape == expected.shape and relative_error(found, expected) < 1e-2
    assert launches == {"grouped": 2, "per_batch": 16}  # forward and dA; dB per batch


def test_cuda_graph_capture_and_replay():
    """A captured call replays on new values of ``a`` and ``b``; its ends are made by a node of the graph."""
    a, b = operands(32, 1024, 1024, 128, torch.float16, "weights", seed=3)
    ops.matmul(a, b)  # builds the kernel outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        c = ops.matmul(a, b)
    for seed in (4, 5):
        new_a, new_b = operands(32, 1024, 1024, 128, torch.float16, "weights", seed=seed)
        a.copy_(new_a)
        b.copy_(new_b)
        graph.replay()
        torch.cuda.synchronize()
        assert relative_error(c, torch.bmm(a.float(), b.float())) < 1e-2


def test_the_loop_keeps_the_epilogue_and_the_errors(launches):
    a, b = operands(4, 256, 128, 64, torch.float16, "row", seed=6)
    bias = torch.randn(128, device="cuda").half()
    c = ops.matmul(a, b, bias=bias, activation="relu")
    assert relative_error(c, torch.relu(torch.bmm(a.float(), b.float()) + bias.float())) < 1e-2
    assert launches == {"grouped": 0, "per_batch": 4}
    with pytest.raises(ArgumentError, match="batched ops.matmul takes a"):
        ops.matmul(a, b[:3])
    shifted = torch.empty(a.numel() + 1, device="cuda", dtype=torch.float16)[1:].view(a.shape)
    with pytest.raises(ArgumentError, match="a starts at an address that is not a multiple of 16 bytes"):
        ops.matmul(shifted, b)
