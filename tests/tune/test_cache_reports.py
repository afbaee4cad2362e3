"""Stored tuning reports with a field of the wrong type (edited by hand, written by another version): never used,
tuned again and replaced, so that printing or launching from them cannot fail later."""

import json

import pytest

from tests.tune.test_tuner import ARGS, FakeBench, NarrowV3, fake_compiler
from warpspec import use_backend
from warpspec.tune import cache, tuner

TIMES = {64: 2.0, 128: 0.5, 32: 3.0, 96: 1.0}


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("WARPSPEC_CACHE_DIR", str(tmp_path))
    for name, value in vars(tuner.settings).items():
        monkeypatch.setattr(tuner.settings, name, value)


def winner(record):
    return next(f for f in record["fates"] if f["fate"] == "winner")


@pytest.mark.parametrize("damage", [
    pytest.param(lambda r: r.update(seconds="3.5"), id="seconds a string"),
    pytest.param(lambda r: r.update(seconds=None), id="seconds null"),
    pytest.param(lambda r: r.update(kernel=["NarrowV3"]), id="kernel"),
    pytest.param(lambda r: r.update(fates={"block_n": 128}), id="fates"),
    pytest.param(lambda r: winner(r).update(schedule=[["block_n", 128]]), id="schedule"),
    pytest.param(lambda r: r["fates"][0].update(fate="champion"), id="fate"),
    pytest.param(lambda r: r["fates"][0].update(reason=None), id="reason"),
    pytest.param(lambda r: winner(r).update(time_ms="fast"), id="time_ms"),
    pytest.param(lambda r: winner(r).update(build_s=[0.5]), id="build_s"),
    pytest.param(lambda r: winner(r).update(registers="104"), id="registers a string"),
    pytest.param(lambda r: winner(r).update(registers=True), id="registers a bool"),
    pytest.param(lambda r: winner(r).update(shared_bytes=1.5), id="shared_bytes"),
    pytest.param(lambda r: winner(r).update(spill_bytes={}), id="spill_bytes"),
    pytest.param(lambda r: winner(r).update(instructions={"HGMMA": "4"}), id="instruction count a string"),
    pytest.param(lambda r: winner(r).update(instructions=[4]), id="instructions a list"),
    pytest.param(lambda r: winner(r).update(colour="red"), id="a field too many"),
    pytest.param(lambda r: winner(r).pop("reason"), id="a field missing"),
])
def test_a_record_with_a_wrongly_typed_field_is_tuned_again(monkeypatch, damage):
    tuned = NarrowV3()
    compiled = fake_compiler(monkeypatch, tuned, {})
    bench = FakeBench("block_n", TIMES)
    tuner.configure(bench=bench)
    with use_backend("cuda"):
        tuned(*ARGS)
    path = cache.entry_path(tuned.last_report.key)
    record = json.loads(path.read_text())
    damage(record)
    path.write_text(json.dumps(record))
    fresh = NarrowV3()
    with use_backend("cuda"):
        fresh(*ARGS)
    report = fresh.last_report
    assert not report.from_cache
    assert len(bench.timed) == 8 and len(compiled) == 8 and report.winner.schedule == {"block_n": 128}
    assert str(report).splitlines()[-1].startswith("NarrowV3: 6 schedules (3 timed, 2 pruned, 1 winner) in ")
    again = NarrowV3()  # the damaged record was replaced by a good one
    with use_backend("cuda"):
        again(*ARGS)
    assert again.last_report.from_cache and len(bench.timed) == 8
    assert "(an earlier run's report, from the tuning cache)" in str(again.last_report)
