"""ops.attention's split-KV path (warpspec.ops.attention_decode) on the emulator: chosen for few query rows, equal
to the dense forward kernel and to numpy (both causal modes, grouped-query heads, fp16 and bf16, D 64 and 128),
its log-sum-exp, random interleavings of the splits, a gradient through it, the planted combine bug with its
error and line, and the NVRTC build (no spills)."""

import ml_dtypes
import numpy as np
import pytest

from tests.kernels import attention_bug_kernels as bk
from tests.ops.test_attention import TOLERANCE, expected, line_of, operands
from tests.support.example_checks import emulator  # noqa: F401  (autouse: the emulator, its deterministic schedule)

from warpspec import RaceError
from warpspec.dtypes import bfloat16, float16
from warpspec.emulator.run import SEED_VARIABLE
from warpspec.ops import attention, attention_backward
from warpspec.ops import attention_decode as decode
from warpspec.ops.attention import launch, validate
from warpspec.ops.attention_decode_kernel import Decode
from warpspec.ops.attention_kernel import WARPGROUP


def dense(q, k, v, causal):
    """The forward kernel itself (no split), and its base-e log-sum-exp."""
    out, lse2 = np.empty_like(q), np.empty(q.shape[:3], np.float32)
    launch(q, k, v, out, lse2, validate(q, k, v, causal, None))
    return out, lse2 * np.float32(np.log(2.0))


def test_decode_packs_the_heads_of_a_group_and_splits_to_fill_the_gpu():
    def plan(batch, heads, seq_q, seq_k, head_dim=128, kv_heads=8):
        q, k, v = (np.empty((batch, h, s, head_dim), np.float16)
                   for h, s in ((heads, seq_q), (kv_heads, seq_k), (kv_heads, seq_k)))
        problem = validate(q, k, v, False, None)
        return decode.uses_decode(problem), decode.pack_size(problem), decode.split_count(problem)

    assert plan(1, 32, 1, 8192) == (True, 4, 16)  # 8 packs; 264 // 8 splits, at most 16
    assert plan(1, 32, 16, 8192) == (True, 4, 16)  # 4 heads of 16 rows fill the block's 64
    assert plan(1, 64, 16, 8192) == (True, 4, 16)  # a group of 8: the largest divisor that fits, 4
    assert plan(1, 24, 3, 8192, kv_heads=2) == (True, 12, 16)  # 12 heads of 3 rows: 36 of 64
    assert plan(1, 32, 17, 8192)[0] is False  # more rows: the forward kernel
    assert plan(32, 32, 1, 8192) == (True, 4, 1)  # 256 packs: a second split would not fit the 264 at once
    assert plan(16, 32, 1, 8192) == (True, 4, 2)  # 128 packs: two splits fit, three would not
    assert plan(8, 32, 1, 8192) == (True, 4, 4)  # 64 packs: four
    assert plan(64, 32, 1, 8192) == (True, 4, 1)  # more packs than the blocks that run at once
    assert plan(1, 8, 1, 100) == (True, 1, 2)  # no grouping; never more splits than 64-key tiles
    assert plan(1, 8, 1, 4096, head_dim=256) == (True, 1, 16)  # D 256 too, in 32-key tiles


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq_q, seq_k, head_dim", [(1, 700, 128), (4, 333, 64), (16, 257, 64), (3, 65, 128),
                                                    (2, 150, 256)])
def test_split_kv_matches_dense_and_numpy(dtype, causal, seq_q, seq_k, head_dim):
    """Two batches of 4 query heads over 2 K/V heads; lengths no multiple of a tile (the last split ragged)."""
    q, k, v = operands(2, 4, 2, seq_q, seq_k, head_dim, dtype)
    assert decode.uses_decode(validate(q, k, v, causal, None))
    out, lse = attention(q, k, v, causal=causal, return_lse=True)
    dense_out, dense_lse = dense(q, k, v, causal)
    assert np.abs(out.astype(np.float32) - dense_out.astype(np.float32)).max() < TOLERANCE[dtype]
    assert np.abs(out.astype(np.float32) - expected(q, k, v, causal)).max() < TOLERANCE[dtype]
    assert np.abs(lse - dense_lse).max() < 1e-4


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_a_full_pack_of_four_heads_of_sixteen_rows(causal):
    """A group of 4 query heads over one K/V head, 16 rows each: the block's 64 rows are all real, and the causal
    mask of each head starts where its rows do."""
    q, k, v = operands(1, 8, 2, 16, 150, 64, np.float16, seed=3)
    assert decode.pack_size(validate(q, k, v, causal, None)) * 16 == 64
    out, lse = attention(q, k, v, causal=causal, return_lse=True)
    assert np.abs(out.astype(np.float32) - expected(q, k, v, causal)).max() < TOLERANCE[np.float16]
    assert np.abs(lse - dense(q, k, v, causal)[1]).max() < 1e-4


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_interleavings(seed, monkeypatch):
    """The splits under random schedules: the last one waits for each earlier one's flag, whatever the order."""
    monkeypatch.setenv(SEED_VARIABLE, str(seed))
    q, k, v = operands(1, 2, 1, 2, 400, 64, np.float16, seed=4)
    out = attention(q, k, v, causal=True)
    assert np.abs(out.astype(np.float32) - expected(q, k, v, True)).max() < 2e-3


