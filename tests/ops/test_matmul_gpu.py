"""``warpspec.ops.matmul`` on a Hopper GPU against torch: every dtype, b layout and epilogue at aligned and ragged
shapes, float8 against torch._scaled_mm, CUDA graph capture (no host synchronisation, tensor scales included) and
torch.compile(fullgraph=True) with inductor."""

import pytest

import warpspec

torch = pytest.importorskip("torch")

import importlib  # noqa: E402

from tests.ops.test_matmul import tile_walk  # noqa: E402, F401  (the fixture: these shapes' tile-walk schedules)
from warpspec import ops  # noqa: E402

ops_matmul = importlib.import_module("warpspec.ops.matmul")

pytestmark = pytest.mark.gpu
SHAPES = [(512, 384, 256), (1000, 520, 328), (72, 40, 48)]
ACTIVATIONS = {None: lambda x: x, "relu": torch.relu, "gelu": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
               "silu": torch.nn.functional.silu}


@pytest.fixture(autouse=True)
def cuda():
    with warpspec.use_backend("cuda"):
        yield


def operands(m, n, k, dtype, seed=0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=generator).to(dtype)
    w = torch.randn(n, k, device="cuda", generator=generator).to(dtype)
    return a, w


def relative_error(c, expected) -> float:
    return ((c.double() - expected.double()).norm() / expected.double().norm()).item()


