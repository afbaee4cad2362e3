"""Timelines of a kernel's roles: what each role of a sampled block did when, measured on the GPU by an
instrumented build or modeled on the CPU, and what is drawn and summarised from them.

``write(timeline, out_dir)`` writes the three views of one timeline: ``trace.json`` (Chrome/Perfetto),
``timeline.png`` (a Gantt chart) and ``summary.txt``; ``warpspec.timeline.model.model_launch`` makes a timeline on
the CPU.

The timeline is a wing of its own, as a profiler installs itself into a compiler: importing this package registers
its statements (``profile_isa``: the timestamps an instrumented build records), their emulation and their sm_90a
emission (``sm90_profile``); the instrumentation pass (``instrument``) and the CPU timing model (``model_timing``,
``model``) read the facts each instruction family declares about itself (``registry.INSTRUMENT``,
``registry.TIMING_COST``). Nothing below this package knows it exists."""

from __future__ import annotations

import os
from pathlib import Path

from warpspec.timeline import profile_isa, sm90_profile  # noqa: F401  (register the profiling statements)


def write(timeline, out_dir, window=2) -> str:
    """Write ``out_dir``/trace.json (every event), timeline.png (the chart of ``window``: a number of waves, a
    (start, end) pair in microseconds or None for all; ``warpspec.timeline.chart.window``) and summary.txt for
    ``timeline`` (creating the folder) and return the summary's text. Each file is written under a temporary name
    and renamed into place, so that a write that fails (a full disk) leaves the file as it was, never truncated;
    the OSError is raised."""
    from warpspec.timeline.chart import write_chart
    from warpspec.timeline.summary import summarize
    from warpspec.timeline.trace import write_trace

    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    _replace(folder / "trace.json", lambda path: write_trace(timeline, path))
    _replace(folder / "timeline.png", lambda path: write_chart(timeline, path, window))
    text = summarize(timeline).text()
    _replace(folder / "summary.txt", lambda path: path.write_text(text))
    return text


def _replace(path: Path, writer) -> None:
    """``writer(temporary path)`` then rename it to ``path``; the temporary file is removed if anything fails. The
    temporary name keeps the suffix, from which the chart's writer takes the image format."""
    temporary = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        writer(temporary)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
