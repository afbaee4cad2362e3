"""Tuning records never reach outside the cache: a ``tuning/`` folder that is a link is refused by ``clear_cache``,
``store``, ``load`` and ``entry_sizes``, only regular ``.json`` records are removed, and a huge file at a record's
name is never read."""

from __future__ import annotations

import hashlib
import os
import pathlib
import time
import tracemalloc

import pytest

from warpspec.cuda.compiler import clear_cache
from warpspec.errors import CacheFolderError
from warpspec.tune import cache

MATERIAL = {"kernel": "safety", "sizes": [1, 2]}


def snapshot(folder: pathlib.Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in folder.rglob("*") if p.is_file()}


@pytest.fixture
def root(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    folder.mkdir()
    monkeypatch.setenv("WARPSPEC_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def outside(tmp_path):
    folder = tmp_path / "precious"
    folder.mkdir()
    key = cache.entry_key(MATERIAL)
    (folder / f"{key}.json").write_text('{"a": "record-named file of the user"}')
    (folder / "budget.json").write_text("[1, 2, 3]")
    return folder


def test_a_tuning_folder_that_is_a_link_is_refused(root, outside):
    before = snapshot(outside)
    (root / "tuning").symlink_to(outside, target_is_directory=True)
    found = []
    assert clear_cache("tuning", on_error=lambda path, error: found.append((path, error))) == 0
    ((path, error),) = found
    assert path == root / "tuning" and isinstance(error, CacheFolderError)
    assert f"{root / 'tuning'} is a symbolic link (to {outside})" in str(error)
    key = cache.entry_key(MATERIAL)
    assert cache.load(key, MATERIAL) is None
    with pytest.warns(RuntimeWarning, match=r"could not write the tuning record .*is a symbolic link"):
        assert cache.store(key, MATERIAL, {"fates": []}) is None
    with pytest.raises(CacheFolderError, match="is a symbolic link"):
        cache.entry_sizes("tuning")
    assert snapshot(outside) == before


def test_only_regular_json_records_are_removed_and_counted(root, outside):
    before = snapshot(outside)
    folder = root / "tuning"
    folder.mkdir()
    key = cache.entry_key(MATERIAL)
    assert cache.store(key, MATERIAL, {"fates": []}) == folder / f"{key}.json"
    (folder / "old.json").mkdir()
    (folder / "old.json" / "x.json").write_text("{}")
    (folder / "linked.json").symlink_to(outside / "budget.json")
    (folder / "notes.txt").write_text("mine")
    assert cache.count_entries("tuning") == 1
    found = []
    assert clear_cache("tuning", on_error=lambda path, error: found.append(path)) == 1
    assert sorted(path.name for path in found) == ["linked.json", "old.json"]
    assert sorted(p.name for p in folder.iterdir()) == ["linked.json", "notes.txt", "old.json"]
    assert snapshot(outside) == before


def test_a_huge_file_at_a_record_name_is_never_read(root):
    key = cache.entry_key(MATERIAL)
    path = cache.entry_path(key)
    path.parent.mkdir()
    with open(path, "wb") as file:
        file.truncate(4 * 2**30)
    tracemalloc.start()
    start = time.perf_counter()
    try:
        assert cache.load(key, MATERIAL) is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - start < 2 and peak < 2**20
    assert cache.store(key, MATERIAL, {"fates": []}) == path  # replaced by the next record
    assert cache.load(key, MATERIAL)["fates"] == [] and os.path.getsize(path) < 2**20
