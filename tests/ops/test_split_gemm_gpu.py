"""ops.matmul's split family on a Hopper GPU against torch: every tile of its space unsplit and split eight ways
launch after launch on one workspace (flags given back), ops.matmul's own schedules at a linear layer's decode and
small-batch shapes in every dtype, and under CUDA graph capture."""

import importlib

import pytest

torch = pytest.importorskip("torch")

from warpspec import ops  # noqa: E402
from warpspec.ops import kernels  # noqa: E402

from tests.ops.test_matmul_gpu import cuda, operands, relative_error  # noqa: E402,F401  (cuda: the fixture)

ops_matmul = importlib.import_module("warpspec.ops.matmul")

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("tile", kernels.SPLIT_TILES, ids=lambda t: f"{'swap' if t[0] else 'plain'}-{t[1]}x{t[2]}")
def test_every_tile_unsplit_and_split_eight_ways_matches_torch(tile):
    """M = 5 rows against N = 1000 (a partial last tile of either orientation), K = 2056 (33 K-tiles, a ragged one):
    each launch twice on one workspace, whose flags are 0 after each."""
    a, w = operands(5, 1000, 2056, torch.bfloat16)
    bias = torch.randn(1000, device="cuda").to(torch.bfloat16)
    out = torch.empty(5, 1000, device="cuda", dtype=torch.bfloat16)
    problem = ops_matmul.validate(a, w.T, bias, "gelu", out, None)
    expected = torch.nn.functional.gelu(a.float() @ w.float().T + bias.float(), approximate="tanh")
    tuned = ops_matmul.tuned_script(problem)
    args = ops_matmul.arguments(a, w.T, out, bias, None, problem)
    flags = args[-2]
    swap, block_m, block_n = tile
    for split in (1, 8):
        script = tuned.instantiate({"swap_ab": swap, "block_m": block_m, "block_n": block_n, "split_k": split,
                                    "num_stages": 4})
        for _ in range(2):
            out.fill_(float("nan"))
            script(*args)
            torch.cuda.synchronize()
            assert relative_error(out, expected) < 1e-2, (tile, split)
            assert not flags.any().item(), (tile, split)


@pytest.mark.parametrize("m", [1, 8, 16, 64, 256])
@pytest.mark.parametrize("n, k", [(4096, 4096), (1024, 4096)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float8_e4m3fn])
def test_ops_matmul_at_a_linear_layers_small_m(m, n, k, dtype):
    a, w = (t.to(dtype) for t in operands(m, n, k, torch.float16))
    if dtype == torch.float8_e4m3fn:
        one = torch.ones(1, device="cuda")
        c = ops.matmul(a, w.T, scale_a=one, scale_b=one)
        expected = torch._scaled_mm(a, w.T, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    else:
        c = ops.matmul(a, w.T)
        expected = a.float() @ w.float().T
    assert relative_error(c, expected) < 1e-2
    problem = ops_matmul.validate(a, w.T, None, None, None, None)
    assert problem.split_family and ops_matmul.chosen_schedule(problem) is not None


def test_a_split_schedule_replays_from_a_cuda_graph():
    """A decode step's split-K schedule (the shipped one of a 1024 × 4096 weight splits K in four) captured on a
    side stream: the graph's own workspace, its flags zeroed by the graph, serves every replay."""
    a, w = operands(1, 1024, 4096, torch.bfloat16)
    ops.matmul(a, w.T)  # builds outside the capture
    problem = ops_matmul.validate(a, w.T, None, None, None, None)
    assert ops_matmul.chosen_schedule(problem)["split_k"] > 1
    out = torch.empty(1, 1024, device="cuda", dtype=torch.bfloat16)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        ops.matmul(a, w.T, out=out)
    torch.cuda.current_stream().wait_stream(stream)
    for seed in range(3):
        a.copy_(torch.randn(1, 4096, device="cuda", generator=torch.Generator("cuda").manual_seed(seed)))
        graph.replay()
        torch.cuda.synchronize()
        assert relative_error(out, a.float() @ w.float().T) < 1e-2
