"""Batched ``ops.matmul`` (``a`` [B, M, K] @ ``b`` [B, K, N]) on the emulator: one launch of the grouped kernel over
B groups of M rows for both layouts of ``b``, both 16-bit dtypes, a float32 output, ragged sizes and ``out=``,
against numpy in float32; the per-batch loop for what the grouped kernel does not take (an epilogue, float8,
layouts it does not read), still correct; torch CPU tensors and their gradients against torch's float32 ones; the
argument errors."""

import importlib

import ml_dtypes
import numpy as np
import pytest

from warpspec import ArgumentError, ops
from warpspec.ops import grouped

ops_matmul = importlib.import_module("warpspec.ops.matmul")  # the module (``ops.matmul`` is the function)
BF16, E4M3 = ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn
B, M, N, K = 3, 40, 24, 48  # M, N and K no tile divides


@pytest.fixture
def launches(monkeypatch):
    """Counts of the grouped kernel's launches and of ``ops.matmul``'s 2-D calls (the per-batch loop's, the grouped
    backward's dB)."""
    counts = {"grouped": 0, "per_batch": 0}
    launch, per_batch = grouped._Launcher.launch, ops_matmul.matmul

    def counted_launch(self, *args):
        counts["grouped"] += 1
        return launch(self, *args)

    def counted_matmul(*args, **kwargs):
        counts["per_batch"] += 1
        return per_batch(*args, **kwargs)

    monkeypatch.setattr(grouped._Launcher, "launch", counted_launch)
    monkeypatch.setattr(ops_matmul, "matmul", counted_matmul)
    monkeypatch.setattr(grouped, "matmul", counted_matmul)
    return counts


