"""Tuning records on disk: keys, size buckets, atomic writes, rejection of foreign or broken records."""

import importlib.util
import json
import sys
import threading

import pytest

from warpspec.tune import cache

MATERIAL = {"kernel": {"class": "m.K", "source_sha256": "ab"}, "compile_time": {"n_size": 64},
            "sizes": {"m_size": 128}, "device": {"gpu": "NVIDIA H200", "compute_capability": "9.0", "driver": 13000},
            "nvrtc": "13.0"}


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("WARPSPEC_CACHE_DIR", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("size, bucket", [(0, 1), (1, 1), (2, 2), (3, 4), (100, 128), (4096, 4096), (4097, 8192),
                                          (8192, 8192)])
def test_size_bucket_is_the_next_power_of_two(size, bucket):
    assert cache.size_bucket(size) == bucket


def test_key_depends_on_every_part_of_the_material():
    key = cache.entry_key(MATERIAL)
    assert len(key) == 64 and key == cache.entry_key(json.loads(json.dumps(MATERIAL)))
    for part, value in [("sizes", {"m_size": 256}), ("nvrtc", "13.1"), ("compile_time", {"n_size": 128}),
                        ("device", {**MATERIAL["device"], "driver": 13010})]:
        assert cache.entry_key({**MATERIAL, part: value}) != key, part


def test_store_then_load(cache_dir):
    key = cache.entry_key(MATERIAL)
    path = cache.store(key, MATERIAL, {"fates": [{"schedule": {"block": (64, 128)}, "fate": "winner"}]})
    assert path == cache_dir / "tuning" / f"{key}.json"
    record = cache.load(key, MATERIAL)
    assert record["fates"] == [{"schedule": {"block": [64, 128]}, "fate": "winner"}]  # as JSON reads it back
    assert record["material"] == MATERIAL and record["format"] == cache.FORMAT
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind
    assert cache.count_entries("tuning") == 1


def test_records_for_other_material_or_broken_files_are_ignored(cache_dir):
    key = cache.entry_key(MATERIAL)
    cache.store(key, MATERIAL, {"fates": []})
    assert cache.load(key, {**MATERIAL, "nvrtc": "12.9"}) is None  # a record is only good for its own material
    path = cache.entry_path(key)
    path.write_text(path.read_text()[:-20])
    assert cache.load(key, MATERIAL) is None
    path.write_text(json.dumps({"format": cache.FORMAT + 1, "material": MATERIAL}))
    assert cache.load(key, MATERIAL) is None
    assert cache.load("0" * 64, MATERIAL) is None


def test_an_unwritable_cache_warns_and_returns_none(cache_dir):
    (cache_dir / "tuning").write_text("a file where the folder should be")
    with pytest.warns(RuntimeWarning, match="could not write the tuning record"):
        assert cache.store(cache.entry_key(MATERIAL), MATERIAL, {"fates": []}) is None


def test_concurrent_writers_never_expose_a_partial_record():
    key = cache.entry_key(MATERIAL)
    cache.store(key, MATERIAL, {"writer": -1, "fates": []})
    big = [{"schedule": {"i": i}, "fate": "timed", "reason": "x" * 200} for i in range(300)]
    seen, stop = [], threading.Event()

    def write(writer):
        for _ in range(20):
            cache.store(key, MATERIAL, {"writer": writer, "fates": big})

    def read():
        while not stop.is_set():
            seen.append(cache.load(key, MATERIAL))

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    stop.set()
    reader.join()
    assert seen and all(record is not None for record in seen)
    assert {record["writer"] for record in seen} <= {-1, 0, 1, 2, 3}
    assert cache.count_entries("tuning") == 1


def test_source_identity_follows_the_files_of_the_class_and_its_bases(tmp_path, monkeypatch, request):
    base_path, derived_path = tmp_path / "base_module.py", tmp_path / "derived_module.py"
    base_path.write_text("from warpspec import Script\n\nclass Base(Script):\n    def __call__(self):\n        pass\n")
    derived_path.write_text("import base_module\n\nclass Derived(base_module.Base):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    request.addfinalizer(lambda: [sys.modules.pop(name, None) for name in ("derived_module", "base_module")])
    derived = importlib.import_module("derived_module")
    first = cache.source_identity(derived.Derived)
    assert first["class"] == "derived_module.Derived"
    assert cache.source_identity(derived.Derived) == first
    derived_path.write_text(derived_path.read_text() + "# an edit to the class's file\n")
    second = cache.source_identity(derived.Derived)
    base_path.write_text(base_path.read_text() + "# an edit to the kernel body's file\n")
    third = cache.source_identity(derived.Derived)
    assert len({first["source_sha256"], second["source_sha256"], third["source_sha256"]}) == 3


def test_a_record_is_only_served_under_its_own_key(cache_dir):
    other = {**MATERIAL, "sizes": {"m_size": 256}}
    key, other_key = cache.entry_key(MATERIAL), cache.entry_key(other)
    cache.store(key, MATERIAL, {"fates": [{"schedule": {"block": 64}, "fate": "winner"}]})
    cache.store(other_key, other, {"fates": [{"schedule": {"block": 128}, "fate": "winner"}]})
    # A valid record of one key copied over another's (by hand, a sync tool, a bad restore).
    cache.entry_path(other_key).write_bytes(cache.entry_path(key).read_bytes())
    assert cache.load(other_key, other) is None
    assert cache.load(other_key, MATERIAL) is None  # even asked with the copy's own material
    assert cache.load(key, MATERIAL)["fates"][0]["schedule"] == {"block": 64}


@pytest.mark.parametrize("depth", [100_000, 5_000, 200])
@pytest.mark.parametrize("where", ["whole file", "fates"])
def test_a_deeply_nested_record_is_a_miss(cache_dir, where, depth):
    key = cache.entry_key(MATERIAL)
    cache.store(key, MATERIAL, {"fates": []})
    nested = "[" * depth + "]" * depth
    if where == "fates":  # a record right in every other respect
        record = json.loads(cache.entry_path(key).read_text())
        nested = json.dumps({**record, "fates": "HERE"}).replace('"HERE"', f'[{{"schedule": {{"b": {nested}}}}}]')
    cache.entry_path(key).write_text(nested)
    assert cache.load(key, MATERIAL) is None
    assert cache.store(key, MATERIAL, {"fates": []}) == cache.entry_path(key)  # and is simply replaced
    assert cache.load(key, MATERIAL)["fates"] == []
