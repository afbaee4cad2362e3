"""warpspec.isa.tma (``self.tma.global_to_shared/shared_to_global/commit_group/wait_group``): the emulator's result
against numpy (a ragged tile: zero-filled loads, clipped stores; reduce-adds of several blocks into one tile), one
planted misuse per check the family makes when the kernel is built (exact error class, the kernel's ``file:line``, a
message fragment), the race rules of reduce-adds, the bulk-tensor instructions in the machine code, and
``gpu``-marked runs against numpy.

The run-time checks (bytes delivered to a barrier whose phase already completed, a buffer refilled while a TMA
store still reads it) are planted in real pipelines in tests/emulator/test_planted_bugs.py; multicast is
tests/isa/test_cluster.py's.
"""

import numpy as np
import pytest

import warpspec
from tests.kernels import global_race_kernels as gk
from tests.support.markers import markers_of
from warpspec import ArgumentError, CompileError, RaceError, float16, float32, int32
from warpspec.errors import InFlightAtExitError
from warpspec.cuda import sass
from warpspec.cuda.launch import compile_kernel
from warpspec.runtime import kernel_for

marker_line = markers_of(__file__)


class TileCopy(warpspec.Script):
    """dst = src through one 64x64 shared tile per block, a block per tile of a [m, n] tensor."""

    def __call__(self, m: int32, n: int32, src_ptr: ~float16, dst_ptr: ~float16):
        self.attrs.blocks = [warpspec.cdiv(m, 64), warpspec.cdiv(n, 64)]
        self.attrs.warps = 1
        src = self.global_view(src_ptr, dtype=float16, shape=[m, n])
        dst = self.global_view(dst_ptr, dtype=float16, shape=[m, n])
        tile = self.shared_tensor(dtype=float16, shape=[64, 64])
        full = self.mbarrier.alloc(counts=[1])
        offsets = [64 * self.blockIdx.x, 64 * self.blockIdx.y]
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(full[0], transaction_bytes=tile.nbytes)
            self.tma.global_to_shared(src=src, dst=tile, offsets=offsets, mbarrier=full[0])
        self.mbarrier.wait(full[0], phase=0)
        with self.single_thread():
            self.tma.shared_to_global(src=tile, dst=dst, offsets=offsets)
            self.tma.commit_group()
            self.tma.wait_group(0)


