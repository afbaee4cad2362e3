"""A timeline per tile and per stage: the tile, stage and phase in trace.json's args, ``Timeline.select`` and what a
filtered summary says, and ``warpspec timeline --tiles/--stages`` (with docs/timeline.md's example, run as quoted)."""

import json
from pathlib import Path

import pytest

import warpspec
from matmul_v3 import MatmulWGMMAV3
from matmul_v6 import MatmulWGMMAV6
from tests.cli.test_timeline import timeline as timeline_command
from tests.support.timeline import matmul_kernel, modeled_matmul
from warpspec.timeline import write
from warpspec.timeline.events import Event, Selection, Timeline, numbers_text, parse_numbers
from warpspec.timeline.model import model_launch
from warpspec.timeline.summary import summarize
from warpspec.timeline.trace import trace_events

ROOT = Path(__file__).parents[2]
V6 = f"{ROOT / 'examples' / 'matmul_v6.py'}:MatmulWGMMAV6"
V6_SCHEDULE = dict(variant="cooperative", num_stages=3, block_m=128, block_n=256, epilogue_n=256)
#: 1024^3 in 128x256 tiles over 4 blocks: 8 tiles per block, 16 K-tiles each.
V6_ARGUMENTS = ["m_size=1024", "n_size=1024", "k_size=1024", "num_sms=4", "--schedule",
                ",".join(f"{k}={v}" for k, v in V6_SCHEDULE.items())]


@pytest.fixture(scope="module")
def v6():
    kernel, runtime = matmul_kernel(MatmulWGMMAV6, 1024, **V6_SCHEDULE)
    return model_launch(kernel, dict(runtime, num_sms=4))


def test_trace_args_carry_each_events_tile_stage_and_phase():
    trace = trace_events(modeled_matmul(MatmulWGMMAV3, 512, num_stages=3, block_m=128, block_n=128, block_k=64))
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["args"]["tile"] for e in complete} == {0}
    for e in complete:
        if e["cat"] == "wait":
            assert e["args"]["barrier"].endswith(f"[{e['args']['stage']}]") and e["args"]["phase"] in (0, 1)
        elif e["cat"] in ("tma", "wgmma"):
            assert "phase" not in e["args"] and e["args"]["stage"] in (0, 1, 2)
        else:  # wait_groups, the sync, the epilogue
            assert "stage" not in e["args"] and "phase" not in e["args"], e
    first = next(e for e in complete if e["name"] == "wait consumer_barriers[0]")
    assert (first["args"]["tile"], first["args"]["stage"], first["args"]["phase"]) == (0, 0, 0)
    assert trace["otherData"]["selection"] is None


def test_select_keeps_the_events_of_the_given_tiles_and_stages(v6):
    total = len(v6.events)
    one = v6.select(tiles=1)
    assert one.events == [e for e in v6.events if e.tile == 1] and one.events
    assert one.selection == Selection(frozenset({1}), None, len(one.events), total)
    assert v6.selection is None and len(v6.events) == total  # the timeline selected from is left as it was
    stage = v6.select(stages=[0])
    assert stage.events == [e for e in v6.events if e.stage == 0]
    assert {e.kind for e in stage.events} == {"wait", "tma", "wgmma"}  # wait_groups and syncs have no stage
    both = v6.select(tiles=range(2, 4), stages=0)
    assert both.events == [e for e in v6.events if e.tile in (2, 3) and e.stage == 0]
    assert both.selection.text() == f"tiles 2-3 and stage 0: {len(both.events)} of {total} events"
    # Selecting from a selection keeps what both select.
    narrowed = v6.select(tiles=[1, 2, 3]).select(stages=0).select(tiles=[3, 4])
    assert narrowed.events == [e for e in v6.events if e.tile == 3 and e.stage == 0]
    assert narrowed.selection == Selection(frozenset({3}), frozenset({0}), len(narrowed.events), total)
    assert v6.select(tiles=[99]).events == []


@pytest.mark.parametrize("arguments, shown", [
    (dict(tiles=-1), "tiles must be a non-negative integer or integers, got -1"),
    (dict(tiles=True), "tiles must be a non-negative integer or integers, got True"),
    (dict(stages="0"), "stages must be a non-negative integer or integers, got '0'"),
    (dict(stages=[0, 1.5]), "stages must be a non-negative integer or integers, got [0, 1.5]"),
    (dict(tiles=2.0), "tiles must be a non-negative integer or integers, got 2.0"),
])
def test_select_refuses_what_is_no_tile_or_stage(v6, arguments, shown):
    with pytest.raises(warpspec.ArgumentError) as error:
        v6.select(**arguments)
    assert str(error.value) == f"Timeline.select {shown}"


def test_lists_of_tiles_and_stages_parse_and_print_as_ranges():
    assert parse_numbers("--tiles", "0-3,7") == frozenset({0, 1, 2, 3, 7})
    assert parse_numbers("--stages", " 2 ") == frozenset({2}) and parse_numbers("--tiles", "4-4") == {4}
    for bad in ("", "x", "3-1", "-1", "1,,2", "1-2-3", "1.5"):
        with pytest.raises(warpspec.ArgumentError) as error:
            parse_numbers("--stages", bad)
        assert str(error.value) == ("--stages must be a comma-separated list of non-negative integers and ranges "
                                    f"A-B with A <= B (e.g. 0-3,7), got {bad!r}")
    assert numbers_text({7, 0, 2, 1, 3, 9}) == "0-3, 7, 9" and numbers_text([5]) == "5"


