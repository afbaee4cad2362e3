"""ops.matmul's split family (``warpspec.ops.kernels.SplitGemm``) on the emulator: every schedule of its space, the
transposed product (``swap_ab``) under every layout, dtype and epilogue, split-K's hand-off through the workspace
(flags given back), the size rule's choices for a linear layer's shapes, the planted hand-off mistakes caught at
their line, and NVRTC builds without spills.

The family runs every problem with M up to ``SPLIT_FAMILY_M`` and every output of at most one wave of tiles. Shapes
are small and ragged: 9 K-tiles of 64 split between up to 8 blocks leave parts of one K-tile, and N = 136 leaves a
partial 128-row tile of the transposed product.
"""

import importlib

import numpy as np
import pytest

from warpspec import DeadlockError, RaceError, ops
from warpspec.errors import CompileError
from warpspec.dtypes import BY_NAME, bfloat16, float8_e4m3, float16, float32
from warpspec.ops import kernels

from tests.ops.test_matmul import BF16, E4M3, OUTPUTS, assert_close, operands, reference
from tests.support.markers import marker_line
from tests.support.example_checks import emulator  # noqa: F401  (autouse: the emulator, its deterministic schedule)

ops_matmul = importlib.import_module("warpspec.ops.matmul")

M, N, K = 5, 136, 9 * 64


def assert_sum_close(result, a, b, expected, out_dtype):
    """``assert_close``, plus float32 accumulation's worst-case error over K terms, K · 2⁻²⁴ · Σ|a||b|: the split
    parts and the transposed product add in other orders than numpy, which float32 outputs show."""
    bound = a.shape[1] * 2.0 ** -24 * (np.abs(a.astype(np.float32)) @ np.abs(b.astype(np.float32)))
    assert_close(result, expected + np.clip(np.asarray(result, np.float32) - expected, -bound, bound), out_dtype)


def run_pinned(schedule, a, b, bias=None, activation=None, scale=None, out_dtype=None):
    """ops.matmul's kernel pinned to the split family's ``schedule`` on these operands: (out, partials, flags)."""
    problem = ops_matmul.validate(a, b, bias, activation, None, out_dtype)
    assert problem.split_family
    out = np.full((problem.m, problem.n), np.nan, problem.out_dtype.numpy)
    script = ops_matmul.tuned_script(problem).instantiate(schedule)
    elements, flag_count = ops_matmul.workspace_sizes(problem.m, problem.n, kernels.NUM_SMS, schedule)
    workspace = (np.zeros(max(elements, 1), np.float32), np.zeros(max(flag_count, 1), np.int32))
    layout = ops_matmul.Layout.of(a, b, out, problem)
    script(*layout.arguments(a, b, out, bias, scale, workspace, kernels.NUM_SMS))
    return (out, *workspace)


SCHEDULES = kernels.SplitGemm._tune_space.schedules()


def test_the_space_is_the_tiles_splits_and_stages():
    assert len(SCHEDULES) == len(kernels.SPLIT_TILES) * len(kernels.SPLITS) * len(kernels.SPLIT_STAGES) == 192
    assert {(s["swap_ab"], s["block_m"], s["block_n"]) for s in SCHEDULES} == set(kernels.SPLIT_TILES)


@pytest.mark.parametrize("schedule", SCHEDULES, ids=lambda s: "{swap_ab}-{block_m}x{block_n}-split{split_k}-"
                         "{num_stages}".format(**s).replace("True", "swap").replace("False", "plain"))
def test_every_schedule_matches_numpy_and_gives_its_flags_back(schedule):
    a, w = operands(M, N, K, BF16)
    bias = np.random.default_rng(3).standard_normal(N).astype(BF16)
    if schedule["num_stages"] * (schedule["block_m"] + schedule["block_n"]) * 128 > 227 * 1024:
        # 8 stages of 128 x 128 tiles: the one that does not fit (the tuner prunes it, with this reason)
        with pytest.raises(CompileError, match="at most 231424 fit in a block on sm90a"):
            run_pinned(schedule, a, w.T, bias, "gelu")
        return
    out, partials, flags = run_pinned(schedule, a, w.T, bias, "gelu")
    assert_close(out, reference(a, w.T, bias, "gelu"), BF16)
    assert not flags.any()  # every launch leaves them 0 for the next
    assert partials.any() == (schedule["split_k"] > 1)  # partial sums went through the workspace only when split


