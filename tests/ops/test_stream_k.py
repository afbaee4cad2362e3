"""Stream-K in ops.matmul's kernel on the emulator: the tiles left over after the persistent walk's whole waves are
split over the blocks by K, their partial sums handed on through the workspace and its flags, and the result
matches numpy for every dtype, layout and tile; a workspace serves launch after launch; and the ways to get the
hand-off wrong are each caught at their line.

Small grids (``num_sms``) make the splits happen at small shapes: 20 tiles of 64 x 64 over 6, 8 or 9 blocks leave 2
or 4 tiles over (at most ``MAX_LEFT_PERCENT`` of the grid), each with 32 K-tiles (``MIN_SPLIT_K_TILES``), shared by
up to four blocks.
"""

import importlib
import inspect

import numpy as np
import pytest

from warpspec import DeadlockError, RaceError
from warpspec.dtypes import bfloat16, float8_e4m3, float16, float32
from warpspec.ops import kernels
from warpspec.ops.frame import Signatures
from warpspec.emulator.run import SEED_VARIABLE

from tests.ops.test_matmul import BF16, E4M3, assert_close, operands, reference
from tests.support.example_checks import emulator  # noqa: F401  (autouse: the emulator, its deterministic schedule)

ops_matmul = importlib.import_module("warpspec.ops.matmul")
KERNELS = kernels.__file__


def launch(kernel, a, b, out, bias, scale, num_sms, workspace=None):
    """Run ``kernel`` on the operands with a grid bound of ``num_sms``; returns the workspace it used."""
    problem = ops_matmul.validate(a, b, bias, kernel.activation, out, None)
    if workspace is None:
        pinned = {"stream_k": kernel.stream_k, "block_m": kernel.block_m, "block_n": kernel.block_n}
        elements, flag_count = ops_matmul.workspace_sizes(problem.m, problem.n, num_sms, pinned)
        workspace = (np.zeros(max(elements, 1), np.float32), np.zeros(max(flag_count, 1), np.int32))
    layout = ops_matmul.Layout.of(a, b, out, problem)
    kernel(*layout.arguments(a, b, out, bias, scale, workspace, num_sms))
    return workspace


def stream_k(cls, block_m, block_n, b_k_major=True, has_bias=False, activation=None, stages=3,
             dtypes=(float16, float16)):
    return cls(*dtypes, b_k_major=b_k_major, has_bias=has_bias, activation=activation, persistent=True,
               stream_k=True, num_stages=stages, block_m=block_m, block_n=block_n)


M, N, K = 300, 200, 64 * kernels.MIN_SPLIT_K_TILES  # 5 x 4 tiles of 64 x 64, the last row of tiles ragged


@pytest.mark.parametrize("num_sms", [6, 8, 9])
def test_the_left_over_tiles_split_over_any_grid_match_numpy(num_sms):
    m, n, k = M, N, K
    a, w = operands(m, n, k, np.float16)
    out = np.full((m, n), np.nan, np.float16)
    partials, flags = launch(stream_k(kernels.Gemm, 64, 64), a, w.T, out, None, None, num_sms)
    assert_close(out, reference(a, w.T), np.float16)
    assert partials.any()  # the split happened: partial tiles went through the workspace
    assert flags.tolist() == [0] * num_sms  # given back for the next launch


@pytest.mark.parametrize("dtype, out_dtype, b_layout, tile", [
    (np.float16, np.float16, "w.T", (128, 256)),
    (BF16, np.float32, "row-major", (128, 128)),
    (BF16, BF16, "w.T", (256, 128)),
    (E4M3, BF16, "w.T", (128, 128)),
], ids=["float16-128x256", "bfloat16-float32-row-major", "bfloat16-256x128", "float8"])
def test_every_dtype_and_layout_splits_with_its_epilogue(dtype, out_dtype, b_layout, tile):
    block_k = 128 if dtype == E4M3 else 64
    m, n, k = 2 * tile[0] + 40, 2 * tile[1] + 8, kernels.MIN_SPLIT_K_TILES * block_k + 16  # 3 x 3 tiles, ragged K
    a, w = operands(m, n, k, dtype)
    b = w.T if b_layout == "w.T" else np.ascontiguousarray(w.T)
    bias = np.random.default_rng(1).standard_normal(n).astype(out_dtype)
    scale = np.array([0.25], np.float32) if dtype == E4M3 else None
    out = np.full((m, n), np.nan, out_dtype)
    problem = ops_matmul.validate(a, b, bias, "gelu", out, None)
    kernel = stream_k(kernels.gemm_class(problem.in_dtype), *tile, b_k_major=b_layout == "w.T", has_bias=True,
                      activation="gelu", stages=2 if tile != (128, 128) else 3,
                      dtypes=(problem.in_dtype, problem.out_dtype))
    launch(kernel, a, b, out, bias, scale, num_sms=4)  # 9 tiles: 8 in two whole waves, 1 split over 4 blocks
    expected = reference(a, b, bias, "gelu", scale=0.25 if dtype == E4M3 else 1.0)
    if out_dtype != np.float32:
        assert_close(out, expected, out_dtype)
    else:  # float32 sums of 2064 products in two orders: a bound on their difference, by the products' magnitude
        magnitude = np.abs(a.astype(np.float32)) @ np.abs(b.astype(np.float32))
        assert np.all(np.abs(out - expected) <= 2.0 ** -16 * (magnitude + 1))


