"""warpspec.isa.memory (global views, shared and register tensors, ``load_global``/``load_scalar``/``store_global``,
``load_shared``/``store_shared``, element writes): the emulator's result against numpy, one planted misuse per check
below (exact error class, the kernel's ``file:line``, a message fragment), the global loads and stores in the machine
code, and a ``gpu``-marked run against numpy."""

import numpy as np
import pytest

import warpspec
from tests.support.markers import markers_of
from warpspec import CompileError, float16, float32, int32
from warpspec.cuda import sass
from warpspec.cuda.launch import compile_kernel
from warpspec.isa.elementwise import flush_subnormals
from warpspec.runtime import kernel_for

marker_line = markers_of(__file__)


class RoundTrip(warpspec.Script):
    """out = 2 * x for an [8, 64] float32 tile, through registers and shared memory and back."""

    def __call__(self, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[8, 64])
        out = self.global_view(out_ptr, dtype=float32, shape=[8, 64])
        staged = self.shared_tensor(dtype=float32, shape=[8, 64])
        self.store_shared(staged, self.load_global(x, offsets=[0, 0], shape=[8, 64]))
        self.sync()
        self.store_global(out, self.load_shared(staged) * 2.0, offsets=[0, 0])


class Gather(warpspec.Script):
    """out[i] = x[rows[i]] * scales[i] for [n, 64] float32 rows: block i reads its row index and its scale as
    scalars from global memory and steers its load with them."""

    def __init__(self, overrun=False):
        super().__init__()
        self.overrun = overrun  # the last block reads one entry past ``rows``

    def __call__(self, n: int32, rows_ptr: ~int32, scales_ptr: ~float32, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = [n]
        self.attrs.warps = 4
        rows = self.global_view(rows_ptr, dtype=int32, shape=[n])
        scales = self.global_view(scales_ptr, dtype=float32, shape=[n, 1])
        x = self.global_view(x_ptr, dtype=float32, shape=[n, 64])
        out = self.global_view(out_ptr, dtype=float32, shape=[n, 64])
        i: int32 = self.blockIdx.x
        if self.overrun:
            i = i + 1
        row = self.load_scalar(rows, [i])  # <<< overrun
        scale = self.load_scalar(scales, [self.blockIdx.x, 0])
        self.store_global(out, self.load_global(x, offsets=[row, 0], shape=[1, 64]) * scale,
                          offsets=[self.blockIdx.x, 0])


class StopAtRow(warpspec.Script):
    """out[:end] = x[:end] for an [8, 64] float32 tile: a store whose rows stop at a runtime row."""

    def __call__(self, end: int32, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[8, 64])
        out = self.global_view(out_ptr, dtype=float32, shape=[8, 64], scratch=True)  # rows past end: never written
        self.store_global(out, self.load_global(x, offsets=[0, 0], shape=[8, 64]), offsets=[0, 0], row_end=end)


class LoadToRow(warpspec.Script):
    """out = x[:end] (zeros below) for an [8, 64] float32 tile: a load whose rows stop at a runtime row. With
    ``overwrite``, a second block writes x's rows from ``end`` on while the first loads: only a load that reads
    past ``end`` races with it."""

    def __init__(self, bounded=True, overwrite=False):
        super().__init__()
        self.bounded, self.overwrite = bounded, overwrite

    def __call__(self, end: int32, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = [2 if self.overwrite else 1]
        self.attrs.warps = 4
        # x is written only from row end on (scratch: its other rows are not the launch's output)
        x = self.global_view(x_ptr, dtype=float32, shape=[8, 64], scratch=self.overwrite)
        out = self.global_view(out_ptr, dtype=float32, shape=[8, 64])
        if self.blockIdx.x == 0:
            if self.bounded:
                tile = self.load_global(x, offsets=[0, 0], shape=[8, 64], row_end=end)
            else:
                tile = self.load_global(x, offsets=[0, 0], shape=[8, 64])  # <<< unbounded-load
            self.store_global(out, tile, offsets=[0, 0])
        else:  # rows end ... 7 of x (the view clips the rest)
            ones = self.register_tensor(dtype=float32, shape=[8, 64], init=1.0)
            self.store_global(x, ones, offsets=[end, 0])  # <<< overwrite


class AddRows(warpspec.Script):
    """out += (block + 1) · x for an [8, 64] float32 tile, every block adding into the same elements
    (``store_global(..., reduce="add")`` of a blocked tile: one add an element); with ``then_store``, block 1 stores
    the tile plainly instead, which races with the others' adds."""

    def __init__(self, then_store=False):
        super().__init__()
        self.then_store = then_store

    def __call__(self, blocks: int32, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = [blocks]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[8, 64])
        out = self.global_view(out_ptr, dtype=float32, shape=[8, 64])
        tile = self.load_global(x, offsets=[0, 0], shape=[8, 64]) * (self.blockIdx.x + 1)
        if self.then_store and self.blockIdx.x == 1:
            self.store_global(out, tile, offsets=[0, 0])  # <<< plain-store
        else:
            self.store_global(out, tile, offsets=[0, 0], reduce="add")  # <<< reduce-add


class Misuse(warpspec.Script):
    """One memory call that breaks one rule, chosen by ``mistake``."""

    def __init__(self, mistake):
        super().__init__()
        self.mistake = mistake

    def __call__(self, n: int32, x_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[8, 64])
        tile = self.load_global(x, offsets=[0, 0], shape=[8, 64])
        if self.mistake == "not-a-pointer":
            self.global_view(n, dtype=float32, shape=[8])  # <<< not-a-pointer
        if self.mistake == "pointee":
            self.global_view(x_ptr, dtype=float16, shape=[8])  # <<< pointee
        if self.mistake == "rank-six":
            self.global_view(x_ptr, dtype=float32, shape=[1, 1, 1, 1, 1, 8])  # <<< rank-six
        if self.mistake == "strides":
            self.global_view(x_ptr, dtype=float32, shape=[8, 64], strides=[64])  # <<< strides
        if self.mistake == "swizzle":
            self.shared_tensor(dtype=float16, shape=[64, 64], swizzle=48)  # <<< swizzle
        if self.mistake == "shared-in-loop":
            for i in self.range(n):
                self.shared_tensor(dtype=float16, shape=[64, 64])  # <<< shared-in-loop
        if self.mistake == "load-rank":
            self.load_global(x, offsets=[0, 0], shape=[64])  # <<< load-rank
        if self.mistake == "store-dtype":
            self.store_global(x, self.cast(tile, float16), offsets=[0, 0])  # <<< store-dtype
        if self.mistake == "scalar-indices":
            self.load_scalar(x, [0])  # <<< scalar-indices
        if self.mistake == "store-shared-rank":
            staged = self.shared_tensor(dtype=float32, shape=[1, 8, 64])
            self.store_shared(staged, tile)  # <<< store-shared-rank
        if self.mistake == "reduce-dtype":
            self.store_global(x, self.cast(tile, float16), offsets=[0, 0], reduce="add")  # <<< reduce-dtype
        if self.mistake == "reduce-op":
            self.store_global(x, tile, offsets=[0, 0], reduce="max")  # <<< reduce-op
        if self.mistake == "load-row-end":
            self.load_global(x, offsets=[0, 0], shape=[8, 64], row_end=2.5)  # <<< load-row-end
        if self.mistake == "col-end-rank":
            flat = self.global_view(x_ptr, dtype=float32, shape=[512])
            row = self.load_global(flat, offsets=[0], shape=[64])
            self.store_global(flat, row, offsets=[0], col_end=n)  # <<< col-end-rank


MISUSES = [
    ("not-a-pointer", "global_view needs a pointer parameter"),
    ("pointee", "global_view of x_ptr"),
    ("rank-six", "global_view shape needs 1 to 5 dimensions, got 6"),
    ("strides", "global_view strides has 1 entries for 2 dimensions"),
    ("swizzle", "shared_tensor swizzle must be 0, 32, 64 or 128 bytes, got 48"),
    ("shared-in-loop", "shared_tensor cannot be allocated inside a runtime loop or branch"),
    ("load-rank", "load_global shape [64] must have the rank of x (2)"),
    ("store-dtype", "is float16 but x holds"),
    ("scalar-indices", "load_scalar needs one index per dimension of x (2), got 1"),
    ("store-shared-rank", "store_shared takes a 2-D shared tile; staged has shape [1, 8, 64]"),
    ("col-end-rank", "store_global col_end bounds the columns of a 2-D view; flat has rank 1"),
    ("reduce-dtype", "store_global reduce='add' combines float32 tiles; "),
    ("reduce-op", "store_global reduce must be None or one of 'add', got 'max'"),
    ("load-row-end", "load_global row_end must be an integer, got 2.5"),
]


def _input():
    return np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)


def test_a_round_trip_through_registers_and_shared_memory():
    x, out = _input(), np.full((8, 64), np.nan, np.float32)
    with warpspec.use_backend("emulator"):
        RoundTrip()(x, out)
    np.testing.assert_array_equal(out, 2 * x)


@pytest.mark.parametrize("end", [0, 3, 8, 20])
def test_a_store_stops_at_its_row_end(end):
    x, out = _input(), np.full((8, 64), np.nan, np.float32)
    with warpspec.use_backend("emulator"):
        StopAtRow()(end, x, out)
    np.testing.assert_array_equal(out[:end], x[:end])
    assert np.isnan(out[end:]).all()


@pytest.mark.parametrize("end", [0, 3, 8, 20])
def test_a_load_reads_zeros_from_its_row_end_on(end):
    x, out = _input(), np.full((8, 64), np.nan, np.float32)
    with warpspec.use_backend("emulator"):
        LoadToRow()(end, x, out)
    np.testing.assert_array_equal(out[:end], x[:end])
    np.testing.assert_array_equal(out[end:], 0.0)


def test_a_load_stopped_at_its_row_end_leaves_the_rows_past_it_to_another_block():
    """Block 1 writes x's rows from 3 on while block 0 loads: bounded at row 3, the load reads none of them (no
    race); unbounded, it reads them: a race named at block 1's store, its message naming the load's line."""
    x = _input()
    with warpspec.use_backend("emulator"):
        out = np.full((8, 64), np.nan, np.float32)
        LoadToRow(overwrite=True)(3, x.copy(), out)
        np.testing.assert_array_equal(out[:3], x[:3])
        np.testing.assert_array_equal(out[3:], 0.0)
        with pytest.raises(warpspec.RaceError) as caught:
            LoadToRow(bounded=False, overwrite=True)(3, x.copy(), out)
    assert caught.value.location == f"{__file__}:{marker_line('overwrite')}"
    assert (f"writes x[3, 0] (argument 'x_ptr'), which block (0, 0, 0) read (load_global of x, argument 'x_ptr', "
            f"at {__file__}:{marker_line('unbounded-load')})") in str(caught.value)


def test_blocks_reduce_add_into_the_same_elements():
    """Three blocks add 1·x, 2·x and 3·x into out (which held 0.5): 6·x + 0.5, in whatever order they land."""
    x, out = _input(), np.full((8, 64), 0.5, np.float32)
    with warpspec.use_backend("emulator"):
        AddRows()(3, x, out)
    np.testing.assert_allclose(out, 6 * x + 0.5, rtol=1e-6, atol=1e-6)


def test_a_plain_store_of_elements_another_block_adds_into_is_a_race():
    """Adds commute with each other, not with a plain store: block 1's store meets block 0's add, named with its
    line."""
    with warpspec.use_backend("emulator"), pytest.raises(warpspec.RaceError) as caught:
        AddRows(then_store=True)(2, _input(), np.zeros((8, 64), np.float32))
    assert caught.value.location == f"{__file__}:{marker_line('plain-store')}"
    assert ("store_global in block (1, 0, 0) writes out[0, 0] (argument 'out_ptr'), which block (0, 0, 0) "
            "reduce-added into (store_global(reduce='add') of out") in str(caught.value)
    assert f"at {__file__}:{marker_line('reduce-add')})" in str(caught.value)


def _subnormal_input():
    """[8, 64] float32 values around the smallest normal (1.18e-38): subnormal ones, normal ones, signs mixed."""
    tiny = np.finfo(np.float32).tiny
    values = np.linspace(-2.0, 2.0, 8 * 64, dtype=np.float32).reshape(8, 64) * tiny
    return values


def test_reduce_adds_flush_subnormals_to_zero():
    """red.global.add.f32 flushes subnormal addends, held values and sums to zeros of their sign (``.ftz``), and so
    does the emulator: one block adds 1·x into out = x (x spanning ±2 times the smallest normal)."""
    x = _subnormal_input()
    out = x.copy()
    with warpspec.use_backend("emulator"):
        AddRows()(1, x, out)
    np.testing.assert_array_equal(out, flush_subnormals(flush_subnormals(x) + flush_subnormals(x)))
    assert (out == 0).sum() > 0 and (np.abs(x) < np.finfo(np.float32).tiny).sum() > 0


def test_the_cuda_build_of_a_reduce_add_is_one_red_an_element():
    counts = sass.count_instructions(sass.disassemble(compile_kernel(kernel_for(AddRows(), {})).module.cubin),
                                     ["REDG", "STG", "LDL", "STL"])
    assert counts["REDG"] > 0 and counts["STG"] == 0
    assert counts["LDL"] == 0 and counts["STL"] == 0


def _gather_inputs(n=5):
    rng = np.random.default_rng(1)
    rows = rng.permutation(n).astype(np.int32)
    scales = rng.standard_normal((n, 1)).astype(np.float32)
    return rows, scales, rng.standard_normal((n, 64)).astype(np.float32)


def test_scalar_loads_steer_each_block():
    rows, scales, x = _gather_inputs()
    out = np.full_like(x, np.nan)
    with warpspec.use_backend("emulator"):
        Gather()(len(rows), rows, scales, x, out)
    np.testing.assert_array_equal(out, x[rows] * scales)


def test_a_scalar_load_outside_its_view_is_a_bounds_error_at_its_line():
    rows, scales, x = _gather_inputs()
    with warpspec.use_backend("emulator"), pytest.raises(warpspec.BoundsError) as caught:
        Gather(overrun=True)(len(rows), rows, scales, x, np.zeros_like(x))
    assert caught.value.location == f"{__file__}:{marker_line('overrun')}"
    assert "load_scalar: index [5] is outside rows [5]" in str(caught.value)


def test_a_scalar_load_of_a_float16_view_is_a_compile_error():
    class Half(warpspec.Script):
        def __call__(self, x_ptr: ~float16):
            self.attrs.blocks = [1]
            self.attrs.warps = 4
            self.load_scalar(self.global_view(x_ptr, dtype=float16, shape=[8]), [0])

    with warpspec.use_backend("emulator"), pytest.raises(CompileError, match="x_ptr holds float16|holds float16"):
        Half()(np.zeros(8, np.float16))


@pytest.mark.parametrize("mistake, fragment", MISUSES, ids=[m[0] for m in MISUSES])
def test_each_misuse_is_a_compile_error_at_its_line(mistake, fragment):
    with warpspec.use_backend("emulator"), pytest.raises(CompileError) as caught:
        Misuse(mistake)(1, np.zeros((8, 64), np.float32))
    assert caught.value.location == f"{__file__}:{marker_line(mistake)}"
    assert fragment in str(caught.value)


def test_the_cuda_build_loads_and_stores_global_and_shared_memory_without_local_memory():
    cubin = compile_kernel(kernel_for(RoundTrip(), {})).module.cubin
    counts = sass.count_instructions(sass.disassemble(cubin), ["LDG", "STG", "STS", "LDS", "LDL", "STL"])
    assert counts["LDG"] > 0 and counts["STG"] > 0 and counts["STS"] > 0 and counts["LDS"] > 0
    assert counts["LDL"] == 0 and counts["STL"] == 0


def test_the_cuda_build_of_a_store_with_a_row_end_guards_rows_with_it():
    kernel = kernel_for(StopAtRow(), {})
    compiled = compile_kernel(kernel)
    assert "< out_size0 ? end : out_size0" in compiled.generated.source
    counts = sass.count_instructions(sass.disassemble(compiled.module.cubin), ["STG", "LDL", "STL"])
    assert counts["STG"] > 0 and counts["LDL"] == 0 and counts["STL"] == 0


def test_the_cuda_build_of_a_load_with_a_row_end_guards_rows_with_it():
    compiled = compile_kernel(kernel_for(LoadToRow(), {}))
    assert "< x_size0 ? end : x_size0" in compiled.generated.source
    counts = sass.count_instructions(sass.disassemble(compiled.module.cubin), ["LDG", "LDL", "STL"])
    assert counts["LDG"] > 0 and counts["LDL"] == 0 and counts["STL"] == 0


def test_the_cuda_build_of_a_scalar_load_is_an_ldg_without_local_memory():
    cubin = compile_kernel(kernel_for(Gather(), {})).module.cubin
    counts = sass.count_instructions(sass.disassemble(cubin), ["LDG", "STG", "LDL", "STL"])
    assert counts["LDG"] >= 3 and counts["STG"] > 0  # the row index, the scale, the row's elements
    assert counts["LDL"] == 0 and counts["STL"] == 0


@pytest.mark.gpu
def test_gpu_scalar_loads_steer_each_block():
    torch = pytest.importorskip("torch")
    rows, scales, x = _gather_inputs()
    out = torch.full(x.shape, float("nan"), device="cuda")
    with warpspec.use_backend("cuda"):
        Gather()(len(rows), *(torch.from_numpy(a).cuda() for a in (rows, scales, x)), out)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(out.cpu().numpy(), x[rows] * scales)


@pytest.mark.gpu
def test_gpu_a_round_trip_through_registers_and_shared_memory():
    torch = pytest.importorskip("torch")
    x = _input()
    out = torch.full((8, 64), float("nan"), device="cuda")
    with warpspec.use_backend("cuda"):
        RoundTrip()(torch.from_numpy(x).cuda(), out)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(out.cpu().numpy(), 2 * x)


@pytest.mark.gpu
@pytest.mark.parametrize("end", [0, 3, 8, 20])
def test_gpu_a_load_reads_zeros_from_its_row_end_on(end):
    torch = pytest.importorskip("torch")
    x = _input()
    out = torch.full((8, 64), float("nan"), device="cuda")
    with warpspec.use_backend("cuda"):
        LoadToRow()(end, torch.from_numpy(x).cuda(), out)
    torch.cuda.synchronize()
    expected = np.where(np.arange(8)[:, None] < end, x, 0.0)
    np.testing.assert_array_equal(out.cpu().numpy(), expected)


@pytest.mark.gpu
def test_gpu_blocks_reduce_add_as_the_emulator_does():
    """The emulator's adds against the GPU's: 6·x + 0.5 from three blocks, and subnormals flushed alike."""
    torch = pytest.importorskip("torch")
    x = _input()
    out = torch.full((8, 64), 0.5, device="cuda")
    with warpspec.use_backend("cuda"):
        AddRows()(3, torch.from_numpy(x).cuda(), out)
    torch.cuda.synchronize()
    np.testing.assert_allclose(out.cpu().numpy(), 6 * x + 0.5, rtol=1e-6, atol=1e-6)
    tiny = _subnormal_input()
    expected = tiny.copy()
    with warpspec.use_backend("emulator"):
        AddRows()(1, tiny, expected)
    got = torch.from_numpy(tiny).cuda()
    with warpspec.use_backend("cuda"):
        AddRows()(1, torch.from_numpy(tiny).cuda(), got)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(got.cpu().numpy().view(np.uint32), expected.view(np.uint32))
