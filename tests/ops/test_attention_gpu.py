"""warpspec.ops.attention on a Hopper GPU: against a float32 torch reference (bottom-right causal mask, grouped-query
heads, ragged lengths), against SDPA at equal lengths, every schedule of the kernel's space, torch.compile and CUDA
graph capture."""

import importlib

import pytest

import warpspec
import warpspec.ops

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

TOLERANCE = {torch.float16: 2e-2, torch.bfloat16: 4e-2}  # max abs error against float32, outputs of size ~0.1


def reference(q, k, v, causal, scale=None):
    """Attention in float32 with K/V heads repeated for grouped-query heads, causal aligned at the bottom right,
    rows that see no key 0."""
    group = q.shape[1] // k.shape[1]
    q32, k32, v32 = q.float(), k.float().repeat_interleave(group, 1), v.float().repeat_interleave(group, 1)
    logits = q32 @ k32.transpose(-1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if causal:
        seq_q, seq_k = q.shape[2], k.shape[2]
        rows = torch.arange(seq_q, device=q.device)[:, None]
        visible = torch.arange(seq_k, device=q.device)[None, :] <= rows + seq_k - seq_q
        logits = logits.masked_fill(~visible, float("-inf"))
    weights = torch.softmax(logits, -1).nan_to_num(0.0)
    return weights @ v32


def operands(batch, heads, kv_heads, seq_q, seq_k, head_dim, dtype, seed=0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(batch, heads, seq_q, head_dim, device="cuda", dtype=dtype, generator=generator)
    k = torch.randn(batch, kv_heads, seq_k, head_dim, device="cuda", dtype=dtype, generator=generator)
    v = torch.randn(batch, kv_heads, seq_k, head_dim, device="cuda", dtype=dtype, generator=generator)
    return q, k, v


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq_q, seq_k", [(1000, 1000), (300, 1111), (777, 200), (1, 4097)])
def test_against_a_float32_reference(dtype, head_dim, causal, seq_q, seq_k):
    q, k, v = operands(2, 6, 2, seq_q, seq_k, head_dim, dtype)
    out = warpspec.ops.attention(q, k, v, causal=causal)
    assert out.dtype == dtype and out.shape == q.shape and out.device == q.device
    assert (out.float() - reference(q, k, v, causal)).abs().max().item() < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_dim, seq_q, seq_k, block_n, num_stages", [
    (64, 3000, 3000, 128, 3), (64, 777, 4100, 128, 2), (64, 2500, 700, 96, 2), (64, 1, 4097, 64, 3),
    (128, 3000, 3000, 80, 2), (128, 777, 4100, 64, 3)])
def test_three_consumer_warpgroups(dtype, causal, head_dim, seq_q, seq_k, block_n, num_stages):
    """The one-tile kernel with three consumer warpgroups (192-row query tiles) at D 64 and 128 against the float32
    reference: grouped-query heads, ragged lengths, S_q above and below S_k, and its log-sum-exp equal to the
    two-warpgroup kernel's."""
    from warpspec.ops.attention import arguments, validate
    from warpspec.ops.attention_kernel import Attention

    q, k, v = operands(2, 6, 2, seq_q, seq_k, head_dim, dtype)
    problem = validate(q, k, v, causal, None)
    results = []
    for consumers in (3, 2):
        out, lse = torch.full_like(q, float("nan")), torch.empty(q.shape[:3], device="cuda")
        kernel = Attention({torch.float16: warpspec.float16, torch.bfloat16: warpspec.bfloat16}[dtype],
                           head_dim=head_dim, causal=causal, block_n=block_n, num_stages=num_stages, unroll=1,
                           consumers=consumers)
        with warpspec.use_backend("cuda"):
            kernel(*arguments(q, k, v, out, lse, problem, persistent=False))
        results.append((out, lse))
    (out, lse), (_, two_lse) = results
    assert (out.float() - reference(q, k, v, causal)).abs().max().item() < TOLERANCE[dtype]
    assert torch.equal(lse, two_lse)


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_against_sdpa_at_equal_lengths(head_dim, causal):
    """SDPA's is_causal mask is the top-left triangle, the same as the bottom-right one when S_q = S_k."""
    q, k, v = operands(2, 2048 // head_dim, 2048 // head_dim, 2048, 2048, head_dim, torch.float16)
    out = warpspec.ops.attention(q, k, v, causal=causal, scale=0.1)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.1)
    assert (out.float() - expected.float()).abs().max().item() < 2e-2


