"""``ops.grouped_matmul`` on a Hopper GPU against ``torch._grouped_mm``'s convention computed by torch (the GPU twin
of test_grouped_matmul.py): balanced, skewed and empty groups of 8 and 64 experts."""

import pytest

import warpspec

torch = pytest.importorskip("torch")

from warpspec import ops  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def cuda():
    with warpspec.use_backend("cuda"):
        yield


@pytest.mark.parametrize("experts, tokens, hidden, width, skewed", [
    (8, 8192, 4096, 1536, False), (8, 2048, 4096, 1536, True), (64, 1024, 1024, 512, True), (64, 16, 1024, 512, False)])
def test_groups_match_torch(experts, tokens, hidden, width, skewed):
    generator = torch.Generator(device="cuda").manual_seed(0)
    if skewed:  # one expert takes half the tokens, a quarter of them none
        sizes = torch.zeros(experts, dtype=torch.int64)
        sizes[0] = tokens // 2
        rest = torch.arange(experts // 4, experts)
        sizes[rest] = (tokens - tokens // 2) // len(rest)
        sizes[-1] += tokens - int(sizes.sum())
    else:
        sizes = torch.full((experts,), tokens // experts, dtype=torch.int64)
        sizes[-1] += tokens - int(sizes.sum())
    offs = sizes.cumsum(0).to(torch.int32).cuda()
    a = torch.randn(tokens, hidden, device="cuda", generator=generator).to(torch.bfloat16)
    w = torch.randn(experts, width, hidden, device="cuda", generator=generator).to(torch.bfloat16)
    c = ops.grouped_matmul(a, w.transpose(1, 2), offs)
    start, expected = 0, torch.zeros(tokens, width, device="cuda")
    for group, end in enumerate(offs.tolist()):
        expected[start:end] = a[start:end].float() @ w[group].float().T
        start = end
    assert ((c.double() - expected.double()).norm() / expected.double().norm()).item() < 1e-2