def test_one_workspace_serves_launch_after_launch_in_any_interleaving(monkeypatch):
    m, n, k = M, N, K
    a, w = operands(m, n, k, np.float16)
    kernel = stream_k(kernels.Gemm, 64, 64)
    workspace = None
    for seed in (None, 1, 2):
        if seed is not None:
            monkeypatch.setenv(SEED_VARIABLE, str(seed))
        out = np.full((m, n), np.nan, np.float16)
        workspace = launch(kernel, a, w.T, out, None, None, 8, workspace)
        assert_close(out, reference(a, w.T), np.float16)


@pytest.mark.parametrize("k, num_sms", [(64 * (kernels.MIN_SPLIT_K_TILES - 1), 8), (K, 7)],
                         ids=["short-k", "nearly-full-last-wave"])
def test_a_short_k_or_a_nearly_full_last_wave_is_not_split(k, num_sms):
    """Fewer than MIN_SPLIT_K_TILES K-tiles per tile, or 6 tiles left over on 7 blocks (more than MAX_LEFT_PERCENT):
    the walk stays whole tiles and the workspace is untouched."""
    a, w = operands(M, N, k, np.float16)
    out = np.full((M, N), np.nan, np.float16)
    partials, _ = launch(stream_k(kernels.Gemm, 64, 64), a, w.T, out, None, None, num_sms)
    assert_close(out, reference(a, w.T), np.float16)
    assert not partials.any()


def test_ops_matmul_runs_the_heuristic_stream_k_schedule_with_a_workspace_per_call(monkeypatch):
    """The size rule's schedule for large problems splits; ops.matmul passes it a zeroed workspace."""
    monkeypatch.setattr(ops_matmul, "heuristic_schedule", lambda problem: {
        "num_stages": 2, "block_m": 64, "block_n": 64, "persistent": True, "stream_k": True})
    monkeypatch.setattr(ops_matmul, "sm_count", lambda: 8)
    # The tile walk's family (an output this small is otherwise the split family's: at most one wave of tiles)
    monkeypatch.setattr(ops_matmul, "SPLIT_FAMILY_TILES", 0)
    monkeypatch.setattr(ops_matmul, "_chosen", {})
    monkeypatch.setattr(ops_matmul, "_signatures", Signatures())
    a, w = operands(M, N, K, np.float16)
    for _ in range(2):
        assert_close(ops_matmul.matmul(a, w.T), reference(a, w.T), np.float16)
    problem = ops_matmul.validate(a, w.T, None, None, None, None)
    assert ops_matmul.chosen_schedule(problem)["stream_k"] is True


# ------------------------------------------------------------------------------------------ planted mistakes


class FinishesWithoutWaiting(kernels.Gemm):
    """Reads an earlier block's partial tile without waiting for its flag."""

    def add_partial(self, acc, ws, flags, contributor):
        self.sync()
        return acc + self.load_global(ws, offsets=[contributor * self.block_m, 0], shape=[self.block_m, self.block_n])


class SignalsBeforeItsStores(kernels.Gemm):
    """Sets its flag before the consumers' stores of the partial tile are ordered before it."""

    def leave_partial(self, acc, ws, flags):
        with self.single_thread():
            self.flag.signal(flags, self.blockIdx.x, 1)
        self.store_global(ws, acc, offsets=[self.blockIdx.x * self.block_m, 0])


class KeepsFlagsSet(kernels.Gemm):
    """Never gives a flag back its 0, so the next launch finds it set."""

    def add_partial(self, acc, ws, flags, contributor):
        with self.single_thread():
            self.flag.wait(flags, contributor, 1)
        self.sync()
        return acc + self.load_global(ws, offsets=[contributor * self.block_m, 0], shape=[self.block_m, self.block_n])


class WaitsForALaterBlock(kernels.Gemm):
    """Waits for the next block's flag instead of the contributor's."""

    def add_partial(self, acc, ws, flags, contributor):
        with self.single_thread():
            self.flag.wait(flags, self.blockIdx.x + 1, 1)
            self.flag.signal(flags, self.blockIdx.x + 1, 0)
        self.sync()
        return acc + self.load_global(ws, offsets=[contributor * self.block_m, 0], shape=[self.block_m, self.block_n])


