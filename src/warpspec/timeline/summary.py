"""What a timeline says in numbers and words: each role's share of time waiting on each barrier, stage occupancy,
tensor-core busy share, TFLOP/s, and a diagnosis with a suggestion from one table of rules.

Everything is computed from the events alone, so GPU and modeled timelines read alike:

- a role's active span in a block runs from its first event's start to its last event's end; a wait share is the
  time in waits on one barrier array over that span (summed over the sampled blocks);
- a barrier array is a "full" one when consumer roles (those issuing WGMMA) wait on it, an "empty" one when
  producer roles (those issuing TMA loads) do: from the roles, not from the names;
- a stage counts as full from its full barrier's completion until the consumers' next wait on a full barrier
  (their release of it comes just before). The completion is the end of the consumers' wait when that wait
  blocked; when it did not, the completion is not observable, and the end of the last TMA issue into the stage
  stands for it (so a stage whose copy is still landing counts as full). Occupancy is the mean number of full
  stages over the consumers' span;
- the tensor cores count as busy from a WGMMA group's first instruction (the ``wgmma`` event's start: the tensor
  cores take each instruction as it issues, and issue waits on them, so that a run's issue takes about as long as
  its work; on the H200, V6's four m64n256k16 per warpgroup issue in 0.33 us) to the end of the issuing role's
  first ``wgmma_wait`` that shows it complete (``wgmma.wait_group(n)`` with at most n of the role's groups
  committed after it): the group runs (or queues behind another block's) in between. The busy share is the
  union of those intervals over the blocks of one SM (all blocks of the model's SM; on the GPU, every block
  recorded on the profiled SM) over their span, averaged over SMs weighted by span;
- blocks per SM: what the timeline knows of the launch (the model's count, or the driver's occupancy query on
  the GPU), and beside it the most recorded blocks whose spans (first event to last) overlap.

A timeline filtered to some tiles or stages (``Timeline.select``) gives the numbers of its events, and its summary
says so first. Filtered to tiles, each tile of a block counts on its own (a role's active span is the sum of its
tiles' spans; stage occupancy and the tensor cores' busy share are taken tile by tile, the latter over the span of
the roles issuing WGMMA), so that the tiles left out between two chosen ones count for nothing. Filtered to
stages, only the waits are given: stage occupancy, the tensor cores' busy share and the diagnosis need every
stage's events (a wait_group has no stage).
"""

from __future__ import annotations

import operator
import re
from collections import defaultdict
from dataclasses import dataclass, field

from warpspec.target import SM90A
from warpspec.timeline.events import Timeline

#: A wait shorter than this did not block. One try_wait that passes takes a few tens of ns, and in an instrumented
#: build up to about 100 ns with its timestamps: on the H200, V3's and V6's consumer waits that passed took 32-100 ns
#: (V6: median 68), so a bound of 50 ns counted most of V6's passing waits as blocked and its stages as full only
#: from the consumers' wait (1.37 of 4 stages full, 2.51 with this bound) while the model's 10 ns waits counted
#: from the copy.
BLOCKED_WAIT_NS = 100.0

