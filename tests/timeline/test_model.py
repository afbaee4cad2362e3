"""The CPU timing model: exact times on a kernel whose waits are known, the ordering of pipeline depths, the fit
to the H200 measurements of V3 (tests/data/v3_8192.json), the speed at 8192³, and the tile, stage and phase of
V3's and V6's modeled events."""

import importlib.util
import time
from collections import Counter
from pathlib import Path

import pytest

from matmul_v3 import MatmulWGMMAV3
from tests.support.timeline import DividesByItsArgument, LoadThenMultiply, matmul_kernel, modeled_matmul
from warpspec.errors import ArgumentError, DeadlockError, KernelError
from warpspec.frontend.kernel import bind_arguments
from warpspec.runtime import kernel_for
from warpspec.timeline.model import estimated_registers, load_parameters, model_launch, occupancy
from warpspec.timeline.summary import summarize

ROOT = Path(__file__).parents[2]
spec = importlib.util.spec_from_file_location("calibrate_model", ROOT / "benchmarks" / "calibrate_model.py")
calibrate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(calibrate)


def round_parameters():
    """H200 parameters with every cost zero but a 1000 ns memory latency and a 64×64×64 WGMMA of 1000 ns, on a
    one-SM device: the known kernel's times can be worked out by hand."""
    p = load_parameters()
    zero = ("launch_ns", "statement_ns", "arrive_ns", "wait_ns", "wake_ns", "sync_ns", "tma_issue_ns", "elect_ns",
            "wgmma_issue_ns", "wgmma_latency_ns", "register_ns_per_element")
    p.update(dict.fromkeys(zero, 0.0), sm_count=1, memory_latency_ns=1000.0, load_bandwidth_gbps=1e12,
             sm_port_gbps=1e12, wgmma_tflops_16bit={"64": 2 * 64**3 / 1e6})  # 2·64³ flops per 1000 ns
    return p


def known_timeline():
    script = LoadThenMultiply()
    runtime, compile_time = bind_arguments(LoadThenMultiply, (None,), {})
    return model_launch(kernel_for(script, compile_time), runtime, round_parameters())


def test_known_kernel_times_are_exact():
    timeline = known_timeline()
    assert timeline.source == "model"
    assert timeline.kernel_ns == pytest.approx(2000.0)  # 1000 ns load, then 1000 ns of WGMMA
    assert timeline.flops == 2 * 64**3
    assert timeline.roles == ["consumer (threads 0-127)", "producer (threads 128-159)"]
    spans = {(e.role.split()[0], e.kind): (round(e.start_ns, 6), round(e.end_ns, 6)) for e in timeline.events}
    assert spans == {
        ("consumer", "wait"): (0.0, 1000.0),
        ("consumer", "wgmma"): (1000.0, 1000.0),
        ("consumer", "wgmma_wait"): (1000.0, 2000.0),
        ("consumer", "epilogue"): (2000.0, 2000.0),
        ("producer", "tma"): (0.0, 0.0),
    }
    names = {e.kind: e.name for e in timeline.events}
    assert names["wait"] == "wait full[0]" and names["tma"] == "tma ga -> sa"
    wait = next(e for e in timeline.events if e.kind == "wait")
    assert wait.barrier == "full[0]" and wait.line.endswith(f"support/timeline.py:{wait_line()}")


def wait_line() -> int:
    source = (Path(__file__).parents[1] / "support" / "timeline.py").read_text().splitlines()
    return next(i for i, line in enumerate(source, 1) if "self.mbarrier.wait(full[0]" in line)


def test_known_kernel_summary_numbers():
    summary = summarize(known_timeline())
    assert summary.waits == {("consumer (threads 0-127)", "full"): pytest.approx(0.5)}
    assert summary.kinds == {"full": "full"}
    assert summary.tensor_busy == pytest.approx(0.5)  # issued at 1000 ns, done at 2000 ns, of 2000 ns
    assert summary.occupancy == pytest.approx(0.5)  # full at 1000 ns, held to the consumer's end at 2000 ns
    assert summary.stages == 1
    text = summary.text()
    assert "modeled kernel time: 2.0 us" in text
    assert "consumer (threads 0-127)    waits on full (full)  50.0%" in text
    assert ("diagnosis: consumers wait on full barriers 50% of the time: the producers can't keep up; try more "
            "stages or larger K tiles") in text


