"""``warpspec.timeline.trace.read_trace``: a trace.json warpspec wrote gives its Timeline back whole (events,
roles, occupancy, selection, shortfalls, a counterexample's failure), and ``warpspec timeline trace.json`` writes
the three files again from it."""

import json

import pytest

from tests.cli.test_timeline import SIZES, V3
from tests.cli.test_timeline import timeline as timeline_command
from tests.timeline.test_outputs import hand_made
from warpspec.errors import ArgumentError
from warpspec.timeline.events import Failure, Occupancy, Shortfall
from warpspec.timeline.summary import summarize
from warpspec.timeline.trace import read_trace, write_trace


def test_a_timeline_comes_back_whole(tmp_path):
    timeline = hand_made()
    timeline.occupancy = Occupancy(2, "registers", 66560, 154, 160, "the driver's occupancy query")
    timeline.sm, timeline.sm_blocks, timeline.view_bytes, timeline.hbm_gbps = 0, 26, 4.0e8, 4200.0
    timeline.notes.append("every block that ran on SM 0 recorded (2), each role's first warp")
    timeline.shortfalls.append(Shortfall((1, 0, 0), "producer (threads 128-159)", 5, 9))
    read = read_trace(write_trace(timeline, tmp_path / "trace.json"))
    assert [(e.block, e.role, e.kind, e.name, e.line, e.sm, e.barrier, e.tile, e.stage, e.phase, e.pending)
            for e in read.events] == [(e.block, e.role, e.kind, e.name, e.line, e.sm, e.barrier, e.tile, e.stage,
                                       e.phase, e.pending) for e in sorted(timeline.events, key=lambda e: e.start_ns)]
    assert [t for e in read.events for t in (e.start_ns, e.end_ns)] == pytest.approx(
        [t for e in sorted(timeline.events, key=lambda e: e.start_ns) for t in (e.start_ns, e.end_ns)])
    for name in ("kernel", "source", "kernel_ns", "roles", "flops", "notes", "sm", "occupancy", "shortfalls",
                 "view_bytes", "hbm_gbps", "sm_blocks", "unit", "failure", "selection"):
        assert getattr(read, name) == getattr(timeline, name), name
    assert read.schedule == {"num_stages": "2"}  # the trace keeps a schedule's values as text
    # Not complete (a shortfall): no waits or diagnosis from the read timeline either.
    assert summarize(read).text() == summarize(timeline).text()


def test_a_selection_and_a_counterexample_come_back(tmp_path):
    selected = hand_made().select(tiles=0, stages=[0])
    read = read_trace(write_trace(selected, tmp_path / "trace.json"))
    assert read.selection == selected.selection and read.selection.stages == frozenset({0})
    assert summarize(read).text() == summarize(selected).text()
    witness = hand_made()
    witness.failure, witness.unit = Failure(3.0, "k.py:5", "deadlock: nothing can run"), "step"
    read = read_trace(write_trace(witness, tmp_path / "witness.json"))
    assert (read.failure, read.unit) == (witness.failure, "step")


def test_files_that_are_not_warpspec_traces_are_refused_naming_them(tmp_path):
    with pytest.raises(ArgumentError, match=r"missing\.json: cannot read the trace"):
        read_trace(tmp_path / "missing.json")
    for name, content in (("text.json", "not json"), ("other.json", json.dumps({"traceEvents": []})),
                          ("list.json", "[1, 2]")):
        (tmp_path / name).write_text(content)
        with pytest.raises(ArgumentError, match=rf"{name} is not a trace warpspec wrote \(trace\.json of warpspec "
                                                 rf"timeline or warpspec\.timeline\.write\)"):
            read_trace(tmp_path / name)


def test_the_command_writes_a_read_trace_again_filtered(capsys, tmp_path):
    code, text, err = timeline_command(capsys, V3, *SIZES, "--schedule", "num_stages=3,block_m=128,block_n=128,"
                                       "block_k=64", "--out", str(tmp_path / "v3"))
    assert code == 0, err
    trace = tmp_path / "v3" / "trace.json"
    code, again, err = timeline_command(capsys, str(trace), "--out", str(tmp_path / "again"))
    assert code == 0, err
    # A model's timeline read back summarizes as it did when written.
    assert again.split("wrote ")[0] == text.split("wrote ")[0]
    code, tile, err = timeline_command(capsys, str(trace), "--stages", "1", "--out", str(tmp_path / "stage"))
    assert code == 0, err
    assert "filtered to stage 1: " in tile
    assert json.loads((tmp_path / "stage" / "trace.json").read_text())["otherData"]["selection"]["stages"] == [1]
    code, _, err = timeline_command(capsys, str(trace), "m_size=512", "--backend", "cuda", "--out", str(tmp_path))
    assert code == 2
    assert (f"{trace} is a trace: NAME=VALUE arguments, --backend apply to running a kernel, not to reading a "
            f"recorded timeline") in err


def test_a_trace_without_the_roles_in_its_other_data_takes_them_from_its_first_blocks_tracks(tmp_path):
    """Traces written before otherData kept a Timeline's roles (and occupancy) read back with the roles of the first
    block's tracks, in track order."""
    timeline = hand_made()
    path = write_trace(timeline, tmp_path / "trace.json")
    trace = json.loads(path.read_text())
    for key in ("roles", "occupancy", "flops", "sm_blocks", "unit", "failure", "view_bytes", "hbm_gbps"):
        del trace["otherData"][key]
    path.write_text(json.dumps(trace))
    read = read_trace(path)
    assert read.roles == timeline.roles == ["consumer (threads 0-127)", "producer (threads 128-159)"]
    assert (read.occupancy, read.flops, read.unit) == (None, None, "time (µs)")
