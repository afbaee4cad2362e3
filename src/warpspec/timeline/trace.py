"""A timeline as a Chrome trace (the JSON "trace event format" that Perfetto and chrome://tracing load), with every
event of the timeline whatever the chart's window: one process per block, named "block (x, y, z)", one thread (track) per role, one complete ("X") event per
interval with its kernel line, barrier, SM, tile, stage, phase and (a wait_group's) pending count in ``args`` (those the event has:
``warpspec.timeline.events.Event``), so that a trace viewer's queries can pick one tile's or one stage's events."""

from __future__ import annotations

import json
from pathlib import Path

from warpspec.timeline.events import Timeline


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
                                          "needed": s.needed} for s in timeline.shortfalls]}}


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