@pytest.mark.parametrize("m, n, k", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout", ["w.T", "row-major"])
@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
def test_sixteen_bit_inputs_match_torch(m, n, k, dtype, layout, activation):
    a, w = operands(m, n, k, dtype)
    b = w.T if layout == "w.T" else w.T.contiguous()
    bias = torch.randn(n, device="cuda").to(dtype)
    c = ops.matmul(a, b, bias=bias, activation=activation)
    expected = ACTIVATIONS[activation](a.float() @ b.float() + bias.float())
    assert c.dtype == dtype and c.device == a.device
    assert relative_error(c, expected) < 1e-2
    wide = ops.matmul(a, b, out_dtype=torch.float32)
    assert wide.dtype == torch.float32 and relative_error(wide, a.float() @ b.float()) < 1e-5


@pytest.mark.parametrize("m, n, k", [(512, 384, 256), (1008, 528, 336)])  # _scaled_mm: multiples of 16
def test_float8_matches_scaled_mm(m, n, k):
    a, w = operands(m, n, k, torch.float16)
    a8, w8 = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    scale_a = torch.tensor([0.5], device="cuda")
    scale_b = torch.tensor([2.0], device="cuda")
    c = ops.matmul(a8, w8.T, scale_a=scale_a, scale_b=scale_b)
    expected = torch._scaled_mm(a8, w8.T, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)
    assert c.dtype == torch.bfloat16 and relative_error(c, expected) < 1e-2
    floats = ops.matmul(a8, w8.T, scale_a=0.5, scale_b=2.0, out_dtype=torch.float32)
    # FP8 WGMMA adds its products with fewer mantissa bits than float32 addition keeps (a relative error of about
    # 2e-4 was measured here at K = 256), so the float32 output is held to 1e-3, not to float32 rounding.
    assert relative_error(floats, a8.float() @ w8.float().T) < 1e-3


def test_cuda_graph_capture_and_replay():
    a, w = operands(512, 384, 256, torch.float16)
    a8, w8 = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    scale = torch.tensor([1.0], device="cuda")
    out = torch.empty(512, 384, device="cuda", dtype=torch.float16)
    out8 = torch.empty(512, 384, device="cuda", dtype=torch.bfloat16)
    ops.matmul(a, w.T, out=out)  # builds the kernels outside the capture
    ops.matmul(a8, w8.T, scale_a=scale, scale_b=scale, out=out8)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops.matmul(a, w.T, out=out)
        ops.matmul(a8, w8.T, scale_a=scale, scale_b=scale, out=out8)
    a.copy_(torch.randn_like(a))
    scale.fill_(3.0)  # read by the kernel at replay: no host copy of the value was made
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert relative_error(out, a.float() @ w.float().T) < 1e-2
    assert relative_error(out8, 9.0 * (a8.float() @ w8.float().T)) < 1e-2


def test_torch_compile_fullgraph_with_inductor():
    a, w = operands(512, 384, 256, torch.bfloat16)
    bias = torch.randn(384, device="cuda").to(torch.bfloat16)

    def f(a, w, bias):
        return ops.matmul(a, w.T, bias=bias, activation="relu") * 2

    compiled = torch.compile(f, fullgraph=True)
    assert torch.equal(compiled(a, w, bias), f(a, w, bias))


def gelu_call(m, n, k, dtype):
    """Operands of an ``a @ w.T`` with a bias and gelu in ``dtype`` (float8: a scale of 0.5, a bfloat16 output), an
    output to fill, the validated problem and the float32 reference: (a, w, bias, scale, out, problem, expected)."""
    a, w = operands(m, n, k, torch.float16)
    a, w = a.to(dtype), w.to(dtype)
    out_dtype = torch.bfloat16 if dtype == torch.float8_e4m3fn else dtype
    bias = torch.randn(n, device="cuda").to(out_dtype)
    scale = torch.tensor([0.5], device="cuda") if dtype == torch.float8_e4m3fn else None
    out = torch.empty(m, n, device="cuda", dtype=out_dtype)
    problem = ops_matmul.validate(a, w.T, bias, "gelu", out, None)
    expected = ACTIVATIONS["gelu"]((0.5 if scale is not None else 1.0) * (a.float() @ w.float().T) + bias.float())
    return a, w, bias, scale, out, problem, expected


#: The schedules of a test over every schedule are dealt round-robin to this many tests, so that a parallel run
#: spreads their builds (a second or two each) over its workers.
SHARDS = 8


@pytest.mark.parametrize("shard", range(SHARDS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.float8_e4m3fn])
def test_every_schedule_at_a_ragged_shape_with_few_sms(dtype, shard, tile_walk):
    """Each schedule pinned (this test's share of them), with a grid bound of 7 SMs: persistent blocks walk several
    ragged tiles and store through TMA; the others take one tile each."""
    # a 336-byte float8 row is a multiple of TMA's 16 bytes (328 is not)
    a, w, bias, scale, out, problem, expected = gelu_call(1000, 520, 336, dtype)
    tuned = ops_matmul.tuned_script(problem)
    ran = 0
    for schedule in tuned.schedules()[shard::SHARDS]:
        out.fill_(float("nan"))
        try:
            tuned.instantiate(schedule)(*ops_matmul.arguments(a, w.T, out, bias, scale, problem)[:-1], 7)
        except warpspec.CompileError as error:
            assert "fit in a block" in str(error), (schedule, error)
            continue
        assert relative_error(out, expected) < 1e-2, schedule
        ran += 1
    assert ran >= 30 // SHARDS  # each share builds 3 or more of its 9 (the unsplit test asked 30 of the 72)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float8_e4m3fn])
def test_every_stream_k_schedule_splits_the_last_wave_and_leaves_the_flags_zero(dtype, tile_walk):
    """Stream-K schedules pinned with a grid bound of 7 SMs at a ragged shape with a long K (32 K-tiles or more in
    every dtype): the tiles left over after the whole waves are split over the blocks where they fill at most 60% of
    the grid, the partial sums handed on through the flags, launch after launch on one workspace; every flag is 0
    after each launch."""
    # 32 K-tiles of float8's 128 columns, and a ragged one
    a, w, bias, scale, out, problem, expected = gelu_call(1000, 520, 4112, dtype)
    tuned = ops_matmul.tuned_script(problem)
    args = ops_matmul.arguments(a, w.T, out, bias, scale, problem)[:-1] + (7,)
    partials, flags = args[-3], args[-2]
    ran = 0
    # Every tile at 2 stages (each builds), and the size rule's 3 stages of 128x256: a compile each.
    chosen = [s for s in tuned.schedules() if s["stream_k"] and (s["num_stages"] == 2 or (
        s["num_stages"] == 3 and (s["block_m"], s["block_n"]) == (128, 256)))]
    for schedule in chosen:
        for _ in range(2):
            out.fill_(float("nan"))
            partials.fill_(float("nan"))
            try:
                tuned.instantiate(schedule)(*args)
            except warpspec.CompileError as error:
                assert "fit in a block" in str(error), (schedule, error)
                break
            assert relative_error(out, expected) < 1e-2, schedule
            assert flags[:7].tolist() == [0] * 7, schedule
            if (schedule["block_m"], schedule["block_n"]) == (128, 256):  # 24 tiles: 3 left over, split
                assert not torch.isnan(partials).all(), schedule
        else:
            ran += 1
    assert ran >= 6


def test_the_size_rule_splits_the_last_wave_at_8192_cubed_under_graph_capture_too():
    """ops.matmul's own schedule at 8192³ is stream-K: eagerly, and replayed from a CUDA graph captured on a side
    stream (the graph zeroes its own workspace's flags), the result matches cuBLAS."""
    a, w = operands(8192, 8192, 8192, torch.float16)
    expected = a @ w.T
    eager = ops.matmul(a, w.T)
    assert ops_matmul.chosen_schedule(ops_matmul.validate(a, w.T, None, None, None, None))["stream_k"] is True
    assert relative_error(eager, expected) < 1e-2
    out = torch.empty_like(expected)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops.matmul(a, w.T, out=out)
    for _ in range(3):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert relative_error(out, expected) < 1e-2


def test_a_plain_eager_call_runs_the_implementation_and_anything_else_goes_through_the_op(monkeypatch):
    """Plain CUDA tensors, no mode, no gradient: the op's implementation runs without PyTorch's dispatcher. A
    dispatch mode, a gradient or the profiler send the call through the op (the dispatcher must see it). Both
    write the same result and advance ``out``'s version once."""
    from torch.utils._python_dispatch import TorchDispatchMode

    a, w = operands(256, 192, 128, torch.float16)
    expected = a.float() @ w.float().T
    out = torch.empty(256, 192, device="cuda", dtype=torch.float16)
    through_op = []
    real_op = ops_matmul._torch_op()
    monkeypatch.setattr(ops_matmul, "_torch_op", lambda: lambda *args: (through_op.append(1), real_op(*args)))

    version = out._version
    ops.matmul(a, w.T, out=out)
    assert through_op == [] and out._version == version + 1
    assert relative_error(out, expected) < 1e-2

    class Seen(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    out.zero_()
    version = out._version
    with Seen() as mode:
        ops.matmul(a, w.T, out=out)
    assert "warpspec.matmul.default" in mode.ops and through_op == [1]
    assert out._version == version + 1 and relative_error(out, expected) < 1e-2

    leaf = a.detach().requires_grad_()  # out= has no backward: refused, never a silently missing gradient
    with pytest.raises(warpspec.ArgumentError, match="out=: ops.matmul writes out in place, which has no backward"):
        ops.matmul(leaf, w.T, out=out)
    assert through_op == [1]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        ops.matmul(a, w.T, out=out)
    assert through_op == [1, 1]
    assert any(event.name == "warpspec::matmul" for event in profile.events())


@pytest.mark.parametrize("m, n, k", [(8, 1024, 4096), (300, 520, 328)])  # split K (a workspace); the tile walk
def test_a_repeated_call_launches_with_the_operands_addresses_alone(m, n, k, monkeypatch):
    """After a call's first launch, a call of the same description with plain CUDA tensors launches through the
    signature's bound launch (``run`` is not reached), with new operands, with and without out and bias; its
    address checks still refuse a misaligned operand and an out that overlaps an input."""
    a, w = operands(m, n, k, torch.float16)
    bias = torch.randn(n, device="cuda").to(torch.float16)
    out = torch.empty(m, n, device="cuda", dtype=torch.float16)
    ops.matmul(a, w.T, bias=bias)
    ops.matmul(a, w.T, out=out)
    assert ops_matmul.signature(a, w.T, None, None, out, None).direct is not None
    monkeypatch.setattr(ops_matmul, "run", lambda *args: pytest.fail("the general path ran"))
    for seed in (1, 2):
        a2, w2 = operands(m, n, k, torch.float16, seed=seed)
        bias2 = torch.randn(n, device="cuda").to(torch.float16)
        assert relative_error(ops.matmul(a2, w2.T, bias=bias2), a2.float() @ w2.float().T + bias2.float()) < 1e-2
        version = out._version
        assert ops.matmul(a2, w2.T, out=out) is out and out._version == version + 1
        assert relative_error(out, a2.float() @ w2.float().T) < 1e-2
    backing = torch.empty(m * k + 8, device="cuda", dtype=torch.float16)
    misaligned = backing[1:1 + m * k].view(m, k)
    with pytest.raises(warpspec.ArgumentError, match="^a starts at an address that is not a multiple of 16 bytes"):
        ops.matmul(misaligned, w.T, out=out)
    shared = torch.empty(max(m * k, m * n), device="cuda", dtype=torch.float16)
    with pytest.raises(warpspec.ArgumentError, match="^out shares memory with a"):
        ops.matmul(shared[:m * k].view(m, k), w.T, out=shared[:m * n].view(m, n))
