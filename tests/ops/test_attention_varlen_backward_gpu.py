"""The packed backward of ops.attention_varlen on a Hopper GPU: each sequence's gradients against float32 torch
autograd on that sequence alone (ragged lengths with a 1-row sequence, one without queries and one without keys;
grouped-query heads, both causal modes, D 64 and 128, fp16 and bf16, both dQ paths), and the forward and backward
captured in a CUDA graph whose replays follow new operands."""

import pytest

import warpspec
from tests.ops.test_attention_backward_gpu import TOLERANCE, reference_gradients
from warpspec.ops import attention_varlen

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

LENGTHS_Q, LENGTHS_K = [300, 1, 129, 0, 77, 1000], [300, 50, 129, 64, 0, 700]


def packed(lengths_q, lengths_k, heads, kv_heads, head_dim, dtype, seed=0):
    """q, k, v (requiring gradients), dO, cu_seqlens_q and cu_seqlens_k on the GPU."""
    generator = torch.Generator(device="cuda").manual_seed(seed)

    def draw(rows, row_heads):
        return torch.randn((rows, row_heads, head_dim), device="cuda", dtype=dtype, generator=generator)

    q, k, v = draw(sum(lengths_q), heads), draw(sum(lengths_k), kv_heads), draw(sum(lengths_k), kv_heads)
    dout = draw(sum(lengths_q), heads)
    cu_q, cu_k = (torch.tensor([0, *lengths], device="cuda", dtype=torch.int32).cumsum(0, dtype=torch.int32)
                  for lengths in (lengths_q, lengths_k))
    return *(x.requires_grad_() for x in (q, k, v)), dout, cu_q, cu_k


def heads_first(x):
    """Rows [S, H, D] as [1, H, S, D]."""
    return x.detach().transpose(0, 1)[None]


def assert_each_sequence(grads, q, k, v, dout, cu_q, cu_k, causal):
    """Every sequence's gradients within ``TOLERANCE`` of float32 autograd on its rows alone; a sequence without
    queries or keys has zero gradients."""
    bounds_q, bounds_k = cu_q.tolist(), cu_k.tolist()
    for b in range(len(bounds_q) - 1):
        rows, keys = slice(bounds_q[b], bounds_q[b + 1]), slice(bounds_k[b], bounds_k[b + 1])
        parts = [g[span] for g, span in zip(grads, (rows, keys, keys))]
        if rows.start == rows.stop or keys.start == keys.stop:
            assert not any(part.any() for part in parts), b
            continue
        expected = reference_gradients(heads_first(q[rows]), heads_first(k[keys]), heads_first(v[keys]),
                                       heads_first(dout[rows]), causal)
        for got, want in zip(parts, expected):
            want = want[0].transpose(0, 1)
            assert ((got.float() - want).abs().max() / want.abs().max()).item() < TOLERANCE[q.dtype], b


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("deterministic", [False, True], ids=["accumulating", "deterministic"])
def test_gradients_of_each_sequence(dtype, head_dim, causal, deterministic):
    q, k, v, dout, cu_q, cu_k = operands = packed(LENGTHS_Q, LENGTHS_K, 6, 2, head_dim, dtype)
    with warpspec.use_backend("cuda"):
        attention_varlen(q, k, v, cu_q, cu_k, causal=causal, deterministic=deterministic).backward(dout)
    grads = (q.grad, k.grad, v.grad)
    assert all(g.dtype == dtype and g.device == q.device for g in grads)
    assert_each_sequence(grads, *operands, causal)


def test_the_deterministic_path_is_bit_identical_between_runs():
    q, k, v, dout, cu_q, cu_k = packed(LENGTHS_Q, LENGTHS_K, 6, 2, 128, torch.bfloat16, seed=1)
    runs = []
    with warpspec.use_backend("cuda"):
        for _ in range(2):
            for x in (q, k, v):
                x.grad = None
            attention_varlen(q, k, v, cu_q, cu_k, causal=True).backward(dout)
            runs.append((q.grad, k.grad, v.grad))
    for first, second in zip(*runs):
        assert torch.equal(first, second)


def test_forward_and_backward_under_cuda_graph_capture():
    """``check=False`` with ``max_seqlen_q`` and ``max_seqlen_k``: nothing is read back, so one training step's
    attention, forward and backward, is captured; a replay on new operands gives their eager gradients."""
    q, k, v, dout, cu_q, cu_k = operands = packed(LENGTHS_Q, LENGTHS_K, 4, 2, 128, torch.bfloat16, seed=2)
    kwargs = {"causal": True, "check": False, "max_seqlen_q": max(LENGTHS_Q), "max_seqlen_k": max(LENGTHS_K)}

    def step():
        for x in (q, k, v):
            x.grad = None
        attention_varlen(q, k, v, cu_q, cu_k, **kwargs).backward(dout)
        return q.grad, k.grad, v.grad

    with warpspec.use_backend("cuda"):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step()  # builds the kernels before the capture
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = step()
        fresh = packed(LENGTHS_Q, LENGTHS_K, 4, 2, 128, torch.bfloat16, seed=3)
        with torch.no_grad():
            for static, new in zip((q, k, v, dout), fresh):
                static.copy_(new)
        graph.replay()
        torch.cuda.synchronize()
        assert_each_sequence(captured, *operands, True)
