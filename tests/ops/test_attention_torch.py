"""warpspec.ops.attention with CPU torch tensors: the custom op runs them on the emulator and returns a tensor of
q's dtype; errors are ArgumentErrors as for numpy arrays; the eager path that skips the dispatcher."""

import numpy as np
import pytest

from attention_fwd import reference

torch = pytest.importorskip("torch")

from warpspec import ArgumentError  # noqa: E402
from warpspec.ops import attention  # noqa: E402


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_cpu_tensors_run_on_the_emulator(dtype):
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 90, 64, generator=generator).to(dtype)
    k = torch.randn(1, 2, 70, 64, generator=generator).to(dtype)
    v = torch.randn(1, 2, 70, 64, generator=generator).to(dtype)
    out = attention(q, k, v, causal=True)
    assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.shape == q.shape
    expected = reference(q.float().numpy()[0], k.float().numpy()[0], v.float().numpy()[0], True)
    assert np.abs(out.float().numpy()[0] - expected).max() < (2e-3 if dtype == torch.float16 else 2e-2)


def test_mixed_kinds_and_devices_are_argument_errors():
    q = torch.zeros(1, 1, 8, 64, dtype=torch.float16)
    with pytest.raises(ArgumentError, match="k is a numpy array but q is a torch tensor"):
        attention(q, q.numpy(), q)
    with pytest.raises(ArgumentError, match="v is on meta but q is on cpu: every tensor of one call must be on the "
                                            "same device"):
        attention(q, q, torch.zeros(1, 1, 8, 64, dtype=torch.float16, device="meta"))


def test_the_eager_fast_path_skips_the_op_but_never_autograd(monkeypatch):
    """Where the dispatcher would do nothing but call the implementation (``dispatch_is_plain``; forced here for CPU
    tensors), ops.attention runs it directly: the same result without the custom op. A call that needs a gradient
    still goes through the op and records one."""
    import sys

    import warpspec
    import warpspec.torch_ops

    attention_module = sys.modules["warpspec.ops.attention"]
    generator = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, h, s, 64, generator=generator).half() for h, s in ((4, 2), (2, 70), (2, 70)))
    through_op = attention(q, k, v, causal=True)
    monkeypatch.setattr(warpspec.torch_ops, "dispatch_is_plain", lambda *tensors: True)
    real_op = attention_module._torch_op
    # The op is still looked up (registered by the first call, for torch.compile), never called.
    monkeypatch.setattr(attention_module, "_torch_op",
                        lambda: lambda *args: pytest.fail("the fast path called the custom op"))
    with warpspec.use_backend("emulator"):
        direct = attention(q, k, v, causal=True)
    assert torch.equal(direct, through_op)
    monkeypatch.setattr(attention_module, "_torch_op", real_op)
    with warpspec.use_backend("emulator"):
        assert attention(q.requires_grad_(), k, v, causal=True).grad_fn is not None


def test_a_differentiated_eager_call_skips_the_op(monkeypatch):
    """With plain CUDA tensors (faked here for CPU tensors) and nothing watching the dispatcher, a call that needs
    a gradient takes ``EagerAttention``: its forward the description's bound launch (``Call.direct``, faked with
    the emulator behind it) once, no call of the custom op, and the op's gradients exactly."""
    import sys

    import warpspec
    import warpspec.torch_ops

    module = sys.modules["warpspec.ops.attention"]
    generator = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, h, s, 64, generator=generator).half().requires_grad_()
               for h, s in ((4, 40), (2, 56), (2, 56)))
    weights = torch.randn(1, 4, 40, 64, generator=generator)
    with warpspec.use_backend("emulator"):
        (attention(q, k, v, causal=True).float() * weights).sum().backward()
    expected = [x.grad for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    found = module.call_for(q, k, v, True, None)
    launches = []

    def direct(q, k, v):
        launches.append(tuple(q.shape))
        out, lse2 = torch.empty_like(q), torch.empty(q.shape[:3])
        module.run(q, k, v, out, lse2, found.problem)
        return out, lse2

    monkeypatch.setattr(found, "direct", direct)
    monkeypatch.setattr(module, "plain_cuda", lambda *tensors: True)
    monkeypatch.setattr(warpspec.torch_ops, "dispatcher_idle", lambda device: True)
    monkeypatch.setattr(module.runtime, "direct_launches", lambda: True)
    op = module._torch_op()
    monkeypatch.setattr(module, "_torch_op", lambda: lambda *args: pytest.fail("the eager path called the op"))
    with warpspec.use_backend("emulator"):
        out = attention(q, k, v, causal=True)
        assert type(out.grad_fn).__name__ == "EagerAttentionBackward"
        (out.float() * weights).sum().backward()
    assert launches == [(1, 4, 40, 64)] and op is not None
    for x, want in zip((q, k, v), expected):
        assert torch.equal(x.grad, want)
