"""Decoding an instrumented build's record buffer (warpspec.timeline.gpu.decode) into a Timeline: a synthetic
buffer, laid out as the generated code writes it (warpspec.timeline.profile_isa: a slot counter per recorder, then the
arrays), becomes exactly the expected Events: names with their runtime indices, roles, tiles, stages and phases,
nanoseconds on one axis, the recorded SM, the notes on blocks past the cap, event overflow and clock rates."""

import json

import numpy as np
import pytest

import matmul_v3
import warpspec
from warpspec.timeline import profile_isa as records
from warpspec.runtime import kernel_for
from warpspec.timeline.events import Event, Occupancy, Shortfall
from warpspec.timeline.gpu import buffer_words, decode, instrumented
from warpspec.timeline.summary import summarize

PRODUCER, CONSUMER = "producer (threads 128-159)", "consumer (threads 0-127)"


SCRIPT = matmul_v3.MatmulWGMMAV3(num_stages=2, block_m=128, block_n=128, block_k=64)


def v3_build(capacity=2, sm=0):
    return instrumented(kernel_for(SCRIPT, {"n_size": 2048, "k_size": 2048}), 2, capacity, sm)


def event_word(site, index, phase=0, tile=0):
    """An event's first word as the device packs it: site in bits 0-15, index in 16-31, phase in 32, tile from 33."""
    return site | index << 16 | phase << 32 | tile << 33


def write_array(words, build, slot, recorder, header, events):
    """Fill recorder ``recorder`` of record slot ``slot`` as the device does: header words by name, events as
    (site, index, start cycle, end cycle) or (site, index, start cycle, end cycle, phase, tile)."""
    base = records.array_start(slot, recorder, len(build.recorders), build.capacity)
    for word, value in header.items():
        words[base + word] = value
    for i, (site, index, start, end, *phase_and_tile) in enumerate(events):
        at = base + records.HEADER_WORDS + records.EVENT_WORDS * i
        words[at:at + 3] = [event_word(site, index, *phase_and_tile), start + CLOCK0, end + CLOCK0]


EPOCH_NS = 1_764_579_600_000_000_000  # %globaltimer counts from an epoch: 2025-12-01 in ns
CLOCK0 = 7_000_000_000_000  # and %clock64 from the SM's start


def header(count, sm, block, start_ns, start_clock, end_ns, end_clock):
    """A header with times relative to EPOCH_NS and CLOCK0 (a float of the absolute timer is 256 ns coarse)."""
    start_ns, end_ns, start_clock, end_clock = (start_ns + EPOCH_NS, end_ns + EPOCH_NS, start_clock + CLOCK0,
                                                end_clock + CLOCK0)
    x, y, z = block
    return {records.WRITTEN: 1, records.COUNT: count, records.SMID: sm, records.BLOCK: x | y << 21 | z << 42,
            records.START_NS: start_ns, records.START_CLOCK: start_clock, records.END_NS: end_ns,
            records.END_CLOCK: end_clock}


def synthetic_buffer(build):
    """Two blocks that ran on the recorded SM, one per slot; the counters say so."""
    words = np.zeros(buffer_words(build), np.uint64)
    words[:len(build.recorders)] = 2
    sm = build.sm
    sites = {(s.kind, s.name): i for i, s in enumerate(build.sites)}
    consumer_wait = sites[("wait", "wait consumer_barriers[{index}]")]
    producer_wait = next(i for i, s in enumerate(build.sites) if s.name == "wait producer_barriers[{index}]")
    # Block (0, 0, 0): 100 us of globaltimer over 200,000 cycles, so 0.5 ns per cycle; the producer (recorder 1)
    # started 50 ns after the consumer (recorder 0), on the same SM clock.
    write_array(words, build, 0, 0, header(2, sm, (0, 0, 0), 1_000_000, 10_000, 1_100_000, 210_000),
                [(consumer_wait, 1, 10_200, 10_400, 1, 0), (sites[("wgmma", "wgmma")], 1, 10_400, 10_600)])
    write_array(words, build, 0, 1, header(1, sm, (0, 0, 0), 1_000_050, 10_100, 1_050_050, 110_100),
                [(producer_wait, 1, 10_100, 10_300, 1, 0)])
    # Block (15, 15, 0), a wave later: 5 events for room for 2, and a 10 us span: converted at the device clock
    # rate.
    write_array(words, build, 1, 0, header(5, sm, (15, 15, 0), 2_000_000, 50_000, 2_010_000, 70_000),
                [(sites[("epilogue", "epilogue")], 0, 50_100, 50_600), (sites[("sync", "sync")], 0, 50_100, 50_200)])
    # Recorder 1 of slot 1 never finished (written stays 0): it is skipped.
    return words, sites


