"""``ops.grouped_matmul`` on a Hopper GPU against ``torch._grouped_mm``'s convention computed by torch (the GPU twin
of test_grouped_matmul.py): balanced, skewed and empty groups of 8 and 64 experts."""

import pytest

import warpspec

torch = pytest.importorskip("torch")

from warpspec import ops  # noqa: E402
from warpspec.ops import grouped  # noqa: E402
from warpspec.ops.frame import Signatures  # noqa: E402

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


def test_rows_past_the_last_group_are_zeros_in_recycled_memory():
    """The output is allocated uninitialised: memory the caching allocator hands back full of NaNs must still come
    back with the rows that belong to no group written as zeros."""
    a = torch.randn(300, 256, device="cuda").to(torch.bfloat16)
    w = torch.randn(4, 128, 256, device="cuda").to(torch.bfloat16)
    offs = torch.tensor([10, 10, 150, 200], dtype=torch.int32, device="cuda")
    for _ in range(3):
        torch.full((300, 128), float("nan"), dtype=torch.bfloat16, device="cuda")  # freed at once: the output's size
        c = ops.grouped_matmul(a, w.transpose(1, 2), offs)
        assert not c[200:].any() and not c.isnan().any()


def test_unchecked_device_offsets_are_clamped():
    """A CUDA offs is not read by the host: a decreasing end gives an empty group, an end past total_M stops at
    it, and nothing outside the tensors is touched."""
    a = torch.randn(256, 128, device="cuda").to(torch.bfloat16)
    w = torch.randn(4, 64, 128, device="cuda").to(torch.bfloat16)
    offs = torch.tensor([100, 40, 200, 900], dtype=torch.int32, device="cuda")
    c = ops.grouped_matmul(a, w.transpose(1, 2), offs).float()
    expected = torch.zeros(256, 64, device="cuda")
    for group, (start, end) in enumerate([(0, 100), (100, 100), (100, 200), (200, 256)]):
        expected[start:end] = a[start:end].float() @ w[group].float().T
    assert ((c - expected).norm() / expected.norm()).item() < 1e-2


def test_the_backward_matches_torch_on_the_gpu():
    generator = torch.Generator(device="cuda").manual_seed(1)
    sizes = [0, 300, 5, 0, 1000, 70]
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    a = torch.randn(sum(sizes) + 9, 512, device="cuda", generator=generator).to(torch.bfloat16).requires_grad_()
    w = torch.randn(len(sizes), 384, 512, device="cuda", generator=generator).to(torch.bfloat16).requires_grad_()
    c = ops.grouped_matmul(a, w.transpose(1, 2), offs)
    grad = torch.randn(c.shape, device="cuda", generator=generator)
    (c.float() * grad).sum().backward()
    a32, w32 = (t.detach().float().requires_grad_() for t in (a, w))
    pieces, start = [], 0
    for group, end in enumerate(offs.tolist()):
        pieces.append(a32[start:end] @ w32[group].T)
        start = end
    pieces.append(torch.zeros(a.shape[0] - start, 384, device="cuda"))
    (torch.cat(pieces) * grad).sum().backward()
    for found, expected in ((a.grad, a32.grad), (w.grad, w32.grad)):
        error = ((found.float() - expected).norm() / expected.norm()).item()
        assert found.shape == expected.shape and error < 1e-2, error


@pytest.mark.parametrize("experts, rows", [(64, (16,)), (64, (5, 11)), (8, (1,))])
def test_decode_steps_on_few_experts_split_their_tiles(experts, rows, monkeypatch):
    """All tokens on one or two experts: their few tiles split by K between blocks (the first call's workspace holds
    partial sums; flags handed back, so the second call, a bound launch, is right too)."""
    workspaces = []
    make = grouped.workspace_like

    def zeroed(*args):  # the stream's scratch partials, zeroed so that only this launch's sums show
        workspace = make(*args)
        workspace[0].zero_()
        workspaces.append(workspace)
        return workspace

    monkeypatch.setattr(grouped, "workspace_like", zeroed)
    # A first call, as other cases share the description (and so its launcher and bound launch).
    monkeypatch.setattr(grouped, "_launchers", Signatures())
    monkeypatch.setattr(grouped, "_calls", Signatures())
    sizes = torch.zeros(experts, dtype=torch.int64)
    sizes[3:3 + len(rows)] = torch.tensor(rows)
    offs = sizes.cumsum(0).to(torch.int32).cuda()
    a = torch.randn(sum(rows), 4096, device="cuda").to(torch.bfloat16)
    w = torch.randn(experts, 1536, 4096, device="cuda").to(torch.bfloat16)
    expected = torch.zeros(a.shape[0], 1536, device="cuda")
    start = 0
    for group, end in enumerate(offs.tolist()):
        expected[start:end] = a[start:end].float() @ w[group].float().T
        start = end
    for _ in range(2):
        c = ops.grouped_matmul(a, w.transpose(1, 2), offs)
        assert ((c.double() - expected.double()).norm() / expected.double().norm()).item() < 1e-2
    ((partials, flags),) = workspaces
    assert partials.any() and not flags.any()


