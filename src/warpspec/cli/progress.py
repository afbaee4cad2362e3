"""Progress on stderr while a command runs: the block ``warpspec check``'s emulator run is in, and the schedules
``warpspec build`` has finished."""

from __future__ import annotations

import sys
import time

from warpspec.cli.failures import first_line


class RunProgress:
    """Where ``warpspec check`` is: the schedule, the run and the block the emulator is running (``emulate_kernel``
    calls it before each block). With ``show``, a run that has taken more than ``DELAY`` seconds is shown on
    stderr as ``block 37/256``: rewritten in place on a terminal (at most every ``TERMINAL_INTERVAL`` seconds, and
    erased before each verdict line), else a line every ``LOG_INTERVAL`` seconds."""

    DELAY, TERMINAL_INTERVAL, LOG_INTERVAL = 1.0, 0.1, 5.0

    def __init__(self, show: bool):
        self.show, self.terminal = show, sys.stderr.isatty()
        self.schedule, self.run, self.block = "", "", None
        self.started = self.shown_at = 0.0
        self.width = 0  # of the line on the terminal now (0: none)

    def start(self, schedule: str, run: str) -> None:
        """``run`` (what is being done: building, which seed) of ``schedule`` begins."""
        self.schedule, self.run, self.block = schedule, run, None
        self.started = time.monotonic()

    def __call__(self, index: int, total: int, block_idx: tuple[int, int, int]) -> None:
        self.block = index, total, block_idx
        if not self.show:
            return
        now = time.monotonic()
        interval = self.TERMINAL_INTERVAL if self.terminal else self.LOG_INTERVAL
        if now - self.started < self.DELAY or now - self.shown_at < interval:
            return
        self.shown_at = now
        line = f"{self.schedule}, {self.run}: block {index + 1}/{total}"
        if self.terminal:
            self.width = max(self.width, len(line))  # pad over the longer line it replaces
            print(f"\r{line.ljust(self.width)}", end="", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)

    def where(self) -> str:
        """The schedule, the run and the block, for a message."""
        text = f"{self.schedule}, {self.run}"
        if self.block is not None:
            index, total, (x, y, z) = self.block
            text += f", block {index + 1}/{total} (blockIdx.x={x}, blockIdx.y={y}, blockIdx.z={z})"
        return text

    def clear(self) -> None:
        """Erase the progress line from the terminal, so that what is printed next starts on a clean line."""
        if self.width:
            print(f"\r{' ' * self.width}\r", end="", file=sys.stderr, flush=True)
            self.width = 0


def build_progress(kernel_name: str, candidates: list) -> dict:
    """The progress arguments of ``warpspec.tune.tuner.build_candidates``: on a terminal its one-line progress bar on
    stderr; elsewhere (a log, a pipe) a line on stderr per schedule as it finishes, so that a long build is
    seen while it runs, not all at its end."""
    if sys.stderr.isatty():
        return {}
    jobs = sum(c.fate.fate == "ok" for c in candidates)
    pruned = sum(c.fate.fate == "pruned" for c in candidates)
    if jobs > 1:
        print(f"{kernel_name}: building {jobs} of {len(candidates)} schedules ({pruned} pruned)", file=sys.stderr,
              flush=True)
    done = 0

    def on_built(candidate) -> None:
        nonlocal done
        done += 1
        fate = candidate.fate
        if fate.reason:
            detail = first_line(fate.reason)
        else:
            detail = "built" if fate.registers is None else f"{fate.registers} registers"
        print(f"[{done}/{jobs}] {fate.fate:<6}  {fate.label}  ({detail}, {fate.build_s:.2f} s)", file=sys.stderr,
              flush=True)

    return {"progress": False, "on_built": on_built}
