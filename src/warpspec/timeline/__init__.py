"""Timelines of a kernel's roles: what each role of a sampled block did when, measured on the GPU by an
instrumented build or modeled on the CPU, and what is drawn and summarised from them.

``write(timeline, out_dir)`` writes the three views of one timeline: ``trace.json`` (Chrome/Perfetto),
``timeline.png`` (a Gantt chart) and ``summary.txt``; ``warpspec.timeline.model.model_launch`` makes a timeline on
the CPU."""

from __future__ import annotations

from pathlib import Path


def write(timeline, out_dir) -> str:
    """Write ``out_dir``/trace.json, timeline.png and summary.txt for ``timeline`` (creating the folder) and return
    the summary's text."""
    from warpspec.timeline.chart import write_chart
    from warpspec.timeline.summary import summarize
    from warpspec.timeline.trace import write_trace

    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    write_trace(timeline, folder / "trace.json")
    write_chart(timeline, folder / "timeline.png")
    text = summarize(timeline).text()
    (folder / "summary.txt").write_text(text)
    return text
