"""The three views of a timeline (Chrome trace, PNG chart, summary) for V3 and V4 from the model, and the
summary's arithmetic on events made by hand."""

import json

import pytest

from matmul_v3 import MatmulWGMMAV3
from matmul_v4 import MatmulWGMMAV4
from tests.support.timeline import modeled_matmul
from warpspec.timeline import write
from warpspec.timeline.events import Event, Timeline
from warpspec.timeline.summary import RULES, summarize

SCHEDULE = dict(num_stages=2, block_m=128, block_n=128, block_k=64)


@pytest.mark.parametrize("script_cls, roles, full, empty", [
    (MatmulWGMMAV3, ["consumer (threads 0-127)", "producer (threads 128-159)"], "consumer_barriers",
     "producer_barriers"),
    (MatmulWGMMAV4, ["consumer (threads 0-255)", "producer (threads 256-287)"], "full_barriers", "empty_barriers"),
])
def test_trace_chart_and_summary_of_a_matmul(tmp_path, script_cls, roles, full, empty):
    timeline = modeled_matmul(script_cls, 512, **SCHEDULE)
    text = write(timeline, tmp_path / "out")
    trace = json.loads((tmp_path / "out" / "trace.json").read_text())
    events = trace["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    # 16 blocks over 132 SMs: one block per SM, so one block is sampled.
    assert processes == {0: "block (0, 0, 0)"}
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert tracks == {(0, 0): roles[0], (0, 1): roles[1]}
    complete = [e for e in events if e["ph"] == "X"]
    names = {(tracks[(e["pid"], e["tid"])], e["name"]) for e in complete}
    assert {(roles[0], f"wait {full}[0]"), (roles[0], f"wait {full}[1]"), (roles[0], "wgmma"),
            (roles[0], "epilogue"), (roles[1], f"wait {empty}[1]"), (roles[1], "tma ga -> sa[0]"),
            (roles[1], "tma gb -> sb[1]")} <= names
    first_wait = next(e for e in complete if e["name"] == f"wait {full}[0]")
    assert first_wait["args"]["barrier"] == f"{full}[0]" and ".py:" in first_wait["args"]["line"]
    assert all(e["dur"] >= 0 for e in complete)
    assert trace["otherData"]["kernel_ns"] == timeline.kernel_ns
    png = (tmp_path / "out" / "timeline.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    from matplotlib import image

    pixels = image.imread(tmp_path / "out" / "timeline.png")
    assert pixels.shape[0] > 100 and pixels.shape[1] > 1000
    assert (tmp_path / "out" / "summary.txt").read_text() == text
    assert f"modeled kernel time: {timeline.kernel_ns / 1e3:.1f} us (" in text
    assert f"waits on {full} (full)" in text and f"waits on {empty} (empty)" in text
    assert "diagnosis: " in text


def hand_made() -> Timeline:
    """Two blocks on one SM. Consumers: span 0-1000 ns, waits on full[0]/full[1] of 200 + 100 ns; producers: span
    0-1000, waits on empty[*] of 600 ns; WGMMA issued from 200 and 600, done at 500 and 900 in both blocks."""
    c, p = "consumer (threads 0-127)", "producer (threads 128-159)"
    events = []
    for block in ((0, 0, 0), (1, 0, 0)):
        events += [
            Event(block, c, "wait", "wait full[0]", 0, 200, "k.py:1", 0, "full[0]"),
            Event(block, c, "wgmma", "wgmma", 200, 300, "k.py:2", 0),
            Event(block, c, "wgmma_wait", "wgmma.wait_group(0)", 300, 500, "k.py:3", 0),
            Event(block, c, "wait", "wait full[1]", 500, 600, "k.py:1", 0, "full[1]"),
            Event(block, c, "wgmma", "wgmma", 600, 700, "k.py:2", 0),
            Event(block, c, "wgmma_wait", "wgmma.wait_group(0)", 700, 900, "k.py:3", 0),
            Event(block, c, "epilogue", "epilogue", 900, 1000, "k.py:3", 0),
            Event(block, p, "tma", "tma ga -> sa[0]", 0, 10, "k.py:4", 0, "full[0]"),
            Event(block, p, "tma", "tma ga -> sa[1]", 10, 20, "k.py:4", 0, "full[1]"),
            Event(block, p, "wait", "wait empty[0]", 20, 620, "k.py:5", 0, "empty[0]"),
            Event(block, p, "tma", "tma ga -> sa[0]", 620, 630, "k.py:4", 0, "full[0]"),
            Event(block, p, "wait", "wait empty[1]", 630, 1000, "k.py:5", 0, "empty[1]"),
        ]
    return Timeline("Hand", "gpu", {"num_stages": 2}, 10_000.0, events, [c, p], flops=5e9)


def test_summary_numbers_of_hand_made_events():
    summary = summarize(hand_made())
    c, p = hand_made().roles
    assert summary.waits == {(c, "full"): pytest.approx(0.3), (p, "empty"): pytest.approx(0.97)}
    assert summary.kinds == {"full": "full", "empty": "empty"}
    # Busy from each group's first issue to its wait's end, 200-500 and 600-900, in both blocks (one SM): 600 of
    # 1000 ns.
    assert summary.tensor_busy == pytest.approx(0.6)
    # Per block: full[0] blocked (200 ns), full at 200 until the next full wait at 500 (300 ns); full[1] blocked
    # (100 ns), full at 600 until the consumer's end at 1000 (400 ns): 700 of 1000 ns.
    assert summary.occupancy == pytest.approx(0.7) and summary.stages == 2
    assert summary.tflops == pytest.approx(500.0)
    assert summary.metrics["epilogue_share"] == pytest.approx(0.1)
    text = summary.text()
    assert "measured kernel time: 10.0 us (500 TFLOP/s)" in text
    assert "stage occupancy: 0.70 of 2 stages full on average" in text
    assert ("diagnosis: consumers wait on full barriers 30% of the time: the producers can't keep up; try more "
            "stages or larger K tiles") in text


@pytest.mark.parametrize("wait_ns", [10, 90], ids=["modeled", "instrumented"])
def test_an_unblocked_wait_counts_the_stage_full_from_its_copy(wait_ns):
    timeline = hand_made()
    # full[1]'s wait now passes at once, as a modeled wait (10 ns) or an instrumented one with its timestamps (on the
    # H200 up to about 100 ns): the stage counts as full from its copy's issue (ends at 20 ns).
    timeline.events = [Event(e.block, e.role, e.kind, e.name, e.start_ns, 500 + wait_ns if e.name == "wait full[1]"
                             else e.end_ns, e.line, e.sm, e.barrier) for e in timeline.events]
    summary = summarize(timeline)
    assert summary.occupancy == pytest.approx((300 + (1000 - 20)) / 1000)


def test_diagnosis_rules_in_order():
    texts = {}
    for full_wait, empty_wait, busy in ((0.1, 0.6, 0.97), (0.1, 0.6, 0.5), (0.1, 0.6, None), (0.1, 0.1, 0.5)):
        summary = summarize(hand_made())
        summary.metrics.update(consumers_full_wait=full_wait, producers_empty_wait=empty_wait, tensor_busy=busy,
                               epilogue_share=0.0)
        texts[(full_wait, empty_wait, busy)] = summary.diagnosis()
    assert texts[(0.1, 0.6, 0.97)].startswith("producers wait on empty barriers 60% of the time while the tensor "
                                              "cores are busy 97%: compute-bound")
    assert texts[(0.1, 0.6, 0.5)].startswith("producers wait on empty barriers 60% of the time but the tensor cores "
                                             "are busy only 50%: the consumers are the bottleneck")
    # Without WGMMA the tensor cores are not the question.
    assert texts[(0.1, 0.6, None)].startswith("producers wait on empty barriers 60% of the time: the roles that "
                                              "empty the stages set the pace")
    assert texts[(0.1, 0.1, 0.5)].startswith("no stall dominates")
    assert RULES[-1][0] == ()


def waves_of_blocks(count=6, at_once=2, block_us=80.0) -> Timeline:
    """``count`` blocks on SM 0, ``at_once`` of them at a time, each a consumer wait then a WGMMA group."""
    c = "consumer (threads 0-127)"
    events = []
    for i in range(count):
        start = (i // at_once) * block_us * 1e3
        events += [Event((i, 0, 0), c, "wait", "wait full[0]", start, start + 10e3, "k.py:1", 0, "full[0]"),
                   Event((i, 0, 0), c, "wgmma", "wgmma", start + 10e3, start + 20e3, "k.py:2", 0),
                   Event((i, 0, 0), c, "wgmma_wait", "wgmma.wait_group(0)", start + 20e3, start + block_us * 1e3,
                         "k.py:3", 0)]
    return Timeline("Waves", "gpu", {}, 1e6, events, [c], sm=0)


def test_the_chart_window_holds_the_first_two_waves_of_the_sm_by_default():
    from warpspec.timeline.chart import window

    timeline = waves_of_blocks()
    shown = window(timeline)
    assert (shown.start_ns, shown.end_ns, shown.blocks) == (0.0, 160e3, [(i, 0, 0) for i in range(4)])
    assert shown.note == ("window 0-160 us: the first 4 of the 6 blocks (2 wave(s) of 2 at once); trace.json has "
                          "every event")
    assert window(timeline, 1).blocks == [(0, 0, 0), (1, 0, 0)] and window(timeline, 1).end_ns == 80e3
    # Microseconds: every block overlapping 100-170 us; all: everything, no note; waves past the end: all too.
    explicit = window(timeline, (100.0, 170.0))
    assert explicit.blocks == [(2, 0, 0), (3, 0, 0), (4, 0, 0), (5, 0, 0)] and explicit.start_ns == 100e3
    assert explicit.note == "window 100-170 us: 4 of the 6 blocks; trace.json has every event"
    for spec in (None, 3):
        assert (window(timeline, spec).blocks, window(timeline, spec).note) == ([(i, 0, 0) for i in range(6)], None)


def test_the_chart_draws_only_the_windows_blocks_and_the_trace_keeps_every_event(tmp_path):
    from matplotlib import image

    timeline = waves_of_blocks()
    write(timeline, tmp_path / "two")
    write(timeline, tmp_path / "all", window=None)
    # One 45-pixel row per block and role over a 160-pixel frame: 4 rows, then 6.
    heights = [image.imread(tmp_path / name / "timeline.png").shape[0] for name in ("two", "all")]
    assert heights == [160 + 45 * 4, 160 + 45 * 6]
    trace = json.loads((tmp_path / "two" / "trace.json").read_text())["traceEvents"]
    assert sum(e["ph"] == "X" for e in trace) == len(timeline.events) == 18


def test_window_values_are_parsed_and_bad_ones_refused():
    import warpspec
    from warpspec.timeline.chart import parse_window

    assert (parse_window("all"), parse_window("3"), parse_window("10:20.5")) == (None, 3, (10.0, 20.5))
    for bad in ("0", "5:2", "x", "1:2:3", "-1:4"):
        with pytest.raises(warpspec.ArgumentError, match="--window must be 'all', a number of waves"):
            parse_window(bad)


def test_blocks_per_sm_come_from_the_timeline_else_from_the_blocks_seen_at_once():
    from warpspec.timeline.events import Occupancy

    assert summarize(hand_made()).metrics["blocks_per_sm"] == 2 and summarize(hand_made()).at_once == 2
    timeline = hand_made()
    timeline.occupancy = Occupancy(1, "shared memory", 197 * 1024, 168, 160, "the driver's occupancy query")
    summary = summarize(timeline)
    assert summary.metrics["blocks_per_sm"] == 1
    assert ("blocks per SM: 1 (limited by shared memory; 197 KB of shared memory, 168 registers x 160 threads each; "
            "the driver's occupancy query); 2 at once on one SM") in summary.text()
    assert summarize(waves_of_blocks(count=5, at_once=3)).at_once == 3


def test_one_block_per_sm_with_idle_tensor_cores_says_so_after_the_producer_rule():
    def diagnosis(**metrics):
        summary = summarize(hand_made())
        summary.metrics.update(dict(consumers_full_wait=0.1, producers_empty_wait=0.1, epilogue_share=0.0), **metrics)
        return summary.diagnosis()

    assert diagnosis(blocks_per_sm=1, tensor_busy=0.55).startswith(
        "one block per SM and the tensor cores busy only 55%: the pipeline is deep enough, but one block cannot keep "
        "the tensor cores busy")
    assert "fewer stages or smaller tiles so that 2-3 blocks share the SM, or a persistent kernel with two " \
           "consumer warpgroups" in diagnosis(blocks_per_sm=1, tensor_busy=0.55)
    for metrics in (dict(blocks_per_sm=2, tensor_busy=0.55), dict(blocks_per_sm=1, tensor_busy=0.75),
                    dict(blocks_per_sm=None, tensor_busy=0.55)):
        assert diagnosis(**metrics).startswith("no stall dominates"), metrics
    # Producers that can't keep up come first: the pipeline is not deep enough then.
    assert diagnosis(blocks_per_sm=1, tensor_busy=0.55, consumers_full_wait=0.3).startswith("consumers wait on full")
