"""ops.attention's split-KV path on a Hopper GPU: few query rows against long keys (grouped-query heads, D 64,
128 and 256, fp16 and bf16, both causal modes) against a float32 reference, its gradients, and two calls in a row (the
flags given back by the first)."""

import importlib

import pytest

import warpspec.ops
from warpspec.ops.attention import validate
from warpspec.ops.attention_decode import split_count

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

from tests.ops.test_attention_gpu import TOLERANCE, reference  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("batch, seq_q, seq_k", [(1, 1, 8192), (4, 4, 4097), (2, 16, 30000)])
def test_split_kv_against_a_float32_reference(dtype, head_dim, causal, batch, seq_q, seq_k):
    generator = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(batch, 32, seq_q, head_dim, device="cuda", dtype=dtype, generator=generator)
    k = torch.randn(batch, 8, seq_k, head_dim, device="cuda", dtype=dtype, generator=generator)
    v = torch.randn(batch, 8, seq_k, head_dim, device="cuda", dtype=dtype, generator=generator)
    assert split_count(validate(q, k, v, causal, None)) > 1
    expected = reference(q, k, v, causal)
    for _ in range(2):  # the second call finds every flag given back
        out = warpspec.ops.attention(q, k, v, causal=causal)
        assert (out.float() - expected).abs().max().item() < TOLERANCE[dtype]


def test_gradients_through_a_split_forward():
    generator = torch.Generator(device="cuda").manual_seed(1)
    q = torch.randn(1, 8, 4, 128, device="cuda", dtype=torch.bfloat16, generator=generator).requires_grad_()
    k = torch.randn(1, 2, 5000, 128, device="cuda", dtype=torch.bfloat16, generator=generator).requires_grad_()
    v = torch.randn(1, 2, 5000, 128, device="cuda", dtype=torch.bfloat16, generator=generator).requires_grad_()
    warpspec.ops.attention(q, k, v, causal=True).float().sum().backward()
    leaves = [x.detach().float().requires_grad_() for x in (q, k, v)]
    reference(*leaves, True).sum().backward()
    for got, want in zip((q.grad, k.grad, v.grad), leaves):
        assert ((got.float() - want.grad).abs().max() / want.grad.abs().max()).item() < 4e-2


@pytest.mark.parametrize("seq_q, seq_k", [(1, 8192), (4, 3000), (200, 700)], ids=["decode", "speculative", "forward"])
def test_a_repeated_call_launches_with_the_operands_addresses_alone(seq_q, seq_k, monkeypatch):
    """After a description's first launch, its calls with plain CUDA tensors take the bound launch (``run`` is not
    reached) on new operands, split decode (its stream workspace) and the forward kernel alike; a lse is returned;
    inside CUDA-graph capture a decode call takes the general path, whose workspace is the graph's."""
    ops_attention = importlib.import_module("warpspec.ops.attention")  # the module, not the function

    shapes = [(2, 8, seq_q, 128), (2, 2, seq_k, 128)]
    q, k, v = (torch.randn(shapes[min(i, 1)], device="cuda", dtype=torch.bfloat16) for i in range(3))
    warpspec.ops.attention(q, k, v, causal=True)
    assert ops_attention.call_for(q, k, v, True, None).direct is not None
    general = ops_attention.run
    monkeypatch.setattr(ops_attention, "run", lambda *args: pytest.fail("the general path ran"))
    for _ in range(2):
        q2, k2, v2 = (torch.randn_like(x) for x in (q, k, v))
        out, lse = warpspec.ops.attention(q2, k2, v2, causal=True, return_lse=True)
        assert (out.float() - reference(q2, k2, v2, True)).abs().max().item() < TOLERANCE[torch.bfloat16]
        logits = q2.float() @ k2.float().repeat_interleave(4, 1).transpose(-1, -2) * 128 ** -0.5
        visible = (torch.arange(seq_k, device="cuda")[None, :]
                   <= torch.arange(seq_q, device="cuda")[:, None] + seq_k - seq_q)
        expected_lse = logits.masked_fill(~visible, float("-inf")).logsumexp(-1)
        assert (lse - expected_lse).abs().max().item() < 1e-2
    monkeypatch.setattr(ops_attention, "run", general)
    static = [torch.randn_like(x) for x in (q, k, v)]
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        warpspec.ops.attention(*static, causal=True)  # warm up on the capturing stream
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        captured = warpspec.ops.attention(*static, causal=True)
    for _ in range(2):
        for x in static:
            x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        assert (captured.float() - reference(*static, True)).abs().max().item() < TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize("seq_q, batch, seq_k", [(1, 32, 131072), (128, 17, 131072)], ids=["decode", "forward"])
def test_keys_of_more_than_two_to_the_31_elements(seq_q, batch, seq_k):
    """K and V of 2**31 elements or more (64-bit element offsets, int32 row coordinates): the last batch entry,
    whose keys start past 2**31 elements, and the first, against a float32 reference on their own slices."""
    generator = torch.Generator(device="cuda").manual_seed(2)
    q = torch.randn(batch, 32, seq_q, 128, device="cuda", dtype=torch.bfloat16, generator=generator)
    k = torch.randn(batch, 8, seq_k, 128, device="cuda", dtype=torch.bfloat16, generator=generator)
    v = torch.randn(batch, 8, seq_k, 128, device="cuda", dtype=torch.bfloat16, generator=generator)
    assert (batch - 1) * k[0].numel() > 2**31 - 1  # the last entry's keys start past int32's reach
    out = warpspec.ops.attention(q, k, v, causal=True)
    for b in (0, batch - 1):
        expected = reference(q[b:b + 1], k[b:b + 1], v[b:b + 1], True)
        assert (out[b:b + 1].float() - expected).abs().max().item() < TOLERANCE[torch.bfloat16]