def test_a_record_buffer_decodes_into_named_events_on_one_time_axis():
    build = v3_build(sm=5)
    words, sites = synthetic_buffer(build)
    timeline = decode(words, build, kernel_ns=123_456.0, clock_hz=1e9, flops=2.0 * 2048 ** 3)
    line = {i: str(s.loc) for i, s in enumerate(build.sites)}
    wait_c, wait_p = sites[("wait", "wait consumer_barriers[{index}]")], 0
    # V3 computes one tile per block: tile 0 throughout. A wait's stage is its barrier's index and its phase the
    # parity recorded; the WGMMA run's stage is the index it recorded (its B tile's); others have neither.
    assert timeline.events == [
        Event((0, 0, 0), CONSUMER, "wait", "wait consumer_barriers[1]", 50.0, 150.0, line[wait_c], 5,
              "consumer_barriers[1]", tile=0, stage=1, phase=1),
        Event((0, 0, 0), CONSUMER, "wgmma", "wgmma", 150.0, 250.0, line[sites[("wgmma", "wgmma")]], 5, None,
              tile=0, stage=1),
        Event((0, 0, 0), PRODUCER, "wait", "wait producer_barriers[1]", 0.0, 100.0, line[wait_p], 5,
              "producer_barriers[1]", tile=0, stage=1, phase=1),
        Event((15, 15, 0), CONSUMER, "epilogue", "epilogue", 1_000_050.0, 1_000_550.0,
              line[sites[("epilogue", "epilogue")]], 5, None, tile=0),
        Event((15, 15, 0), CONSUMER, "sync", "sync", 1_000_050.0, 1_000_150.0, line[sites[("sync", "sync")]], 5,
              None, tile=0),
    ]
    assert (timeline.kernel, timeline.source, timeline.kernel_ns, timeline.flops) == \
        ("MatmulWGMMAV3", "gpu", 123_456.0, 2.0 * 2048 ** 3)
    assert timeline.schedule["num_stages"] == 2 and timeline.schedule["block_k"] == 64
    assert timeline.roles == [CONSUMER, PRODUCER] and timeline.sm == 5
    assert timeline.notes == [
        "every block that ran on SM 5 recorded (2), each role's first warp",
        "1 block(s) ran shorter than 20 us: their cycles were converted at the device clock rate, 1.000 GHz",
    ]
    assert timeline.shortfalls == [Shortfall((15, 15, 0), CONSUMER, 2, 5)] and not timeline.complete


def test_a_record_past_its_capacity_gives_no_shares_of_the_fragment(tmp_path):
    build = v3_build()
    words, _ = synthetic_buffer(build)
    timeline = decode(words, build, kernel_ns=1_442_000.0, clock_hz=1e9, flops=2.0 * 8192 ** 3)
    text = warpspec.timeline.write(timeline, tmp_path)
    assert "measured kernel time: 1442.0 us (762 TFLOP/s)" in text
    assert ("incomplete record: 1 role(s) ran past the record's capacity, 2 of their 5 events recorded:\n"
            f"  block (15, 15, 0), {CONSUMER}: 2 of 5 events\n"
            "waits, stage occupancy, tensor-core busy share and diagnosis: not given, they would be a fragment's; "
            "profile(capacity=5) records every event\n") in text
    for fragment in ("waits on", "stage occupancy:", "tensor cores busy", "\ndiagnosis:"):
        assert fragment not in text
    trace = json.loads((tmp_path / "trace.json").read_text())
    assert trace["otherData"]["incomplete"] == [{"block": [15, 15, 0], "role": CONSUMER, "recorded": 2,
                                                 "needed": 5}]


