"""A counterexample as a timeline: the steps of the failing schedule (``warpspec.emulator.explore``), one per
microsecond of the chart's axis, up to the error.

Every partition gets a row with its steps (what it ran up to each visible operation, named by the instruction and
line) and its blocked waits; each asynchronous operation a row span from its issue to its completion, on the row
"async ops"; each mbarrier a row whose spans are its states (phase, arrivals in, tx-count) between changes. The
chart marks the failing step and line in red. ``write_witness`` writes trace.json, timeline.png and summary.txt
with the timeline package's own writers.
"""

from __future__ import annotations

from pathlib import Path

from warpspec.emulator.explore import format_choices
from warpspec.isa.mbarrier import AllocBarriers, MbarrierWait
from warpspec.isa.roles import Sync
from warpspec.isa.tma import TmaLoad, TmaStore, TmaWait
from warpspec.isa.wgmma import WgmmaCommit, WgmmaMma, WgmmaWait
from warpspec.ir import nodes as ir
from warpspec.timeline.events import Event, Failure, Timeline

STEP_NS = 1000.0  # one step per microsecond: the chart's axis counts steps
ASYNC_ROLE = "async ops"

#: The timeline kind of the instruction a step stopped at (an arrive for the other mbarrier instructions).
_KINDS = ((MbarrierWait, "wait"), (TmaLoad, "tma"), (TmaStore, "tma"), (TmaWait, "tma_wait"), (WgmmaMma, "wgmma"),
          (WgmmaCommit, "wgmma"), (WgmmaWait, "wgmma_wait"), (Sync, "sync"), (AllocBarriers, "sync"))


def _statements(kernel: ir.Kernel) -> dict:
    """Kernel line -> the (last) statement there, by its location text's last line."""
    found = {}
    for stmt in ir.walk(kernel.body):
        if stmt.loc is not None:
            found[str(stmt.loc)] = stmt
    return found


def _kind(stmt) -> str:
    for node, kind in _KINDS:
        if isinstance(stmt, node):
            return kind
    return "arrive" if stmt is not None and "barrier" in type(stmt).__module__ else "step"


def _line(loc) -> str:
    """``file.py:40`` of a location (its innermost line, as the user reads it in the chart)."""
    text = str(loc) if loc is not None else "?"
    last = text.rsplit(" at ", 1)[-1]
    return last.rsplit("/", 1)[-1]


def witness_timeline(result, schedule: dict | None = None) -> Timeline:
    """The timeline of ``result``'s counterexample (a ``ProofResult`` with an error and its steps)."""
    kernel, steps, error = result.kernel, result.steps, result.error
    statements = _statements(kernel)
    roles: list[str] = []
    events: list[Event] = []
    block = result.block or (0, 0, 0)
    blocked: dict = {}  # role -> (start step, text, line) of its current blocked wait
    issued: dict = {}  # event process -> issue step index
    lanes: list[float] = []  # per row of async ops: when its last operation completed

    def role_of(task) -> str:
        name = task.name
        if name not in roles:
            roles.append(name)
        return name

    for index, step in enumerate(steps):
        start, end = index * STEP_NS, (index + 1) * STEP_NS
        if step.process[0] == "e":
            first = issued.get(step.process, index) * STEP_NS
            lane = next(i for i in range(len(lanes) + 1) if i == len(lanes) or lanes[i] <= first)
            lanes[lane:lane + 1] = [end]
            events.append(Event(block, f"{ASYNC_ROLE} {lane + 1}", "in_flight", step.what.split(",")[0].split(
                " -> ")[-1].join(("-> ", "")), first, end, str(step.start_loc)))
            continue
        role = role_of(step.task)
        if role in blocked:
            since, text, line = blocked.pop(role)
            events.append(Event(block, role, "wait", _wait_label(text), since, start, line))
        stmt = statements.get(str(step.end_loc))
        kind = _kind(stmt) if step.what != "finished" else "step"
        label = "end" if step.what == "finished" else _line(step.end_loc).rsplit(":", 1)[-1]
        events.append(Event(block, role, kind, label, start, end, str(step.end_loc)))
        if step.what.startswith("blocked"):
            blocked[role] = (end, step.what.removeprefix("blocked in ").removeprefix("blocked "), str(step.end_loc))
        for later in range(index + 1, len(steps)):  # the operations this step issued: in flight from here
            if steps[later].creator == index:
                issued[steps[later].process] = index
    finish = len(steps) * STEP_NS
    for role, (since, text, line) in blocked.items():
        events.append(Event(block, role, "wait", _wait_label(text), since, finish, line))
    _barrier_rows(steps, block, roles, events, finish + STEP_NS)
    partitions = len([r for r in roles if not r.startswith("mbarrier")])
    roles[partitions:partitions] = [f"{ASYNC_ROLE} {lane + 1}" for lane in range(len(lanes))]
    message = str(error).split("\n", 1)[0]
    if error.location and message.startswith(error.location):
        message = message[len(error.location) + 2:]
    failure = Failure(finish, _line(error.location), _shorten(message, 110))
    notes = [f"{type(error).__name__} after {len(steps)} steps", f"choices: {format_choices(result.choices)}"]
    return Timeline(kernel.name, "witness", schedule or {}, finish, events, roles, notes=notes, failure=failure,
                    unit="step of the failing schedule")


