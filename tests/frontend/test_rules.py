"""Front-end rules that the examples do not exercise: early returns, tensor operators, runtime scalar types."""

import numpy as np
import pytest

from tests.kernels import frontend_kernels as fk
import warpspec
from warpspec import CompileError

FILE = fk.__file__


@pytest.fixture(autouse=True)
def emulator():
    with warpspec.use_backend("emulator"):
        yield


def _raises_at(marker, fragment, call):
    with pytest.raises(CompileError) as caught:
        call()
    # Inside a helper the location is "<call in the kernel body> -> Class.helper at <line>".
    assert caught.value.location.split(" at ")[-1] == f"{FILE}:{fk.marker_line(marker)}"
    assert caught.value.location.startswith(f"{FILE}:")
    assert fragment in str(caught.value)


def test_a_kernel_body_cannot_return():
    _raises_at("body-return", "cannot return",
               lambda: fk.ReturnsFromBody()(3, np.zeros(1, np.float32)))


def test_return_inside_a_runtime_loop_of_a_helper_is_refused():
    _raises_at("loop-return", "'return' inside a runtime loop",
               lambda: fk.ReturnInRuntimeLoop()(3, np.zeros(1, np.float32)))


def test_tensor_operators_are_the_supported_ones():
    _raises_at("tensor-power", "operator '**' is not supported on tensors",
               lambda: fk.PowerOfTensor()(np.zeros(1, np.float32)))


def test_min_and_max_work_elementwise_on_register_tensors():
    x = np.array([-3, -1, -0.5, 0, 0.25, 1, 2, 9], dtype=np.float32)
    out = np.full(8, np.nan, dtype=np.float32)
    fk.TensorMinMax()(8, x, out)
    np.testing.assert_array_equal(out, np.clip(x, -1, 1))


def test_runtime_scalars_have_the_types_both_back_ends_pass():
    _raises_at("f16-param", "runtime scalars are int32, uint32, int64, float32, boolean",
               lambda: fk.Float16Scalar()(1.0, np.zeros(1, np.float32)))


def test_a_name_bound_to_another_s_tensor_is_rebound_not_written_into():
    """``b = a; b = b * 2`` leaves a as it was (Python's meaning), and b holds the new value."""
    x = np.arange(8, dtype=np.float32)
    out, other = np.zeros(8, np.float32), np.zeros(8, np.float32)
    fk.RebindsACopyOfAName()(8, x, out, other)
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(other, 2 * x)


def test_a_name_bound_to_a_list_element_s_tensor_is_rebound_not_written_into():
    """``m = parts[0]; m = max(m, parts[1])`` inside a runtime loop leaves parts[0] as it was: the element is a
    second name of its tensor as much as ``b = a`` is."""
    x = np.arange(8, dtype=np.float32) - 3
    out, other = np.zeros(8, np.float32), np.zeros(8, np.float32)
    fk.RebindsACopyOfAName(element_in_loop=True)(8, x, out, other)
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(other, np.maximum(x, 2 * x))


@pytest.mark.parametrize("where", ["same-depth", "in-branch"])
def test_a_helper_rebinding_its_parameter_leaves_the_caller_s_tensor_alone(where):
    """``def doubled(self, t): t = t * 2.0; return t`` returns twice a and leaves a as it was (Python's meaning),
    also when the update is inside a runtime branch of the helper (the parameter gets a copy of its own, made
    before the branch)."""
    x = np.arange(8, dtype=np.float32)
    out, other = np.zeros(8, np.float32), np.zeros(8, np.float32)
    fk.RebindsACopyOfAName(parameter=where)(8, x, out, other)
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(other, 2 * x)


@pytest.mark.parametrize("mode, grown", [("add", lambda x, n: x + n), ("read-first", lambda x, n: x + n),
                                         ("nested", lambda x, n: x * 4.0 ** n), ("moved", lambda x, n: x + n),
                                         ("alias-read", lambda x, n: x * (n + 1))])
def test_a_helper_updating_its_parameter_in_a_runtime_loop_carries_it_from_iteration_to_iteration(mode, grown):
    """``def grown(self, t, n): for _ in self.range(n): t = t + 1.0`` returns x + n (each iteration adds to the
    last one's value, not to the caller's tensor again) and leaves the caller's tensor as it was; ``u = t`` before
    the loop keeps the first value (``t = t + u``: x · (n + 1))."""
    x = np.arange(8, dtype=np.float32) - 2
    for n in (0, 1, 3):
        out, other = np.zeros(8, np.float32), np.zeros(8, np.float32)
        fk.UpdatesAParameterInALoop(mode)(n, x, out, other)
        np.testing.assert_array_equal(out, x)
        np.testing.assert_array_equal(other, grown(x, n).astype(np.float32))


@pytest.mark.parametrize("mode, expected", [
    ("fibonacci", lambda n: ([0, 1, 1, 2, 3, 5, 8][n], [1, 1, 2, 3, 5, 8, 13][n])),
    ("pair", lambda n: (n, 2 * n)),
    ("branch", lambda n: (3 if n > 2 else 0, n + 1))])
