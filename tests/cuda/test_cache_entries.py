"""Something other than a regular file under a cache entry's name (a FIFO, a directory, a socket, a link to a
device), in the compile cache and the tuning cache: a miss, found at once, never opened for reading in a way that
blocks or never ends, and replaced by the atomic rename where a rename can replace it."""

from __future__ import annotations

import os
import socket
import threading
import warnings

import pytest

from warpspec.cuda.compiler import compile_cuda
from warpspec.tune import cache

KERNEL = 'extern "C" __global__ void entry_probe(float* out) { out[threadIdx.x] = 2.0f; }\n'
MATERIAL = {"kernel": {"class": "m.K", "source_sha256": "ab"}, "sizes": {"m_size": 128}}
SPECIAL = ["fifo", "directory", "socket", "link to /dev/zero"]


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("WARPSPEC_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("WARPSPEC_CACHE", raising=False)
    return tmp_path / "cache"


def make_special(path, kind, monkeypatch):
    """Put a ``kind`` of non-regular file at ``path``; returns what must be closed afterwards (a socket)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        monkeypatch.chdir(path.parent)  # a socket's path is limited to about 100 bytes: bind a relative one
        server.bind(path.name)
        return server
    else:
        path.symlink_to("/dev/zero")
    return None


def within(seconds, call, path):
    """``call()``'s result and the warnings it issued, failing the test if it takes longer than ``seconds`` (a
    reader stuck in the open of a FIFO is then released by opening the FIFO's other end)."""
    outcome = {}

    def run():
        try:
            outcome["value"] = call()
        except BaseException as error:  # noqa: BLE001 - re-raised in the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        thread.start()
        thread.join(seconds)
        if thread.is_alive():
            if path.is_fifo():
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            thread.join(seconds)
            pytest.fail(f"reading the cache entry {path} did not return within {seconds} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"], [str(w.message) for w in caught]


@pytest.mark.parametrize("kind", SPECIAL)
def test_compile_cache_entry_that_is_not_a_regular_file(cache_dir, kind, monkeypatch):
    first = compile_cuda(KERNEL)
    entry = cache_dir / "cubin" / f"{first.key}.cubin"
    entry.unlink()
    server = make_special(entry, kind, monkeypatch)
    try:
        module, warned = within(10, lambda: compile_cuda(KERNEL), entry)
    finally:
        if server is not None:
            server.close()
    assert module.from_cache is False and module.cubin == first.cubin
    if kind == "directory":  # a rename cannot replace a directory: left alone, with a warning
        assert entry.is_dir() and len(warned) == 1
        assert warned[0].startswith(f"warpspec could not write the compile cache entry {entry}: ")
        with pytest.warns(RuntimeWarning, match="could not write the compile cache entry"):
            assert compile_cuda(KERNEL).from_cache is False
    else:
        assert warned == [] and entry.is_file() and not entry.is_symlink()
        assert compile_cuda(KERNEL).from_cache is True


@pytest.mark.parametrize("kind", SPECIAL)
def test_tuning_record_that_is_not_a_regular_file(cache_dir, kind, monkeypatch):
    key = cache.entry_key(MATERIAL)
    server = make_special(cache.entry_path(key), kind, monkeypatch)
    try:
        record, warned = within(10, lambda: cache.load(key, MATERIAL), cache.entry_path(key))
    finally:
        if server is not None:
            server.close()
    assert record is None and warned == []
    assert cache.count_entries("tuning") == 0
    if kind == "directory":
        with pytest.warns(RuntimeWarning, match="could not write the tuning record"):
            assert cache.store(key, MATERIAL, {"fates": []}) is None
    else:
        assert cache.store(key, MATERIAL, {"fates": []}) == cache.entry_path(key)
        assert cache.load(key, MATERIAL)["fates"] == [] and cache.count_entries("tuning") == 1