SWAP = {"swap_ab": True, "block_m": 128, "block_n": 8, "split_k": 4, "num_stages": 6}
PLAIN = {"swap_ab": False, "block_m": 64, "block_n": 64, "split_k": 2, "num_stages": 6}


@pytest.mark.parametrize("schedule", [SWAP, PLAIN], ids=["swap", "plain"])
@pytest.mark.parametrize("a_layout", ["row", "column"])
@pytest.mark.parametrize("b_layout", ["w.T", "row-major"])
@pytest.mark.parametrize("dtype", [np.float16, BF16], ids=["float16", "bfloat16"])
def test_every_layout_and_output_dtype(schedule, a_layout, b_layout, dtype):
    a, w = operands(8, N, K, dtype)  # 8 rows: a column-major a's pitch is TMA's 16 bytes (``ops.matmul`` stages others)
    a = a if a_layout == "row" else np.ascontiguousarray(a.T).T
    b = w.T if b_layout == "w.T" else np.ascontiguousarray(w.T)
    for out_dtype in OUTPUTS[dtype]:
        bias = np.random.default_rng(4).standard_normal(N).astype(out_dtype)
        out, _, _ = run_pinned(schedule, a, b, bias, "silu", out_dtype=None if out_dtype is dtype else out_dtype)
        assert_sum_close(out, a, b, reference(a, b, bias, "silu"), out_dtype)


@pytest.mark.parametrize("schedule", [SWAP, PLAIN], ids=["swap", "plain"])
@pytest.mark.parametrize("out_dtype", [BF16, np.float16, np.float32])
def test_float8_with_its_scale(schedule, out_dtype):
    a, w = operands(M, N, 2 * K, E4M3)
    scale = np.array([0.25 * 0.5], np.float32)
    out, _, _ = run_pinned(schedule, a, w.T, scale=scale, out_dtype=BY_NAME[np.dtype(out_dtype).name])
    assert_sum_close(out, a, w.T * 0.125, reference(a, w.T, scale=0.125), out_dtype)


@pytest.mark.parametrize("m", [1, 8, 9, 33, 64, 65, 256])
def test_ops_matmul_runs_the_size_rule_at_every_small_m(m):
    """The family's own rule for what nothing tuned: matches numpy at each M its tiles switch at."""
    a, w = operands(m, N, K, np.float16, seed=m)
    result = ops.matmul(a, w.T)
    assert_close(result, reference(a, w.T), np.float16)
    chosen = ops_matmul.chosen_schedule(ops_matmul.validate(a, w.T, None, None, None, None))
    assert chosen["swap_ab"] == (m <= ops_matmul.SWAP_M)


@pytest.mark.parametrize("m, n, k, expected", [
    # A decode step against Llama-sized weights: 64 tiles of 64 rows of N, each K range split in two.
    (1, 4096, 4096, (True, 64, 8, 2, 8)),
    (8, 4096, 14336, (True, 64, 8, 2, 8)),
    (1, 14336, 4096, (True, 128, 8, 1, 8)),  # 112 tiles fill the SMs unsplit
    (16, 1024, 4096, (True, 64, 16, 4, 8)),  # no choice fills half the SMs: the most blocks
    (1, 4096, 1024, (True, 64, 8, 2, 8)),  # 16 K-tiles: two parts of 8 at most
    (1, 4096, 512, (True, 64, 8, 1, 8)),  # 8 K-tiles: no split
    (64, 6144, 4096, (False, 64, 64, 1, 8)),
    (256, 4096, 4096, (False, 64, 128, 1, 8)),
    (256, 1024, 4096, (False, 64, 64, 2, 8)),
    # Above M = 64, outputs of at most one wave of 128 x 128 tiles
    (2048, 1024, 4096, (False, 128, 128, 1, 6)),  # 8 stages of 128 x 128 tiles do not fit
    (1024, 1024, 4096, (False, 64, 128, 1, 8)),
    (512, 1024, 4096, (False, 64, 64, 1, 8)),
])
def test_the_size_rule(m, n, k, expected):
    problem = ops_matmul.Problem(m, n, k, bfloat16, bfloat16, True, False, None)
    schedule = ops_matmul.heuristic_schedule(problem)
    assert tuple(schedule[name] for name in ("swap_ab", "block_m", "block_n", "split_k", "num_stages")) == expected


