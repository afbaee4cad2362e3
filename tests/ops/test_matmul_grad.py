"""The backward of ``ops.matmul`` on torch CPU tensors (the emulator runs every GEMM, the backward's too): gradients
against torch's in float32 for each layout of ``b`` and each epilogue, ``ops.Linear`` training a small MLP to
torch's losses, and the refusals of paths without a backward."""

import pytest

torch = pytest.importorskip("torch")

from warpspec import ArgumentError, ops  # noqa: E402

ACTIVATIONS = {None: lambda z: z, "relu": torch.relu, "silu": torch.nn.functional.silu,
               "gelu": lambda z: torch.nn.functional.gelu(z, approximate="tanh")}
#: Relative to the largest gradient element: the inputs are rounded to 16 bits once, dZ once (to the input dtype)
#: and each gradient once; bfloat16's 8-bit mantissa makes 2**-8 = 0.4% per rounding.
TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1.5e-2}


def leaves(m, n, k, dtype, b_layout, seed=0):
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=generator).to(dtype).requires_grad_()
    w = torch.randn(n, k, generator=generator).to(dtype)
    # k-major: b is the transposed view of a weight [N, K] (the leaf); n-major: b is a row-major [K, N] leaf.
    weight = (w if b_layout == "k-major" else w.T.contiguous()).requires_grad_()
    bias = torch.randn(n, generator=generator).to(dtype).requires_grad_()
    return a, weight, bias


def b_of(weight, b_layout):
    return weight.T if b_layout == "k-major" else weight


def reference_grads(a, weight, bias, b_layout, activation, grad, with_bias):
    """Gradients of the same loss in float32 torch ops."""
    a32, w32, bias32 = (t.detach().float().requires_grad_() for t in (a, weight, bias))
    z = a32 @ b_of(w32, b_layout) + (bias32 if with_bias else 0)
    (ACTIVATIONS[activation](z) * grad).sum().backward()
    return a32.grad, w32.grad, bias32.grad


def assert_grads_close(found, expected, tolerance):
    for name, got, want in zip(("a", "b", "bias"), found, expected):
        if want is None:
            assert got is None, name
            continue
        assert got.dtype != torch.float32 and got.shape == want.shape, name
        error = (got.float() - want).abs().max() / want.abs().max()
        assert error <= tolerance, f"{name}: relative error {error:.2e} above {tolerance}"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("b_layout", ["k-major", "n-major"])
@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
def test_gradients_match_torch_for_every_layout_and_activation(dtype, b_layout, activation):
    a, weight, bias = leaves(64, 80, 96, dtype, b_layout)
    y = ops.matmul(a, b_of(weight, b_layout), bias=bias, activation=activation)
    assert y.grad_fn is not None and y.dtype == dtype and y.shape == (64, 80)
    grad = torch.randn(64, 80, generator=torch.Generator().manual_seed(1))
    (y.float() * grad).sum().backward()
    expected = reference_grads(a, weight, bias, b_layout, activation, grad, with_bias=True)
    assert_grads_close((a.grad, weight.grad, bias.grad), expected, TOLERANCE[dtype])


@pytest.mark.parametrize("b_layout", ["k-major", "n-major"])
def test_gradients_without_bias_with_a_float32_output_and_a_ragged_shape(b_layout):
    """out_dtype=float32 (the incoming gradient is float32 and is rounded to the inputs' dtype for the GEMMs), M
    and N not multiples of 8: the backward stages dZ and Aᵀ into rows padded to 16 bytes."""
    a, weight, bias = leaves(72, 40, 64, torch.float16, b_layout, seed=3)
    y = ops.matmul(a, b_of(weight, b_layout), out_dtype=torch.float32)
    assert y.dtype == torch.float32
    grad = torch.randn(72, 40, generator=torch.Generator().manual_seed(4))
    (y * grad).sum().backward()
    expected = reference_grads(a, weight, bias, b_layout, None, grad, with_bias=False)
    assert_grads_close((a.grad, weight.grad, None), expected[:2] + (None,), TOLERANCE[torch.float16])
    assert bias.grad is None


@pytest.mark.parametrize("activation", [None, "relu", "gelu", "silu"])
def test_gradients_of_an_empty_sum(activation):
    """K = 0: the result is activation(bias) in each row, so only the bias gets a nonzero gradient (each row's
    incoming gradient through the activation's derivative at the bias); a and b get empty ones."""
    a, weight, bias = leaves(6, 16, 0, torch.float16, "k-major")
    grad = torch.randn(6, 16, generator=torch.Generator().manual_seed(1))
    (ops.matmul(a, b_of(weight, "k-major"), bias=bias, activation=activation).float() * grad).sum().backward()
    expected = reference_grads(a, weight, bias, "k-major", activation, grad, True)
    error = (bias.grad.float() - expected[2]).abs().max() / expected[2].abs().max()
    assert bias.grad.dtype == torch.float16 and error <= TOLERANCE[torch.float16]
    assert a.grad.shape == (6, 0) and weight.grad.shape == (16, 0)