def test_gradients_through_a_split_forward():
    """The split's lse is the forward's: attention_backward on it gives the dense gradients."""
    q, k, v = operands(1, 2, 1, 4, 200, 64, np.float16, seed=5)
    dout = operands(1, 2, 1, 4, 4, 64, np.float16, seed=6)[0]
    out, lse = attention(q, k, v, causal=True, return_lse=True)
    dense_out, dense_lse = dense(q, k, v, True)
    split_grads = attention_backward(q, k, v, out, dout, lse, causal=True)
    dense_grads = attention_backward(q, k, v, dense_out, dout, dense_lse, causal=True)
    for got, want in zip(split_grads, dense_grads):
        assert np.abs(got.astype(np.float32) - want.astype(np.float32)).max() < 2e-3


def test_planted_bug_combine_reads_a_partial_before_its_flag():
    """The last split loads the first split's partial before waiting for the pack's count: a RaceError at that
    load."""
    q, k, v = operands(1, 1, 1, 2, 200, 64, np.float16)
    kernel = bk.ReadsPartialBeforeItsFlag(float16, head_dim=64, causal=False, block_n=64, num_stages=2)
    splits = 4
    with pytest.raises(RaceError) as raised:
        kernel(2, 200, 1, 1, 1, 0.18, 64, splits, q, k, v, np.zeros_like(q), np.zeros((1, 1, 2), np.float32),
               np.zeros(2 * splits * 64, np.float32), np.zeros(2 * splits, np.float32), np.zeros(1, np.int32))
    assert "load_global in block (3, 0, 0) reads ws_lse[0, 0] (argument 'ws_lse_ptr'), which block (0, 0, 0) " \
           "wrote" in str(raised.value)
    assert raised.value.location.rsplit(" at ", 1)[-1] == f"{bk.__file__}:{bk.marker_line('early-read')}"
    assert line_of(bk.__file__, "# <<< early-read") == bk.marker_line("early-read")


@pytest.mark.parametrize("pack", [1, 4])
@pytest.mark.parametrize("head_dim", sorted(decode.DEFAULT_DECODE_SCHEDULES))
def test_nvrtc_builds_the_decode_kernel_without_spills(head_dim, pack):
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import count_instructions, disassemble, parse_ptxas_log
    from warpspec.runtime import kernel_for

    kernel = Decode(bfloat16, head_dim=head_dim, causal=True, pack=pack, **decode.DEFAULT_DECODE_SCHEDULES[head_dim])
    built = compile_kernel(kernel_for(kernel, {}))
    (report,) = parse_ptxas_log(built.module.log).values()
    assert (report.spill_store_bytes, report.spill_load_bytes, report.stack_bytes, report.advisories) == (0, 0, 0, ())
    # Two blocks share an SM (the shipped schedule's premise): 65536 registers over 2 x 160 threads, allocated in
    # steps of 8 a thread.
    threads = WARPGROUP + 32  # the consumer warpgroup and the producer warp
    assert report.registers <= 65536 // (2 * threads) // 8 * 8 == 200
    counts = count_instructions(disassemble(built.module.cubin), ["HGMMA", "LDL", "STL"])
    assert counts["HGMMA"] > 0 and counts["LDL"] == counts["STL"] == 0


def test_the_fold_issues_a_steps_loads_before_it_folds_any():
    """In the SASS after the last split gives the pack's flag back (its one strong store), every one of a fold
    step's ``FOLD_WIDTH`` 16-byte partial loads comes before the step's first exponential. Folding each partial as
    it arrived (its value used between two loads, behind the vector load's alignment branch) made each partial a
    round trip to memory of its own."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import disassemble
    from warpspec.ops.attention_decode_kernel import FOLD_WIDTH
    from warpspec.runtime import kernel_for

    kernel = Decode(bfloat16, head_dim=128, causal=True, pack=4, **decode.DEFAULT_DECODE_SCHEDULES[128])
    sass = disassemble(compile_kernel(kernel_for(kernel, {})).module.cubin).splitlines()
    flag_given_back = max(i for i, line in enumerate(sass) if "STG.E.STRONG.GPU" in line)
    fold = sass[flag_given_back:]
    first_exponential = next(i for i, line in enumerate(fold) if "MUFU.EX2" in line)
    assert sum("LDG.E.128" in line for line in fold[:first_exponential]) == FOLD_WIDTH > 1
