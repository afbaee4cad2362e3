"""The grouped GEMM kernel (``warpspec.ops.grouped_kernel.GroupedGemm``) on the emulator: every schedule of its
space in both layouts of B against numpy, on ragged groups (empty ones first, in the middle and last, a group of one
row, a group spanning several row bands) with rows past the last group, K and N no tile divides; tiles split by K
when the groups' tiles are few (partials handed on through the workspace, counts given back), also past the first
batch of group ends; the clamping of offsets the host did not check; the size rule; planted mistakes (a store past
its group, partials summed before their count, a count kept) caught at their line; NVRTC builds without spills, and
the group ends loaded a batch at a time. ``ops.grouped_matmul`` itself is tested in test_grouped_matmul.py."""

import inspect

import numpy as np
import pytest

from warpspec import RaceError
from warpspec.dtypes import bfloat16, float16, float32
from warpspec.errors import CompileError
from warpspec.ops import grouped_kernel
from warpspec.ops.grouped_kernel import GroupedGemm, grouped_schedule, grouped_workspace

from tests.ops import test_split_gemm as split_tests
from tests.ops.test_grouped_matmul import expected_of
from tests.ops.test_split_gemm import SPLIT_HAND_OFF_MISTAKES, SplitKeepsCountSet, SplitSumsWithoutWaiting
from tests.support.markers import marker_line
from tests.support.example_checks import emulator  # noqa: F401  (autouse: the emulator, its deterministic schedule)

#: Group sizes: a 64-row tile of group 3 reaches into group 4, a 128-row one past it; 8 rows follow the last group.
SIZES = [0, 5, 0, 150, 1, 0]
TAIL = 8
K, N = 72, 136  # 64 + 8 of K, 128 + 8 of N
NUM_SMS = 3  # fewer blocks than tiles: each block walks several groups
SCHEDULES = GroupedGemm._tune_space.schedules()


def operands(dtype, b_k_major, sizes=SIZES, tail=TAIL, k=K):
    """(a, b as the op sees it [G, K, N], b as stored, ends): random values, B stored [G, N, K] when K-major."""
    rng = np.random.default_rng(0)
    ends = np.cumsum(sizes).astype(np.int32)
    a = rng.standard_normal((int(ends[-1]) + tail, k)).astype(dtype)
    stored = rng.standard_normal((len(sizes), N, k) if b_k_major else (len(sizes), k, N)).astype(dtype)
    return a, (stored.transpose(0, 2, 1) if b_k_major else stored), stored, ends