def line_of(cls, text: str) -> str:
    lines, first = inspect.getsourcelines(cls)
    return f"{__file__}:{first + next(i for i, line in enumerate(lines) if text in line)}"


#: stream-K's planted hand-off mistakes, the line each is caught at and a fragment of its message: what every kernel
#: that hands partial tiles on through stream-K's flags is checked against (here, and in test_grouped_kernel.py).
HAND_OFF_MISTAKES = [
    pytest.param(FinishesWithoutWaiting, "return acc + self.load_global", "(to hand data from one block to a later "
                 "one, use self.flag.signal and self.flag.wait)", id="reads-without-waiting"),
    pytest.param(KeepsFlagsSet, "self.flag.wait(flags, contributor, 1)", "already held 1 when the launch began",
                 id="keeps-flags-set")]


PLANTED = [
    pytest.param(FinishesWithoutWaiting, RaceError, "return acc + self.load_global",
                 ["load_global in block (", "reads ws[", "which block (", "wrote (store_global of ws",
                  "(to hand data from one block to a later one, use self.flag.signal and self.flag.wait)"],
                 id="reads-without-waiting"),
    pytest.param(SignalsBeforeItsStores, RaceError, None,
                 ["reads ws[", "unless a flag orders the two: a flag.wait of this block, before this access, that "
                  "passed on a flag.signal the other block made after its access"], id="signals-before-its-stores"),
    pytest.param(KeepsFlagsSet, RaceError, "self.flag.wait(flags, contributor, 1)",
                 ["may pass before block (", "already held 1 when the launch began"], id="keeps-flags-set"),
    pytest.param(WaitsForALaterBlock, DeadlockError, "self.flag.wait(flags, self.blockIdx.x + 1, 1)",
                 ["in flag.wait until flags[", "(it holds 0; only this block or a block launched before it can set "
                  "it"], id="waits-for-a-later-block"),
]


@pytest.mark.parametrize("cls, error, line, fragments", PLANTED)
def test_each_planted_hand_off_mistake_is_caught_at_its_line(cls, error, line, fragments):
    m, n, k = M, N, K
    a, w = operands(m, n, k, np.float16)
    kernel = stream_k(cls, 64, 64)
    with pytest.raises(error) as caught:
        workspace = launch(kernel, a, w.T, np.zeros((m, n), np.float16), None, None, 8)
        launch(kernel, a, w.T, np.zeros((m, n), np.float16), None, None, 8, workspace)  # flags left set show here
    where = caught.value.location
    if line is not None:
        assert where.endswith(line_of(cls, line)), where
    else:  # the finishing block's read of the partial, in the library kernel's add_partial
        assert f"-> _Gemm.add_partial at {KERNELS}:" in where, where
    for fragment in fragments:
        assert fragment in str(caught.value), str(caught.value)[:2000]


@pytest.mark.parametrize("dtypes, persistent, split, stages", [
    ((float16, float16), True, True, 3), ((float8_e4m3, bfloat16), True, True, 3),
    ((float16, float32), True, True, 2), ((float16, float32), False, False, 2)], ids=["float16-stream-k", "float8-stream-k", "float32-out-stream-k",
                                                 "float32-out-one-tile-per-block"])
def test_builds_that_store_an_accumulator_keep_their_wgmmas_pipelined(dtypes, persistent, split, stages):
    """The partial tile's store (and a float32 output's) reads the accumulator right after wgmma.wait_group(0):
    the wait pins the accumulator's registers, so ptxas keeps the WGMMAs asynchronous (no C7514 advisory, which
    serialized every WGMMA of these builds and cost 10% at 8192³), with no spills and both main loops' WGMMAs."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import count_instructions, disassemble, parse_ptxas_log
    from warpspec.runtime import kernel_for

    kernel = kernels.gemm_class(dtypes[0])(*dtypes, b_k_major=True, has_bias=True, activation="gelu",
                                           persistent=persistent, stream_k=split, num_stages=stages, block_m=128,
                                           block_n=256 if persistent else 128)
    built = compile_kernel(kernel_for(kernel, {}))
    (report,) = parse_ptxas_log(built.module.log).values()
    assert (report.spill_store_bytes, report.spill_load_bytes, report.stack_bytes, report.advisories) == (0, 0, 0, ())
    mnemonic = "QGMMA" if dtypes[0] == float8_e4m3 else "HGMMA"
    # One K-step is 4 WGMMAs per warpgroup (k16 over 64 columns, k32 over float8's 128), unrolled once per stage.
    per_loop = 4 * stages
    count = count_instructions(disassemble(built.module.cubin), [mnemonic])[mnemonic]
    assert count == per_loop * (2 if split else 1), count
