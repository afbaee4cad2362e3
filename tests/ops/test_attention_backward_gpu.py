"""warpspec.ops.attention's backward on a Hopper GPU: gradients against a float32 torch reference (grouped-query
heads, ragged lengths, both causal modes, D 64 and 128, fp16 and bf16), both dQ paths of
``ops.attention_backward`` at seq 2048 (the deterministic one bit-identical between runs), and against SDPA's at
equal lengths."""

import pytest

import warpspec.ops

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu

#: Max abs error over max |reference gradient|.
TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 4e-2}


def reference_gradients(q, k, v, dout, causal):
    leaves = [x.detach().float().requires_grad_() for x in (q, k, v)]
    group = q.shape[1] // k.shape[1]
    q32, k32, v32 = leaves
    logits = q32 @ k32.repeat_interleave(group, 1).transpose(-1, -2) * q.shape[-1] ** -0.5
    if causal:
        seq_q, seq_k = q.shape[2], k.shape[2]
        rows = torch.arange(seq_q, device=q.device)[:, None]
        visible = torch.arange(seq_k, device=q.device)[None, :] <= rows + seq_k - seq_q
        logits = logits.masked_fill(~visible, float("-inf"))
    out = torch.softmax(logits, -1).nan_to_num(0.0) @ v32.repeat_interleave(group, 1)
    out.backward(dout.float())
    return [x.grad for x in leaves]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq_q, seq_k", [(1000, 1000), (300, 1111), (777, 200)])
def test_gradients_against_a_float32_reference(dtype, head_dim, causal, seq_q, seq_k):
    generator = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(2, 6, seq_q, head_dim, device="cuda", dtype=dtype, generator=generator).requires_grad_()
    k = torch.randn(2, 2, seq_k, head_dim, device="cuda", dtype=dtype, generator=generator).requires_grad_()
    v = torch.randn(2, 2, seq_k, head_dim, device="cuda", dtype=dtype, generator=generator).requires_grad_()
    dout = torch.randn(2, 6, seq_q, head_dim, device="cuda", dtype=dtype, generator=generator)
    warpspec.ops.attention(q, k, v, causal=causal).backward(dout)
    for got, want in zip((q.grad, k.grad, v.grad), reference_gradients(q, k, v, dout, causal)):
        assert got.dtype == dtype and got.device == q.device
        assert ((got.float() - want).abs().max() / want.abs().max()).item() < TOLERANCE[dtype]


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_against_sdpa_at_equal_lengths(head_dim, causal):
    generator = torch.Generator(device="cuda").manual_seed(1)
    shape = (2, 2048 // head_dim, 2048, head_dim)
    q, k, v, dout = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, generator=generator)
                     for _ in range(4))
    ours = [x.clone().requires_grad_() for x in (q, k, v)]
    warpspec.ops.attention(*ours, causal=causal).backward(dout)
    theirs = [x.clone().requires_grad_() for x in (q, k, v)]
    torch.nn.functional.scaled_dot_product_attention(*theirs, is_causal=causal).backward(dout)
    for got, want in zip(ours, theirs):
        assert ((got.grad.float() - want.grad.float()).abs().max() / want.grad.float().abs().max()).item() < 4e-2