def test_only_the_operands_that_need_a_gradient_get_one():
    a, weight, bias = leaves(64, 64, 64, torch.bfloat16, "k-major")
    frozen = weight.detach()
    y = ops.matmul(a, frozen.T, bias=bias.detach())
    y.float().sum().backward()
    expected = torch.ones(64, 64) @ frozen.float()
    assert (a.grad.float() - expected).abs().max() / expected.abs().max() <= TOLERANCE[torch.bfloat16]


def test_a_sum_s_expanded_gradient_is_staged():
    """``y.sum()`` hands back a gradient whose strides are 0, which TMA cannot read: it is copied first."""
    a, weight, bias = leaves(64, 64, 128, torch.float16, "k-major")
    ops.matmul(a, weight.T, bias=bias).sum().backward()
    torch.testing.assert_close(bias.grad, torch.full((64,), 64.0, dtype=torch.float16))
    torch.testing.assert_close(a.grad.float(), weight.detach().float().sum(0).expand(64, 128), rtol=2e-3,
                               atol=2e-2)


def test_the_eager_fast_path_does_not_bypass_autograd(monkeypatch):
    """Even where the dispatcher would be skipped (``dispatch_is_plain``), a call that needs a gradient records
    one; under no_grad the same operands run the plain path."""
    import warpspec.torch_ops

    monkeypatch.setattr(warpspec.torch_ops, "dispatch_is_plain", lambda *args: True)
    a, weight, _ = leaves(64, 64, 64, torch.float16, "k-major")
    assert ops.matmul(a, weight.T).grad_fn is not None
    with torch.no_grad():
        assert ops.matmul(a, weight.T).grad_fn is None


def test_paths_without_a_backward_refuse_operands_that_need_one():
    a, weight, _ = leaves(64, 64, 64, torch.float16, "k-major")
    with pytest.raises(ArgumentError, match="out=: ops.matmul writes out in place, which has no backward"):
        ops.matmul(a, weight.T, out=torch.empty(64, 64, dtype=torch.float16))
    a8 = torch.randn(64, 64).to(torch.float8_e4m3fn).requires_grad_()
    w8 = torch.randn(64, 64).to(torch.float8_e4m3fn)
    with pytest.raises(ArgumentError, match="no backward for float8 inputs"):
        ops.matmul(a8, w8.T, scale_a=1.0, scale_b=1.0)
    with torch.no_grad():  # without a gradient both run
        ops.matmul(a, weight.T, out=torch.empty(64, 64, dtype=torch.float16))
        ops.matmul(a8, w8.T, scale_a=1.0, scale_b=1.0)


def test_argument_errors_come_before_the_autograd_refusals():
    a, weight, _ = leaves(64, 64, 64, torch.float16, "k-major")
    with pytest.raises(ArgumentError, match="b has 32 rows but a has 64 columns"):
        ops.matmul(a, torch.empty(32, 64, dtype=torch.float16))


def test_gradcheck_style_comparison_of_the_backward_gemms_with_float32_inputs_rounded():
    """The backward's products themselves: with inputs exactly representable in float16 and sums of few terms,
    dA and dB equal torch's float32 gradients to float16's rounding of the result."""
    generator = torch.Generator().manual_seed(5)
    a = torch.randint(-3, 4, (64, 64), generator=generator).half().requires_grad_()
    w = torch.randint(-3, 4, (64, 64), generator=generator).half().requires_grad_()
    grad = torch.randint(-2, 3, (64, 64), generator=generator).half()
    ops.matmul(a, w.T).backward(grad)
    torch.testing.assert_close(a.grad.float(), grad.float() @ w.detach().float(), rtol=0, atol=0)
    torch.testing.assert_close(w.grad.float(), grad.float().T @ a.detach().float(), rtol=0, atol=0)


def test_linear_trains_a_small_mlp_to_torch_s_losses():
    """Two ``ops.Linear`` layers (the first with its relu fused) and the same layers in torch, from the same
    initial weights, SGD on one batch: the loss curves agree within bfloat16's rounding."""
    dtype = torch.bfloat16
    torch.manual_seed(0)
    ours = torch.nn.Sequential(ops.Linear(64, 128, activation="relu", dtype=dtype), ops.Linear(128, 64, dtype=dtype))
    theirs = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64))
    with torch.no_grad():
        for mine, reference in zip((ours[0], ours[1]), (theirs[0], theirs[2])):
            reference.weight.copy_(mine.weight.float())
            reference.bias.copy_(mine.bias.float())
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(2, 32, 64, generator=generator)  # leading dimensions: flattened into 64 rows
    target = x.flip(-1) * 0.5  # a map the MLP can learn
    losses = {}
    for name, model, inputs in (("ours", ours, x.to(dtype)), ("theirs", theirs, x)):
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        curve = []
        for _ in range(8):
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(inputs).float(), target)
            loss.backward()
            optimizer.step()
            curve.append(loss.item())
        losses[name] = curve
    assert losses["theirs"][-1] < losses["theirs"][0] * 0.8, losses  # it trains
    for step, (mine, reference) in enumerate(zip(losses["ours"], losses["theirs"])):
        assert abs(mine - reference) <= 2e-3 * reference, (step, losses)
    assert ours[0].weight.grad.dtype == dtype


