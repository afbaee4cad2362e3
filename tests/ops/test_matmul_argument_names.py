"""Errors inside ``ops.matmul`` name the op's arguments (``out``, ``a``), not the kernel's pointer parameters
(``c_ptr``, ``a_ptr``) that the library kernel would have raised them for."""

import numpy as np
import pytest

from warpspec import ArgumentError, ops


def operands():
    return np.ones((64, 32), np.float16), np.ones((32, 48), np.float16)


def test_a_read_only_out_is_named_out():
    a, b = operands()
    out = np.zeros((64, 48), np.float16)
    out.flags.writeable = False
    with pytest.raises(ArgumentError) as caught:
        ops.matmul(a, b, out=out)
    assert str(caught.value) == ("out is read-only, and ops.matmul writes the result into it: pass a writeable out "
                                 "(or none, for a new array)")
    assert not out.any()


def test_a_read_only_out_is_named_out_after_a_writeable_one_of_its_description():
    """The first call's checks are kept per description of the operands: a read-only out of the same shape, dtype
    and strides as an earlier writeable one must still be refused by its own name."""
    a, b = operands()
    ops.matmul(a, b, out=np.zeros((64, 48), np.float16))
    out = np.zeros((64, 48), np.float16)
    out.flags.writeable = False
    with pytest.raises(ArgumentError) as caught:
        ops.matmul(a, b, out=out)
    assert str(caught.value).startswith("out is read-only, and ops.matmul writes the result into it")
    assert not out.any()


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
@pytest.mark.parametrize("name", ["a", "b", "out"])
def test_an_ndarray_subclass_is_named_by_its_argument(name):
    a, b = operands()
    arguments = {"a": a, "b": b, "out": np.zeros((64, 48), np.float16)}
    arguments[name] = np.asmatrix(arguments[name])
    with pytest.raises(ArgumentError) as caught:
        ops.matmul(arguments["a"], arguments["b"], out=arguments["out"])
    assert str(caught.value) == (f"argument {name!r}: got a numpy.matrix, an ndarray subclass that indexes "
                                 f"differently from a plain array; pass np.asarray({name}) instead")
    assert "_ptr" not in str(caught.value)