@pytest.mark.parametrize("transposed", [False, True], ids=["key-halves", "transposed"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq_q, seq_k", [(1000, 1000), (300, 1111), (777, 200)])
def test_both_forms_of_the_fused_kernel_against_a_float32_reference(monkeypatch, causal, seq_q, seq_k, transposed):
    """``BackwardFused`` in each form, pinned by the schedule: ``transposed`` (the shipped one: dVᵀ and dKᵀ of all
    128 keys, one warpgroup each, stored through transposed views up to the head's last key) and by key halves, on
    the accumulating path at D 64, grouped-query heads, ragged lengths."""
    import importlib

    module = importlib.import_module("warpspec.ops.attention_backward")  # the module (ops exports the function)
    fused = {**module.DEFAULT_BACKWARD_SCHEDULES[64]["fused"], "transposed": transposed}  # the shipped ring depth
    schedule = {**module.DEFAULT_BACKWARD_SCHEDULES[64], "fused": fused}
    monkeypatch.setitem(module.DEFAULT_BACKWARD_SCHEDULES, 64, schedule)
    monkeypatch.setattr(module, "_kernels", {})
    monkeypatch.setattr(module, "_calls", module.Signatures())  # no bound launch of an earlier test's kernels
    generator = torch.Generator(device="cuda").manual_seed(3)
    q = torch.randn(2, 6, seq_q, 64, device="cuda", dtype=torch.bfloat16, generator=generator)
    k, v = (torch.randn(2, 2, seq_k, 64, device="cuda", dtype=torch.bfloat16, generator=generator) for _ in "kv")
    dout = torch.randn(q.shape, device="cuda", dtype=torch.bfloat16, generator=generator)
    out, lse = warpspec.ops.attention(q, k, v, causal=causal, return_lse=True)
    grads = warpspec.ops.attention_backward(q, k, v, out, dout, lse, causal=causal, deterministic=False)
    (fused,) = [kernel for kernels in module._kernels.values() for kernel in kernels if hasattr(kernel, "transposed")]
    assert fused.transposed is transposed
    for got, want in zip(grads, reference_gradients(q, k, v, dout, causal)):
        assert ((got.float() - want).abs().max() / want.abs().max()).item() < TOLERANCE[torch.bfloat16]


@pytest.mark.parametrize("head_dim", [64, 128])
def test_the_accumulating_path_s_dot_zeroes_a_nan_filled_dq_accumulator(head_dim):
    """``DotZeroingDQ`` on the GPU: D against a float32 rowsum and every row of a NaN-filled accumulator zeroed (3
    heads of 1000 rows: a head's last block stops at its last row)."""
    from warpspec.dtypes import bfloat16
    from warpspec.ops.attention_backward_kernel import DotZeroingDQ

    generator = torch.Generator(device="cuda").manual_seed(5)
    out, dout = (torch.randn(1, 3, 1000, head_dim, device="cuda", dtype=torch.bfloat16, generator=generator)
                 for _ in range(2))
    dd = torch.full((1, 3, 1000), float("nan"), device="cuda")
    dq_accum = torch.full((1, 3, 1000, head_dim), float("nan"), device="cuda")
    DotZeroingDQ(bfloat16, head_dim=head_dim)(1000, 3, out, dout, dd, dq_accum)
    assert torch.count_nonzero(dq_accum).item() == 0
    torch.testing.assert_close(dd, (out.float() * dout.float()).sum(-1), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("deterministic", [False, True], ids=["accumulating", "deterministic"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_both_dq_paths_at_seq_2048(deterministic, dtype, head_dim, causal):
    """ops.attention_backward on the forward's out and lse, 4 query heads over 2 K/V heads: 16 key blocks
    reduce-add into every query tile on the accumulating path."""
    generator = torch.Generator(device="cuda").manual_seed(2)
    q = torch.randn(1, 4, 2048, head_dim, device="cuda", dtype=dtype, generator=generator)
    k, v = (torch.randn(1, 2, 2048, head_dim, device="cuda", dtype=dtype, generator=generator) for _ in "kv")
    dout = torch.randn(q.shape, device="cuda", dtype=dtype, generator=generator)
    out, lse = warpspec.ops.attention(q, k, v, causal=causal, return_lse=True)
    grads = warpspec.ops.attention_backward(q, k, v, out, dout, lse, causal=causal, deterministic=deterministic)
    for got, want in zip(grads, reference_gradients(q, k, v, dout, causal)):
        assert got.dtype == dtype
        assert ((got.float() - want).abs().max() / want.abs().max()).item() < TOLERANCE[dtype]
    if deterministic:
        again = warpspec.ops.attention_backward(q, k, v, out, dout, lse, causal=causal, deterministic=True)
        assert all(torch.equal(a, b) for a, b in zip(grads, again))


def test_a_repeated_training_step_launches_with_the_arrays_addresses_alone(monkeypatch):
    """After a description's first forward and backward, later ones take the bound launches (neither the forward's
    ``run`` nor ``launch_backward`` is reached), the forward through ``EagerAttention``, with new data, and the
    gradients are still right."""
    import importlib

    ops_attention = importlib.import_module("warpspec.ops.attention")
    ops_backward = importlib.import_module("warpspec.ops.attention_backward")
    shapes = [(2, 4, 700, 64), (2, 2, 900, 64), (2, 2, 900, 64)]
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16).requires_grad_() for shape in shapes)
    warpspec.ops.attention(q, k, v, causal=True).backward(torch.randn_like(q))
    monkeypatch.setattr(ops_attention, "run", lambda *args: pytest.fail("the forward's general path ran"))
    monkeypatch.setattr(ops_backward, "launch_backward", lambda *args: pytest.fail("the backward's general path ran"))
    for _ in range(2):
        q2, k2, v2 = (torch.randn_like(x).requires_grad_() for x in (q, k, v))
        dout = torch.randn_like(q2)
        out = warpspec.ops.attention(q2, k2, v2, causal=True)
        assert type(out.grad_fn).__name__ == "EagerAttentionBackward"  # the op's autograd, not its dispatch
        out.backward(dout)
        for got, want in zip((q2.grad, k2.grad, v2.grad), reference_gradients(q2, k2, v2, dout, True)):
            assert ((got.float() - want).abs().max() / want.abs().max()).item() < TOLERANCE[torch.bfloat16]


def test_autograd_under_torch_s_deterministic_switch_repeats_bit_for_bit():
    """Under ``torch.use_deterministic_algorithms(True)`` ops.attention's backward takes the deterministic kernels:
    two backward passes of one forward give bit-identical gradients, which match the float32 reference."""
    generator = torch.Generator(device="cuda").manual_seed(3)
    q, k, v = (torch.randn(2, 4, 1500, 64, device="cuda", dtype=torch.bfloat16, generator=generator)
               .requires_grad_() for _ in range(3))
    dout = torch.randn(2, 4, 1500, 64, device="cuda", dtype=torch.bfloat16, generator=generator)
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        out = warpspec.ops.attention(q, k, v, causal=True)
        first = torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
        second = torch.autograd.grad(out, (q, k, v), dout)
    finally:
        torch.use_deterministic_algorithms(was)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    for got, want in zip(first, reference_gradients(q, k, v, dout, True)):
        assert ((got.float() - want).abs().max() / want.abs().max()).item() < TOLERANCE[torch.bfloat16]