def test_linear_refuses_an_unknown_activation():
    with pytest.raises(ArgumentError, match="activation must be one of"):
        ops.Linear(64, 64, activation="tanh")


def test_opcheck_accepts_the_differentiable_op():
    """torch's checks of the schema, the fake implementation and the autograd registration."""
    a, weight, bias = leaves(64, 64, 64, torch.float16, "k-major")
    torch.library.opcheck(torch.ops.warpspec.matmul_grad.default, (a, weight.T, bias, "relu", torch.float16))


def test_torch_compile_traces_the_differentiable_op_without_a_graph_break():
    a, weight, bias = leaves(64, 64, 64, torch.float16, "k-major")

    def loss(a, weight, bias):
        return ops.matmul(a, weight.T, bias=bias, activation="gelu").float().sum()

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    compiled(a, weight, bias).backward()
    grads = [t.grad.clone() for t in (a, weight, bias)]
    for t in (a, weight, bias):
        t.grad = None
    loss(a, weight, bias).backward()
    for got, want in zip(grads, (a.grad, weight.grad, bias.grad)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("b_layout", ["k-major", "n-major"])
def test_gradients_through_a_column_major_a(dtype, b_layout):
    """a = x.T (a column-major A): dA's GEMM writes [M, K] row-major, autograd hands x its transpose; dB's GEMM
    reads a.T = x as a row-major A."""
    generator = torch.Generator().manual_seed(6)
    x = torch.randn(96, 64, generator=generator).to(dtype).requires_grad_()  # a = x.T: [64, 96]
    _, weight, bias = leaves(64, 80, 96, dtype, b_layout, seed=7)
    y = ops.matmul(x.T, b_of(weight, b_layout), bias=bias, activation="relu")
    grad = torch.randn(64, 80, generator=generator)
    (y.float() * grad).sum().backward()
    expected = reference_grads(x.detach().T, weight, bias, b_layout, "relu", grad, with_bias=True)
    assert_grads_close((x.grad.T, weight.grad, bias.grad), expected, TOLERANCE[dtype])


@pytest.mark.parametrize("m, n, k", [(50, 76, 60), (33, 5, 24)])
def test_gradients_at_pitches_tma_cannot_describe(m, n, k):
    """Ragged K, N or M: the forward and both backward GEMMs stage the operands whose pitch is not 16 bytes."""
    a, weight, bias = leaves(m, n, k, torch.float16, "n-major", seed=8)
    y = ops.matmul(a, weight, bias=bias)
    grad = torch.randn(m, n, generator=torch.Generator().manual_seed(9))
    (y.float() * grad).sum().backward()
    expected = reference_grads(a, weight, bias, "n-major", None, grad, with_bias=True)
    assert_grads_close((a.grad, weight.grad, bias.grad), expected, TOLERANCE[torch.float16])


def test_gradients_of_batched_and_leading_dimension_operands():
    generator = torch.Generator().manual_seed(10)
    a = torch.randn(2, 64, 64, generator=generator).half().requires_grad_()
    b = torch.randn(2, 64, 72, generator=generator).half().requires_grad_()
    x = torch.randn(2, 3, 16, 64, generator=generator).half().requires_grad_()
    w = torch.randn(40, 64, generator=generator).half().requires_grad_()
    (ops.matmul(a, b).float().sum() + ops.matmul(x, w.T).float().sum()).backward()
    for leaf, expected in ((a, torch.ones(2, 64, 72) @ b.detach().float().transpose(1, 2)),
                           (b, a.detach().float().transpose(1, 2) @ torch.ones(2, 64, 72)),
                           (x, torch.ones(2, 3, 16, 40) @ w.detach().float()),
                           (w, torch.ones(40, 96) @ x.detach().float().reshape(96, 64))):
        error = (leaf.grad.float() - expected).abs().max() / expected.abs().max()
        assert leaf.grad.shape == leaf.shape and error <= TOLERANCE[torch.float16]


@pytest.mark.parametrize("name, value", [("in_features", "4"), ("in_features", -1), ("out_features", 2.0),
                                         ("out_features", True)])
def test_linear_refuses_sizes_that_are_not_non_negative_ints(name, value):
    sizes = {"in_features": 16, "out_features": 8, name: value}
    with pytest.raises(ArgumentError) as caught:
        ops.Linear(**sizes)
    assert str(caught.value) == f"{name} must be a non-negative int, got {value!r}"