@pytest.mark.parametrize("schedule", [
    {"variant": "cooperative", "num_stages": 3, "block_m": 128, "block_n": 256, "epilogue_n": 256},
    {"variant": "pingpong", "num_stages": 4, "block_m": 128, "block_n": 128, "epilogue_n": 128},
], ids=["cooperative", "pingpong"])
def test_the_model_counts_each_warpgroups_own_rows_of_a_shared_wgmma(schedule):
    """V6 cooperative's WGMMAs span both consumer warpgroups, each multiplying half the rows: the modeled flops
    (hence TFLOP/s and tensor-core time) are the problem's 2·M·N·K, as for ping-pong's one-warpgroup WGMMAs."""
    from matmul_v6 import MatmulWGMMAV6

    kernel, runtime = matmul_kernel(MatmulWGMMAV6, 1024, **schedule)
    assert model_launch(kernel, runtime).flops == 2 * 1024 ** 3


def test_one_stage_models_slower_than_four_when_latency_is_not_hidden():
    one = modeled_matmul(MatmulWGMMAV3, 8192, num_stages=1, block_m=128, block_n=128, block_k=64)
    four = modeled_matmul(MatmulWGMMAV3, 8192, num_stages=4, block_m=128, block_n=128, block_k=64)
    assert one.kernel_ns > 1.1 * four.kernel_ns
    # The shallow pipeline's consumers wait on their full barriers; the deep one's hardly do.
    assert summarize(one).metrics["consumers_full_wait"] > 0.2 > summarize(four).metrics["consumers_full_wait"]


def test_model_ranks_and_predicts_the_measured_v3_schedules():
    rows = calibrate.measurements(ROOT / "tests" / "data" / "v3_8192.json")
    ranked = [r for r in rows if 2 <= r["num_stages"] <= 7]
    assert len(ranked) == 12
    rho, worst, modeled = calibrate.evaluate(ranked, load_parameters())
    assert rho >= 0.8
    for row, ms in zip(ranked, modeled):
        assert abs(ms - row["ms"]) / row["ms"] <= 0.25, (row, ms)


def test_the_breakdown_comparison_sets_each_kernels_model_summary_beside_the_gpus():
    """calibrate_model --breakdown: each kernel of the H200 breakdown file against the model's summary of the same
    schedule at the same size as recorded (the instrumented build the GPU's summary comes from), the plain
    build's time, the offsets and the verdict from the bounds (10 points of busy share, 1 stage, the same rule)."""
    path = ROOT / "tests" / "data" / "breakdown_h200.json"
    rows = calibrate.breakdown_rows(path)
    assert [row["label"] for row in rows] == ["V3, 2 stages", "V3, 6 stages", "V6, 4 stages 128x256"]
    compared = calibrate.compare_breakdowns(rows, load_parameters())
    for row, c in zip(rows, compared):
        script = calibrate.BREAKDOWN_KERNELS[row["kernel"]]().instantiate(row["schedule"])
        runtime, compile_time = bind_arguments(type(script), (), dict(m_size=8192, n_size=8192, k_size=8192,
                                                                      a_ptr=None, b_ptr=None, c_ptr=None))
        kernel = kernel_for(script, compile_time)
        model = summarize(model_launch(kernel, runtime, recorded=True))
        assert c["model"] == model.metrics and c["model_rule"] == model.rule() and c["gpu"] == row["metrics"]
        assert c["model_ms"] == pytest.approx(model_launch(kernel, runtime).kernel_ns / 1e6)
        busy = abs(model.tensor_busy - row["metrics"]["tensor_busy"])
        occupancy = abs(model.occupancy - row["metrics"]["occupancy"])
        assert (c["busy_off"], c["occupancy_off"]) == (pytest.approx(busy), pytest.approx(occupancy))
        assert c["ok"] == (busy <= 0.10 and occupancy <= 1.0 and model.rule() == row["rule"])
    # Modeled as recorded, every kernel is within the bounds: its busy share, its stage occupancy and its rule.
    assert [c["label"] for c in compared if not c["ok"]] == []