def test_the_families_meet_at_split_family_m_and_one_wave_of_tiles():
    """Every M up to SPLIT_FAMILY_M, and above it an output of at most one wave of 128 x 128 tiles counted on the
    size buckets of M and N: a bucket belongs to one family."""
    def family(m, n):
        return ops_matmul.Problem(m, n, 4096, float16, float16, True, False, None).split_family

    assert family(ops_matmul.SPLIT_FAMILY_M, 131072) and not family(ops_matmul.SPLIT_FAMILY_M + 1, 131072)
    assert ops_matmul.SPLIT_FAMILY_M & (ops_matmul.SPLIT_FAMILY_M - 1) == 0  # a power of two: one family per bucket
    assert ops_matmul.SPLIT_FAMILY_TILES == 132
    # 8 x 8, 16 x 8 and 2 x 64 tiles of 128 (one wave); 8 x 32 and 2 x 128 (two)
    assert family(1024, 1024) and family(2048, 1024) and family(256, 6144)
    assert not family(1024, 4096) and not family(256, 14336)
    for m, n in ((513, 513), (1024, 1024), (700, 1000)):  # one bucket, one family
        assert family(m, n)
    for m, n in ((1025, 2049), (2048, 4096), (1500, 3000)):
        assert not family(m, n)


def test_the_workspace_is_one_tile_and_one_flag_per_block():
    # Transposed: 136 rows of N in 2 tiles of 128, 5 columns of M in one of 8; 4 blocks each.
    assert ops_matmul.workspace_sizes(M, N, 132, SWAP) == (2 * 4 * 128 * 8, 8)
    assert ops_matmul.workspace_sizes(M, N, 132, PLAIN) == (1 * 3 * 2 * 64 * 64, 6)
    assert ops_matmul.workspace_sizes(M, N, 132, dict(SWAP, split_k=1)) == (0, 0)
    every = ops_matmul.workspace_sizes(M, N, 132)  # what a tuning run passes: enough for any schedule
    for schedule in SCHEDULES:
        needed = ops_matmul.workspace_sizes(M, N, 132, schedule)
        assert every[0] >= needed[0] and every[1] >= needed[1]


def test_persistent_or_stream_k_schedules_cannot_swap_or_split():
    with pytest.raises(CompileError, match="swap_ab and split_k > 1 run one tile"):
        kernels.Gemm(float16, float16, b_k_major=True, has_bias=False, activation=None, persistent=True,
                     stream_k=False, num_stages=3, block_m=128, block_n=128, swap_ab=True)
    with pytest.raises(CompileError, match="split_k must be a positive int, got 0"):
        kernels.SplitGemm(float16, float16, b_k_major=True, has_bias=False, activation=None, swap_ab=False,
                          split_k=0, num_stages=3, block_m=128, block_n=128)


# ------------------------------------------------------------------------------------------ planted mistakes


class SplitSumsWithoutWaiting(kernels.SplitFamily, kernels.Gemm):
    """Adds the other parts' partials without waiting for their count."""

    def add_parts(self, acc, ws, flags, tile, first, end, rows=None):
        self.sync()
        for contributor in self.range(first, end):
            slot = contributor * self.block_m
            acc = acc + self.load_global(ws, offsets=[slot, 0],  # <<< sums-without-waiting
                                         shape=[self.block_m, self.block_n],
                                         row_end=None if rows is None else slot + rows)
        return acc


class SplitKeepsCountSet(kernels.SplitFamily, kernels.Gemm):
    """Never gives the tile's count back its 0, so the next launch finds it counted."""

    def add_parts(self, acc, ws, flags, tile, first, end, rows=None):
        with self.single_thread():
            self.flag.wait(flags, tile, end - first)  # <<< keeps-count-set
        self.sync()
        for contributor in self.range(first, end):
            slot = contributor * self.block_m
            acc = acc + self.load_global(ws, offsets=[slot, 0], shape=[self.block_m, self.block_n],
                                         row_end=None if rows is None else slot + rows)
        return acc