#: The diagnosis: the first rule whose conditions all hold gives the line. Conditions are (metric, comparison,
#: threshold) over ``Summary.metrics``; a metric that is unknown (None) fails its condition.
RULES = (
    # Without WGMMA, a launch that moves its views' bytes near HBM's rate is bound by memory, whatever its roles wait
    # on: their waits are the memory's pace.
    ((("wgmma", "==", 0), ("hbm_share", ">=", 0.60)),
     "no WGMMA, and the launch moves its global views' {view_mb:.0f} MB at {hbm_tbps:.2f} TB/s, {hbm_share:.0%} of "
     "the HBM bandwidth the device sustains: bound by memory; the roles' waits are the memory's pace, and only "
     "fewer bytes (or reads served from L2) would gain"),
    ((("consumers_full_wait", ">", 0.20),),
     "consumers wait on full barriers {consumers_full_wait:.0%} of the time: the producers can't keep up; try more "
     "stages or larger K tiles"),
    # A persistent kernel with two consumer warpgroups already is what the next row suggests.
    ((("blocks_per_sm", "==", 1), ("tensor_busy", "<", 0.70), ("consumer_warpgroups", ">=", 2),
      ("tiles_per_block", ">=", 2)),
     "one block per SM and the tensor cores busy only {tensor_busy:.0%}, although the kernel is persistent with "
     "{consumer_warpgroups:.0f} consumer warpgroups: they idle between WGMMA groups or between tiles; keep a WGMMA "
     "group in flight through the K loop (wgmma.wait_group(1)), let one warpgroup's epilogue run under the other's "
     "MMAs (ping-pong), or use the widest WGMMA the tile allows (N = 256)"),
    ((("blocks_per_sm", "==", 1), ("tensor_busy", "<", 0.70)),
     "one block per SM and the tensor cores busy only {tensor_busy:.0%}: the pipeline is deep enough, but one "
     "block cannot keep the tensor cores busy (they idle while its consumers wait for each WGMMA group); use fewer "
     "stages or smaller tiles so that 2-3 blocks share the SM, or a persistent kernel with two consumer "
     "warpgroups (V3 at 8192^3 on the H200: 6 stages, one block per SM, 473 TFLOP/s; 2 stages, two blocks, 595)"),
    ((("producers_empty_wait", ">", 0.50), ("tensor_busy", ">", 0.95)),
     "producers wait on empty barriers {producers_empty_wait:.0%} of the time while the tensor cores are busy "
     "{tensor_busy:.0%}: compute-bound, as a matmul should be; only a faster WGMMA shape (larger N) or fewer "
     "instructions per tile gain more"),
    ((("producers_empty_wait", ">", 0.50), ("tensor_busy", "<=", 0.95)),
     "producers wait on empty barriers {producers_empty_wait:.0%} of the time but the tensor cores are busy only "
     "{tensor_busy:.0%}: the consumers are the bottleneck outside WGMMA; keep a WGMMA group in flight "
     "(wgmma.wait_group(1)), add a consumer warpgroup, or fit a second block per SM (fewer stages)"),
    ((("producers_empty_wait", ">", 0.50),),
     "producers wait on empty barriers {producers_empty_wait:.0%} of the time: the roles that empty the stages set "
     "the pace; make their work per stage cheaper, or split it over more threads"),
    ((("epilogue_share", ">", 0.20),),
     "the epilogue takes {epilogue_share:.0%} of the consumers' time: give each block more K per output tile, or "
     "overlap the store with the next tile's loads"),
    ((),
     "no stall dominates: consumers wait on full barriers {consumers_full_wait:.0%} and producers on empty "
     "barriers {producers_empty_wait:.0%} of the time"),
)

_COMPARE = {">": operator.gt, "<": operator.lt, ">=": operator.ge, "<=": operator.le, "==": operator.eq}


