"""ops.matmul's input errors are ArgumentErrors naming the user's argument, checked before anything is allocated,
and the K-major form with one output column (``a @ w.T`` with a one-row ``w``) computes."""

from __future__ import annotations

import numpy as np
import pytest

import warpspec
from warpspec import ArgumentError, ops


@pytest.fixture(autouse=True)
def emulator():
    with warpspec.use_backend("emulator"):
        yield


def operands(m=64, n=64, k=64):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((k, n)).astype(np.float16),
            np.zeros((m, n), np.float16))


def test_a_negative_row_stride_of_out_names_it():
    a, b, out = operands()
    with pytest.raises(ArgumentError) as caught:
        ops.matmul(a, b, out=out[::-1])
    assert str(caught.value) == ("out has strides (-64, 1): a negative stride (a reversed view such as x[::-1]) "
                                 "cannot be written by the kernel; pass a row-major out")


@pytest.mark.parametrize("reversed_name", ["a", "b"])
def test_a_reversed_operand_is_multiplied_from_a_copy(reversed_name):
    a, b, out = operands()
    given = {"a": a, "b": b}
    given[reversed_name] = given[reversed_name][::-1]
    ops.matmul(given["a"], given["b"], out=out)
    expected = given["a"].astype(np.float32) @ given["b"].astype(np.float32)
    np.testing.assert_allclose(out.astype(np.float32), expected, rtol=1e-2, atol=1e-2)


def test_a_huge_n_through_a_stride_0_b_is_refused_before_any_allocation(monkeypatch):
    a, _, _ = operands()
    b = np.broadcast_to(np.float16(1), (64, 2**31))
    monkeypatch.setattr(np, "empty", lambda *args, **kwargs: pytest.fail("allocated before the size check"))
    with pytest.raises(ArgumentError, match=r"^N \(b.shape\[1\]\) is 2147483648: ops.matmul takes extents up to "
                                            r"2147483647"):
        ops.matmul(a, b)


def test_one_output_column_in_the_k_major_form_computes():
    a, _, _ = operands()
    w = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float16)
    result = ops.matmul(a, w.T)
    assert result.shape == (64, 1) and result.dtype == np.float16
    expected = a.astype(np.float32) @ w.T.astype(np.float32)
    np.testing.assert_allclose(result.astype(np.float32), expected, rtol=2e-3, atol=2e-2)


@pytest.mark.parametrize("aliased", ["a", "b"])
def test_out_sharing_memory_with_an_input_names_out_and_the_input(aliased):
    a, b, _ = operands()
    given = {"a": a, "b": b}
    with pytest.raises(ArgumentError) as caught:
        ops.matmul(a, b, out=given[aliased])
    assert str(caught.value).startswith(f"out shares memory with {aliased}: the kernel would overwrite {aliased}")
    assert "a_ptr" not in str(caught.value) and "c_ptr" not in str(caught.value)


@pytest.mark.parametrize("aliased", ["a", "b"])
def test_out_sharing_memory_is_refused_after_a_call_of_the_same_description(aliased):
    """A call like an earlier one reuses its checked signature: the addresses are checked again on every call."""
    a, b, out = operands(m=16, n=32, k=32)
    backing = {"a": np.zeros((16, 32), np.float16), "b": np.zeros((32, 32), np.float16)}[aliased]
    separate = np.zeros_like(out)
    given = {"a": a, "b": b}
    given[aliased] = backing
    ops.matmul(given["a"], given["b"], out=separate[:16, :32])  # the description, memory apart
    with pytest.raises(ArgumentError) as caught:
        ops.matmul(given["a"], given["b"], out=backing[:16, :32])
    assert str(caught.value).startswith(f"out shares memory with {aliased}: the kernel would overwrite {aliased}")


def test_a_bias_inside_out_is_refused_at_the_first_call_and_after_one_like_it():
    """The kernel writes out's rows while other blocks still read the bias: a bias in out's memory is refused."""
    a, b, out = operands(m=16, n=32, k=32)
    with pytest.raises(ArgumentError, match="^out shares memory with bias: the kernel would overwrite bias"):
        ops.matmul(a, b, bias=out[3], out=out)
    ops.matmul(a, b, bias=np.zeros(32, np.float16), out=out)  # the description, memory apart
    with pytest.raises(ArgumentError, match="^out shares memory with bias: the kernel would overwrite bias"):
        ops.matmul(a, b, bias=out[15], out=out)


@pytest.mark.parametrize("m, n", [(0, 8), (4, 0)])
@pytest.mark.parametrize("given, message", [
    (lambda n: {"out": np.zeros((1, 8), np.float16)}, r"out must have shape \("),
    (lambda n: {"activation": "tanh"}, "activation must be one of None, 'relu', 'gelu', 'silu'; got 'tanh'"),
    (lambda n: {"bias": np.zeros(n + 3, np.float16)}, r"bias must have shape \("),
    (lambda n: {"bias": np.zeros(n, np.float32)}, "bias has dtype float32; it must have the output dtype, float16")])
def test_an_empty_product_checks_its_epilogue_as_any_other(m, n, given, message):
    """A product with no rows or no columns launches nothing, but its out, activation and bias are checked as
    any other's: an out of another shape was returned unwritten as the result."""
    a, b = np.zeros((m, 16), np.float16), np.ones((16, n), np.float16)
    with pytest.raises(ArgumentError, match=message):
        ops.matmul(a, b, **given(n))
