"""warpspec.ops.attention with CPU torch tensors: the custom op runs them on the emulator and returns a tensor of
q's dtype; errors are ArgumentErrors as for numpy arrays."""

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
