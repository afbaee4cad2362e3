"""ops.attention differentiable with CPU torch tensors (the emulator): gradients against SDPA in float32, the
log-sum-exp output, mixed devices refused, and a small transformer block that trains to the same losses as the
same block on torch's attention."""

from math import inf

import pytest

torch = pytest.importorskip("torch")

from torch.nn.attention.bias import causal_lower_right  # noqa: E402

from warpspec import ArgumentError  # noqa: E402
from warpspec.ops import attention, attention_backward  # noqa: E402


def sdpa_float32(q, k, v, causal):
    group = q.shape[1] // k.shape[1]
    mask = causal_lower_right(q.shape[2], k.shape[2]) if causal else None
    return torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float().repeat_interleave(group, 1), v.float().repeat_interleave(group, 1), attn_mask=mask)


@pytest.mark.parametrize("head_dim, deterministic, fewest_keys, accumulates", [
    (64, False, None, True), (64, True, None, False), (128, False, None, False), (128, False, 40, True),
    (128, True, 40, False), (128, False, 41, False)],
    ids=["64", "64-use_deterministic_algorithms", "128-short", "128-long", "128-long-use_deterministic_algorithms",
         "128-one-key-short"])
def test_autograd_s_dq_path_follows_torch_s_deterministic_switch(head_dim, deterministic, fewest_keys, accumulates,
                                                                 monkeypatch):
    """At D 64, and at D 128 from ``AUTOGRAD_ACCUMULATES``'s number of keys (4096 shipped; here 40 keys against
    that bound set to 40 or 41), the backward accumulates dQ in float32 (a dQ accumulator given to the kernels)
    unless ``torch.use_deterministic_algorithms(True)`` is in force, when it takes the deterministic kernels (none);
    at D 128 with fewer keys it takes those."""
    import importlib

    backward = importlib.import_module("warpspec.ops.attention_backward")
    assert backward.AUTOGRAD_ACCUMULATES == {64: 0, 128: 4096}
    assert [backward.autograd_accumulates(128, n) for n in (4095, 4096)] == [False, True]
    assert not backward.autograd_accumulates(256, 10 ** 6)
    if fewest_keys is not None:
        monkeypatch.setitem(backward.AUTOGRAD_ACCUMULATES, 128, fewest_keys)
    accumulators = []
    launch = backward.launch_backward

    def recording(*args):
        accumulators.append(args[-1] is not None)
        return launch(*args)

    monkeypatch.setattr(backward, "launch_backward", recording)
    q, k, v = (torch.randn(1, 2, 40, head_dim).to(torch.bfloat16).requires_grad_() for _ in range(3))
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(deterministic)
    try:
        attention(q, k, v).sum().backward()
    finally:
        torch.use_deterministic_algorithms(was)
    assert accumulators == [accumulates]


@pytest.mark.parametrize("dtype, tolerance", [(torch.float16, 4e-3), (torch.bfloat16, 3e-2)], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_backward_through_the_op_matches_sdpa(dtype, tolerance, causal):
    """out.backward() reaches q, k and v (dK/dV summed over the 2 query heads of each K/V head); max abs error
    over max |gradient| within the stated tolerance of SDPA's float32 gradients on the same rounded inputs."""
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 70, 64, generator=generator).to(dtype).requires_grad_()
    k = torch.randn(1, 2, 90, 64, generator=generator).to(dtype).requires_grad_()
    v = torch.randn(1, 2, 90, 64, generator=generator).to(dtype).requires_grad_()
    weights = torch.randn(1, 4, 70, 64, generator=generator)
    (attention(q, k, v, causal=causal).float() * weights).sum().backward()
    leaves = [x.detach().float().requires_grad_() for x in (q, k, v)]
    (sdpa_float32(*leaves, causal) * weights).sum().backward()
    for got, want in zip((q.grad, k.grad, v.grad), (x.grad for x in leaves)):
        assert got.dtype == dtype
        assert ((got.float() - want).abs().max() / want.abs().max()).item() < tolerance


@pytest.mark.parametrize("scale", [-0.2, 0.0], ids=["negative", "zero"])
def test_autograd_carries_a_non_positive_scale_s_sign_into_dq(scale):
    """The call runs on sign · q (``fold_scale_sign``); autograd gives q its true gradient: negated, or 0. The
    reference is written out in float32 (SDPA's CPU kernel returns NaN for a causal mask under a negative scale)."""
    generator = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 2, 40, 64, generator=generator).half().requires_grad_() for _ in range(3))
    weights = torch.randn(1, 2, 40, 64, generator=generator)
    (attention(q, k, v, causal=True, scale=scale).float() * weights).sum().backward()
    leaves = [x.detach().float().requires_grad_() for x in (q, k, v)]
    logits = (leaves[0] @ leaves[1].transpose(-1, -2) * scale).masked_fill(~torch.ones(40, 40).bool().tril(), -inf)
    (torch.softmax(logits, -1) @ leaves[2] * weights).sum().backward()
    for got, want in zip((q.grad, k.grad, v.grad), (x.grad for x in leaves)):
        assert ((got.float() - want).abs().max() / want.abs().max().clamp_min(1e-30)).item() < 4e-3