def rounded(shape, dtype, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def batched_b(dtype, layout, seed, batches=B, k=K, n=N):
    """b [B, K, N]: row-major, or the transposed view of [B, N, K] weights (``w.transpose(0, 2, 1)``)."""
    if layout == "row":
        return rounded((batches, k, n), dtype, seed)
    return rounded((batches, n, k), dtype, seed).transpose(0, 2, 1)


def expected_of(a, b, bias=None, activation=None):
    """Each batch's float32 product, plus the bias, through relu."""
    product = np.matmul(a.astype(np.float32), b.astype(np.float32))
    if bias is not None:
        product = product + bias.astype(np.float32)
    return np.maximum(product, 0) if activation == "relu" else product


def assert_close(found, expected, out_dtype):
    """float32 outputs: the summation order's few units of float32; 16-bit ones: one rounding of the result."""
    tolerance = {np.float32: 1e-5, np.float16: 2 ** -10, BF16: 2 ** -7}[out_dtype]
    np.testing.assert_allclose(found.astype(np.float32), expected, rtol=0,
                               atol=tolerance * 8 * np.abs(expected).max())


@pytest.mark.parametrize("dtype", [np.float16, BF16])
@pytest.mark.parametrize("layout", ["row", "weights"])
@pytest.mark.parametrize("out_dtype", [None, np.float32])
def test_one_launch_matches_numpy(dtype, layout, out_dtype, launches):
    a = rounded((B, M, K), dtype, 0)
    b = batched_b(dtype, layout, 1)
    c = ops.matmul(a, b, out_dtype=out_dtype)
    assert c.shape == (B, M, N) and c.dtype == (out_dtype or dtype)
    assert_close(c, expected_of(a, b), out_dtype or dtype)
    assert launches == {"grouped": 1, "per_batch": 0}


def test_out_is_written_in_place_through_its_rows(launches):
    """A contiguous out, and the first N columns of a wider one (its rows still flatten into one pitch); an out
    whose batches do not flatten into rows (every other batch of a wider one) takes the loop."""
    a, b = rounded((B, M, K), np.float16, 2), batched_b(np.float16, "weights", 3)
    expected = expected_of(a, b)
    out = np.full((B, M, N), np.nan, np.float32)
    assert ops.matmul(a, b, out=out) is out
    wide = np.full((B, M, N + 8), np.nan, np.float32)
    assert ops.matmul(a, b, out=wide[:, :, :N]) is not None
    assert launches == {"grouped": 2, "per_batch": 0}
    assert_close(out, expected, np.float32)
    assert_close(wide[:, :, :N], expected, np.float32)
    assert np.isnan(wide[:, :, N:]).all()
    every_other = np.full((2 * B, M, N), np.nan, np.float32)
    ops.matmul(a, b, out=every_other[::2])
    assert launches == {"grouped": 2, "per_batch": B}
    assert_close(every_other[::2], expected, np.float32)
    assert np.isnan(every_other[1::2]).all()


def test_the_ends_are_made_once_per_batch_shape():
    a, b = rounded((B, M, K), BF16, 4), batched_b(BF16, "row", 5)
    ops.matmul(a, b)
    ends = grouped._offsets[(B, M, None, None)]
    ops.matmul(a, b, out_dtype=np.float32)
    assert grouped._offsets[(B, M, None, None)] is ends and ends.tolist() == [M, 2 * M, 3 * M]


def test_no_batches_give_an_empty_result():
    """B = 0 (numpy gives the empty operands strides of 0): an empty [0, M, N] result, or out returned as it is."""
    a, b = np.zeros((0, M, K), np.float16), np.zeros((0, K, N), np.float16)
    c = ops.matmul(a, b, out_dtype=np.float32)
    assert c.shape == (0, M, N) and c.dtype == np.float32
    out = np.empty((0, M, N), np.float16)
    assert ops.matmul(a, b, out=out) is out
    # with an epilogue (the loop's path): np.stack of no results raised a raw ValueError
    c = ops.matmul(a, b, bias=np.zeros(N, np.float16), activation="relu")
    assert c.shape == (0, M, N) and c.dtype == np.float16


@pytest.mark.parametrize("case", ["bias", "relu", "float8", "ragged-k", "a-rows-apart", "broadcast-b"])
def test_what_the_grouped_kernel_does_not_take_runs_the_loop(case, launches):
    """An epilogue (bias, activation), float8 with its scales, a K whose pitch TMA cannot describe (20 elements =
    40 bytes: the loop stages it), an ``a`` whose batches are not one pitch apart, a ``b`` broadcast over the
    batch: one GEMM per batch, each right."""
    k = 20 if case == "ragged-k" else K
    dtype = E4M3 if case == "float8" else np.float16
    a = rounded((B, M, k), dtype, 6)
    b = batched_b(dtype, "weights" if case == "float8" else "row", 7, k=k)
    kwargs, bias, activation = {}, None, None
    if case in ("bias", "relu"):
        bias, activation = rounded((N,), np.float32, 8), ("relu" if case == "relu" else None)
        kwargs = {"bias": bias, "activation": activation, "out_dtype": np.float32}
    elif case == "float8":
        kwargs = {"scale_a": 1.0, "scale_b": 1.0, "out_dtype": np.float32}
    elif case == "a-rows-apart":
        a = np.concatenate([a, rounded((B, 8, k), dtype, 9)], axis=1)[:, :M]
    elif case == "broadcast-b":
        b = np.broadcast_to(b[:1], b.shape)
    c = ops.matmul(a, b, **kwargs)
    assert launches == {"grouped": 0, "per_batch": B}
    assert_close(c, expected_of(a, b, bias, activation), c.dtype.type)


@pytest.mark.parametrize("call, fragment", [
    (lambda a, b: ops.matmul(a, b[:2]), "batched ops.matmul takes a [B, M, K] and b [B, K, N] with one B"),
    (lambda a, b: ops.matmul(a, b[:, :32]), "b has 32 rows but a has 48 columns"),
    (lambda a, b: ops.matmul(a, b.astype(BF16)), "b has dtype bfloat16 but a has float16"),
    (lambda a, b: ops.matmul(a, b, out_dtype=np.float64), "out_dtype <class 'numpy.float64'> is not supported"),
    (lambda a, b: ops.matmul(a, b, out=np.empty((B, M, N + 1), np.float16)), "out must have shape (3, 40, 24)"),
    (lambda a, b: ops.matmul(a, b, out=np.empty((B, M, N), np.float16), out_dtype=np.float32),
     "out has dtype float16 but out_dtype is float32"),
    (lambda a, b: ops.matmul(a, b, out=np.broadcast_to(np.zeros((1, M, N), np.float16), (B, M, N))),
     "read-only"),
    (lambda a, b: ops.matmul(a, b, out=a[:, :, :N]), "out shares memory with a"),
])
def test_argument_errors_name_the_argument(call, fragment):
    a, b = rounded((B, M, K), np.float16, 10), rounded((B, K, N), np.float16, 11)
    with pytest.raises(ArgumentError) as caught:
        call(a, b)
    assert fragment in str(caught.value)


# ------------------------------------------------------------------------------------------- torch tensors


@pytest.mark.parametrize("layout", ["row", "weights"])
def test_cpu_tensors_take_one_launch(layout, launches):
    torch = pytest.importorskip("torch")
    a = torch.from_numpy(rounded((B, M, K), np.float32, 12)).bfloat16()
    b = torch.from_numpy(batched_b(np.float32, layout, 13)).bfloat16()  # .bfloat16() keeps the strides
    assert grouped._k_major(b) == (layout == "weights")
    c = ops.matmul(a, b, out_dtype=torch.float32)
    expected = torch.bmm(a.float(), b.float())
    torch.testing.assert_close(c, expected, rtol=0, atol=1e-5 * 8 * expected.abs().max().item())
    out = torch.full((B, M, N), float("nan"), dtype=torch.bfloat16)
    assert ops.matmul(a, b, out=out) is out
    torch.testing.assert_close(out.float(), expected, rtol=0, atol=2 ** -7 * 8 * expected.abs().max().item())
    assert launches == {"grouped": 2, "per_batch": 0}
    with pytest.raises(ArgumentError, match="b is a numpy array but a is a torch tensor"):
        ops.matmul(a, rounded((B, K, N), BF16, 0))


@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
@pytest.mark.parametrize("layout", ["row", "weights"])
def test_gradients_match_torch(dtype_name, layout, launches, monkeypatch):
    """dA is one grouped launch on b's other layout, dB one GEMM per batch on the ends the forward made (the
    backward reads none from the tensor: ``_clamped``, which takes the read ends, is never called)."""
    torch = pytest.importorskip("torch")
    from tests.ops.test_matmul_grad import TOLERANCE, assert_grads_close

    dtype = getattr(torch, dtype_name)
    generator = torch.Generator().manual_seed(14)
    a = torch.randn(B, M, K, generator=generator).to(dtype).requires_grad_()
    # row: b is a [B, K, N] leaf; weights: b is the transposed view of a [B, N, K] leaf
    leaf = torch.randn(*((B, K, N) if layout == "row" else (B, N, K)), generator=generator).to(dtype)
    leaf.requires_grad_()
    b = leaf if layout == "row" else leaf.transpose(1, 2)
    monkeypatch.setattr(grouped, "_clamped", lambda *args: pytest.fail("the backward read the ends"))
    c = ops.matmul(a, b)
    assert c.grad_fn is not None and c.shape == (B, M, N) and c.dtype == dtype
    grad = torch.randn(B, M, N, generator=generator)
    (c.float() * grad).sum().backward()
    a32, leaf32 = (t.detach().float().requires_grad_() for t in (a, leaf))
    (torch.bmm(a32, leaf32 if layout == "row" else leaf32.transpose(1, 2)) * grad).sum().backward()
    assert_grads_close((a.grad, leaf.grad, None), (a32.grad, leaf32.grad, None), TOLERANCE[dtype])
    # the forward and dA: a launch each; dB: one GEMM per batch
    assert launches == {"grouped": 2, "per_batch": B}


def test_a_gradient_with_out_is_refused_and_the_loop_keeps_its_gradients():
    torch = pytest.importorskip("torch")
    a = torch.randn(B, M, K).half().requires_grad_()
    b = torch.randn(B, K, N).half()
    with pytest.raises(ArgumentError, match="out=: ops.matmul writes out in place, which has no backward"):
        ops.matmul(a, b, out=torch.empty(B, M, N, dtype=torch.float16))
    bias = torch.randn(N).half().requires_grad_()
    ops.matmul(a, b, bias=bias).float().sum().backward()  # the loop: a gradient for each batch and the bias
    expected = torch.ones(B, M, N) @ b.float().transpose(1, 2)
    assert (a.grad.float() - expected).abs().max() <= 2e-3 * expected.abs().max()
    torch.testing.assert_close(bias.grad.float(), torch.full((N,), float(B * M)))
