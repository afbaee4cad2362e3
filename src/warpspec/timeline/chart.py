"""A timeline as a PNG Gantt chart: one row per role per sampled block, a colour per event kind, a legend, time in
microseconds, and a title naming the kernel, its schedule and where the times come from (GPU or model). Needs
matplotlib (``pip install 'warpspec[timeline]'``), imported only here."""

from __future__ import annotations

from pathlib import Path

from warpspec.timeline.events import KINDS, Timeline
from warpspec.timeline.trace import blocks

#: A colour per event kind (colour-blind-safe palette).
COLOURS = dict(zip(KINDS, ("#d55e00", "#0072b2", "#009e73", "#56b4e9", "#e69f00", "#cc79a7", "#999999")))


def write_chart(timeline: Timeline, path: str | Path) -> Path:
    """Draw ``timeline`` into the PNG file ``path`` and return the path. ImportError naming the package when
    matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
        from matplotlib.patches import Patch
    except ImportError:
        raise ImportError("the timeline chart needs matplotlib: pip install 'warpspec[timeline]' "
                          "(or pip install matplotlib)") from None
    rows = [(block, role) for block in blocks(timeline) for role in timeline.roles]
    index = {row: i for i, row in enumerate(rows)}
    figure, axes = pyplot.subplots(figsize=(14, 1.2 + 0.45 * max(len(rows), 1)))
    for kind in KINDS:
        spans = {}
        for e in timeline.events:
            if e.kind == kind:
                spans.setdefault(index[(e.block, e.role)], []).append((e.start_ns / 1e3, max(e.duration_ns, 1) / 1e3))
        for row, bars in spans.items():
            axes.broken_barh(bars, (row - 0.4, 0.8), facecolors=COLOURS[kind], linewidth=0)
    axes.set_yticks(range(len(rows)), [f"block {b[0]},{b[1]},{b[2]}  {role}" for b, role in rows], fontsize=8)
    axes.set_ylim(len(rows) - 0.5, -0.5)
    axes.set_xlabel("time (µs)")
    used = [k for k in KINDS if any(e.kind == k for e in timeline.events)]
    axes.legend(handles=[Patch(color=COLOURS[k], label=k) for k in used], loc="upper left",
                bbox_to_anchor=(1.005, 1.0), fontsize=8)
    schedule = " ".join(f"{k}={v}" for k, v in timeline.schedule.items())
    source = "CPU timing model" if timeline.source == "model" else "GPU"
    axes.set_title(f"{timeline.kernel}  {schedule}  ({source}, kernel {timeline.kernel_ns / 1e3:.1f} µs)",
                   fontsize=10)
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
    return path
