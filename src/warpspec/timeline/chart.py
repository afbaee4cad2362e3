"""A timeline as a PNG Gantt chart: one row per role per block, a colour per event kind, a legend, time in
microseconds, and a title naming the kernel, its schedule and where the times come from (GPU or model). Needs
matplotlib (``pip install 'warpspec[timeline]'``), imported only here.

A chart shows a window of the timeline, by default its first two waves: the first ``2 x k`` blocks to start,
where ``k`` is how many the SM held at once, from the first event to the last end among them, so a pipeline's
waits and WGMMA groups are wide enough to read; the window is noted under the title, and trace.json keeps every
event. GPU and modeled charts share one layout (row height, width, the roles in the timeline's order, blocks in
the order they started, every kind in the legend with the same colour), so two of them compare side by side."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from warpspec.errors import ArgumentError
from warpspec.timeline.events import KINDS, WITNESS_KINDS, Timeline
from warpspec.timeline.summary import at_once, block_spans

#: A colour per event kind (colour-blind-safe palette).
COLOURS = dict(zip(KINDS, ("#d55e00", "#0072b2", "#009e73", "#56b4e9", "#e69f00", "#cc79a7", "#999999")))
COLOURS.update(zip(WITNESS_KINDS, ("#f0e442", "#bbbbbb", "#a6cee3", "#dddddd")))

#: The waves a chart shows unless told otherwise.
WAVES = 2


@dataclass(frozen=True)
class Window:
    """The part of a timeline a chart shows: ``[start_ns, end_ns]``, the blocks that start in it (in the order
    they started), and a note saying what it holds (None when it is the whole timeline)."""

    start_ns: float
    end_ns: float
    blocks: list
    note: str | None


def parse_window(text: str):
    """A ``--window`` value: ``all`` (None: the whole timeline), ``N`` (the first N waves) or ``A:B`` (from A to B
    microseconds, as a (start, end) pair); ArgumentError naming the option otherwise."""
    text = text.strip()
    if text == "all":
        return None
    try:
        if ":" in text:
            start, end = (float(part) for part in text.split(":"))
            if 0 <= start < end:
                return start, end
        elif int(text) >= 1:
            return int(text)
    except ValueError:
        pass
    raise ArgumentError(f"--window must be 'all', a number of waves (1, 2, ...) or START:END in microseconds with "
                        f"START < END, got {text!r}")


def window(timeline: Timeline, spec=WAVES) -> Window:
    """The window ``spec`` selects: a number of waves (see the module docstring), a (start, end) pair in
    microseconds, or None for the whole timeline."""
    spans = block_spans(timeline.events)
    order = sorted(spans, key=lambda b: (spans[b][0], b[2], b[1], b[0]))
    first = min((s for s, _ in spans.values()), default=0.0)
    last = max((e for _, e in spans.values()), default=0.0)
    if spec is None or not order:
        return Window(first, last, order, None)
    if isinstance(spec, tuple):
        start, end = spec[0] * 1e3, spec[1] * 1e3
        shown = [b for b in order if spans[b][0] < end and spans[b][1] > start]
        return Window(start, end, shown, f"window {spec[0]:g}-{spec[1]:g} us: {len(shown)} of the {len(order)} "
                                         f"blocks; trace.json has every event")
    resident = at_once(timeline.events) or 1
    count = min(spec * resident, len(order))
    if count == len(order):
        return Window(first, last, order, None)
    end = max(spans[b][1] for b in order[:count])
    shown = [b for b in order if spans[b][0] < end]
    return Window(first, end, shown, f"window {first / 1e3:.0f}-{end / 1e3:.0f} us: the first {count} of the "
                                     f"{len(order)} blocks ({spec} wave(s) of {resident} at once); trace.json has "
                                     f"every event")


def write_chart(timeline: Timeline, path: str | Path, window_spec=WAVES) -> Path:
    """Draw ``timeline`` into the PNG file ``path`` and return the path; ``window_spec`` as ``window`` takes it
    (default: the first two waves). ImportError naming the package when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
        from matplotlib.patches import Patch
    except ImportError:
        raise ImportError("the timeline chart needs matplotlib: pip install 'warpspec[timeline]' "
                          "(or pip install matplotlib)") from None
    shown = window(timeline, window_spec)
    rows = [(block, role) for block in shown.blocks for role in timeline.roles]
    index = {row: i for i, row in enumerate(rows)}
    width = 14 if timeline.failure is None else min(max(14, 0.35 * timeline.failure.time_ns / 1e3), 60)
    figure, axes = pyplot.subplots(figsize=(width, 1.6 + 0.45 * max(len(rows), 1)))
    witness = timeline.failure is not None
    kinds = [k for k in KINDS + WITNESS_KINDS if any(e.kind == k for e in timeline.events)] if witness else KINDS
    for kind in kinds:
        spans = {}
        for e in timeline.events:
            row = index.get((e.block, e.role))
            if e.kind != kind or row is None or e.end_ns < shown.start_ns or e.start_ns > shown.end_ns:
                continue
            spans.setdefault(row, []).append((e.start_ns / 1e3, max(e.duration_ns, 1) / 1e3))
        for row, bars in spans.items():
            axes.broken_barh(bars, (row - 0.4, 0.8), facecolors=COLOURS[kind], linewidth=0.5 if witness else 0,
                             edgecolor="white")
    if witness:  # a counterexample has few events: each is labelled, and the failure marked
        for e in timeline.events:
            row = index.get((e.block, e.role))
            if row is not None and e.duration_ns >= 1000:
                axes.text((e.start_ns + e.end_ns) / 2e3, row, e.name, ha="center", va="center", fontsize=6,
                          clip_on=True)
        failure = timeline.failure
        axes.axvline(failure.time_ns / 1e3, color="#d00000", linewidth=2)

    sm = {e.block: e.sm for e in timeline.events}
    axes.set_yticks(range(len(rows)), [f"block {b[0]},{b[1]},{b[2]}" + (f" (SM {sm[b]})" if sm[b] is not None else "")
                                       + f"  {role}" for b, role in rows], fontsize=8)
    axes.set_ylim(len(rows) - 0.5, -0.5)
    axes.set_xlim(shown.start_ns / 1e3, max(shown.end_ns, shown.start_ns + 1) / 1e3)
    axes.set_xlabel(timeline.unit)
    axes.legend(handles=[Patch(color=COLOURS[k], label=k) for k in kinds], loc="upper left",
                bbox_to_anchor=(1.005, 1.0), fontsize=8)
    schedule = " ".join(f"{k}={v}" for k, v in timeline.schedule.items())
    source = "CPU timing model" if timeline.source == "model" else "GPU"
    title = f"{timeline.kernel}  {schedule}  ({source}, kernel {timeline.kernel_ns / 1e3:.1f} µs)"
    if witness:
        failure = timeline.failure
        title = (f"{timeline.kernel}  {schedule}  counterexample: {timeline.notes[0]} (red line)\n"
                 f"{failure.line}: {failure.text}")
    per_sm = f"{timeline.occupancy.blocks} block(s) per SM" if timeline.occupancy is not None else None
    selected = f"filtered to {timeline.selection.text()}" if timeline.selection is not None else None
    detail = "; ".join(text.replace(" us", " µs") for text in (selected, per_sm, shown.note) if text)
    axes.set_title(title + (f"\n{detail}" if detail else ""), fontsize=10)
    figure.tight_layout()
    path = Path(path)
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
    return path