def test_an_empty_buffer_has_no_events_and_a_wrong_one_is_refused():
    build = v3_build()
    timeline = decode(np.zeros(buffer_words(build), np.uint64), build, kernel_ns=1.0, clock_hz=1e9)
    assert timeline.events == [] and timeline.roles == [CONSUMER, PRODUCER]
    assert timeline.notes == ["no block ran on SM 0: nothing was recorded"]
    with pytest.raises(warpspec.ArgumentError, match=f"a record buffer of {buffer_words(build)} words was expected"):
        decode(np.zeros(7, np.uint64), build, kernel_ns=1.0, clock_hz=1e9)
    words = np.zeros(buffer_words(build), np.uint64)
    write_array(words, build, 0, 0, header(1, 0, (0, 0, 0), 0, 0, 0, 0), [(len(build.sites), 0, 0, 1)])
    with pytest.raises(warpspec.ArgumentError, match=f"names site {len(build.sites)}; the build has"):
        decode(words, build, kernel_ns=1.0, clock_hz=1e9)


def test_instrumented_builds_are_made_once_per_kernel_and_settings():
    build = v3_build()
    assert v3_build() is build and v3_build(capacity=3) is not build and v3_build(sm=1) is not build
    # Two recorders' counters, then two slots of two recorders' arrays.
    assert buffer_words(build) == 2 + 2 * 2 * (records.HEADER_WORDS + records.EVENT_WORDS * 2)


def test_blocks_past_the_cap_are_counted_and_a_block_short_of_slots_is_left_out():
    build = v3_build()
    words = np.zeros(buffer_words(build), np.uint64)
    words[:2] = 5  # five blocks ran on SM 0, the cap is two
    wait = next(i for i, s in enumerate(build.sites) if s.kind == "wait" and s.group.begin == 0)
    for recorder in (0, 1):
        write_array(words, build, 0, recorder, header(1, 0, (3, 0, 0), 0, 0, 100_000, 200_000), [(wait, 0, 10, 20)])
    # The last slot went to block (4, 0, 0)'s consumer but to block (5, 0, 0)'s producer: both are incomplete.
    write_array(words, build, 1, 0, header(1, 0, (4, 0, 0), 0, 0, 100_000, 200_000), [(wait, 0, 10, 20)])
    write_array(words, build, 1, 1, header(0, 0, (5, 0, 0), 0, 0, 100_000, 200_000), [])
    timeline = decode(words, build, kernel_ns=1.0, clock_hz=1e9)
    assert {e.block for e in timeline.events} == {(3, 0, 0)}
    assert timeline.notes == [
        "the first 2 of the 5 blocks that ran on SM 0 recorded, each role's first warp (profile(blocks=...) raises "
        "the cap)",
        "2 block(s) at the cap got a slot for only some of their roles and are left out"]


