"""ops.attention's split-KV path on a Hopper GPU: few query rows against long keys (grouped-query heads, D 64 and
128, fp16 and bf16, both causal modes) against a float32 reference, its gradients, and two calls in a row (the
flags given back by the first)."""

import pytest

import warpspec.ops
from warpspec.ops.attention import validate
from warpspec.ops.attention_decode import split_count

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

from tests.ops.test_attention_gpu import TOLERANCE, reference  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("head_dim", [64, 128])
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
