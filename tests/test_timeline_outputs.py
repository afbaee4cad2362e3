"""The three views of a timeline (Chrome trace, PNG chart, summary) for V3 and V4 from the model, and the
summary's arithmetic on events made by hand."""

import json

import pytest

from matmul_v3 import MatmulWGMMAV3
from matmul_v4 import MatmulWGMMAV4
from timeline_support import modeled_matmul
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
    0-1000, waits on empty[*] of 600 ns; WGMMA committed at 300 and 700, done at 500 and 900 (block 0) and
    500-700 (block 1)."""
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
    # Busy 300-500 and 700-900 in both blocks (one SM): 400 of 1000 ns.
    assert summary.tensor_busy == pytest.approx(0.4)
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


def test_an_unblocked_wait_counts_the_stage_full_from_its_copy():
    timeline = hand_made()
    # full[1]'s wait now passes at once (10 ns): the stage counts as full from its copy's issue (ends at 20 ns).
    timeline.events = [Event(e.block, e.role, e.kind, e.name, e.start_ns, 510 if e.name == "wait full[1]" else
                             e.end_ns, e.line, e.sm, e.barrier) for e in timeline.events]
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
