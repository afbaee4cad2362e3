"""Global memory on the emulator: an element one block writes and another block reads or writes is a RaceError at the
second access (blocks run in no fixed order), aliased arguments included; so is a TMA store's destination read back
before the store's wait_group. Correct kernels, in-place updates and reads shared by blocks still run.

The kernels are tests/kernels/global_race_kernels.py and two examples; every error comes from the emulator's
deterministic schedule, so its line and names are exact.
"""

from pathlib import Path

import numpy as np
import pytest

from tests.kernels import global_race_kernels as gk
import warpspec
from matmul_v3 import MatmulWGMMAV3
from tma_copy import TmaCopy
from warpspec import ArgumentError, CompileError, RaceError
from warpspec.emulator.run import SEED_VARIABLE

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BLOCKS_RACE = "thread blocks run in no fixed order, so no block may read or write global memory that another block " \
              "writes"


@pytest.fixture(autouse=True)
def deterministic_emulator(monkeypatch):
    monkeypatch.delenv(SEED_VARIABLE, raising=False)
    with warpspec.use_backend("emulator"):
        yield


def at(marker: str) -> str:
    """``global_race_kernels.py:LINE`` of the line carrying ``marker``."""
    return f"{gk.__file__}:{gk.marker_line(marker)}"


def example_at(example: str, text: str) -> str:
    """``examples/EXAMPLE:LINE`` of the first line of ``example`` containing ``text``."""
    path = EXAMPLES / example
    lines = path.read_text().splitlines()
    return f"{path}:{next(number for number, line in enumerate(lines, 1) if text in line)}"


def rows(count: int) -> np.ndarray:
    """``count`` rows of 64 distinct float32 values."""
    return np.arange(count * 64, dtype=np.float32).reshape(count, 64)


def half_rows(count: int) -> np.ndarray:
    return np.arange(count * 64).astype(np.float16).reshape(count, 64)


# ------------------------------------------------------------------------------------------- correct kernels


def test_a_block_may_update_its_own_rows_in_place():
    """out passed as x: each block reads and writes only its own rows, which is no race."""
    x = rows(32)
    gk.MoveRows()(32, 16, 16, 0, x, x)
    np.testing.assert_array_equal(x, rows(32) + 1)


def test_blocks_may_read_the_same_elements():
    """Both blocks read rows 0-15 of x (read_step 0), nobody writes them."""
    out = np.zeros((32, 64), dtype=np.float32)
    gk.MoveRows()(32, 0, 16, 0, rows(32), out)
    np.testing.assert_array_equal(out, np.concatenate([rows(16), rows(16)]) + 1)


def test_a_tma_copy_in_place_is_no_race():
    """The example copy with dst passed as src: every block copies its own band onto itself."""
    data = half_rows(128)
    TmaCopy(64, 64)(128, 64, data, data)
    np.testing.assert_array_equal(data, half_rows(128))


@pytest.mark.parametrize("kernel", [gk.StoreThenRead(wait=True, tma_reader=False),
                                    gk.StoreThenRead(wait=True, tma_reader=True),
                                    gk.StoreThenReadElsewhere(ordered=True)], ids=["load_global", "tma", "other-warp"])
def test_a_waited_tma_store_may_be_read_back(kernel):
    """After tma.wait_group (and, from another warp, a barrier wait ordered after it) the destination is readable
    and holds the stored tile."""
    source, destination, out = half_rows(64), np.zeros((64, 64), np.float16), np.zeros((64, 64), np.float16)
    kernel(source, destination, out)
    np.testing.assert_array_equal(destination, source)
    np.testing.assert_array_equal(out, source)


# --------------------------------------------------------------------------------------------------- races


def read_after_write_through_an_alias():
    """out passed as x, block b writes rows 16b+8..16b+23: block 1 reads row 16, which block 0 wrote."""
    x = rows(32)
    gk.MoveRows()(32, 16, 16, 8, x, x)


def write_after_read_through_an_alias():
    """out passed as x, block b writes rows 16b-8..16b+7: block 1 writes row 8, which block 0 read."""
    x = rows(32)
    gk.MoveRows()(32, 16, 16, -8, x, x)


def write_after_write():
    """Distinct arrays; block b writes rows 8b..8b+15: block 1 writes row 8, which block 0 wrote."""
    gk.MoveRows()(32, 16, 8, 0, rows(32), np.zeros((32, 64), np.float32))