def test_a_decoded_timeline_goes_through_the_timeline_writers(tmp_path):
    import json

    from warpspec.timeline import write

    build = v3_build()
    words, _ = synthetic_buffer(build)
    timeline = decode(words, build, kernel_ns=123_456.0, clock_hz=1e9, flops=2.0 * 2048 ** 3)
    summary = write(timeline, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.txt", "timeline.png", "trace.json"]
    assert "(GPU)" in summary.splitlines()[0] and "measured kernel time: 123.5 us (139 TFLOP/s)" in summary
    trace = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert sorted(e["name"] for e in trace if e.get("ph") == "X") == sorted(e.name for e in timeline.events)


def fields(text: str) -> list[str]:
    """A summary's field names in order: each unindented line's text before its colon, past the kernel line
    (role lines and notes vary with the timeline; "measured"/"modeled" name the source)."""
    lines = [line for line in text.splitlines()[1:] if not line.startswith(("  ", "note: "))]
    return [line.split(":")[0].removeprefix("measured ").removeprefix("modeled ") for line in lines]


def test_measured_and_modeled_summaries_print_the_same_fields():
    from tests.support.timeline import modeled_matmul
    from warpspec.timeline.events import Occupancy
    from warpspec.timeline.summary import summarize

    build = v3_build()
    words, _ = synthetic_buffer(build)
    # Block (15, 15, 0)'s consumer ran 2 events, not 5: a whole record, which a summary reads in full.
    words[records.array_start(1, 0, len(build.recorders), build.capacity) + records.COUNT] = 2
    occupancy = Occupancy(2, "registers", 66560, 168, 160, "the driver's occupancy query")
    measured = summarize(decode(words, build, kernel_ns=123_456.0, clock_hz=1e9, flops=1e9, occupancy=occupancy))
    modeled = summarize(modeled_matmul(matmul_v3.MatmulWGMMAV3, 512, num_stages=2, block_m=128, block_n=128,
                                       block_k=64))
    expected = ["kernel time", "blocks per SM", "2 block(s) of SM 0; waits as a share of each role's active time",
                "stage occupancy", "tensor cores busy", "diagnosis"]
    assert fields(measured.text()) == expected
    assert fields(modeled.text())[:2] + fields(modeled.text())[3:] == expected[:2] + expected[3:]
    assert fields(modeled.text())[2] == "1 block(s) of SM 0; waits as a share of each role's active time"
    assert "blocks per SM: 2 (limited by registers; 65 KB of shared memory, 168 registers x 160 threads each; the " \
           "driver's occupancy query)" in measured.text()
    assert (measured.metrics.keys(), measured.metrics["blocks_per_sm"]) == (modeled.metrics.keys(), 2)


def test_a_persistent_kernels_records_decode_with_their_tiles_stages_and_phases():
    """V6 cooperative (3 stages): each event's first word carries the tile its recorder was in; a wait's stage is
    its barrier's index and its phase the parity it waited for; a TMA load's stage is its tile's index; a TMA store
    (out of the epilogue buffer) and a wait_group have no stage, and only waits have a phase."""
    from tests.timeline.test_instrument import v6

    build = instrumented(v6(), 1, 8)
    named = {s.name: i for i, s in enumerate(build.sites)}  # a name's last site: the final tma.wait_group(0)
    empty = [i for i, s in enumerate(build.sites) if s.name == "wait empty_barriers[{index}]"]  # loop, drain
    words = np.zeros(buffer_words(build), np.uint64)
    words[:len(build.recorders)] = 1
    consumer, producer = build.recorders.index(0), build.recorders.index(256)
    write_array(words, build, 0, producer, header(3, 0, (3, 0, 0), 0, 0, 100_000, 200_000), [
        (empty[0], 2, 10, 20, 1, 0), (named["tma ga -> sa[{index}]"], 2, 20, 30, 0, 0),
        (empty[1], 0, 900, 950, 0, 5)])  # the drain's wait, after the last (sixth) tile
    write_array(words, build, 0, consumer, header(4, 0, (3, 0, 0), 0, 0, 100_000, 200_000), [
        (named["wait full_barriers[{index}]"], 2, 40, 60, 0, 4), (named["wgmma"], 2, 60, 70, 0, 4),
        (named["tma sc[{index}] -> gc"], 0, 80, 90, 0, 4), (named["tma.wait_group(0)"], 0, 90, 95, 0, 2**31 - 1)])
    timeline = decode(words, build, kernel_ns=1.0, clock_hz=1e9)
    got = [(e.role, e.name, e.tile, e.stage, e.phase) for e in timeline.events]
    assert got == [
        ("consumer (threads 0-255)", "wait full_barriers[2]", 4, 2, 0),
        ("consumer (threads 0-255)", "wgmma", 4, 2, None),
        ("consumer (threads 0-255)", "tma sc[0, 0] -> gc", 4, None, None),
        ("consumer (threads 0-255)", "tma.wait_group(0)", 2**31 - 1, None, None),  # the most a record holds
        ("producer (threads 256-287)", "wait empty_barriers[2]", 0, 2, 1),
        ("producer (threads 256-287)", "tma ga -> sa[2]", 0, 2, None),
        ("producer (threads 256-287)", "wait empty_barriers[0]", 5, 0, 0),
    ]


def persistent_block(group_ns, epilogue_ns, k_tiles=16, tiles=2):
    """The record buffer of one V6 cooperative block (4 stages of 128 x 256) that walks ``tiles`` tiles of
    ``k_tiles`` K-tiles on SM 0, shaped as the H200 recorded V6 at 8192^3: the tensor cores run the groups back to
    back, ``group_ns`` each, and issuing a group's WGMMAs stalls until the group before it is almost done, so its
    commit comes 30 ns before that group ends and the ``wgmma.wait_group(1)`` after it returns at once. Then
    ``epilogue_ns`` of epilogue per tile. One cycle is one ns. Returns the build, the buffer and the tensor cores'
    true busy share over the block's span."""
    from matmul_v6 import MatmulWGMMAV6

    script = MatmulWGMMAV6(variant="cooperative", num_stages=4, block_m=128, block_n=256, epilogue_n=64)
    build = instrumented(kernel_for(script, {"n_size": 8192, "k_size": 64 * k_tiles}), 1, 4096)
    site = {(s.kind, s.name): i for i, s in enumerate(build.sites)}
    full, wgmma = site[("wait", "wait full_barriers[{index}]")], site[("wgmma", "wgmma")]
    in_loop, last = site[("wgmma_wait", "wgmma.wait_group(1)")], site[("wgmma_wait", "wgmma.wait_group(0)")]
    epilogue = site[("epilogue", "epilogue")]
    consumer, producer = [], []
    now, previous_end, busy, k = 100, 0, 0, 0
    for tile in range(tiles):
        for step in range(k_tiles):
            stage = k % 4
            producer.append((0, stage, now - 60, now - 50, 1, tile))  # its empty wait, a stage ahead
            consumer.append((full, stage, now, now + 10, k // 4 & 1, tile))
            commit = max(now + 20, previous_end - 30)
            consumer.append((wgmma, stage, now + 10, commit, 0, tile))
            previous_end = max(commit, previous_end) + group_ns
            busy += group_ns
            wait_from = commit
            now = max(commit, previous_end - group_ns) + 10  # the group before it is done
            consumer.append((in_loop, 0, wait_from, now, 0, tile))
            now += 5
            k += 1
        consumer.append((last, 0, now, previous_end + 10, 0, tile))
        now = previous_end + 10 + epilogue_ns
        consumer.append((epilogue, 0, previous_end + 10, now, 0, tile))
        now += 100
    words = np.zeros(buffer_words(build), np.uint64)
    words[:len(build.recorders)] = 1
    for recorder, events in ((build.recorders.index(0), consumer), (build.recorders.index(256), producer)):
        write_array(words, build, 0, recorder, header(len(events), 0, (0, 0, 0), 0, 0, now, now), events)
    events = consumer + producer
    return build, words, busy / (max(e[3] for e in events) - min(e[2] for e in events))


def test_a_group_kept_in_flight_counts_busy_until_the_wait_that_shows_it_done():
    """V6 measured on the H200 (2026-12-04, 8192^3) gave "tensor cores busy: 15%" at 758 TFLOP/s, when at least
    ~75% was needed to reach that rate. Its consumers keep one WGMMA group in flight (``wgmma.wait_group(1)``): the
    wait after a commit shows only the group before it done, and with WGMMA issue stalled behind the running group
    that wait passes at once, so a group counted from its commit to the next wait lasted ~30 ns of its 700. A group
    is shown done by the first wait that leaves no more groups in flight than were committed after it."""
    build, words, true_busy = persistent_block(group_ns=700, epilogue_ns=1500)
    timeline = decode(words, build, kernel_ns=1.0, clock_hz=1e9,
                      occupancy=Occupancy(1, "shared memory", 230400, 168, 384, "the driver's occupancy query"))
    summary = summarize(timeline)
    assert [e.pending for e in timeline.events if e.kind == "wgmma_wait"][:2] == [1, 1]
    assert summary.tensor_busy == pytest.approx(true_busy, abs=0.02) and summary.tensor_busy > 0.85
    assert summary.metrics["consumer_warpgroups"] == 2 and summary.metrics["tiles_per_block"] == 2
    assert summary.diagnosis().startswith("no stall dominates")


def test_a_persistent_kernel_with_two_consumer_warpgroups_is_not_told_to_become_one():
    """One block per SM and the tensor cores idle through long epilogues: the advice for a kernel that already is
    persistent with two consumer warpgroups names what is left, not a persistent kernel with two warpgroups."""
    build, words, true_busy = persistent_block(group_ns=700, epilogue_ns=9000)
    timeline = decode(words, build, kernel_ns=1.0, clock_hz=1e9,
                      occupancy=Occupancy(1, "shared memory", 230400, 168, 384, "the driver's occupancy query"))
    summary = summarize(timeline)
    assert summary.tensor_busy == pytest.approx(true_busy, abs=0.02) and summary.tensor_busy < 0.70
    assert summary.diagnosis().startswith(f"one block per SM and the tensor cores busy only "
                                          f"{summary.tensor_busy:.0%}, although the kernel is persistent with 2 "
                                          f"consumer warpgroups")
    assert "a persistent kernel with two consumer warpgroups" not in summary.diagnosis()
