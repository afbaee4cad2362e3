"""Pruning before compiling: every rule rejects with a reason carrying its numbers, and nothing viable is rejected."""

import inspect
import os
from collections import Counter

import pytest

from tests.kernels import buggy_kernels
from matmul_v3 import MatmulWGMMAV3
from warpspec import Script, autotune, float16, int32
from warpspec.target import SM90A
from warpspec.tune.prune import RESERVED_REGISTERS, plan_kernel, prune

BIG = {"n_size": 8192, "k_size": 8192}


def v3_verdict(num_stages, block_m, block_n, block_k):
    script = MatmulWGMMAV3(num_stages=num_stages, block_m=block_m, block_n=block_n, block_k=block_k)
    return prune(script, BIG)


def v3_shared_bytes(num_stages, block_m, block_n, block_k):
    """Tiles rounded to the 1 KB alignment (fp16), times the stages, plus two 8-byte mbarriers per stage."""
    def tile(rows):
        return -(-rows * block_k * 2 // 1024) * 1024

    return num_stages * (tile(block_m) + tile(block_n)) + 2 * 8 * num_stages


def test_v3_schedules_pruned_for_shared_memory_and_registers():
    tuned = MatmulWGMMAV3()
    reasons = Counter()
    for schedule in tuned.schedules():
        verdict = prune(tuned.instantiate(schedule), BIG)
        reasons[verdict.reason.split(" ")[0] if verdict.pruned else "viable"] += 1
    # 128x64 and 128x128 tiles (64 and 128 accumulator registers) for every stage count and block_k survive.
    assert reasons == {"viable": 36, "WGMMA": 44, "needs": 10}


def test_accumulator_registers_reason_states_the_count():
    verdict = v3_verdict(2, 128, 256, 64)
    assert verdict.reason == ("WGMMA accumulators need 256 f32 registers per thread at once (acc 256); more than 207 "
                              "leave too few of its 255 for the rest of the kernel")
    assert verdict.plan.accumulator_registers == {"acc": 256}
    assert verdict.shared_bytes == v3_shared_bytes(2, 128, 256, 64)
    assert v3_verdict(2, 256, 256, 16).reason.startswith("WGMMA accumulators need 512 f32 registers")


@pytest.mark.parametrize("block_n, pruned", [(136, False), (144, True)])
def test_accumulator_limit_is_inclusive(block_n, pruned):
    # Three m64 blocks on one warpgroup: 3 * block_n / 2 registers; V3's 160 threads start with 255 each (no
    # setmaxnreg), so 207 may be accumulators: block_n 136 (204) is admitted, 144 (216) is not.
    verdict = v3_verdict(2, 192, block_n, 16)
    assert verdict.plan.registers_per_thread == 3 * block_n // 2
    assert verdict.plan.register_budget == 255 and RESERVED_REGISTERS == 48
    assert verdict.pruned is pruned


def test_the_reserve_is_what_ptxas_needs():
    """The largest V3 tile the rule admits builds without spilling or serializing its WGMMAs; a wider one (240
    accumulator registers) spills, and the rule refuses it before compiling."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import parse_ptxas_log
    from warpspec.runtime import kernel_for

    reports = {}
    for block_n in (136, 160):
        script = MatmulWGMMAV3(num_stages=2, block_m=192, block_n=block_n, block_k=16)
        assert prune(script, BIG).pruned is (block_n == 160)
        (reports[block_n],) = parse_ptxas_log(compile_kernel(kernel_for(script, BIG)).module.log).values()
    admitted, refused = reports[136], reports[160]
    assert (admitted.spill_store_bytes, admitted.stack_bytes, admitted.advisories) == (0, 0, ())
    assert refused.spill_store_bytes > 0


def test_accumulators_count_only_while_they_live():
    """The attention backward's dK/dV kernel at D 128 declares 224 accumulator registers a consumer thread but
    holds at most 192 at once (dQ's share only after Sᵀ and dPᵀ are consumed), within its 240 (setmaxnreg): it
    is admitted, as every shipped backward kernel is."""
    from warpspec.dtypes import bfloat16
    from warpspec.ops import attention_backward_kernel as bk
    from warpspec.ops.attention_backward import DEFAULT_BACKWARD_SCHEDULES

    verdict = prune(bk.BackwardKVDQ(bfloat16, head_dim=128, causal=False, **DEFAULT_BACKWARD_SCHEDULES[128]["kvdq"]),
                    {})
    assert not verdict.pruned
    assert sum(verdict.plan.accumulator_registers.values()) == 224
    assert verdict.plan.registers_per_thread == 192 and verdict.plan.register_budget == 240
    assert dict(verdict.plan.live) == {"acc_dk": 64, "acc_dv": 64, "acc_s": 32, "acc_dp": 32}
    for head_dim, schedule in DEFAULT_BACKWARD_SCHEDULES.items():
        scripts = [bk.BackwardKV(bfloat16, head_dim=head_dim, causal=True, **schedule["kv"]),
                   bk.BackwardKVDQ(bfloat16, head_dim=head_dim, causal=True, **schedule["kvdq"]),
                   bk.BackwardQ(bfloat16, head_dim=head_dim, causal=True, **schedule["q"])]
        if "fused" in schedule:
            scripts.append(bk.BackwardFused(bfloat16, head_dim=head_dim, causal=True, **schedule["fused"]))
        for script in scripts:
            assert prune(script, {}).reason is None, (head_dim, type(script).__name__)


def test_shared_memory_over_the_block_limit():
    verdict = v3_verdict(4, 256, 256, 64)
    needed = v3_shared_bytes(4, 256, 256, 64)
    assert needed == 262208
    source = os.path.realpath(inspect.getsourcefile(MatmulWGMMAV3))
    with open(source) as f:
        sb_line = next(n for n, text in enumerate(f, 1) if "sb = self.shared_tensor(" in text)
    # sa's 4 x 32 KB fit; sb's take the block past its limit, at sb's line.
    assert verdict.reason == (f"needs {needed} bytes of shared memory (tiles and barriers); a block has at most "
                              f"{SM90A.shared_limit}; the shared_tensor at {source}:{sb_line} crosses it")
    assert verdict.shared_bytes == needed
    assert verdict.kernel is None and verdict.plan is None  # the IR itself is refused (both back ends agree)
    assert SM90A.shared_limit == 227 * 1024 - 1024


def test_largest_fitting_v3_schedule_is_viable_with_its_planned_size():
    verdict = v3_verdict(7, 128, 128, 64)
    assert not verdict.pruned and verdict.reason is None
    assert verdict.shared_bytes == v3_shared_bytes(7, 128, 128, 64) == 229488 <= SM90A.shared_limit
    assert verdict.plan.accumulator_registers == {"acc": 128}


def test_plan_matches_the_code_generator():
    from warpspec.cuda.codegen import generate
    from warpspec.runtime import kernel_for

    script = MatmulWGMMAV3(num_stages=3, block_m=128, block_n=64, block_k=32)
    kernel = kernel_for(script, BIG)
    assert plan_kernel(kernel).shared_bytes + SM90A.shared_alignment == generate(kernel).shared_bytes


def test_front_end_errors_are_the_reason():
    tuned = buggy_kernels.V3TunedPastWgmmaWidth()
    verdict = prune(tuned.instantiate({"block_n": 512}), {"n_size": 64, "k_size": 128})
    assert verdict.kernel is None and verdict.plan is None
    assert f"{buggy_kernels.__file__}:" in verdict.reason
    assert "wgmma.mma needs M a multiple of 64 per warpgroup, N a multiple of 8 up to 256" in verdict.reason
    assert not prune(tuned.instantiate({"block_n": 64}), {"n_size": 64, "k_size": 128}).pruned


@autotune("rows", [256, 300, 512])
class StagingTile(Script):
    """A shared tile whose row count decides whether TMA can load it (boxes hold at most 256 rows)."""

    def __init__(self, rows):
        super().__init__()
        self.rows = rows

    def __call__(self, n_size: int32, out_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        staging = self.shared_tensor(dtype=float16, shape=[self.rows, 64])  # noqa: F841 - only its layout matters


def test_tiles_without_a_tma_layout_are_pruned_with_the_layout_reason():
    tuned = StagingTile()
    verdicts = {s["rows"]: prune(tuned.instantiate(s), {}) for s in tuned.schedules()}
    assert not verdicts[256].pruned
    assert not verdicts[512].pruned  # two boxes of 256 rows
    reason = verdicts[300].reason
    assert reason.startswith(f"{__file__}:")
    assert reason.endswith("shared tensor staging: tile [300, 64] of float16: rows > 256 must split into equal TMA "
                           "boxes of at most 256 rows, each a multiple of 8 (rows must be a multiple of 8)")


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_the_attention_forward_s_register_budget_admits_its_schedules(head_dim):
    """The forward peels its first K/V tile (``first_s``), whose S is consumed before the loop's: O and one S are
    live at once (at D 128 with 128-key tiles, 64 + 64 of 240), so no schedule of either forward kernel is refused
    for registers. Summed over the kernel instead (first_s + acc_s + acc_o: 192 at D 128's 128-key tiles, more than
    168 at every D 256 schedule) they were refused, and the tuner never timed them."""
    from warpspec.dtypes import bfloat16
    from warpspec.ops.attention_kernel import Attention
    from warpspec.ops.attention_persistent_kernel import AttentionPersistent

    for cls in (Attention, AttentionPersistent):
        tuned = cls(bfloat16, head_dim=head_dim, causal=False)
        verdicts = {tuple(s.items()): prune(tuned.instantiate(s), {}) for s in tuned.schedules()}
        reasons = [v.reason for v in verdicts.values() if v.pruned]
        assert not any(reason.startswith("WGMMA accumulators") for reason in reasons), reasons
        admitted = [v for v in verdicts.values() if not v.pruned]
        assert admitted and all(v.plan.register_budget == 240 for v in admitted)
        if head_dim == 128:
            wide = [v for key, v in verdicts.items() if dict(key)["block_n"] == 128]
            assert wide and not any(v.pruned for v in wide)
            assert {v.plan.registers_per_thread for v in wide} == {128}
