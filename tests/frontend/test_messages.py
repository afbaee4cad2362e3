"""Front-end messages name what the author wrote: a computed tensor by the variable it is assigned to (not ``tmp``
or ``sx_regs_float32``), its operands each by their own name and in the order written, and a launch attribute that
is never set at the line that sets its partner, not at the ``def`` line."""

import inspect

import numpy as np
import pytest

import warpspec
from warpspec import cdiv, float16, float32, int32
from warpspec.errors import CompileError
from warpspec.runtime import kernel_for


def line_of(cls, text: str) -> str:
    """``file:line`` of the line inside ``cls`` that contains ``text``."""
    lines, first = inspect.getsourcelines(cls)
    return f"{__file__}:{first + next(i for i, line in enumerate(lines) if text in line)}"


class _Rows(warpspec.Script):
    def rows(self, x_ptr, out_ptr):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[64, 64])
        out = self.global_view(out_ptr, dtype=float32, shape=[64, 64])
        return x, out


class ScaledPlusRows(_Rows):
    def __call__(self, x_ptr: ~float32, out_ptr: ~float32):
        x, out = self.rows(x_ptr, out_ptr)
        scaled = self.load_global(x, offsets=[0, 0], shape=[64, 64]) * 2.0
        two_rows = self.load_global(x, offsets=[0, 0], shape=[2, 64])
        out = scaled + two_rows  # broadcast
        self.store_global(out, out, offsets=[0, 0])


class RowsPlusProduct(_Rows):
    def __call__(self, x_ptr: ~float32, out_ptr: ~float32):
        x, out = self.rows(x_ptr, out_ptr)
        tile = self.load_global(x, offsets=[0, 0], shape=[64, 64])
        two_rows = self.load_global(x, offsets=[0, 0], shape=[2, 64])
        out = two_rows + tile * 2.0  # broadcast
        self.store_global(out, out, offsets=[0, 0])


class Names(warpspec.Script):
    """Every computed tensor assigned to a variable, through an operand, a cast of a load and a helper."""

    def __call__(self, x_ptr: ~float16, out_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float16, shape=[64, 64])
        out = self.global_view(out_ptr, dtype=float32, shape=[64, 64])
        sx = self.shared_tensor(dtype=float16, shape=[64, 64])
        tile = self.load_global(x, offsets=[0, 0], shape=[64, 64])
        self.store_shared(sx, tile)
        self.sync()
        widened = self.cast(self.load_shared(sx), dtype=float32)
        doubled = self.double(widened)
        total = widened + doubled * 3.0
        self.store_global(out, total, offsets=[0, 0])

    def double(self, value):
        return value + value


def defined_names(kernel) -> list[str]:
    from warpspec.ir import nodes as ir

    return [stmt.decl.name for stmt in ir.walk(kernel.body) if isinstance(stmt, ir.DefineTensor)]


def test_computed_tensors_are_named_by_their_variables():
    names = defined_names(kernel_for(Names(), {}))
    assert names == ["tile", "sx_regs", "widened", "doubled", "tmp", "total"]


def run(cls):
    with pytest.raises(CompileError) as caught:
        cls()(np.zeros((64, 64), np.float32), np.zeros((64, 64), np.float32))
    return str(caught.value)


def test_a_broadcast_error_names_the_operands_as_written():
    assert run(ScaledPlusRows) == (f"{line_of(ScaledPlusRows, '# broadcast')}: shapes do not broadcast: "
                                   f"scaled[64, 64] + two_rows[2, 64]; a 2-D tensor [M, N] combines with a tensor of "
                                   f"its shape, a row vector [1, N] or a column vector [M, 1]")


def test_the_assigned_name_is_the_result_not_an_operand():
    message = run(RowsPlusProduct)
    assert message.startswith(f"{line_of(RowsPlusProduct, '# broadcast')}: shapes do not broadcast: "
                              f"two_rows[2, 64] + tmp[64, 64];")
    assert "out[" not in message


class NoBlocks(warpspec.Script):
    def __call__(self, n: int32, x_ptr: ~float32):
        self.attrs.warps = 4  # warps
        x = self.global_view(x_ptr, dtype=float32, shape=[n])
        self.store_global(x, self.load_global(x, offsets=[0], shape=[64]), offsets=[0])


class NoWarps(warpspec.Script):
    def __call__(self, n: int32, x_ptr: ~float32):
        self.attrs.blocks = [cdiv(n, 64)]  # blocks


def test_a_missing_grid_is_named_at_the_warps_line():
    with pytest.raises(CompileError) as caught:
        NoBlocks()(64, np.zeros(64, np.float32))
    assert str(caught.value) == (f"{line_of(NoBlocks, '# warps')}: the kernel never sets self.attrs.blocks (the "
                                 f"grid); set it beside self.attrs.warps")


def test_missing_warps_are_named_at_the_blocks_line():
    with pytest.raises(CompileError) as caught:
        NoWarps()(64, np.zeros(64, np.float32))
    assert str(caught.value) == (f"{line_of(NoWarps, '# blocks')}: the kernel never sets self.attrs.warps (the "
                                 f"threads of a block: 32 per warp); set it beside self.attrs.blocks")


