"""A timeline as a Chrome trace (the JSON "trace event format" that Perfetto and chrome://tracing load), with every
event of the timeline whatever the chart's window: one process per block, named "block (x, y, z)", one thread (track) per role, one complete ("X") event per
interval with its kernel line, barrier, SM, tile, stage, phase and (a wait_group's) pending count in ``args`` (those the event has:
``warpspec.timeline.events.Event``), so that a trace viewer's queries can pick one tile's or one stage's events.
``otherData`` holds the rest of the Timeline, so that ``read_trace`` gives it back whole: a trace recorded once
(on a GPU) can be summarized, filtered and drawn again anywhere."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from warpspec.errors import ArgumentError
from warpspec.timeline.events import Event, Failure, Occupancy, Selection, Shortfall, Timeline


def blocks(timeline: Timeline) -> list[tuple[int, int, int]]:
    """The timeline's blocks, in launch order (x fastest)."""
    return sorted({e.block for e in timeline.events}, key=lambda b: (b[2], b[1], b[0]))


def trace_events(timeline: Timeline) -> dict:
    """The trace as a JSON-ready object: ``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": ...}``.
    Times are microseconds, as the format requires; every role gets a track in every block, events or not."""
    out = []
    for pid, block in enumerate(blocks(timeline)):
        out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                    "args": {"name": f"block ({block[0]}, {block[1]}, {block[2]})"}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": pid}})
        for tid, role in enumerate(timeline.roles):
            out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": role}})
            out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    pids = {block: pid for pid, block in enumerate(blocks(timeline))}
    tids = {role: tid for tid, role in enumerate(timeline.roles)}
    for e in sorted(timeline.events, key=lambda e: e.start_ns):
        args = {"line": e.line}
        for name in ("barrier", "sm", "tile", "stage", "phase", "pending"):
            value = getattr(e, name)
            if value is not None:
                args[name] = value
        out.append({"ph": "X", "name": e.name, "cat": e.kind, "pid": pids[e.block], "tid": tids[e.role],
                    "ts": e.start_ns / 1e3, "dur": e.duration_ns / 1e3, "args": args})
    return {"traceEvents": out, "displayTimeUnit": "ns",
            "otherData": {"kernel": timeline.kernel, "source": timeline.source,
                          "schedule": {k: str(v) for k, v in timeline.schedule.items()},
                          "kernel_ns": timeline.kernel_ns, "sm": timeline.sm, "notes": timeline.notes,
                          "selection": _selection(timeline),
                          "incomplete": [{"block": list(s.block), "role": s.role, "recorded": s.recorded,
                                          "needed": s.needed} for s in timeline.shortfalls],
                          "roles": list(timeline.roles), "flops": timeline.flops,
                          "occupancy": None if timeline.occupancy is None else asdict(timeline.occupancy),
                          "view_bytes": timeline.view_bytes, "hbm_gbps": timeline.hbm_gbps,
                          "sm_blocks": timeline.sm_blocks, "unit": timeline.unit,
                          "failure": None if timeline.failure is None else asdict(timeline.failure)}}


def _selection(timeline: Timeline) -> dict | None:
    """What a selected timeline holds (``Timeline.select``): its tiles and stages (null: any) and how many of the
    whole timeline's events; None when it holds every event."""
    chosen = timeline.selection
    if chosen is None:
        return None
    return {"tiles": None if chosen.tiles is None else sorted(chosen.tiles),
            "stages": None if chosen.stages is None else sorted(chosen.stages), "kept": chosen.kept,
            "total": chosen.total}


def write_trace(timeline: Timeline, path: str | Path) -> Path:
    """Write the trace of ``timeline`` to ``path`` (JSON) and return the path."""
    path = Path(path)
    path.write_text(json.dumps(trace_events(timeline)))
    return path


def read_trace(path: str | Path) -> Timeline:
    """The Timeline a trace.json written by warpspec (``write_trace``, ``warpspec.timeline.write``,
    ``warpspec timeline``) holds, to summarize, select from or draw again. Times come back from the trace's
    microseconds. ArgumentError naming the file when it is not such a trace."""
    path = Path(path)
    try:
        trace = json.loads(path.read_text())
        other = trace["otherData"]
        metadata = [e for e in trace["traceEvents"] if e["ph"] == "M"]
        blocks = {e["pid"]: e["args"]["name"] for e in metadata if e["name"] == "process_name"}
        roles = {(e["pid"], e["tid"]): e["args"]["name"] for e in metadata if e["name"] == "thread_name"}
        events = [_event(e, blocks, roles) for e in trace["traceEvents"] if e["ph"] == "X"]
        # A trace written before otherData kept the roles has every role as a track of every block: the first's.
        first = min(blocks, default=0)
        timeline = Timeline(
            other["kernel"], other["source"], dict(other["schedule"]), other["kernel_ns"], events,
            other.get("roles") or [name for (pid, _), name in sorted(roles.items()) if pid == first],
            other.get("flops"), list(other.get("notes", [])), other.get("sm"),
            None if other.get("occupancy") is None else Occupancy(**other["occupancy"]),
            None if other.get("failure") is None else Failure(**other["failure"]), other.get("unit", "time (µs)"),
            [Shortfall(tuple(s["block"]), s["role"], s["recorded"], s["needed"]) for s in other["incomplete"]],
            _read_selection(other.get("selection")), other.get("view_bytes"), other.get("hbm_gbps"),
            other.get("sm_blocks"))
    except OSError as error:
        raise ArgumentError(f"{path}: cannot read the trace ({error.strerror or error})") from None
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ArgumentError(f"{path} is not a trace warpspec wrote (trace.json of warpspec timeline or "
                            f"warpspec.timeline.write): {type(error).__name__}: {error}") from None
    return timeline


def _event(record: dict, blocks: dict, roles: dict) -> Event:
    """One complete ("X") record of a trace as the Event it was written from (``blocks``: process id -> "block (x,
    y, z)"; ``roles``: (process, thread) -> role)."""
    block = tuple(int(part) for part in blocks[record["pid"]].removeprefix("block (").rstrip(")").split(","))
    args = record["args"]
    start = record["ts"] * 1e3
    return Event(block, roles[(record["pid"], record["tid"])], record["cat"], record["name"], start,
                 start + record["dur"] * 1e3, args["line"], args.get("sm"), args.get("barrier"), args.get("tile"),
                 args.get("stage"), args.get("phase"), args.get("pending"))


def _read_selection(selection: dict | None) -> Selection | None:
    """A trace's ``otherData.selection`` as the Selection it was written from."""
    if selection is None:
        return None
    return Selection(*(None if selection[key] is None else frozenset(selection[key]) for key in ("tiles", "stages")),
                     selection["kept"], selection["total"])