class ReusedStaging(warpspec.Script):
    """dst[r] = src + r for r in 0..2 through one shared staging tile: each round's store must have read the tile
    before the next round overwrites it (``wait``: ``read`` waits for that only, ``full`` for the global write too,
    ``none`` for nothing), and ``final`` waits for the global writes before the block ends."""

    def __init__(self, wait="read", final=True):
        super().__init__()
        self.wait, self.final = wait, final

    def __call__(self, src_ptr: ~float16, dst_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        src = self.global_view(src_ptr, dtype=float16, shape=[64, 64])
        dst = self.global_view(dst_ptr, dtype=float16, shape=[3, 64, 64])
        tile = self.shared_tensor(dtype=float16, shape=[1, 64, 64])
        values = self.load_global(src, offsets=[0, 0], shape=[64, 64])
        for r in range(3):
            self.store_shared(tile[0], values + float(r))  # <<< overwrite
            self.fence_proxy_async()
            self.sync()
            with self.single_thread():
                self.tma.shared_to_global(src=tile, dst=dst, offsets=[r, 0, 0])  # <<< store
                self.tma.commit_group()
                if self.wait != "none":
                    self.tma.wait_group(0, read=self.wait == "read")
            self.sync()
        if self.final:
            with self.single_thread():
                self.tma.wait_group(0)


class Misuse(warpspec.Script):
    """One TMA call that breaks one rule, chosen by ``mistake``."""

    def __init__(self, mistake):
        super().__init__()
        self.mistake = mistake

    def __call__(self, x_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float16, shape=[64, 64])
        x3 = self.global_view(x_ptr, dtype=float16, shape=[2, 64, 64])
        tile = self.shared_tensor(dtype=float16, shape=[64, 64])
        full = self.mbarrier.alloc(counts=[1])
        if self.mistake == "many-threads":
            self.tma.shared_to_global(src=tile, dst=x, offsets=[0, 0])  # <<< many-threads
        with self.single_thread():
            if self.mistake == "rank":
                self.tma.shared_to_global(src=tile, dst=x3, offsets=[0, 0, 0])  # <<< rank
            if self.mistake == "one-dimension":
                row = self.shared_tensor(dtype=float16, shape=[64])
                flat = self.global_view(x_ptr, dtype=float16, shape=[64])
                self.tma.global_to_shared(src=flat, dst=row, offsets=[0], mbarrier=full[0])  # <<< one-dimension
            if self.mistake == "leading-extent":
                slab = self.shared_tensor(dtype=float16, shape=[2, 64, 64])
                self.tma.shared_to_global(src=slab, dst=x3, offsets=[0, 0, 0])  # <<< leading-extent
            if self.mistake == "dtype":
                wide = self.shared_tensor(dtype=float32, shape=[64, 64])
                self.tma.shared_to_global(src=wide, dst=x, offsets=[0, 0])  # <<< dtype
            if self.mistake == "inner-bytes":
                narrow = self.shared_tensor(dtype=float16, shape=[64, 4])
                self.tma.shared_to_global(src=narrow, dst=x, offsets=[0, 0])  # <<< inner-bytes
            if self.mistake == "wait-group":
                self.tma.wait_group(8)  # <<< wait-group
            if self.mistake == "wait-read":
                self.tma.wait_group(0, read="yes")  # <<< wait-read
            if self.mistake == "reduce-dtype":
                self.tma.shared_to_global(src=tile, dst=x, offsets=[0, 0], reduce="add")  # <<< reduce-dtype
            if self.mistake == "reduce-op":
                self.tma.shared_to_global(src=tile, dst=x, offsets=[0, 0], reduce="max")  # <<< reduce-op


MISUSES = [
    ("many-threads", "tma.shared_to_global is issued by one thread"),
    ("rank", "must have the same rank"),
    ("one-dimension", "needs at least 2 dimensions"),
    ("leading-extent", "a TMA tile's leading dimensions must have extent 1"),
    ("dtype", "is float32 but"),
    ("inner-bytes", "is 8 bytes; TMA needs a multiple of 16 bytes"),
    ("wait-group", "tma.wait_group n must be in [0, 7], got 8"),
    ("wait-read", "tma.wait_group read must be True or False, got 'yes'"),
    ("reduce-dtype", "tma.shared_to_global reduce='add' combines float32 tiles; tile is float16"),
    ("reduce-op", "tma.shared_to_global reduce must be None or one of 'add', got 'max'"),
]


@pytest.mark.parametrize("m, n", [(64, 64), (100, 136)])
def test_a_copy_through_shared_memory_is_exact_at_ragged_shapes(m, n):
    src = np.random.default_rng(0).standard_normal((m, n)).astype(np.float16)
    dst = np.full((m, n), np.nan, dtype=np.float16)
    with warpspec.use_backend("emulator"):
        TileCopy()(m, n, src, dst)
    np.testing.assert_array_equal(dst, src)


def test_the_emulator_refuses_a_pitch_no_tensor_map_can_describe_as_the_gpu_does():
    # Rows of 150 fp16 elements are 300 bytes apart: cuTensorMapEncodeTiled refuses that pitch, so must the emulator.
    src = np.zeros((100, 150), np.float16)
    with warpspec.use_backend("emulator"), pytest.raises(ArgumentError) as caught:
        TileCopy()(100, 150, src, np.zeros_like(src))
    assert str(caught.value) == ("argument 'src_ptr' (view src): tensor map: global_strides_bytes[0] = 300 (stride of "
                                 "dimension 1) must be a positive multiple of 16 below 2^40")


def test_the_emulator_refuses_a_misaligned_base_as_the_gpu_does():
    storage = np.zeros(64 * 64 + 8, np.float16)
    src = storage[1:1 + 64 * 64].reshape(64, 64)  # 2 bytes past an aligned address
    with warpspec.use_backend("emulator"), pytest.raises(ArgumentError, match=r"argument 'src_ptr' \(view src\): "
                                                                                r"tensor map: global_address .* must "
                                                                                r"be a non-null device address aligned "
                                                                                r"to 16 bytes"):
        TileCopy()(64, 64, src, np.zeros((64, 64), np.float16))


@pytest.mark.parametrize("mistake, fragment", MISUSES, ids=[m[0] for m in MISUSES])
def test_each_misuse_is_a_compile_error_at_its_line(mistake, fragment):
    with warpspec.use_backend("emulator"), pytest.raises(CompileError) as caught:
        Misuse(mistake)(np.zeros(2 * 64 * 64, np.float16))
    assert caught.value.location == f"{__file__}:{marker_line(mistake)}"
    assert fragment in str(caught.value)


@pytest.mark.parametrize("parts, m", [(3, 64), (2, 100)])
def test_reduce_adds_of_several_blocks_into_one_tile_sum_and_are_no_race(parts, m):
    """Every part's blocks add into the same rows; the emulator runs them one after another, so the sum must be
    the float32 sum (in the order of the parts) over what dst held, rows past m clipped."""
    src = np.random.default_rng(0).standard_normal((parts, m, 64)).astype(np.float32)
    dst = np.random.default_rng(1).standard_normal((m, 64)).astype(np.float32)
    expected = dst.copy()
    for part in src:
        expected += part
    with warpspec.use_backend("emulator"):
        gk.ReduceTiles()(parts, m, src, dst)
    np.testing.assert_array_equal(dst, expected)


@pytest.mark.parametrize("mistake, marker, fragment", [
    ("store", "add", "tma.shared_to_global(reduce='add') in block (1, 0, 0) adds into dst[0, 0, 0] (argument "
                     "'dst_ptr'), which block (0, 0, 0) wrote (tma.shared_to_global of dst"),
    ("read", "reduce-add", "tma.shared_to_global(reduce='add') in block (1, 0, 0) adds into dst[0, 0, 0] (argument "
                           "'dst_ptr'), which block (0, 0, 0) read (load_global of plain"),
])
def test_a_plain_access_of_elements_other_blocks_reduce_add_into_is_a_race(mistake, marker, fragment):
    with warpspec.use_backend("emulator"), pytest.raises(RaceError) as caught:
        gk.ReduceTiles(mistake)(2, 64, np.ones((2, 64, 64), np.float32), np.zeros((64, 64), np.float32))
    assert caught.value.location == f"{gk.__file__}:{gk.marker_line(marker)}"
    assert fragment in str(caught.value)


def test_a_read_of_elements_another_block_reduce_added_into_is_a_race_at_the_read():
    """Part 1's block reads dst back after its own add (waited for), but part 0's block added into it too."""
    with warpspec.use_backend("emulator"), pytest.raises(RaceError) as caught:
        gk.ReduceTiles("read-back")(2, 64, np.ones((2, 64, 64), np.float32), np.zeros((64, 64), np.float32))
    assert caught.value.location == f"{gk.__file__}:{gk.marker_line('read-back')}"
    assert "load_global in block (1, 0, 0) reads plain[0, 0] (argument 'dst_ptr'), which block (0, 0, 0) " \
           "reduce-added into (tma.shared_to_global(reduce='add') of dst" in str(caught.value)


def test_a_reduce_add_in_flight_at_exit_is_the_error_of_an_unwaited_store():
    with warpspec.use_backend("emulator"), pytest.raises(InFlightAtExitError) as caught:
        gk.ReduceTiles("no-wait")(1, 64, np.ones((1, 64, 64), np.float32), np.zeros((64, 64), np.float32))
    assert caught.value.location == f"{gk.__file__}:{gk.marker_line('reduce-add')}"
    assert "TMA reduce-add tile -> dst[0, 0, 0]" in str(caught.value)
    assert "is still in flight" in str(caught.value) and "tma.wait_group(0)" in str(caught.value)


def reused_staging(kernel):
    """``kernel`` (a ReusedStaging) on the emulator: dst."""
    src = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float16)
    dst = np.full((3, 64, 64), np.nan, np.float16)
    with warpspec.use_backend("emulator"):
        kernel(src, dst)
    return src, dst