def overlapping_slices():
    """x is rows 0-31 and out rows 8-39 of one array: out's row 8 is x's row 16, which block 1 reads."""
    memory = rows(40)
    gk.MoveRows()(32, 16, 16, 0, memory[:32], memory[8:])


def different_element_sizes():
    """float16 x over the bytes of float32 out: x's rows 16-31 are out's rows 8-15, which block 0 wrote."""
    out = np.zeros((32, 64), dtype=np.float32)
    gk.WidenRows()(32, out.reshape(-1).view(np.float16)[:32 * 64].reshape(32, 64), out)


def matmul_c_passed_as_a():
    """The issue's case: V3 on a 1x2 grid with C passed as A; block (0, 1) loads A's first K-tile, which is block
    (0, 0)'s C tile."""
    c = np.zeros((128, 128), dtype=np.float16)
    MatmulWGMMAV3(num_stages=2, block_m=128, block_n=64, block_k=64)(128, 128, 128, c, np.ones_like(c), c)


def tma_copy_onto_the_next_band():
    """The example copy with dst 32 rows below src in one array: block 1 loads src rows 64-127, half of which
    block 0 stored."""
    memory = half_rows(160)
    TmaCopy(64, 64)(128, 64, memory[:128], memory[32:])


def tma_copy_onto_the_previous_band():
    """The example copy with dst 32 rows above src in one array: block 1's TMA store writes dst rows 64-127, half
    of which block 0 loaded as src."""
    memory = half_rows(160)
    TmaCopy(64, 64)(128, 64, memory[32:], memory[:128])


def rewrite_after_the_partner_read():
    """Rank 0 of a cluster reads x, then its partner does, then rank 0 writes x: the element's first read is the
    writer's own, and its partner's read (the element's second reader) is the race."""
    gk.RewriteAfterThePartnerRead()(rows(64))


CROSS_BLOCK = [
    pytest.param(read_after_write_through_an_alias, at("move-load"),
                 ["load_global in block (1, 0, 0) reads x[16, 0] (argument 'x_ptr'), which block (0, 0, 0) wrote "
                  f"(store_global of out, argument 'out_ptr', at {at('move-store')})"], id="read-after-write"),
    pytest.param(write_after_read_through_an_alias, at("move-store"),
                 ["store_global in block (1, 0, 0) writes out[8, 0] (argument 'out_ptr'), which block (0, 0, 0) read "
                  f"(load_global of x, argument 'x_ptr', at {at('move-load')})"], id="write-after-read"),
    pytest.param(write_after_write, at("move-store"),
                 ["store_global in block (1, 0, 0) writes out[8, 0] (argument 'out_ptr'), which block (0, 0, 0) also "
                  f"wrote (store_global of out, argument 'out_ptr', at {at('move-store')})"], id="write-after-write"),
    pytest.param(overlapping_slices, at("move-load"),
                 ["load_global in block (1, 0, 0) reads x[16, 0] (argument 'x_ptr'), which block (0, 0, 0) wrote "
                  "(store_global of out"], id="overlapping-slices"),
    pytest.param(different_element_sizes, at("widen-load"),
                 ["load_global in block (1, 0, 0) reads x[16, 0] (argument 'x_ptr'), which block (0, 0, 0) wrote "
                  "(store_global of out, argument 'out_ptr'"], id="different-element-sizes"),
    pytest.param(matmul_c_passed_as_a, example_at("matmul_v3.py", "self.tma.global_to_shared("),
                 ["tma.global_to_shared in block (0, 1, 0) reads ga[0, 0] (argument 'a_ptr'), which block (0, 0, 0) "
                  "wrote (store_global of gc, argument 'c_ptr', at "
                  f"{example_at('matmul_v3.py', 'self.store_global(')})"],
                 id="matmul-c-as-a"),
    pytest.param(tma_copy_onto_the_next_band, example_at("tma_copy.py", "self.tma.global_to_shared("),
                 ["tma.global_to_shared in block (1, 0, 0) reads src[64, 0] (argument 'src_ptr'), which block "
                  "(0, 0, 0) wrote (tma.shared_to_global of dst, argument 'dst_ptr', at "
                  f"{example_at('tma_copy.py', 'self.tma.shared_to_global(')})"], id="tma-copy-onto-next"),
    pytest.param(tma_copy_onto_the_previous_band, example_at("tma_copy.py", "self.tma.shared_to_global("),
                 ["tma.shared_to_global in block (1, 0, 0) writes dst[64, 0] (argument 'dst_ptr'), which block "
                  "(0, 0, 0) read (tma.global_to_shared of src, argument 'src_ptr', at "
                  f"{example_at('tma_copy.py', 'self.tma.global_to_shared(')})"], id="tma-copy-onto-previous"),
    pytest.param(rewrite_after_the_partner_read, at("rewrite"),
                 ["store_global in block (0, 0, 0) writes x[0, 0] (argument 'x_ptr'), which block (1, 0, 0) read "
                  f"(load_global of x, argument 'x_ptr', at {at('partner-read')})"], id="cluster-write-after-read"),
]


