"""The unroll and constant-propagation passes (warpspec.passes.unroll, warpspec.passes.constants) on small IR: the
shape of what they write, the values they fold, and that the emulator computes the same with and without them."""

from dataclasses import dataclass

import numpy as np
import pytest

import warpspec
from warpspec import float16, float32, int32
from warpspec.cuda.codegen import generate
from warpspec.dtypes import boolean, uint32
from warpspec.emulator.run import emulate_kernel
from warpspec.ir import nodes as ir
from warpspec.ir.evaluate import ExprCompiler
from warpspec.isa.memory import StoreElement
from warpspec.passes.constants import UNKNOWN, fold, propagate
from warpspec.passes.unroll import unroll
from warpspec.runtime import kernel_for


class RingCounter(warpspec.Script):
    """``counts[stage] += 1`` on each of ``n`` trips around a ring of ``num_stages`` stages."""

    def __init__(self, num_stages=3, unroll=3):
        super().__init__()
        self.num_stages = num_stages
        self.unroll = unroll

    def __call__(self, n: int32, out_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        counts = self.register_tensor(float32, [1, self.num_stages], init=0.0)
        stage: int32 = 0
        for i in self.range(0, n, 1, unroll=self.unroll):
            counts[0, stage] = counts[0, stage] + 1.0
            stage = (stage + 1) % self.num_stages
        out = self.global_view(out_ptr, dtype=float32, shape=[1, self.num_stages])
        self.store_global(out, counts, offsets=[0, 0])


class NestedRings(warpspec.Script):
    """``counts[outer, inner] += 1`` with a ring of 3 inside a ring of 2, both unrolled by their stage counts."""

    def __call__(self, n: int32, m: int32, out_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        counts = self.register_tensor(float32, [2, 3], init=0.0)
        outer: int32 = 0
        for i in self.range(0, n, 1, unroll=2):
            inner: int32 = 0
            for j in self.range(0, m, 1, unroll=3):
                counts[outer, inner] = counts[outer, inner] + 1.0
                inner = (inner + 1) % 3
            outer = (outer + 1) % 2
        out = self.global_view(out_ptr, dtype=float32, shape=[2, 3])
        self.store_global(out, counts, offsets=[0, 0])


class GroupAssigned(warpspec.Script):
    """``row`` is 1 on the threads of the second warp only: each warp writes its own row of ``out``."""

    def __call__(self, out_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 2
        row: int32 = 0
        with self.thread_group(thread_begin=32, num_threads=32):
            row = 1
        out = self.global_view(out_ptr, dtype=float32, shape=[2, 8])
        ones = self.register_tensor(float32, [1, 8], init=1.0)
        self.store_global(out, ones, offsets=[row, 0])


def _lowered(kernel):
    return propagate(unroll(kernel))


def _ring_counts(kernel, n, stages):
    out = np.zeros((1, stages), np.float32)
    emulate_kernel(kernel, {"n": n, "out_ptr": out})
    return out[0].tolist()


def _loops(body):
    return [s for s in ir.walk(body) if isinstance(s, ir.For)]


# --------------------------------------------------------------------------------------------------- unroll


def test_unroll_writes_nested_guarded_copies_with_their_own_loop_variable():
    kernel = kernel_for(RingCounter(num_stages=3, unroll=3), {})
    (original,) = _loops(kernel.body)
    (loop,) = _loops(unroll(kernel).body)
    assert loop.unroll == 1 and loop.var.name == "i_trip" and loop.step.value == 3
    assert loop.start is original.start and loop.stop is original.stop
    copies, block = [], loop.body
    while True:  # copy j: Declare(i_j, trip + j), the body, then the guarded copy j + 1
        declare = block[0]
        offset = 0 if declare.value is loop.var else declare.value.b.value
        assert isinstance(declare, ir.Declare) and declare.var.name == "i"
        copies.append((offset, declare.var.uid))
        if not isinstance(block[-1], ir.If):
            break
        guard = block[-1].cond
        assert guard.op == "<" and guard.a.a is loop.var and guard.b is loop.stop
        assert guard.a.b.value == offset + 1 and block[-1].orelse == ()
        block = block[-1].then
    assert [offset for offset, _ in copies] == [0, 1, 2]
    uids = {uid for _, uid in copies}
    assert len(uids) == 3 and original.var.uid not in uids
    # The ring's stage is declared outside the loop: every copy advances the same variable.
    stage = {s.var.uid for s in ir.walk(loop.body) if isinstance(s, ir.Assign)}
    assert len(stage) == 1 and stage == {s.var.uid for s in ir.walk(original.body) if isinstance(s, ir.Assign)}


LOC = ir.Loc("passes_test.py", 1)


@dataclass(frozen=True, eq=False)
class _Probe(ir.Stmt):
    """A statement of a family the passes have never heard of: an Expr, a TensorRef, a tuple and a nested block."""

    abstract = True  # a test node: keeps the registry's every-statement-has-an-emitter test to the real ones
    value: ir.Expr
    ref: ir.TensorRef
    offsets: tuple
    body: tuple
    blocks = ("body",)


def _kernel(*body):
    return ir.Kernel("k", (), (), 1, (1, 1, 1), tuple(body), (), LOC)


def test_unroll_renames_every_field_of_any_statement_and_the_variables_declared_in_the_body():
    i, n, total, x = ir.Var("i", int32), ir.Var("n", int32), ir.Var("total", int32), ir.Var("x", int32)
    tile = ir.TensorDecl("tile", ir.SHARED, float16, (2, 64, 64), LOC)
    doubled = ir.Binary("*", i, ir.Const(2, int32), int32)
    probe = _Probe(LOC, x, ir.TensorRef(tile, (i,)), (i, ir.Const(7, int32)), (ir.Assign(LOC, total, i),))
    loop = ir.For(LOC, i, ir.Const(0, int32), n, ir.Const(1, int32), (ir.Declare(LOC, x, doubled), probe), unroll=2)
    (unrolled,) = unroll(_kernel(loop)).body
    first, guarded = unrolled.body[:3], unrolled.body[3]
    second = guarded.then
    for declare_i, declare_x, copy in (first, second):
        assert declare_x.var.uid != x.uid and declare_x.value.a is declare_i.var
        assert copy.value is declare_x.var  # the probe reads its own copy's x
        assert copy.ref.decl is tile and copy.ref.index == (declare_i.var,)
        assert copy.offsets[0] is declare_i.var and copy.offsets[1].value == 7
        (assign,) = copy.body
        assert assign.var is total and assign.value is declare_i.var
    assert first[1].var.uid != second[1].var.uid and first[0].var.uid != second[0].var.uid


def test_loops_without_unroll_are_left_as_they_are():
    kernel = kernel_for(RingCounter(num_stages=3, unroll=1), {})
    assert unroll(kernel).body == kernel.body


# ------------------------------------------------------------------------------------------------ constants


def _element_indices(body):
    """The stage index of every element access of ``counts`` (StoreElement targets and the Loads they read)."""
    indices = []
    for s in ir.walk(body):
        if isinstance(s, StoreElement):
            indices += [s.indices[1], s.value.a.indices[1]]
    return indices


def test_the_ring_stage_is_a_constant_in_each_unrolled_copy():
    kernel = _lowered(kernel_for(RingCounter(num_stages=3, unroll=3), {}))
    (loop,) = _loops(kernel.body)
    indices = _element_indices(loop.body)
    assert all(isinstance(i, ir.Const) for i in indices)
    assert [i.value for i in indices] == [0, 0, 1, 1, 2, 2]
    stage = [s.value.value for s in ir.walk(loop.body) if isinstance(s, ir.Assign)]
    assert stage == [1, 2, 0]


@pytest.mark.parametrize("stages, factor", [(3, 2), (3, 1), (2, 3)])
def test_a_stage_that_does_not_return_to_its_entry_value_is_not_known_at_the_loop_head(stages, factor):
    kernel = _lowered(kernel_for(RingCounter(num_stages=stages, unroll=factor), {}))
    indices = _element_indices(_loops(kernel.body)[0].body)
    assert indices and all(isinstance(i, ir.Var) and i.name == "stage" for i in indices)


@pytest.mark.parametrize("stages, factor", [(3, 3), (3, 2), (3, 1), (2, 4), (4, 2)])
def test_the_passes_keep_what_the_emulator_computes(stages, factor):
    kernel = kernel_for(RingCounter(num_stages=stages, unroll=factor), {})
    lowered = _lowered(kernel)
    for n in range(9):
        expected = [float(len(range(s, n, stages))) for s in range(stages)]
        assert _ring_counts(kernel, n, stages) == expected
        assert _ring_counts(lowered, n, stages) == expected, n


def test_nested_unrolled_loops_get_constants_from_both_rings():
    kernel = kernel_for(NestedRings(), {})
    lowered = _lowered(kernel)
    stores = [s for s in ir.walk(lowered.body) if isinstance(s, StoreElement)]
    assert [(s.indices[0].value, s.indices[1].value) for s in stores] == [(o, i) for o in range(2) for i in range(3)]
    inner = {s.var.uid for s in ir.walk(lowered.body) if isinstance(s, ir.Declare) and s.var.name == "inner"}
    assert len(inner) == 2  # declared in the outer body: one variable per outer copy
    for n in range(5):
        for m in range(5):
            expected = [[float(len(range(o, n, 2)) * len(range(i, m, 3))) for i in range(3)] for o in range(2)]
            for candidate in (kernel, lowered):
                out = np.zeros((2, 3), np.float32)
                emulate_kernel(candidate, {"n": n, "m": m, "out_ptr": out})
                assert out.tolist() == expected, (n, m)


@pytest.mark.parametrize("module, name, k_size", [
    ("matmul_v3", "MatmulWGMMAV3", 160), ("matmul_v3", "MatmulWGMMAV3", 32),
    ("matmul_v4", "MatmulWGMMAV4", 160), ("matmul_v4", "MatmulWGMMAV4", 96)])
def test_the_passes_keep_the_examples_results_on_the_emulator(module, name, k_size):
    """K tiles that are no multiple of the stage count end the unrolled loop after a middle copy."""
    import importlib

    cls = getattr(importlib.import_module(module), name)
    kernel = kernel_for(cls(num_stages=3 if module == "matmul_v3" else 2, block_m=128, block_n=64, block_k=32),
                        {"n_size": 70, "k_size": k_size})
    rng = np.random.default_rng(0)
    a = rng.standard_normal((130, k_size)).astype(np.float16)
    b = rng.standard_normal((70, k_size)).astype(np.float16)
    outputs = []
    for candidate in (kernel, _lowered(kernel)):
        c = np.full((130, 70), np.nan, np.float16)
        emulate_kernel(candidate, {"m_size": 130, "a_ptr": a, "b_ptr": b, "c_ptr": c})
        outputs.append(c)
    reference = a.astype(np.float32) @ b.astype(np.float32).T
    assert np.array_equal(outputs[0], outputs[1])
    assert np.abs(outputs[1].astype(np.float32) - reference).max() < 0.05


def test_a_value_assigned_in_a_thread_group_is_not_known_after_it():
    """Only the group's threads ran the assignment: after the group ``row`` is 0 or 1, so the store must read it."""
    kernel = kernel_for(GroupAssigned(), {})
    out = np.zeros((2, 8), np.float32)
    emulate_kernel(_lowered(kernel), {"out_ptr": out})
    assert out.tolist() == [[1.0] * 8, [1.0] * 8]  # each warp wrote its own row
    source = generate(kernel).source
    store = source[source.index("// ones"):]
    assert "static_cast<long long>((row + 0)) * out_stride0" in store
    assert "static_cast<long long>((1 + 0))" not in store


def _assigned(body, var):
    return [s.value for s in ir.walk(body) if isinstance(s, ir.Assign) and s.var is var]


def test_folding_wraps_and_truncates_like_the_emulator():
    n = ir.Var("n", int32)
    cases = [ir.Binary("+", ir.Const(2**31 - 1, int32), ir.Const(1, int32), int32),
             ir.Binary("-", ir.Const(0, uint32), ir.Const(1, uint32), uint32),
             ir.Binary("//", ir.Const(-7, int32), ir.Const(2, int32), int32),
             ir.Binary("%", ir.Const(-7, int32), ir.Const(2, int32), int32),
             ir.Binary("<<", ir.Const(1, int32), ir.Const(31, int32), int32),
             ir.Unary("-", ir.Const(-2**31, int32)),
             ir.Convert(ir.Const(-1, int32), uint32),
             ir.Select(ir.Binary("<", ir.Const(1, int32), ir.Const(2, int32), boolean), ir.Const(3, int32), n)]
    evaluate = ExprCompiler({})
    assert [fold(e) for e in cases] == [evaluate(e)({}) for e in cases]
    assert [fold(e) for e in cases] == [-2**31, 2**32 - 1, -3, -1, -2**31, -2**31, 2**32 - 1, 3]
    assert fold(ir.Binary("//", ir.Const(1, int32), ir.Const(0, int32), int32)) is UNKNOWN  # run time reports it
    assert fold(ir.Binary("+", n, ir.Const(1, int32), int32)) is UNKNOWN
    assert fold(ir.Binary("+", ir.Const(1.5, float32), ir.Const(1.0, float32), float32)) is UNKNOWN


def test_known_variables_become_constants_and_a_division_by_zero_stays():
    x, y, z = ir.Var("x", int32), ir.Var("y", int32), ir.Var("z", int32)
    body = (ir.Declare(LOC, x, ir.Const(2**31 - 1, int32)),
            ir.Declare(LOC, y, ir.Binary("+", x, ir.Const(1, int32), int32)),
            ir.Declare(LOC, z, ir.Binary("//", y, ir.Binary("-", x, x, int32), int32)))
    declares = propagate(_kernel(*body)).body
    assert [type(d.value) for d in declares] == [ir.Const, ir.Const, ir.Binary]
    assert declares[1].value.value == -2**31
    assert (declares[2].value.a.value, declares[2].value.b.value) == (-2**31, 0)


def test_a_known_condition_is_replaced_by_its_branch_and_an_unknown_one_keeps_what_both_agree_on():
    n, x, y, z, w = (ir.Var(name, int32) for name in "nxyzw")
    one, two, five = (ir.Const(v, int32) for v in (1, 2, 5))
    body = (ir.Declare(LOC, x, ir.Const(3, int32)),
            ir.If(LOC, ir.Binary("==", x, ir.Const(3, int32), boolean), (ir.Declare(LOC, y, one),),
                  (ir.Declare(LOC, y, two),)),
            ir.If(LOC, ir.Binary(">", n, ir.Const(0, int32), boolean),
                  (ir.Assign(LOC, y, two), ir.Declare(LOC, z, five)), (ir.Declare(LOC, z, five),)),
            ir.Declare(LOC, w, ir.Binary("+", y, z, int32)))
    out = propagate(_kernel(*body)).body
    assert [type(s) for s in out] == [ir.Declare, ir.Declare, ir.If, ir.Declare]
    assert out[1].var is y and out[1].value.value == 1  # the then branch, spliced in
    total = out[3].value
    assert total.a is y and isinstance(total.b, ir.Const) and total.b.value == 5  # y is 1 or 2, z is 5 either way


def _ring_loop(stop, factor):
    """stage = 0; for i in range(0, stop, 1, unroll=3): seen = stage; stage = (stage + 1) % 3; after: last = stage."""
    i, stage, seen, last = (ir.Var(name, int32) for name in ("i", "stage", "seen", "last"))
    advance = ir.Binary("%", ir.Binary("+", stage, ir.Const(1, int32), int32), ir.Const(3, int32), int32)
    loop = ir.For(LOC, i, ir.Const(0, int32), stop, ir.Const(1, int32),
                  (ir.Assign(LOC, seen, stage), ir.Assign(LOC, stage, advance)), unroll=factor)
    body = (ir.Declare(LOC, stage, ir.Const(0, int32)), ir.Declare(LOC, seen, ir.Const(0, int32)), loop,
            ir.Declare(LOC, last, stage))
    return _kernel(*body), seen, last


@pytest.mark.parametrize("trips, last", [(5, 2), (6, 0), (1, 1), (3, 0)])
def test_with_a_known_trip_count_the_values_after_the_loop_are_those_of_its_last_trip(trips, last):
    kernel, seen, _ = _ring_loop(ir.Const(trips, int32), 3)
    out = propagate(unroll(kernel)).body
    assert out[-1].value.value == last
    assert [e.value for e in _assigned(out, seen)] == [0, 1, 2][:trips]  # copies that never run are gone


def test_a_loop_that_never_runs_is_removed():
    kernel, _, _ = _ring_loop(ir.Const(0, int32), 3)
    out = propagate(unroll(kernel)).body
    assert not _loops(out) and out[-1].value.value == 0


def test_with_an_unknown_trip_count_the_loop_may_end_after_any_copy():
    kernel, seen, last = _ring_loop(ir.Var("n", int32), 3)
    out = propagate(unroll(kernel)).body
    assert [e.value for e in _assigned(out, seen)] == [0, 1, 2]
    assert out[-1].var is last and out[-1].value.name == "stage"


def _guarded_pair(guard_offset: int, changes_stop: bool = False):
    """What ``seen`` reads in a ring of 2 unrolled by hand: ``for i in range(0, n, 2): seen = stage; stage = 1;
    if i + guard_offset < n: stage = 0`` (and ``n -= 1`` with ``changes_stop``). With the guard's offset at most the
    step, only the path through the guard starts another trip, so stage is 0 at the loop head."""
    i, n, stage, seen = (ir.Var(name, int32) for name in ("i", "n", "stage", "seen"))
    guard = ir.If(LOC, ir.Binary("<", ir.Binary("+", i, ir.Const(guard_offset, int32), int32), n, boolean),
                  (ir.Assign(LOC, stage, ir.Const(0, int32)),), ())
    body = (ir.Assign(LOC, seen, stage), ir.Assign(LOC, stage, ir.Const(1, int32)), guard)
    if changes_stop:
        body += (ir.Assign(LOC, n, ir.Binary("-", n, ir.Const(1, int32), int32)),)
    loop = ir.For(LOC, i, ir.Const(0, int32), n, ir.Const(2, int32), body)
    kernel = _kernel(ir.Declare(LOC, stage, ir.Const(0, int32)), ir.Declare(LOC, seen, ir.Const(0, int32)), loop)
    (value,) = _assigned(propagate(kernel).body, seen)
    return value


def test_a_failed_unroll_guard_ends_the_trip():
    seen = _guarded_pair(1)
    assert isinstance(seen, ir.Const) and seen.value == 0


@pytest.mark.parametrize("guard_offset, changes_stop", [(3, False), (1, True)])
def test_guards_that_do_not_prove_the_loop_ends_keep_the_stage_unknown(guard_offset, changes_stop):
    """i + 3 >= n does not make i + 2 >= n; a stop the body changes is not the one the next check reads."""
    seen = _guarded_pair(guard_offset, changes_stop)
    assert isinstance(seen, ir.Var) and seen.name == "stage"
