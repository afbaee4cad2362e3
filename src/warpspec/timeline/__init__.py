"""Timelines of a kernel's roles: what each role of a sampled block did when, measured on the GPU by an
instrumented build or modeled on the CPU, and what is drawn and summarised from them.

``write(timeline, out_dir)`` writes the three views of one timeline: ``trace.json`` (Chrome/Perfetto),
``timeline.png`` (a Gantt chart) and ``summary.txt``; ``warpspec.timeline.model.model_launch`` makes a timeline on
the CPU."""

from __future__ import annotations

from pathlib import Path


def write(timeline, out_dir, window=2) -> str:
    """Write ``out_dir``/trace.json (every event), timeline.png (the chart of ``window``: a number of waves, a
    (start, end) pair in microseconds or None for all; ``warpspec.timeline.chart.window``) and summary.txt for
    ``timeline`` (creating the folder) and return the summary's text."""
    from warpspec.timeline.chart import write_chart
    from warpspec.timeline.summary import summarize
    from warpspec.timeline.trace import write_trace

    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    write_trace(timeline, folder / "trace.json")
    write_chart(timeline, folder / "timeline.png", window)
    text = summarize(timeline).text()
    (folder / "summary.txt").write_text(text)
    return text