@pytest.mark.parametrize("run, location, fragments", CROSS_BLOCK)
def test_an_element_of_two_blocks_one_writing_is_a_race(run, location, fragments):
    with pytest.raises(RaceError) as caught:
        run()
    assert caught.value.location == location
    for fragment in fragments + [BLOCKS_RACE]:
        assert fragment in str(caught.value)


UNWAITED = "before tma.wait_group observed that store's bulk group: the copy may still be writing it"
READ_BACK = [
    pytest.param(gk.StoreThenRead(wait=False, tma_reader=False), "load-read",
                 [f"load_global reads dst[0, 0] (argument 'dst_ptr'), the destination of a TMA store "
                  f"(tma.shared_to_global of dst, argument 'dst_ptr', at {at('store-dst')}), {UNWAITED}"],
                 id="load_global"),
    pytest.param(gk.StoreThenRead(wait=False, tma_reader=True), "tma-read",
                 [f"tma.global_to_shared reads dst[0, 0] (argument 'dst_ptr'), the destination of a TMA store "
                  f"(tma.shared_to_global of dst, argument 'dst_ptr', at {at('store-dst')}), {UNWAITED}"], id="tma"),
    pytest.param(gk.StoreThenReadElsewhere(ordered=False), "elsewhere-read",
                 ["load_global reads dst[0, 0] (argument 'dst_ptr'), the destination of a TMA store",
                  "after threads 0-31 observed it with tma.wait_group, but no barrier wait or sync orders that wait "
                  "before this read"], id="other-warp-unordered"),
]


@pytest.mark.parametrize("kernel, marker, fragments", READ_BACK)
def test_reading_a_tma_store_destination_before_its_wait_is_a_race(kernel, marker, fragments):
    with pytest.raises(RaceError) as caught:
        kernel(half_rows(64), np.zeros((64, 64), np.float16), np.zeros((64, 64), np.float16))
    assert caught.value.location == at(marker)
    for fragment in fragments:
        assert fragment in str(caught.value)


# -------------------------------------------------------------------------------------------------- bounds


def test_a_view_sized_through_a_local_variable_is_checked_before_the_run():
    """A view's size computed from parameters (through a top-level local) is known on the host: a view that does not
    fit its array is an ArgumentError before any block runs, as on the GPU; one that fits works."""
    x, out = rows(32), np.zeros((16, 64), np.float32)
    gk.DoubledView()(16, 8, x, out)
    np.testing.assert_array_equal(out, x[8:24])
    with pytest.raises(ArgumentError) as caught:
        gk.DoubledView()(16, 0, rows(16), out)
    assert str(caught.value) == (f"argument 'x_ptr' holds 1024 elements but the kernel views it as x of shape "
                                 f"[32, 64] (line {gk.marker_line('doubled') - 2}), which needs 2048")


def test_a_view_sized_by_the_block_is_refused_at_compile_time():
    with pytest.raises(CompileError) as caught:
        gk.BlockDependentView()(rows(2))
    assert caught.value.location == at("block-view")
    assert "global_view shape may only use kernel parameters and compile-time values" in str(caught.value)
    assert "depends on blockIdx.x" in str(caught.value)


def test_one_torch_tensor_for_two_parameters_is_one_memory():
    """A CPU torch tensor is the emulator's memory as a numpy array is: C passed as A races as in the numpy case."""
    torch = pytest.importorskip("torch")
    c = torch.zeros((128, 128), dtype=torch.float16)
    with pytest.raises(RaceError) as caught:
        MatmulWGMMAV3(num_stages=2, block_m=128, block_n=64, block_k=64)(128, 128, 128, c, torch.ones_like(c), c)
    assert caught.value.location == example_at("matmul_v3.py", "self.tma.global_to_shared(")
    assert "reads ga[0, 0] (argument 'a_ptr'), which block (0, 0, 0) wrote" in str(caught.value)