def test_a_summary_of_some_tiles_says_so_and_counts_each_tile_on_its_own(v6):
    picked = v6.select(tiles=[0, 7])
    summary = summarize(picked)
    lines = summary.text().splitlines()
    assert lines[1] == (f"filtered to tiles 0, 7: {len(picked.events)} of {len(v6.events)} events; the shares below "
                        f"are of these events alone")
    assert lines[2].startswith("modeled kernel time: ")  # the launch's, whatever is selected
    # The six tiles between the two chosen ones count for nothing: each role's span is the sum of two tiles'.
    role = "consumer (threads 0-255)"
    spans = [max(e.end_ns for e in tile) - min(e.start_ns for e in tile)
             for tile in ([e for e in picked.events if e.role == role and e.tile == t] for t in (0, 7))]
    waited = sum(e.duration_ns for e in picked.events if e.role == role and e.kind == "wait")
    assert summary.waits[(role, "full_barriers")] == pytest.approx(waited / sum(spans))
    assert summary.occupancy is not None and 0 < summary.tensor_busy <= 1 and "diagnosis: " in summary.text()


def test_a_summary_of_some_stages_gives_only_the_waits(v6):
    summary = summarize(v6.select(stages=1))
    text = summary.text()
    assert text.splitlines()[1].startswith("filtered to stage 1: ")
    assert "waits on full_barriers (full)" in text and "waits on empty_barriers (empty)" in text
    assert ("stage occupancy, tensor-core busy share and diagnosis: not given, they need every stage's events"
            in text)
    assert "diagnosis: " not in text.replace("and diagnosis: not given", "")
    assert (summary.occupancy, summary.tensor_busy) == (None, None)


def test_a_selections_files_hold_its_events_and_say_what_they_are(v6, tmp_path):
    picked = v6.select(tiles=2, stages=[0, 2])
    text = write(picked, tmp_path)
    trace = json.loads((tmp_path / "trace.json").read_text())
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == len(picked.events)
    assert {(e["args"]["tile"], e["args"]["stage"]) for e in complete} == {(2, 0), (2, 2)}
    assert trace["otherData"]["selection"] == {"tiles": [2], "stages": [0, 2], "kept": len(picked.events),
                                               "total": len(v6.events)}
    assert (tmp_path / "summary.txt").read_text() == text and "filtered to tile 2 and stages 0, 2: " in text


def test_the_command_writes_the_chosen_tiles_and_stages_alone(capsys, tmp_path):
    out = tmp_path / "v6"
    code, text, err = timeline_command(capsys, V6, *V6_ARGUMENTS, "--tiles", "1-2", "--stages", "0",
                                       "--out", str(out))
    assert code == 0, err
    assert text.splitlines()[1].startswith("filtered to tiles 1-2 and stage 0: ")
    trace = json.loads((out / "trace.json").read_text())
    assert {(e["args"]["tile"], e["args"]["stage"]) for e in trace["traceEvents"] if e["ph"] == "X"} == \
        {(1, 0), (2, 0)}
    assert trace["otherData"]["selection"]["tiles"] == [1, 2]


@pytest.mark.parametrize("options, message", [
    (["--tiles", "1-"], "--tiles must be a comma-separated list of non-negative integers and ranges A-B with "
                        "A <= B (e.g. 0-3,7), got '1-'"),
    (["--stages", "two"], "--stages must be a comma-separated list of non-negative integers and ranges A-B with "
                          "A <= B (e.g. 0-3,7), got 'two'"),
    (["--tiles", "8-9"], "--tiles 8-9: no event of the timeline has such a tile (its events' tiles: 0-7)"),
    (["--tiles", "0", "--stages", "3,5"], "--stages 3, 5: no event of the timeline has such a stage (its events' "
                                          "stages: 0-2)"),
])
def test_bad_tiles_or_stages_are_usage_errors_naming_the_option(capsys, tmp_path, options, message):
    code, _, err = timeline_command(capsys, V6, *V6_ARGUMENTS, *options, "--out", str(tmp_path))
    assert code == 2
    assert err == f"warpspec timeline: error: {message}\n"
    assert not (tmp_path / "trace.json").exists()


def test_tiles_and_stages_that_no_one_event_has_together_are_a_usage_error(capsys, tmp_path, monkeypatch):
    from warpspec.timeline import model

    role = "consumer (threads 0-127)"
    events = [Event((0, 0, 0), role, "wait", f"wait full[{tile}]", 10.0 * tile, 10.0 * tile + 5, "k.py:1", 0,
                    f"full[{tile}]", tile=tile, stage=tile, phase=0) for tile in (0, 1)]
    monkeypatch.setattr(model, "model_launch", lambda *args, **kwargs: Timeline("K", "model", {}, 100.0, events,
                                                                                 [role]))
    monkeypatch.setattr(model, "built_registers", lambda kernel: None)
    code, _, err = timeline_command(capsys, V6, *V6_ARGUMENTS, "--tiles", "0", "--stages", "1", "--out",
                                    str(tmp_path))
    assert code == 2
    assert err == ("warpspec timeline: error: --tiles 0 --stages 1: no event of the timeline has both such a tile "
                   "and such a stage\n")


def test_the_docs_example_prints_as_quoted(capsys, tmp_path, monkeypatch):
    """docs/timeline.md's per-tile example output is what the command prints (run from a folder holding
    examples/, as from the repository root)."""
    doc = (ROOT / "docs" / "timeline.md").read_text()
    block = doc.split("```\n$ warpspec timeline examples/matmul_v6.py", 1)[1].split("```", 1)[0]
    command, _, expected = block.replace("\\\n", "").partition("\n")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    code, text, err = timeline_command(capsys, "examples/matmul_v6.py" + command.split(" ", 1)[0],
                                       *command.split()[1:])
    assert code == 0, err
    assert text == expected