@pytest.mark.parametrize("scale", [-0.1, 0.0], ids=["negative", "zero"])
@pytest.mark.parametrize("seq_q", [1, 700], ids=["decode", "forward"])
def test_a_negative_or_zero_scale_and_its_gradients_on_the_gpu(scale, seq_q):
    """The decode and the forward kernel on sign · q (``fold_scale_sign``), eager twice (the second call's bound
    launch) and differentiated: gradients against float32 autograd through the reference."""
    q, k, v = operands(2, 8, 2, seq_q, 900, 128, torch.bfloat16)
    for _ in range(2):
        out = warpspec.ops.attention(q, k, v, causal=True, scale=scale)
        assert (out.float() - reference(q, k, v, True, scale)).abs().max().item() < TOLERANCE[torch.bfloat16]
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    weights = torch.randn(q.shape, device="cuda")
    (warpspec.ops.attention(*leaves, causal=True, scale=scale).float() * weights).sum().backward()
    floats = [x.float().requires_grad_() for x in (q, k, v)]
    (reference(*floats, True, scale) * weights).sum().backward()
    for got, want in zip(leaves, floats):
        error = (got.grad.float() - want.grad).abs().max() / want.grad.abs().max().clamp_min(1e-30)
        assert error.item() < 3e-2


def _schedules() -> list[dict]:
    from warpspec.dtypes import float16
    from warpspec.ops.attention_kernel import Attention

    return Attention(float16).schedules()


# One test per schedule, so that a parallel run spreads their builds (a few seconds each) over its workers.
@pytest.mark.parametrize("schedule", _schedules(), ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_every_schedule_builds_or_is_refused_for_its_shared_memory(head_dim, schedule):
    from warpspec.errors import CompileError
    from warpspec.ops.attention import arguments, script_for, validate

    q, k, v = operands(1, 4, 1, 700, 900, head_dim, torch.float16, seed=1)
    problem = validate(q, k, v, True, None)
    out = torch.full_like(q, float("nan"))
    try:
        with warpspec.use_backend("cuda"):
            args = arguments(q, k, v, out, torch.empty(q.shape[:3], device="cuda"), problem, persistent=False)
            script_for(problem, args, schedule, persistent=False)(*args)
    except CompileError as error:  # pruned, as the tuner would
        assert "fit in a block" in str(error), error
        return
    torch.cuda.synchronize()
    assert (out.float() - reference(q, k, v, True)).abs().max().item() < 2e-2


def test_tune_attention_times_what_builds_and_later_launches_run_its_winner(tmp_path, monkeypatch):
    """``tune_attention`` at D 256, causal (the one-tile kernel, whose every schedule the pruner once refused for
    registers, leaving nothing to time): the six schedules past shared memory are pruned, the three that fit are
    built and timed, none fails; the winner is returned, and the next launch of the shape runs it, within the
    float32 reference's tolerance."""
    attention_op = importlib.import_module("warpspec.ops.attention")  # the module: ops.attention is the function
    monkeypatch.setenv("WARPSPEC_CACHE_DIR", str(tmp_path))  # nothing tuned yet, nothing left for other tests
    monkeypatch.setattr(attention_op, "_tuned", {})
    monkeypatch.setattr(attention_op, "_chosen", {})
    shape = (1, 4, 2, 384, 384, 256)
    winners = attention_op.tune_attention([shape], "bfloat16", causal=True)

    q, k, v = operands(*shape, torch.bfloat16, seed=3)
    problem = attention_op.validate(q, k, v, True, None)
    assert not attention_op.uses_persistent(problem)
    report = attention_op.tuned_script(problem).last_report
    assert report.counts() == {"pruned": 6, "timed": 2, "winner": 1}, report.table()
    assert all("bytes of shared memory" in fate.reason for fate in report.fates if fate.fate == "pruned")
    assert winners == {shape: report.winner.schedule}
    out = torch.full_like(q, float("nan"))
    with warpspec.use_backend("cuda"):
        script, _ = attention_op.launch(q, k, v, out, torch.empty(q.shape[:3], device="cuda"), problem)
    torch.cuda.synchronize()
    assert {name: getattr(script, name) for name in report.winner.schedule} == report.winner.schedule
    assert (out.float() - reference(q, k, v, True)).abs().max().item() < TOLERANCE[torch.bfloat16]


def test_torch_compile_and_cuda_graphs():
    q, k, v = operands(1, 4, 4, 512, 512, 128, torch.bfloat16)
    expected = warpspec.ops.attention(q, k, v, causal=True)
    compiled = torch.compile(lambda q, k, v: warpspec.ops.attention(q, k, v, causal=True) * 2, fullgraph=True)
    assert torch.equal(compiled(q, k, v), expected * 2)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = warpspec.ops.attention(q, k, v, causal=True)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, expected)