def _barrier_rows(steps, block, roles, events, finish) -> None:
    """A row per mbarrier: its state between changes, as the steps left it."""
    states: dict = {}  # name -> (since, state)
    for index, step in enumerate(steps):
        for name, completed, pending, expected, tx in step.barriers:
            state = (completed, expected - pending, expected, tx)
            role = f"mbarrier {name}"
            if name not in states:
                states[name] = (0.0, (0, 0, expected, 0))
                roles.append(role)
            since, old = states[name]
            if state != old:
                events.append(_phase(block, role, old, since, (index + 1) * STEP_NS))
                states[name] = ((index + 1) * STEP_NS, state)
    for name, (since, state) in states.items():
        events.append(_phase(block, f"mbarrier {name}", state, since, finish))


def _phase(block, role, state, start, end) -> Event:
    completed, arrived, expected, tx = state
    tx_text = f" tx {tx}" if tx else ""
    return Event(block, role, "phase", f"ph {completed} (par {completed & 1}) {arrived}/{expected}{tx_text}", start,
                 end, "")


def _wait_label(text: str) -> str:
    """A blocked wait as its bar reads: ``wait consumer_barriers[0] parity 1``."""
    text = text.replace("mbarrier.wait on ", "wait ").replace(" for phase parity ", " parity ")
    return _shorten(text.replace("the block-wide barrier after ", "sync after "), 40)


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def write_witness(result, out_dir, schedule: dict | None = None) -> str:
    """Write ``out_dir``/trace.json, timeline.png and summary.txt of ``result``'s counterexample (creating the
    folder) and return the summary: the error, the choices that reproduce it, and the steps."""
    from warpspec.timeline.chart import write_chart
    from warpspec.timeline.trace import write_trace

    timeline = witness_timeline(result, schedule)
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    write_trace(timeline, folder / "trace.json")
    write_chart(timeline, folder / "timeline.png", None)
    lines = [f"counterexample: {type(result.error).__name__} in block {result.block}",
             f"choices that reproduce it: {format_choices(result.choices)}", "", str(result.error), "", "steps:"]
    for index, step in enumerate(result.steps):
        who = step.task.name if step.task is not None else "?"
        where = step.end_loc if step.process[0] == "t" else step.start_loc
        lines.append(f"  {index:4d}  {who:<22} {step.what[:70]:<70} {_line(where)}")
    text = "\n".join(lines) + "\n"
    (folder / "summary.txt").write_text(text)
    return text