@dataclass
class Summary:
    """The numbers of one timeline. ``waits``: (role, barrier array) -> share of the role's active time;
    ``kinds``: barrier array -> "full", "empty" or "other"; ``metrics``: the rule table's inputs."""

    timeline: Timeline
    waits: dict = field(default_factory=dict)
    kinds: dict = field(default_factory=dict)
    occupancy: float | None = None
    stages: int | None = None
    tensor_busy: float | None = None
    at_once: int | None = None
    metrics: dict = field(default_factory=dict)

    @property
    def tflops(self) -> float | None:
        """TFLOP/s of the launch, when its useful flops are known."""
        t = self.timeline
        return t.flops / t.kernel_ns / 1e3 if t.flops and t.kernel_ns else None

    def rule(self) -> int:
        """The index in ``RULES`` of the first rule that holds (the diagnosis's)."""
        for index, (conditions, _) in enumerate(RULES):
            if all(self.metrics.get(m) is not None and _COMPARE[op](self.metrics[m], limit)
                   for m, op, limit in conditions):
                return index
        raise AssertionError("the last rule has no conditions")

    def diagnosis(self) -> str:
        """The first rule of ``RULES`` that holds, filled in."""
        values = {k: (v if v is not None else 0.0) for k, v in self.metrics.items()}
        return RULES[self.rule()][1].format(**values)

    def text(self) -> str:
        """The summary as ``warpspec timeline`` prints it: the same lines for measured and modeled timelines."""
        t = self.timeline
        schedule = " ".join(f"{k}={v}" for k, v in t.schedule.items())
        what = "modeled" if t.source == "model" else "measured"
        rate = f" ({self.tflops:.0f} TFLOP/s)" if self.tflops else ""
        where = f"SM {t.sm}" if t.sm is not None else "one SM"
        blocks = len({e.block for e in t.events})
        per_sm = t.occupancy.text() if t.occupancy is not None else "unknown"
        seen = f"; {self.at_once} at once on {where}" if self.at_once else ""
        lines = [f"{t.kernel} {schedule} ({'CPU timing model' if t.source == 'model' else 'GPU'})"]
        if t.selection is not None:
            lines.append(f"filtered to {t.selection.text()}; the shares below are of these events alone")
        lines += [f"{what} kernel time: {t.kernel_ns / 1e3:.1f} us{rate}", f"blocks per SM: {per_sm}{seen}"]
        if not t.complete:
            return "\n".join(lines + self._incomplete() + [f"note: {note}" for note in t.notes]) + "\n"
        stages_only = t.selection is not None and t.selection.stages is not None
        lines.append(f"{blocks} block(s) of {where}; waits as a share of each role's active time:")
        width = max((len(r) for r in t.roles), default=0)
        for role in t.roles:
            mine = [(b, s) for (r, b), s in self.waits.items() if r == role]
            if not mine:
                lines.append(f"  {role:<{width}}  no barrier waits")
            for barrier, share in sorted(mine):
                lines.append(f"  {role:<{width}}  waits on {barrier} ({self.kinds[barrier]}) {share:6.1%}")
        if stages_only:
            lines.append("stage occupancy, tensor-core busy share and diagnosis: not given, they need every stage's "
                         "events")
        else:
            lines.append(f"stage occupancy: {self.occupancy:.2f} of {self.stages} stages full on average"
                         if self.occupancy is not None else
                         "stage occupancy: unknown (no consumer waits on full barriers)")
            lines.append(f"tensor cores busy: {self.tensor_busy:.0%} of the time (the {blocks} block(s) of {where} "
                         f"together)" if self.tensor_busy is not None else "tensor cores busy: unknown (no WGMMA)")
            lines.append(f"diagnosis: {self.diagnosis()}")
        lines += [f"note: {note}" for note in t.notes]
        return "\n".join(lines) + "\n"


    def _incomplete(self) -> list[str]:
        """What a record past its capacity lacks, in place of the shares a fragment would misstate."""
        t = self.timeline
        recorded = sum(short.recorded for short in t.shortfalls)
        needed = sum(short.needed for short in t.shortfalls)
        most = max(short.needed for short in t.shortfalls)
        return ([f"incomplete record: {len(t.shortfalls)} role(s) ran past the record's capacity, {recorded} of "
                 f"their {needed} events recorded:"] +
                [f"  {short.text()}" for short in t.shortfalls] +
                ["waits, stage occupancy, tensor-core busy share and diagnosis: not given, they would be a "
                 f"fragment's; profile(capacity={most}) records every event"])


def array_name(barrier: str) -> str:
    """The barrier array of one barrier: ``full_barriers[2]`` -> ``full_barriers``."""
    return re.sub(r"\[[^\]]*\]$", "", barrier)


def _role_kind(role: str) -> str:
    return role.split(" ", 1)[0]