def test_a_first_call_inside_graph_capture_runs_the_one_tile_kernel_and_later_calls_the_walk():
    """A short causal shape never called before: inside capture the persistent kernel's walk cannot be uploaded,
    so the captured call runs the one-tile kernel; the eager call after it (not bound to the captured launch)
    uploads the walk and runs the persistent kernel, and a second capture of the shape takes it too."""
    attention_op = importlib.import_module("warpspec.ops.attention")  # the module: ops.attention is the function

    q, k, v = operands(3, 4, 2, 640, 640, 64, torch.float16, seed=5)
    problem = attention_op.validate(q, k, v, True, None)
    assert attention_op.uses_persistent(problem)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        assert not attention_op.walk_uploadable(problem, q)
        captured = warpspec.ops.attention(q, k, v, causal=True)
    graph.replay()
    eager = warpspec.ops.attention(q, k, v, causal=True)
    assert attention_op.walk_uploadable(problem, q)
    again = torch.cuda.CUDAGraph()
    with torch.cuda.graph(again):
        assert attention_op.walk_uploadable(problem, q)
        recaptured = warpspec.ops.attention(q, k, v, causal=True)
    again.replay()
    torch.cuda.synchronize()
    expected = reference(q, k, v, True)
    for out in (captured, eager, recaptured):
        assert (out.float() - expected).abs().max().item() < TOLERANCE[torch.float16]
    assert torch.equal(recaptured, eager)


@pytest.mark.parametrize("head_dim, schedule, consumers", [(64, (128, 2), 2), (128, (128, 2), 2), (128, (64, 3), 2),
                                                            (256, (80, 2), 2), (256, (48, 2), 2), (64, (96, 2), 3),
                                                            (64, (64, 2), 3), (128, (64, 2), 3)])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_persistent_kernel_against_a_float32_reference(head_dim, schedule, consumers, causal):
    """``AttentionPersistent`` with the GPU's SMs as its grid bound and with 7 (each block walking many tiles), at
    a ragged grouped-query shape whose causal rows past S_k see no key; at D 64 and 128 also with three consumer
    warpgroups."""
    from warpspec.ops.attention_kernel import LOG2_E
    from warpspec.ops.attention_persistent_kernel import AttentionPersistent, tile_walk

    block_n, num_stages = schedule
    q, k, v = operands(2, 6, 2, 777, 600, head_dim, torch.bfloat16)
    kernel = AttentionPersistent(warpspec.bfloat16, head_dim=head_dim, causal=causal, block_n=block_n,
                                 num_stages=num_stages, consumers=consumers)
    for num_sms in (torch.cuda.get_device_properties(0).multi_processor_count, 7):
        out = torch.full_like(q, float("nan"))
        lse = torch.empty(q.shape[:3], device="cuda", dtype=torch.float32)
        walk = torch.from_numpy(tile_walk(777, 600, 12, kernel.block_m, causal, num_sms).copy()).cuda()
        with warpspec.use_backend("cuda"):
            kernel(777, 600, 12, 6, 3, head_dim ** -0.5 * LOG2_E, q, k, v, out, lse, walk, num_sms)
        assert (out.float() - reference(q, k, v, causal)).abs().max().item() < TOLERANCE[torch.bfloat16], num_sms