def test_modeling_as_recorded_charges_the_records_and_leaves_the_plain_launch_alone():
    """The instrumented build's records slow the recorded SM: V3 at 6 stages, one block per SM, runs its blocks
    slower as recorded (the GPU's recorded SM ran 26 of V3's 4096 blocks where, recording only its first, it ran
    30), and its producer, whose records and join fill its loop, no longer runs ahead of the consumers: about 3 of
    6 stages full (5.55 in the plain model's timeline) and the tensor cores busy under 70%. Without records the
    plain launch's timeline is what it was."""
    kernel, runtime = matmul_kernel(MatmulWGMMAV3, 8192, num_stages=6, block_m=128, block_n=128, block_k=64)
    plain, recorded = model_launch(kernel, runtime), model_launch(kernel, runtime, recorded=True)
    assert recorded.kernel_ns > 1.2 * plain.kernel_ns
    assert recorded.notes[-1].startswith("as recorded: the instrumented build")
    ahead, balanced = summarize(plain), summarize(recorded)
    assert ahead.occupancy > 5.0 and 2.04 <= balanced.occupancy <= 4.04
    assert balanced.tensor_busy < 0.70 < ahead.tensor_busy
    p = load_parameters()
    free = dict(p, record_ns=0.0, record_join_ns=0.0, recorded_wait_ns=p["wait_ns"])
    # What is left of the records is their clock reads, a scalar statement each: a few ns an iteration.
    assert model_launch(kernel, runtime, free, recorded=True).kernel_ns == pytest.approx(plain.kernel_ns, rel=0.01)


def test_spearman_of_known_rankings():
    assert calibrate.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert calibrate.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert calibrate.spearman([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)


def test_occupancy_follows_shared_memory_and_registers():
    p = load_parameters()
    kernel, _ = matmul_kernel(MatmulWGMMAV3, 256, num_stages=2, block_m=128, block_n=128, block_k=64)
    assert estimated_registers(kernel, p) == 160  # ptxas: 154, allocated in 8s
    assert occupancy(kernel, p) == (2, "registers")
    kernel, _ = matmul_kernel(MatmulWGMMAV3, 256, num_stages=4, block_m=128, block_n=128, block_k=64)
    assert occupancy(kernel, p) == (1, "shared memory")
    assert occupancy(kernel, p, registers=64)[0] == 1


def test_8192_cubed_models_in_seconds():
    start = time.perf_counter()
    timeline = modeled_matmul(MatmulWGMMAV3, 8192, num_stages=2, block_m=128, block_n=64, block_k=64)
    assert time.perf_counter() - start < 5.0
    assert timeline.flops == pytest.approx(2 * 8192**3)
    assert "4 block(s) per SM" in timeline.notes[0] and "8192 blocks in 16 wave(s)" in timeline.notes[0]


def test_a_copy_is_bound_by_hbm():
    from tma_copy import TmaCopy

    script = TmaCopy().instantiate({"tile_m": 64, "tile_n": 64})
    runtime, compile_time = bind_arguments(type(script), (16384, 16384, None, None), {})
    p = load_parameters()
    timeline = model_launch(kernel_for(script, compile_time), runtime, p)
    moved = 2 * 16384 * 16384 * 2  # read once, written once
    assert timeline.kernel_ns == pytest.approx(p["launch_ns"] + moved / p["hbm_bandwidth_gbps"])
    assert timeline.notes[1].startswith("bound by HBM: the global views hold 1073.7 MB, which take ")
    # ... and its diagnosis says so, whatever its roles wait on (before, it blamed the roles that empty the stages)
    share = moved / timeline.kernel_ns / p["hbm_bandwidth_gbps"]
    assert summarize(timeline).diagnosis().startswith(
        f"no WGMMA, and the launch moves its global views' 1074 MB at {moved / timeline.kernel_ns / 1e3:.2f} TB/s, "
        f"{share:.0%} of the HBM bandwidth the device sustains: bound by memory")


def test_a_copy_far_from_hbm_and_a_matmul_near_it_get_their_roles_diagnosis():
    """The memory rule needs both: no WGMMA, and the views' bytes moved at 60% of HBM or more."""
    from tma_copy import TmaCopy

    script = TmaCopy().instantiate({"tile_m": 64, "tile_n": 64})
    runtime, compile_time = bind_arguments(type(script), (512, 512, None, None), {})
    small = summarize(model_launch(kernel_for(script, compile_time), runtime, load_parameters()))
    assert small.metrics["wgmma"] == 0.0 and small.metrics["hbm_share"] < 0.60
    assert not small.diagnosis().startswith("no WGMMA")
    matmul = summarize(modeled_matmul(MatmulWGMMAV3, 2048, num_stages=2, block_m=128, block_n=128, block_k=64))
    assert matmul.metrics["wgmma"] == 1.0 and not matmul.diagnosis().startswith("no WGMMA")


def test_a_deadlock_is_reported_as_the_emulator_reports_it():
    from tests.kernels import buggy_kernels as bk

    script = bk.ConsumerNeverReleases()
    runtime, compile_time = bind_arguments(type(script), (128, 64, 256, None, None, None), {})
    with pytest.raises(DeadlockError) as caught:
        model_launch(kernel_for(script, compile_time), runtime)
    line = f"buggy_kernels.py:{bk.marker_line('never-release-wait')}"
    assert caught.value.location.endswith(line)
    assert (f"threads 0-127: blocked at {bk.__file__}:" in caught.value.tasks and
            f"ConsumerNeverReleases.consume at {bk.__file__}:{bk.marker_line('never-release-wait')} in mbarrier.wait "
            f"on consumer_barriers[0]" in caught.value.tasks)


def test_missing_argument_is_an_argument_error():
    kernel, runtime = matmul_kernel(MatmulWGMMAV3, 256, num_stages=2, block_m=128, block_n=128, block_k=64)
    del runtime["m_size"]
    with pytest.raises(ArgumentError, match="model_launch: missing argument 'm_size'"):
        model_launch(kernel, runtime)


def test_a_division_by_zero_is_the_kernels_error_at_its_line():
    """As on the emulator: a KernelError at the user's line with the thread partitions, not a ZeroDivisionError."""
    runtime, compile_time = bind_arguments(DividesByItsArgument, (0, None), {})
    with pytest.raises(KernelError) as caught:
        model_launch(kernel_for(DividesByItsArgument(), compile_time), runtime)
    assert type(caught.value) is KernelError and "integer division by zero in '//'" in str(caught.value)
    source = (Path(__file__).parents[1] / "support" / "timeline.py").read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if "# division-by-zero" in text)
    assert caught.value.location.endswith(f"support/timeline.py:{line}")
    assert "threads 0-127: running at " in caught.value.tasks