#: split-K's planted hand-off mistakes, the error each is, the line it is caught at and a fragment of its message.
#: A count left set makes the next launch's count pass the value waited for: the last part waits for ever.
SPLIT_HAND_OFF_MISTAKES = [
    pytest.param(SplitSumsWithoutWaiting, RaceError, "sums-without-waiting", "(to hand data from one block to a "
                 "later one, use self.flag.signal and self.flag.wait)", id="reads-without-waiting"),
    pytest.param(SplitKeepsCountSet, DeadlockError, "keeps-count-set", "flag.wait until flags[0] == 3 (it holds 6",
                 id="keeps-count-set")]


@pytest.mark.parametrize("planted, error, marker, fragment", SPLIT_HAND_OFF_MISTAKES)
def test_each_planted_hand_off_mistake_is_caught_at_its_line(planted, error, marker, fragment):
    a, w = operands(M, N, K, np.float16)
    problem = ops_matmul.validate(a, w.T, None, None, None, None)
    kernel = planted(float16, float16, b_k_major=True, has_bias=False, activation=None, **SWAP)
    elements, flag_count = ops_matmul.workspace_sizes(M, N, kernels.NUM_SMS, SWAP)
    workspace = (np.zeros(elements, np.float32), np.zeros(flag_count, np.int32))
    with pytest.raises(error) as caught:
        for _ in range(2):  # a count left set shows in the second launch
            out = np.zeros((M, N), np.float16)
            kernel(*ops_matmul.Layout.of(a, w.T, out, problem).arguments(a, w.T, out, None, None, workspace,
                                                                            kernels.NUM_SMS))
    assert caught.value.location.endswith(f"{__file__}:{marker_line(__file__, marker)}"), caught.value.location
    assert fragment in str(caught.value)


# ---------------------------------------------------------------------------------------------- builds


@pytest.mark.parametrize("dtypes, schedule", [
    ((bfloat16, bfloat16), {"swap_ab": True, "block_m": 128, "block_n": 8, "split_k": 4, "num_stages": 8}),
    ((float16, float32), {"swap_ab": True, "block_m": 128, "block_n": 64, "split_k": 2, "num_stages": 8}),
    ((float8_e4m3, bfloat16), {"swap_ab": True, "block_m": 128, "block_n": 16, "split_k": 8, "num_stages": 6}),
    ((bfloat16, bfloat16), {"swap_ab": False, "block_m": 128, "block_n": 128, "split_k": 2, "num_stages": 4}),
    ((bfloat16, bfloat16), {"swap_ab": False, "block_m": 64, "block_n": 32, "split_k": 1, "num_stages": 16}),
    ((float16, float16), {"swap_ab": False, "block_m": 128, "block_n": 96, "split_k": 1, "num_stages": 8})],
    ids=["bf16-swap-8", "f16-f32-swap-64", "e4m3-swap-16", "bf16-plain-128", "bf16-plain-32-16-stages",
         "f16-plain-96"])
def test_nvrtc_builds_the_split_family_without_spills(dtypes, schedule):
    """The builds compile for sm_90a with no spills, no stack and no ptxas advisory (serialized WGMMAs), with their
    WGMMAs: one per 16 (float8: 32) of K per 64-row block of a warpgroup, unrolled once per stage."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import count_instructions, disassemble, parse_ptxas_log
    from warpspec.runtime import kernel_for

    kernel = kernels.gemm_class(dtypes[0], split=True)(*dtypes, b_k_major=True, has_bias=True, activation="relu",
                                                       **schedule)
    assert kernel.kernel_name().startswith("SplitGemm")
    built = compile_kernel(kernel_for(kernel, {}))
    (report,) = parse_ptxas_log(built.module.log).values()
    assert (report.spill_store_bytes, report.spill_load_bytes, report.stack_bytes, report.advisories) == (0, 0, 0, ())
    mnemonic = "QGMMA" if dtypes[0] == float8_e4m3 else "HGMMA"
    count = count_instructions(disassemble(built.module.cubin), [mnemonic])[mnemonic]
    assert count == 4 * schedule["num_stages"], count