class TensorConditions(_Rows):
    """A tensor where a condition goes: Python's truth value of it would take the branch whatever it holds."""

    def __init__(self, form):
        super().__init__()
        self.form = form

    def __call__(self, x_ptr: ~float32, out_ptr: ~float32):
        x, out = self.rows(x_ptr, out_ptr)
        tile = self.load_global(x, offsets=[0, 0], shape=[64, 64])
        if self.form == "if":
            if tile > 0.0:  # condition: if
                self.store_global(out, tile, offsets=[0, 0])
        elif self.form == "ifexp":
            kept = tile if tile > 0.0 else tile * 0.0  # condition: ifexp
            self.store_global(out, kept, offsets=[0, 0])
        elif self.form == "and":
            if True and tile > 0.0:  # condition: and
                self.store_global(out, tile, offsets=[0, 0])
        else:
            assert tile  # condition: assert


@pytest.mark.parametrize("form, where", [("if", "if"), ("ifexp", "a conditional expression"), ("and", "'and'"),
                                         ("assert", "assert")])
def test_a_tensor_as_a_condition_is_refused_at_its_line(form, where):
    x = np.ones((64, 64), np.float32)
    with pytest.raises(CompileError) as caught:
        with warpspec.use_backend("emulator"):
            TensorConditions(form)(x, np.zeros_like(x))
    assert caught.value.location == line_of(TensorConditions, f"# condition: {form}")
    assert f"{where} needs a scalar condition, got register tensor " in str(caught.value)
    assert "has no single truth value; choose element by element with self.where(condition, a, b)" in \
        str(caught.value)


class OddOperands(warpspec.Script):
    """Operands no rule takes: errors raised by the type rules, away from the statement being built, and Python's
    own error of a compile-time unary operator."""

    def __init__(self, form):
        super().__init__()
        self.form = form

    def __call__(self, n: int32, x_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        if self.form == "list":
            k = n + [1]  # odd: list
        elif self.form == "none":
            k = max(n, None)  # odd: none
        elif self.form == "unary":
            k = -"a" if self.form == "unary" else 1  # odd: unary
        else:
            x = self.global_view(x_ptr, dtype=float32, shape=[64, 64])
            t = self.load_global(x, offsets=[0, 0], shape=[64, 64])
            self.store_global(x, abs(t), offsets=[0, 0])  # odd: abs


@pytest.mark.parametrize("form, fragment", [
    ("list", "expected a scalar, got list [1]"), ("none", "expected a scalar, got NoneType"),
    ("unary", "- 'a': bad operand type for unary -: 'str'"),
    ("abs", "abs() takes a scalar, got register tensor t; for a tensor write self.where(t < 0.0, -t, t)")])
def test_operands_no_rule_takes_are_refused_at_their_line(form, fragment):
    with pytest.raises(CompileError) as caught:
        with warpspec.use_backend("emulator"):
            OddOperands(form)(4, np.zeros((64, 64), np.float32))
    assert caught.value.location == line_of(OddOperands, f"# odd: {form}")
    assert str(caught.value) == f"{caught.value.location}: {fragment}"


class OptionalBound(warpspec.Script):
    """A helper's optional runtime argument tested with ``is None``: decided at compile time, since a runtime scalar
    is never None; ``is`` between two runtime scalars has no such answer and is refused."""

    def __init__(self, form):
        super().__init__()
        self.form = form

    def copy_rows(self, x, out, end=None):
        tile = self.load_global(x, offsets=[0, 0], shape=[8, 64], row_end=None if end is None else end)
        self.store_global(out, tile, offsets=[0, 0])

    def __call__(self, n: int32, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[8, 64])
        out = self.global_view(out_ptr, dtype=float32, shape=[8, 64])
        if self.form == "bounded":
            self.copy_rows(x, out, n)
        elif self.form == "unbounded":
            self.copy_rows(x, out)
        elif n is not n + 1:  # identity: runtime
            self.copy_rows(x, out)


@pytest.mark.parametrize("form, rows", [("bounded", 3), ("unbounded", 8)])
def test_is_none_of_a_runtime_scalar_is_known_at_compile_time(form, rows):
    x = np.arange(8 * 64, dtype=np.float32).reshape(8, 64) + 1
    out = np.full_like(x, np.nan)
    with warpspec.use_backend("emulator"):
        OptionalBound(form)(3, x, out)
    np.testing.assert_array_equal(out[:rows], x[:rows])
    np.testing.assert_array_equal(out[rows:], 0.0)


def test_is_between_runtime_scalars_is_refused_at_its_line():
    with pytest.raises(CompileError) as caught:
        with warpspec.use_backend("emulator"):
            OptionalBound("runtime")(3, np.zeros((8, 64), np.float32), np.zeros((8, 64), np.float32))
    assert caught.value.location == line_of(OptionalBound, "# identity: runtime")
    assert str(caught.value) == f"{caught.value.location}: IsNot needs compile-time operands"