def test_return_lse_and_the_functional_backward_on_tensors():
    generator = torch.Generator().manual_seed(1)
    q, k, v, dout = (torch.randn(1, 2, 50, 64, generator=generator).half() for _ in range(4))
    out, lse = attention(q, k, v, return_lse=True)
    logits = q.float() @ k.float().transpose(-1, -2) * 64 ** -0.5
    assert lse.dtype == torch.float32 and (lse - torch.logsumexp(logits, -1)).abs().max().item() < 1e-4
    dq, dk, dv = attention_backward(q, k, v, out, dout, lse)
    leaves = [x.float().requires_grad_() for x in (q, k, v)]
    sdpa_float32(*leaves, False).backward(dout.float())
    for got, want in zip((dq, dk, dv), (x.grad for x in leaves)):
        assert ((got.float() - want).abs().max() / want.abs().max()).item() < 4e-3


def test_mixed_devices_are_argument_errors():
    q = torch.zeros(1, 1, 8, 64, dtype=torch.float16)
    lse = torch.zeros(1, 1, 8, device="meta")
    with pytest.raises(ArgumentError, match="lse is on meta but q is on cpu"):
        attention_backward(q, q, q, q, q, lse)


class Block(torch.nn.Module):
    """Pre-norm self-attention and MLP, causal, with the attention itself a parameter of the test."""

    def __init__(self, width, heads, attend):
        super().__init__()
        self.heads, self.attend = heads, attend
        self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.qkv, self.proj = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 2 * width), torch.nn.GELU(),
                                       torch.nn.Linear(2 * width, width))

    def forward(self, x):
        batch, seq, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(batch, seq, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        # fp16 operands for both attentions: the comparison is of the kernels, not of the rounding.
        mixed = self.attend(*(t.half().contiguous() for t in (q, k, v))).float()
        x = x + self.proj(mixed.transpose(1, 2).reshape(batch, seq, width))
        return x + self.mlp(self.norm2(x))


def test_a_transformer_block_trains_to_torchs_losses():
    """Four SGD steps of a next-token-style regression through one causal block (2 heads of 64, seq 96): the
    losses with ops.attention follow those with SDPA (float32 on the same fp16 operands) within 1e-3 relative,
    and they fall."""
    def train(attend):
        torch.manual_seed(0)
        model = Block(128, 2, attend)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        generator = torch.Generator().manual_seed(2)
        x, target = torch.randn(1, 96, 128, generator=generator), torch.randn(1, 96, 128, generator=generator)
        losses = []
        for _ in range(4):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), target)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return losses

    ours = train(lambda q, k, v: attention(q, k, v, causal=True))
    theirs = train(lambda q, k, v: sdpa_float32(q, k, v, True))
    assert ours[-1] < ours[0]
    for got, want in zip(ours, theirs):
        assert abs(got - want) < 1e-3 * abs(want), (ours, theirs)


def test_torch_compile_traces_forward_and_backward():
    """fullgraph=True through AOT autograd (the fake implementations describe both ops) gives the eager
    gradients; the log-sum-exp output is not differentiable."""
    generator = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, n, 64, generator=generator).half().requires_grad_() for n in (40, 50, 50))
    compiled = torch.compile(lambda q, k, v: attention(q, k, v, causal=True).float().sum(), fullgraph=True,
                             backend="aot_eager")
    compiled(q, k, v).backward()
    traced = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    attention(q, k, v, causal=True).float().sum().backward()
    assert all(torch.equal(a, x.grad) for a, x in zip(traced, (q, k, v)))
    assert not attention(q, k, v, return_lse=True)[1].requires_grad


def test_torch_compile_does_not_trace_an_eager_call_s_bound_launch(monkeypatch):
    """A description whose eager calls take a bound launch (``Call.direct``, made for plain CUDA tensors; stood
    in for here on CPU tensors) is traced by torch.compile as the op, never as that launch."""
    import importlib

    ops_attention = importlib.import_module("warpspec.ops.attention")
    generator = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 2, n, 64, generator=generator).half() for n in (40, 50, 50))
    expected = attention(q, k, v, causal=True)
    found = ops_attention.call_for(q, k, v, True, None)
    monkeypatch.setattr(found, "direct", lambda *args: pytest.fail("the bound launch was traced"))
    monkeypatch.setattr(importlib.import_module("warpspec.torch_ops"), "dispatcher_idle", lambda device: True)
    compiled = torch.compile(lambda q, k, v: attention(q, k, v, causal=True) * 2, fullgraph=True,
                             backend="aot_eager")
    assert torch.equal(compiled(q, k, v), expected * 2)


def test_the_backward_makes_no_zeros_for_the_log_sum_exp_s_gradient():
    """The log-sum-exp output is not differentiable and its gradient is never read: autograd is told not to
    materialise it (a zeros kernel per training step on the GPU otherwise)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Filled(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.filled = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.__name__.split(".")[0] in ("zeros", "zeros_like", "new_zeros", "zero_", "fill_"):
                self.filled.append(func.__name__)
            return func(*args, **(kwargs or {}))

    generator = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 24, 64, generator=generator).half().requires_grad_() for _ in range(3))
    out = attention(q, k, v)
    with Filled() as mode:
        out.backward(torch.ones_like(out))
    assert mode.filled == []
    assert q.grad is not None and k.grad is not None and v.grad is not None