def _consumer_warpgroups(timeline: Timeline) -> int | None:
    """The warpgroups of a block's consumer roles, from the threads their names give; None without consumers."""
    threads = [int(last) - int(first) + 1 for role in timeline.roles if _role_kind(role) == "consumer"
               for first, last in re.findall(r"threads (\d+)-(\d+)", role)]
    return -(-sum(threads) // SM90A.warpgroup_threads) if threads else None


def _union(intervals) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def summarize(timeline: Timeline) -> Summary:
    """The numbers of ``timeline`` (see the module's docstring for how each is defined)."""
    chosen = timeline.selection
    per_tile = chosen is not None and chosen.tiles is not None
    by_block = defaultdict(list)  # each block's events; filtered to tiles, each tile's of each block
    for event in timeline.events:
        by_block[(event.block, event.tile) if per_tile else event.block].append(event)
    spans: dict = defaultdict(float)  # role -> active time summed over blocks
    waited: dict = defaultdict(float)  # (role, array) -> wait time summed over blocks
    waiters: dict = defaultdict(set)  # array -> role kinds that wait on it
    epilogue = 0.0
    for events in by_block.values():
        by_role = defaultdict(list)
        for e in events:
            by_role[e.role].append(e)
        for role, mine in by_role.items():
            spans[role] += max(e.end_ns for e in mine) - min(e.start_ns for e in mine)
            for e in mine:
                if e.kind == "wait" and e.barrier:
                    waited[(role, array_name(e.barrier))] += e.duration_ns
                    waiters[array_name(e.barrier)].add(_role_kind(role))
                elif e.kind == "epilogue":
                    epilogue += e.duration_ns
    kinds = {a: "full" if "consumer" in w else "empty" if "producer" in w else "other" for a, w in waiters.items()}
    summary = Summary(timeline, {k: v / spans[k[0]] if spans[k[0]] else 0.0 for k, v in waited.items()}, kinds)
    consumer_span = sum(s for r, s in spans.items() if _role_kind(r) == "consumer")
    producer_span = sum(s for r, s in spans.items() if _role_kind(r) == "producer")

    def share(role_kind: str, barrier_kind: str, span: float) -> float | None:
        if not span:
            return None
        return sum(t for (r, a), t in waited.items() if _role_kind(r) == role_kind and kinds[a] == barrier_kind) / span

    summary.at_once = at_once(timeline.events)
    stages_only = chosen is not None and chosen.stages is not None
    if not stages_only:  # the tensor cores' share and the occupancy need every stage's events
        summary.tensor_busy = _tensor_busy(timeline.events, per_tile)
    full = [a for a, k in kinds.items() if k == "full"]
    if full and consumer_span and not stages_only:
        held, summary.stages = _stage_time(by_block, set(full))
        summary.occupancy = held / consumer_span
    summary.metrics = {
        "consumers_full_wait": share("consumer", "full", consumer_span),
        "producers_empty_wait": share("producer", "empty", producer_span),
        "tensor_busy": summary.tensor_busy,
        "epilogue_share": epilogue / consumer_span if consumer_span else None,
        "occupancy": summary.occupancy,
        "blocks_per_sm": timeline.occupancy.blocks if timeline.occupancy is not None else summary.at_once,
        "consumer_warpgroups": _consumer_warpgroups(timeline),
        "tiles_per_block": max((e.tile + 1 for e in timeline.events if e.tile is not None), default=None),
        "wgmma": float(any(e.kind == "wgmma" for e in timeline.events)),
        **_memory(timeline),
    }
    return summary


def _memory(timeline: Timeline) -> dict:
    """The launch's memory metrics, where its views' bytes and the device's HBM rate are known: ``view_mb`` (the
    bytes the global views hold, in MB), ``hbm_tbps`` (those bytes over the launch's time) and ``hbm_share`` (that
    rate over the HBM bandwidth the device sustains)."""
    t = timeline
    if not (t.view_bytes and t.hbm_gbps and t.kernel_ns):
        return {"view_mb": None, "hbm_tbps": None, "hbm_share": None}
    rate = t.view_bytes / t.kernel_ns  # bytes per ns = GB/s
    return {"view_mb": t.view_bytes / 1e6, "hbm_tbps": rate / 1e3, "hbm_share": rate / t.hbm_gbps}


def block_spans(events) -> dict:
    """Each block's span: ``block -> (first event's start, last event's end)``."""
    spans = {}
    for e in events:
        start, end = spans.get(e.block, (e.start_ns, e.end_ns))
        spans[e.block] = (min(start, e.start_ns), max(end, e.end_ns))
    return spans


def at_once(events) -> int | None:
    """The most blocks whose spans overlap (those recorded on one SM: how many it held at once); None without
    events."""
    edges = sorted((t, step) for start, end in block_spans(events).values() for t, step in ((start, 1), (end, -1)))
    most = running = 0
    for _, step in edges:  # at a tie the end (-1) sorts first: a block that starts as another ends replaces it
        running += step
        most = max(most, running)
    return most or None


def _tensor_busy(events: list, per_tile: bool) -> float | None:
    """The tensor cores' busy share (see the module's docstring), None without WGMMA; ``per_tile``: each tile's
    events of an SM taken on their own, over the span of the roles issuing its WGMMA (a producer's part of a tile
    starts while the consumers still work on the one before, so a tile's span over every role would count that
    time twice)."""
    by_sm = defaultdict(list)
    for e in events:
        by_sm[(e.sm if e.sm is not None else e.block, e.tile if per_tile else None)].append(e)
    busy = span = 0.0
    for mine in by_sm.values():
        running = []
        by_role = defaultdict(list)
        for e in sorted(mine, key=lambda e: e.start_ns):
            by_role[(e.block, e.role)].append(e)
        spanned = [] if per_tile else mine
        for role_events in by_role.values():
            running += _groups_in_flight(role_events)
            if per_tile and any(e.kind == "wgmma" for e in role_events):
                spanned += role_events
        if running:
            busy += _union(running)
            span += max(e.end_ns for e in spanned) - min(e.start_ns for e in spanned)
    return busy / span if span else None


def _groups_in_flight(role_events: list) -> list[tuple[float, float]]:
    """Each WGMMA group of one role, from its first instruction's issue to the end of the first
    ``wgmma.wait_group(n)`` that shows it complete: one ending with at most n groups committed after it
    (``Event.pending``). With a group kept in flight (``wait_group(1)``), the wait right after a commit shows only
    the group before it complete, so pairing each commit with the next wait would end a group as the previous one
    ended; when WGMMA issue stalls while the tensor cores are full, that is almost at once. A group in flight while
    its role waits on a full barrier counts to the wait that shows it done (the events cannot show it ending
    sooner). ``role_events`` are in start order."""
    in_flight: list[float] = []  # issue times of the groups not yet shown complete, oldest first
    running = []
    for e in role_events:
        if e.kind == "wgmma":
            in_flight.append(e.start_ns)
        elif e.kind == "wgmma_wait":
            done = max(len(in_flight) - (e.pending or 0), 0)
            running += [(commit, e.end_ns) for commit in in_flight[:done]]
            del in_flight[:done]
    return running


def _stage_time(by_block: dict, full: set) -> tuple[float, int]:
    """Stage-full time summed over the sampled blocks (the values of ``by_block``: each block's events, or each
    tile's of a block), and the number of stages (full barriers seen)."""
    held, stages = 0.0, set()
    for events in by_block.values():
        consumer = next((e.role for e in events if _role_kind(e.role) == "consumer" and e.kind == "wait"
                         and e.barrier and array_name(e.barrier) in full), None)
        if consumer is None:
            continue
        mine = sorted((e for e in events if e.role == consumer), key=lambda e: e.start_ns)
        waits = [e for e in mine if e.kind == "wait" and e.barrier and array_name(e.barrier) in full]
        end = max(e.end_ns for e in mine)
        issues = defaultdict(list)  # barrier -> end times of the TMA issues completing on it
        for e in sorted(events, key=lambda e: e.start_ns):
            if e.kind == "tma" and e.barrier:
                issues[e.barrier].append(e.end_ns)
        fills = defaultdict(int)
        count = defaultdict(int)
        for w in waits:
            count[w.barrier] += 1
        for i, w in enumerate(waits):
            stages.add(w.barrier)
            j = fills[w.barrier]
            fills[w.barrier] += 1
            if w.duration_ns >= BLOCKED_WAIT_NS or not issues[w.barrier]:
                full_at = w.end_ns if w.duration_ns >= BLOCKED_WAIT_NS else w.start_ns
            else:
                per_fill = max(len(issues[w.barrier]) // count[w.barrier], 1)
                landed = issues[w.barrier][min((j + 1) * per_fill, len(issues[w.barrier])) - 1]
                full_at = min(landed, w.start_ns)
            released = waits[i + 1].start_ns if i + 1 < len(waits) else end
            held += max(released - full_at, 0.0)
    return held, len(stages)