def test_a_read_wait_lets_the_staging_tile_be_overwritten_while_the_write_is_in_flight():
    src, dst = reused_staging(ReusedStaging("read"))
    np.testing.assert_array_equal(dst, np.stack([src + np.float16(r) for r in range(3)]))


def test_overwriting_a_staging_tile_no_wait_saw_read_is_a_race_at_the_overwrite():
    with pytest.raises(RaceError) as caught:
        reused_staging(ReusedStaging("none"))
    assert caught.value.location.rsplit(" at ", 1)[-1] == f"{__file__}:{marker_line('overwrite')}"


def test_a_block_ending_after_only_a_read_wait_is_an_error_at_the_store():
    """The global writes a read wait leaves in flight must be waited for before the block ends."""
    with pytest.raises(InFlightAtExitError) as caught:
        reused_staging(ReusedStaging("read", final=False))
    assert caught.value.location.rsplit(" at ", 1)[-1] == f"{__file__}:{marker_line('store')}"
    assert "tma.wait_group(read=True)" in str(caught.value) and "end with tma.wait_group(0)" in str(caught.value)


def test_the_cuda_build_of_a_read_wait_is_wait_group_read():
    source = compile_kernel(kernel_for(ReusedStaging("read"), {})).generated.source
    assert source.count("cp.async.bulk.wait_group.read 0;") == 3
    assert source.count("cp.async.bulk.wait_group 0;") == 1