def test_names_rebound_in_a_runtime_loop_to_other_tensors_take_their_values(mode, expected):
    """``a, b = b, a + b`` inside a runtime loop is Python's: each name gets the value its right side had (a copy into
    the loop's tensor where the value is not the statement just built), also under a runtime branch."""
    for n in (0, 1, 2, 3, 5):
        out, other = np.full(8, np.nan, np.float32), np.full(8, np.nan, np.float32)
        fk.RebindsToOtherTensorsInALoop(mode)(n, out, other)
        np.testing.assert_array_equal((out, other), np.broadcast_to(np.float32(expected(n))[:, None], (2, 8)))


def test_rebinding_an_item_of_a_list_is_refused_at_its_line():
    _raises_at("list-item", "cannot assign to an element of a list of 2 items: a kernel's lists and tuples are "
               "compile-time values", lambda: fk.RebindsToOtherTensorsInALoop("list")(3, np.zeros(8, np.float32),
                                                                                     np.zeros(8, np.float32)))


@pytest.mark.parametrize("mode, expected", [("top", lambda n: [10 * n, 10 * n + 1]),
                                            ("loop", lambda n: [10 * n, 11 * n]),
                                            ("loop-variable", lambda n: [n, 2 * (n - 1) if n else 0]),
                                            ("loop-body", lambda n: [n, 2 * (n - 1) if n else 0])])
def test_a_helper_assigning_its_scalar_parameter_leaves_the_caller_s_variable_alone(mode, expected):
    """``def counted(self, k, n): k = k + 1; return k`` returns k + 1 and the caller's k keeps its value (Python's
    meaning), in a runtime loop of the helper too; a loop variable given a new value, in a helper or in the loop's
    body, still counts the loop's iterations, and in the IR no statement of a runtime loop assigns its counter (the
    GPU's C++ loop would take the new value as its next iteration's start)."""
    from warpspec.frontend.kernel import bind_arguments
    from warpspec.ir import nodes as ir
    from warpspec.runtime import kernel_for

    for n in (0, 1, 3):
        out = np.full(2, -1, np.int32)
        fk.AssignsAScalarParameter(mode)(n, out)
        np.testing.assert_array_equal(out, expected(n))
    script = fk.AssignsAScalarParameter(mode)
    _, compile_time = bind_arguments(type(script), (3, np.zeros(2, np.int32)), {})
    loops = [s for s in ir.walk(kernel_for(script, compile_time).body) if isinstance(s, ir.For)]
    assert loops or mode == "top"
    for loop in loops:
        assert not any(isinstance(s, ir.Assign) and s.var is loop.var for s in ir.walk(loop.body))


def _casts(script):
    from warpspec.frontend.kernel import bind_arguments
    from warpspec.isa.elementwise import Cast
    from warpspec.ir import nodes as ir
    from warpspec.runtime import kernel_for

    _, compile_time = bind_arguments(type(script), (8, np.zeros(8, np.float32), np.zeros(8, np.float32),
                                                    np.zeros(8, np.float32)), {})
    return sum(isinstance(s, Cast) for s in ir.walk(kernel_for(script, compile_time).body))


def test_a_parameter_updated_in_a_branch_gets_one_copy_unless_its_tensor_is_moved_in():
    """The copy a parameter updated inside a runtime branch needs is one Cast to its own type; ``a =
    self.doubled(a, n)`` moves a in, and the helper computes into it with no copy (and the result is right)."""
    assert _casts(fk.RebindsACopyOfAName(parameter="in-branch")) == 1
    assert _casts(fk.RebindsACopyOfAName(parameter="same-depth")) == 0
    assert _casts(fk.RebindsACopyOfAName(parameter="moved")) == 0
    x = np.arange(8, dtype=np.float32)
    out, other = np.zeros(8, np.float32), np.zeros(8, np.float32)
    fk.RebindsACopyOfAName(parameter="moved")(8, x, out, other)
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(other, 2 * x)


def test_a_tensor_passed_twice_is_not_moved():
    """``a = self.doubled_plus(a, a, n)``: the helper doubles its first parameter inside a runtime branch and adds
    the second; computing into a's registers would double the second too (4a). It gets a copy: 3a."""
    x = np.arange(8, dtype=np.float32)
    out, other = np.zeros(8, np.float32), np.zeros(8, np.float32)
    fk.RebindsACopyOfAName(parameter="moved-twice")(8, x, out, other)
    np.testing.assert_array_equal(other, 3 * x)


def test_updating_a_second_name_of_a_tensor_in_a_runtime_loop_is_refused():
    """Inside a runtime loop the update must go into the tensor's registers, which a names too: a CompileError at
    the update, saying how to bind a copy, instead of a silently changed a."""
    _raises_at("alias-in-loop", "'b' and 'a' are one tensor (b = a bound the same registers): updating 'b' inside "
               "this runtime loop or branch would change 'a' too; bind a copy before it (b = a + 0.0)",
               lambda: fk.RebindsACopyOfAName(alias_in_loop=True)(8, np.zeros(8, np.float32),
                                                                   np.zeros(8, np.float32), np.zeros(8, np.float32)))