def run(script, a, stored, ends, out, num_sms=NUM_SMS):
    """One launch of a pinned grouped Script on these operands (C filled by the caller); returns its workspace
    (partials, flags), zeroed before the launch."""
    group_pitch, pitch, _ = (s // stored.itemsize for s in stored.strides)
    elements, flag_count = grouped_workspace(num_sms, script.schedule())
    workspace = (np.zeros(max(elements, 1), np.float32), np.zeros(max(flag_count, 1), np.int32))
    script(len(ends), a.shape[0], N, a.shape[1], a.shape[1], pitch, group_pitch, N, ends, a, stored, out,
           *workspace, num_sms=num_sms)
    return workspace


def fits(schedule, out_dtype) -> bool:
    """Whether the schedule's ring and epilogue buffer fit in shared memory (``grouped_kernel.deepest_ring``)."""
    return schedule["num_stages"] <= grouped_kernel.deepest_ring(schedule["block_m"], schedule["block_n"],
                                                                 out_dtype)["num_stages"]


def test_the_space_is_the_tiles_and_stages():
    assert len(SCHEDULES) == len(grouped_kernel.GROUPED_TILINGS) * len(grouped_kernel.GROUPED_STAGES) == 24


@pytest.mark.parametrize("b_k_major", [False, True], ids=["b-row-major", "b-expert-weights"])
@pytest.mark.parametrize("schedule", SCHEDULES,
                         ids=lambda s: "{block_m}x{block_n}-{num_stages}-split{max_split}".format(**s))
def test_every_schedule_matches_numpy(schedule, b_k_major):
    a, b, stored, ends = operands(np.float16, b_k_major)
    script = GroupedGemm(float16, float16, b_k_major).instantiate(schedule)
    out = np.full((a.shape[0], N), np.nan, np.float16)
    if not fits(schedule, float16):
        with pytest.raises(CompileError, match="shared memory"):
            run(script, a, stored, ends, out)
        return
    run(script, a, stored, ends, out)
    expected = expected_of(a, b, ends)
    np.testing.assert_allclose(out.astype(np.float32), expected, rtol=2e-3, atol=2e-2)
    assert not out[int(ends[-1]):].any()  # written as zeros


@pytest.mark.parametrize("in_dtype, out_dtype", [(bfloat16, float32), (bfloat16, bfloat16), (float16, float32)])
def test_output_dtypes_under_the_size_rule(in_dtype, out_dtype):
    a, b, stored, ends = operands(in_dtype.numpy, True)
    schedule = grouped_schedule(a.shape[0], len(SIZES), N, out_dtype)
    out = np.full((a.shape[0], N), np.nan, out_dtype.numpy)
    run(GroupedGemm(in_dtype, out_dtype, True).instantiate(schedule), a, stored, ends, out)
    expected = expected_of(a, b, ends)
    tolerance = 1e-4 if out_dtype == float32 else (2e-2 if out_dtype == bfloat16 else 2e-3)
    np.testing.assert_allclose(out.astype(np.float32), expected, rtol=tolerance, atol=tolerance * 10)


def test_ends_the_host_did_not_check_are_clamped():
    """A decreasing end makes its group empty, an end past total_M stops at it: nothing outside A and C is read
    or written (the emulator raises on either), and every row is written."""
    a, b, stored, _ = operands(np.float16, False)
    total = a.shape[0]
    ends = np.array([5, 3, 150, total + 40, 7, total + 1], np.int32)
    out = np.full((total, N), np.nan, np.float16)
    run(GroupedGemm(float16, float16, False).instantiate({"block_m": 64, "block_n": 128, "num_stages": 3,
                                                          "max_split": 1}), a, stored, ends, out)
    clamped = np.array([5, 5, 150, total, total, total], np.int32)
    np.testing.assert_allclose(out.astype(np.float32), expected_of(a, b, clamped), rtol=2e-3, atol=2e-2)


@pytest.mark.parametrize("total, groups, n, out_dtype, expected", [
    (16, 64, 1536, bfloat16, (64, 128, 5, 8)),  # decode-sized groups, split where their tiles are few
    (128, 8, 14336, bfloat16, (64, 256, 4, 1)),  # ... and a wide output, whose 64 x 256 tiles never split
    (8192, 8, 14336, bfloat16, (128, 256, 3, 1)),  # 1024 rows per expert: 3584 tiles of 128 x 256
    (1024, 8, 14336, bfloat16, (128, 128, 5, 1)),  # 448 such tiles, under four waves: 128 columns
    (8192, 8, 14336, float32, (128, 128, 5, 1)),  # a float32 128 x 256 buffer leaves 2 stages: 128 columns
    (8192, 64, 1536, bfloat16, (128, 128, 5, 1))])
def test_the_size_rule(total, groups, n, out_dtype, expected):
    schedule = grouped_schedule(total, groups, n, out_dtype)
    assert (schedule["block_m"], schedule["block_n"], schedule["num_stages"], schedule["max_split"]) == expected
    assert fits(schedule, out_dtype)


#: Few tiles: one group of 5 rows (two 64 × 128 tiles of N = 136) with 9 K-tiles, on 6 blocks: each tile's K range
#: split between 2 blocks (at least MIN_PART_K_TILES K-tiles each), parts of 4 and 5 K-tiles.
FEW = [0, 5, 0]
SPLIT = {"block_m": 64, "block_n": 128, "num_stages": 3, "max_split": 8}


@pytest.mark.parametrize("block_m", [64, 128], ids=["one-warpgroup", "two-warpgroups"])
@pytest.mark.parametrize("b_k_major", [False, True], ids=["b-row-major", "b-expert-weights"])
def test_few_tiles_are_split_by_k(b_k_major, block_m):
    a, b, stored, ends = operands(np.float16, b_k_major, sizes=FEW, k=9 * 64)
    out = np.full((a.shape[0], N), np.nan, np.float16)
    partials, flags = run(GroupedGemm(float16, float16, b_k_major).instantiate(dict(SPLIT, block_m=block_m)), a,
                          stored, ends, out, num_sms=6)
    np.testing.assert_allclose(out.astype(np.float32), expected_of(a, b, ends), rtol=2e-3, atol=5e-2)
    assert not out[5:].any()
    assert partials.any() and not flags.any()  # the first parts' sums went through the workspace; flags given back


@pytest.mark.parametrize("block_m, batch", [(64, grouped_kernel.WIDE_GROUP_BATCH), (128, grouped_kernel.GROUP_BATCH)],
                         ids=["64-rows", "128-rows"])
@pytest.mark.parametrize("first", [0, 2], ids=["from-the-first-group", "from-group-2"])
def test_few_tiles_past_the_first_batch_of_ends_are_split(first, block_m, batch):
    """The scans that count the tiles and find a part's tile load the ends a batch at a time (``GROUP_BATCH``,
    ``WIDE_GROUP_BATCH`` for 64-row tiles), the search from the first group with rows: tiles in the second batch's
    groups, one of whose ends the host did not check (below its predecessor's: clamped to an empty group), and a
    last batch that is not full (its items past the last group repeat that group's end); with tiles in group 0
    too, or none before group 2 (whose rows then start at 0)."""
    schedule = dict(SPLIT, block_m=block_m)
    assert GroupedGemm(float16, float16, True, **schedule).group_batch == batch
    sizes = [3 if first == 0 else 0, 0, 4] + [0] * (batch - 3) + [0, 5, 0, 3]
    a, b, stored, ends = operands(np.float16, True, sizes=sizes, k=9 * 64)
    ends[batch + 2] = ends[batch] - 1  # below the end of the second batch's first group: empty
    out = np.full((a.shape[0], N), np.nan, np.float16)
    partials, flags = run(GroupedGemm(float16, float16, True).instantiate(schedule), a, stored, ends, out,
                          num_sms=16)
    expected = expected_of(a, b, np.maximum.accumulate(ends))
    np.testing.assert_allclose(out.astype(np.float32), expected, rtol=2e-3, atol=5e-2)
    assert not out[int(ends[-1]):].any()
    assert partials.any() and not flags.any()  # 6 or 8 tiles on 16 blocks: each split in two


def test_tiles_that_fill_the_grid_are_not_split():
    a, b, stored, ends = operands(np.float16, False, sizes=[40, 40, 40], k=9 * 64)  # 6 tiles on 6 blocks
    out = np.full((a.shape[0], N), np.nan, np.float16)
    partials, _ = run(GroupedGemm(float16, float16, False).instantiate(SPLIT), a, stored, ends, out, num_sms=6)
    np.testing.assert_allclose(out.astype(np.float32), expected_of(a, b, ends), rtol=2e-3, atol=5e-2)
    assert not partials.any()


class GroupedSumsWithoutWaiting(GroupedGemm):
    """split-K's planted mistake in the grouped kernel's split: adds the partials without waiting for their count
    (the split-K test's method itself, so the error names its line there)."""

    add_parts = SplitSumsWithoutWaiting.add_parts


class GroupedKeepsCountSet(GroupedGemm):
    """Never gives a tile's count back its 0."""

    add_parts = SplitKeepsCountSet.add_parts


#: The count a kept count leaves: FEW's two tiles split in two on 6 blocks, each last part waiting for 1.
KEPT_COUNT = "flag.wait until flags[0] == 1 (it holds 2"


@pytest.mark.parametrize("cls, error, marker, fragment", SPLIT_HAND_OFF_MISTAKES)
def test_each_planted_hand_off_mistake_is_caught_at_its_line(cls, error, marker, fragment):
    planted = {SplitSumsWithoutWaiting: GroupedSumsWithoutWaiting, SplitKeepsCountSet: GroupedKeepsCountSet}[cls]
    fragment = KEPT_COUNT if cls is SplitKeepsCountSet else fragment
    a, _, stored, ends = operands(np.float16, False, sizes=FEW, k=9 * 64)
    kernel = planted(float16, float16, False, **SPLIT)
    elements, flag_count = grouped_workspace(6, SPLIT)
    workspace = (np.zeros(elements, np.float32), np.zeros(flag_count, np.int32))
    group_pitch, pitch, _ = (s // stored.itemsize for s in stored.strides)
    with pytest.raises(error) as caught:
        for _ in range(2):  # a count left set shows in the second launch
            kernel(len(ends), a.shape[0], N, a.shape[1], a.shape[1], pitch, group_pitch, N, ends, a, stored,
                   np.zeros((a.shape[0], N), np.float16), *workspace, num_sms=6)
    where = split_tests.__file__
    assert caught.value.location.endswith(f"{where}:{marker_line(where, marker)}"), caught.value.location
    assert fragment in str(caught.value)


#: Equal groups (a batched product): 3 groups of 70 rows, so a 64- or 128-row band crosses into the next group.
UNIFORM = [70, 70, 70]


class StoresPastItsGroup(GroupedGemm):
    """Planted: every tile leaves through the TMA store, whose box also writes the rows after its group's end."""

    def store_tile(self, result, sc, gc, row, offset_n, end, inside):
        self.store_through_shared(result, sc, gc, row, offset_n)


@pytest.mark.parametrize("uniform", [False, True], ids=["ragged", "uniform"])
def test_a_store_past_its_group_is_caught(uniform):
    """Ragged groups, and equal ones of 70 rows, whose second 64-row band crosses into the next group: on 4
    blocks, so that another block stores the next group's first band (on 3, the block that overwrites it would)."""
    sizes, tail, blocks = (UNIFORM, 0, 4) if uniform else (SIZES, TAIL, NUM_SMS)
    a, _, stored, ends = operands(np.float16, False, sizes=sizes, tail=tail)
    kernel = StoresPastItsGroup(float16, float16, False, num_stages=3, block_m=64, block_n=128, max_split=1,
                                uniform=uniform)
    with pytest.raises(RaceError) as caught:
        run(kernel, a, stored, ends, np.zeros((a.shape[0], N), np.float16), num_sms=blocks)
    line = inspect.getsourcelines(StoresPastItsGroup.store_tile)[1] + 1
    assert f"test_grouped_kernel.py:{line}" in str(caught.value)
    assert "which block (0, 0, 0) also wrote (tma.shared_to_global of gc" in str(caught.value)


@pytest.mark.parametrize("num_sms", [2, 5, 7])
def test_a_walk_over_many_groups_skips_those_without_a_block_s_tiles(num_sms):
    """Twenty groups of 0 to 70 rows (every fourth empty) on 2, 5 and 7 blocks: each block walks every group (their
    ends loaded ``WALK_BATCH`` at a time, the last batch not full) and works only on its own tiles, several in some
    groups and none in most; every row is its group's product."""
    sizes = [0 if g % 4 == 3 else (g * 37) % 71 for g in range(20)]
    a, b, stored, ends = operands(np.float16, True, sizes=sizes, tail=5)
    out = np.full((a.shape[0], N), np.nan, np.float16)
    run(GroupedGemm(float16, float16, True, num_stages=3, block_m=64, block_n=128, max_split=1), a, stored, ends,
        out, num_sms=num_sms)
    expected = expected_of(a, b, ends)
    np.testing.assert_allclose(out.astype(np.float32), expected, rtol=2e-3, atol=5e-2)


@pytest.mark.parametrize("b_k_major", [False, True], ids=["b-row-major", "b-expert-weights"])
@pytest.mark.parametrize("schedule", [s for s in SCHEDULES if fits(s, float16)],
                         ids=lambda s: "{block_m}x{block_n}-{num_stages}-split{max_split}".format(**s))
def test_equal_groups_walk_without_reading_their_ends(schedule, b_k_major):
    """``uniform``: every tile's group comes from its index, so ends the kernel would read wrongly (all 0) change
    nothing, and the result is each group's product, stored up to its end."""
    a, b, stored, ends = operands(np.float16, b_k_major, sizes=UNIFORM, tail=0)
    out = np.full((a.shape[0], N), np.nan, np.float16)
    script = GroupedGemm(float16, float16, b_k_major, uniform=True).instantiate(schedule)
    assert script.kernel_name() == "GroupedGemmUniformF16"
    run(script, a, stored, np.zeros_like(ends), out)
    np.testing.assert_allclose(out.astype(np.float32), expected_of(a, b, ends), rtol=2e-3, atol=2e-2)


def test_equal_groups_of_few_tiles_are_split_by_k():
    """One group of 20 rows (B = 1): two tiles on up to four blocks, each split between two."""
    a, b, stored, ends = operands(np.float16, False, sizes=[20], tail=0, k=9 * 64)
    out = np.full((a.shape[0], N), np.nan, np.float16)
    partials, flags = run(GroupedGemm(float16, float16, False, uniform=True).instantiate(SPLIT), a, stored,
                          np.zeros_like(ends), out, num_sms=6)
    np.testing.assert_allclose(out.astype(np.float32), expected_of(a, b, ends), rtol=2e-3, atol=5e-2)
    assert partials.any() and not flags.any()


@pytest.mark.parametrize("out_dtype, schedule", [
    (bfloat16, {"block_m": 128, "block_n": 256, "num_stages": 3, "max_split": 1}),
    (float32, {"block_m": 128, "block_n": 128, "num_stages": 5, "max_split": 1}),
    (bfloat16, {"block_m": 64, "block_n": 256, "num_stages": 4, "max_split": 1}),
    (bfloat16, {"block_m": 64, "block_n": 128, "num_stages": 5, "max_split": 8}),
    (bfloat16, {"block_m": 64, "block_n": 64, "num_stages": 5, "max_split": 8}),
    (float32, {"block_m": 128, "block_n": 128, "num_stages": 5, "max_split": 8})],
    ids=["bf16-128x256", "f32-128x128", "bf16-64x256", "bf16-64x128-split", "bf16-64x64-split",
         "f32-128x128-split"])
@pytest.mark.parametrize("uniform", [False, True], ids=["ragged", "uniform"])
def test_nvrtc_builds_without_spills(out_dtype, schedule, uniform):
    """No spills, no stack, no ptxas advisory, and the WGMMAs of one K-tile per stage: 4 (16 of K each) per
    warpgroup's 64 rows, unrolled once per stage, in the walk's main loop and, where tiles may split, the split
    part's; for ragged groups and for equal ones. A split tile's last part loads the other parts' sums
    ``GROUPED_PARTIAL_REGISTERS`` registers at a time: 2 partials of 64 × 128 and 128 × 128, 4 of 64 × 64."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import count_instructions, disassemble, parse_ptxas_log
    from warpspec.runtime import kernel_for

    kernel = GroupedGemm(bfloat16, out_dtype, True, uniform=uniform, **schedule)
    if schedule["max_split"] > 1:
        assert kernel.parts_at_once() == {64: 4, 128: 2}[schedule["block_n"]]
    stem = "GroupedGemmUniform" if uniform else "GroupedGemm"
    assert kernel.kernel_name() == stem + ("BF16" if out_dtype == bfloat16 else "BF16F32")
    built = compile_kernel(kernel_for(kernel, {}))
    (report,) = parse_ptxas_log(built.module.log).values()
    assert (report.spill_store_bytes, report.spill_load_bytes, report.stack_bytes, report.advisories) == (0, 0, 0, ())
    count = count_instructions(disassemble(built.module.cubin), ["HGMMA"])["HGMMA"]
    assert count == 4 * schedule["num_stages"] * (2 if schedule["max_split"] > 1 else 1), count


@pytest.mark.parametrize("block_m, max_split, batch", [
    (64, 8, grouped_kernel.WIDE_GROUP_BATCH), (128, 8, grouped_kernel.GROUP_BATCH),
    (64, 1, grouped_kernel.WALK_BATCH - 1)], ids=["scan-64-rows", "scan-128-rows", "walk"])
def test_the_groups_ends_load_a_batch_before_any_branch(block_m, max_split, batch):
    """The kernel's first global loads (the producer's count of the groups' tiles where tiles may split, else its
    walk) are a batch of ends issued together before any branch: the scans' whole batch (a bound check on an item
    past the last group had ptxas load the ends of a 64-group batch's last six behind it, each a round trip of its
    own), the walk's all but one (ptxas places one after the batch's first bound check, which a loop trip always
    meets). Each copy of an ``unroll=`` loop loaded behind its own bound check, and the walk one end per group: one
    load before the first branch, so every group was a serial round trip."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import disassemble
    from warpspec.runtime import kernel_for

    kernel = GroupedGemm(bfloat16, bfloat16, True, block_m=block_m, block_n=128, num_stages=5, max_split=max_split)
    lines = disassemble(compile_kernel(kernel_for(kernel, {})).module.cubin).splitlines()
    first = next(i for i, line in enumerate(lines) if "LDG.E " in line)
    run_end = next(i for i in range(first, len(lines)) if " BRA " in lines[i])
    assert sum("LDG.E " in line for line in lines[first:run_end]) >= batch
