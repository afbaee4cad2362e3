"""``ops.matmul`` under ``torch.compile(fullgraph=True)`` (torch CPU tensors; skipped without torch): an operand
mistake the op's checks find on the fake tensors is the ArgumentError itself, naming the argument and, in Dynamo's
"from user code" lines, the caller's line; not a TorchRuntimeError quoting it under a long internal traceback.
Without ``fullgraph`` the call breaks the graph, runs eagerly and raises the plain ArgumentError."""

import inspect
import traceback

import pytest

torch = pytest.importorskip("torch")

from warpspec import ArgumentError, ops  # noqa: E402
from warpspec.errors import WarpspecError  # noqa: E402


def product(a, b, bias=None):
    return ops.matmul(a, b, bias=bias) * 2  # the user's line


USER_LINE = inspect.getsourcelines(product)[1] + 1


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def caught(compiled, *args) -> ArgumentError:
    with pytest.raises(ArgumentError) as found:
        compiled(*args)
    return found.value


def test_a_k_mismatch_is_the_argument_error_at_the_users_line():
    a, b = torch.randn(64, 32).half(), torch.randn(48, 64).half()
    error = caught(torch.compile(product, fullgraph=True, backend="aot_eager"), a, b)
    assert isinstance(error, WarpspecError) and type(error).__name__ == "ArgumentError"
    text = str(error)
    assert text.startswith("b has 48 rows but a has 32 columns: a @ b needs b of shape [K, N] = [32, N]")
    assert f'File "{__file__}", line {USER_LINE}, in product' in text
    assert "TorchRuntimeError" not in text and "RuntimeError when making fake tensor call" not in text
    shown = traceback.format_exception(error)
    assert sum(part.count("\n") for part in shown) < 40  # it was 197 lines


def test_a_bias_of_the_wrong_length_is_the_argument_error():
    a, w = torch.randn(64, 32).half(), torch.randn(48, 32).half()
    error = caught(torch.compile(product, fullgraph=True, backend="aot_eager"), a, w.T, torch.zeros(47).half())
    assert str(error).startswith("bias must have shape (48,) (one value per column of the result), got (47,)")
    assert f'line {USER_LINE}, in product' in str(error)


def test_without_fullgraph_the_eager_call_raises_the_plain_error():
    a, b = torch.randn(64, 32).half(), torch.randn(48, 64).half()
    error = caught(torch.compile(product, backend="aot_eager"), a, b)
    assert type(error) is ArgumentError
    assert str(error) == "b has 48 rows but a has 32 columns: a @ b needs b of shape [K, N] = [32, N]"


def test_a_correct_call_still_compiles_whole():
    a, w = torch.randn(64, 32).half(), torch.randn(48, 32).half()
    result = torch.compile(product, fullgraph=True, backend="aot_eager")(a, w.T)
    torch.testing.assert_close(result.float(), (a.float() @ w.float().T) * 2, rtol=4e-3, atol=4e-2)