@pytest.mark.parametrize("experts, rows", [(8, (3, 0, 9)), (64, (16,))], ids=["walk", "split"])
def test_a_call_like_an_earlier_one_takes_its_bound_launch(experts, rows, monkeypatch):
    """The first call of a description binds its launch (``GroupedCall.direct``); the next takes it alone and is
    right on new values, and an ``a`` of the same description that starts off TMA's 16 bytes takes the full path
    (one ``ops.matmul`` per group), right too."""
    monkeypatch.setattr(grouped, "_calls", Signatures())
    sizes = torch.zeros(experts, dtype=torch.int64)
    sizes[2:2 + len(rows)] = torch.tensor(rows)
    offs = sizes.cumsum(0).to(torch.int32).cuda()
    tokens, hidden = sum(rows) + 2, 1024
    w = torch.randn(experts, 768, hidden, device="cuda").to(torch.bfloat16)

    def check(a):
        c = ops.grouped_matmul(a, w.transpose(1, 2), offs)
        expected, start = torch.zeros(tokens, 768, device="cuda"), 0
        for group, end in enumerate(offs.tolist()):
            expected[start:end] = a[start:end].float() @ w[group].float().T
            start = end
        assert ((c.double() - expected.double()).norm() / expected.double().norm()).item() < 1e-2

    check(torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16))
    found = grouped.call_for(torch.empty(tokens, hidden, device="cuda", dtype=torch.bfloat16), w.transpose(1, 2),
                             offs, None)
    assert found.direct is not None
    taken = []
    direct = found.direct
    monkeypatch.setattr(found, "direct", lambda *args: taken.append(direct(*args)) or taken[-1])
    check(torch.randn(tokens, hidden, device="cuda").to(torch.bfloat16))
    storage = torch.randn(tokens * hidden + 1, device="cuda").to(torch.bfloat16)
    check(storage[1:].view(tokens, hidden))  # 2 bytes past an aligned address
    assert taken[0] is not None and taken[1] is None


@pytest.mark.parametrize("sizes, replayed", [
    ([0, 300, 5, 0, 1000, 70], [[0, 100, 105, 105, 900, 1300], [50, 50, 60, 700, 700, 1379]]),
    ([0, 0, 7, 0], [[0, 0, 3, 5], [1, 1, 1, 11]])], ids=["walk", "split"])
def test_cuda_graph_capture_and_replay(sizes, replayed):
    """A captured call replays on new values of ``a`` and new group ends (the kernel reads them on the device);
    the split schedule's workspace comes from the graph's pool, its flags zeroed by the graph before each replay."""
    generator = torch.Generator(device="cuda").manual_seed(2)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    a = torch.randn(sum(sizes) + 4, 1024, device="cuda", generator=generator).to(torch.bfloat16)
    w = torch.randn(len(sizes), 512, 1024, device="cuda", generator=generator).to(torch.bfloat16)
    ops.grouped_matmul(a, w.transpose(1, 2), offs)  # builds the kernel outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        c = ops.grouped_matmul(a, w.transpose(1, 2), offs)
    for ends in replayed:
        a.copy_(torch.randn(a.shape, device="cuda", generator=generator).to(torch.bfloat16))
        offs.copy_(torch.tensor(ends, dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        expected, start = torch.zeros(a.shape[0], 512, device="cuda"), 0
        for group, end in enumerate(ends):
            expected[start:end] = a[start:end].float() @ w[group].float().T
            start = end
        assert ((c.double() - expected.double()).norm() / expected.double().norm()).item() < 1e-2