def test_the_cuda_build_of_a_reduce_add_is_one_bulk_tensor_reduction():
    """ptxas accepts the emitted ``cp.reduce.async.bulk.tensor``: a UTMAREDG per box in the SASS (64 float32 columns
    are two boxes of the 128-byte swizzle span, for the load as for the reduce-add)."""
    built = compile_kernel(kernel_for(gk.ReduceTiles(), {}))
    assert "cp.reduce.async.bulk.tensor.3d.global.shared::cta.add.tile.bulk_group" in built.generated.source
    counts = sass.count_instructions(sass.disassemble(built.module.cubin), ["UTMALDG", "UTMAREDG", "UTMASTG"])
    assert counts == {"UTMALDG": 2, "UTMAREDG": 2, "UTMASTG": 0}


def test_the_cuda_build_has_one_bulk_tensor_load_and_store():
    cubin = compile_kernel(kernel_for(TileCopy(), {})).module.cubin
    counts = sass.count_instructions(sass.disassemble(cubin), ["UTMALDG", "UTMASTG", "LDL", "STL"])
    assert counts == {"UTMALDG": 1, "UTMASTG": 1, "LDL": 0, "STL": 0}


@pytest.mark.gpu
def test_gpu_a_copy_through_shared_memory_is_exact_at_a_ragged_shape():
    torch = pytest.importorskip("torch")
    src = np.random.default_rng(0).standard_normal((100, 136)).astype(np.float16)
    dst = torch.full((100, 136), float("nan"), device="cuda", dtype=torch.float16)
    with warpspec.use_backend("cuda"):
        TileCopy()(100, 136, torch.from_numpy(src).cuda(), dst)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(dst.cpu().numpy(), src)


@pytest.mark.gpu
def test_gpu_read_waits_between_rounds_of_one_staging_tile_give_every_round():
    torch = pytest.importorskip("torch")
    src = np.random.default_rng(1).standard_normal((64, 64)).astype(np.float16)
    dst = torch.full((3, 64, 64), float("nan"), device="cuda", dtype=torch.float16)
    with warpspec.use_backend("cuda"):
        ReusedStaging("read")(torch.from_numpy(src).cuda(), dst)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(dst.cpu().numpy(), np.stack([src + np.float16(r) for r in range(3)]))


@pytest.mark.gpu
def test_gpu_reduce_adds_of_several_blocks_sum_in_float32():
    """Three blocks add into each tile; float32 adds in any order, so the sum matches numpy's to rounding."""
    torch = pytest.importorskip("torch")
    src = np.random.default_rng(0).standard_normal((3, 100, 64)).astype(np.float32)
    dst = np.random.default_rng(1).standard_normal((100, 64)).astype(np.float32)
    expected = dst + src.sum(axis=0)
    out = torch.from_numpy(dst).cuda()
    with warpspec.use_backend("cuda"):
        gk.ReduceTiles()(3, 100, torch.from_numpy(src).cuda(), out)
    torch.cuda.synchronize()
    np.testing.assert_allclose(out.cpu().numpy(), expected, rtol=1e-6, atol=1e-5)