def ring(uses: int, stages: int, first_phase: int) -> list[tuple[int, int]]:
    """(stage, phase) of the first ``uses`` waits walking a ring of ``stages`` from stage 0: the phase flips each
    time the ring wraps."""
    return [(i % stages, first_phase ^ (i // stages & 1)) for i in range(uses)]


def test_v3s_modeled_events_are_of_tile_0_and_walk_the_stages_in_order_with_alternating_phases():
    timeline = modeled_matmul(MatmulWGMMAV3, 512, num_stages=3, block_m=128, block_n=128, block_k=64)
    assert {e.block for e in timeline.events} == {(0, 0, 0)} and {e.tile for e in timeline.events} == {0}
    producer = [e for e in timeline.events if e.role.startswith("producer")]
    consumer = [e for e in timeline.events if e.role.startswith("consumer")]
    # 8 K-tiles over 3 stages, then the producer drains the 3 stages: its waits on empty stages start at parity 1,
    # the consumers' on full ones at 0.
    assert [(e.stage, e.phase) for e in producer if e.kind == "wait"] == ring(11, 3, 1)
    assert [(e.stage, e.phase) for e in consumer if e.kind == "wait"] == ring(8, 3, 0)
    assert all(e.barrier.endswith(f"[{e.stage}]") for e in timeline.events if e.kind == "wait")
    assert [(e.name, e.stage) for e in producer if e.kind == "tma"][:4] == [
        ("tma ga -> sa[0]", 0), ("tma gb -> sb[0]", 0), ("tma ga -> sa[1]", 1), ("tma gb -> sb[1]", 1)]
    assert [e.stage for e in consumer if e.kind == "wgmma"] == [i % 3 for i in range(8)]
    assert {(e.kind, e.stage, e.phase) for e in consumer if e.kind in ("wgmma_wait", "epilogue", "sync")} == {
        ("wgmma_wait", None, None), ("epilogue", None, None), ("sync", None, None)}


def test_v6s_modeled_roles_walk_their_tiles_in_order_and_the_ring_runs_on_across_them():
    from matmul_v6 import MatmulWGMMAV6

    kernel, runtime = matmul_kernel(MatmulWGMMAV6, 1024, variant="cooperative", num_stages=3, block_m=128,
                                    block_n=256, epilogue_n=256)
    # 32 tiles over 4 blocks: the modeled block (0, 0, 0) walks 8 of them, 16 K-tiles each.
    timeline = model_launch(kernel, dict(runtime, num_sms=4))
    producer = sorted((e for e in timeline.events if e.role.startswith("producer")), key=lambda e: e.start_ns)
    consumer = sorted((e for e in timeline.events if e.role.startswith("consumer")), key=lambda e: e.start_ns)
    for events in (producer, consumer):
        tiles = [e.tile for e in events]
        assert tiles == sorted(tiles) and set(tiles) == set(range(8))
    loads = Counter((e.tile, e.kind) for e in producer)
    assert all(loads[(tile, "wait")] == 16 and loads[(tile, "tma")] == 32 for tile in range(7))
    assert loads[(7, "wait")] == 16 + 3  # the drain's three waits are the last tile's
    assert [(e.stage, e.phase) for e in producer if e.kind == "wait"] == ring(8 * 16 + 3, 3, 1)
    assert [(e.stage, e.phase) for e in consumer if e.kind == "wait"] == ring(8 * 16, 3, 0)
    assert all(e.name.endswith(f"[{e.stage}]") for e in producer if e.kind == "tma")
    waits = iter(e for e in consumer if e.kind in ("wait", "wgmma"))
    assert all(wgmma.stage == wait.stage for wait, wgmma in zip(waits, waits))  # each mma reads its waited stage
    stores = [e for e in consumer if e.kind == "tma"]
    assert [(e.name, e.tile, e.stage) for e in stores] == [("tma sc[0, 0] -> gc", tile, None) for tile in range(8)]


def test_a_kernel_that_adds_from_registers_into_global_memory_is_modeled():
    """Split-K whose parts add their float32 tiles with store_global(..., reduce="add"): the model prices the adds as
    stores (it failed on them with a TypeError when they arrived), and every part's WGMMAs are modeled."""
    from tests.kernels.feature_kernels import MatmulSplitKReduce

    script = MatmulSplitKReduce(splits=3)
    runtime, compile_time = bind_arguments(MatmulSplitKReduce, (256, 128, 384, None, None, None), {})
    timeline = model_launch(kernel_for(script, compile_time), runtime, load_parameters())
    assert summarize(timeline).metrics["wgmma"] == 1.0
    assert [e.name for e in timeline.events if e.kind == "tma" and "->" in e.name and e.name.startswith("tma ga")]


def test_a_kernel_that_reduce_adds_into_global_memory_is_modeled():
    """The accumulating attention backward reduce-adds each tile's dQ share with a TMA reduce-add: the model, which
    carries no data, prices it as a store (it used to fail on it with an AttributeError)."""
    from warpspec.dtypes import bfloat16
    from warpspec.ops.attention_backward_kernel import BackwardKVDQ

    script = BackwardKVDQ(bfloat16, head_dim=64, causal=False, block_m=64, num_stages=2)
    runtime, compile_time = bind_arguments(BackwardKVDQ, (256, 256, 2, 2, 1, 0.125, 0.18) + (None,) * 9, {})
    timeline = model_launch(kernel_for(script, compile_time), runtime, load_parameters())
    reduce_adds = [e.name for e in timeline.events if e.kind == "tma" and e.name.startswith("tma staging[")]
    # One block of SM 0 over 256 queries in tiles of 64: the consumer role records its first warpgroup, whose
    # share of each tile is one reduce-add from its staging tile.
    assert reduce_adds == ["tma staging[0] -> dq_view"] * (256 // 64)
    assert summarize(timeline).metrics["wgmma"] == 1.0
