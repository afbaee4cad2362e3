"""The compile cache never touches anything outside it: a ``cubin/`` folder that is a link is refused, only regular
entry files are removed, and an entry is size-checked before it is read (a huge file at an entry's name is never
loaded). Every test hashes a folder outside the cache before and after."""

from __future__ import annotations

import hashlib
import os
import pathlib
import struct
import time
import tracemalloc

import pytest

from warpspec.cuda import compiler
from warpspec.cuda.compiler import clear_cache, compile_cuda
from warpspec.errors import CacheFolderError
from warpspec.tune.tuner import _compile_job

KERNEL = 'extern "C" __global__ void cache_safety_probe(int *out) { out[threadIdx.x] = 1; }'


def snapshot(folder: pathlib.Path) -> dict:
    """Every file below ``folder`` (links not followed) with the sha256 of its contents."""
    found = {}
    for parent, _, names in os.walk(folder):
        for name in names:
            path = pathlib.Path(parent, name)
            found[str(path.relative_to(folder))] = (path.is_symlink(), hashlib.sha256(path.read_bytes()).hexdigest())
    return found


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    root.mkdir()
    monkeypatch.setenv("WARPSPEC_CACHE_DIR", str(root))
    monkeypatch.delenv("WARPSPEC_CACHE", raising=False)
    return root


@pytest.fixture
def outside(tmp_path):
    """A user's folder outside the cache, with files an entry could be confused with."""
    folder = tmp_path / "precious"
    folder.mkdir()
    (folder / "thesis.cubin").write_bytes(b"chapter one")
    (folder / "notes.json").write_text('{"keep": true}')
    (folder / "inner").mkdir()
    (folder / "inner" / "data.cubin").write_bytes(b"more")
    return folder


def reports():
    found = []
    return found, lambda path, error: found.append((path, error))


def test_a_cubin_folder_that_is_a_link_is_refused_by_clear_and_by_compile(cache, outside):
    before = snapshot(outside)
    (cache / "cubin").symlink_to(outside, target_is_directory=True)
    found, on_error = reports()
    assert clear_cache("cubin", on_error=on_error) == 0
    assert clear_cache(on_error=on_error) == 0
    assert [path for path, _ in found] == [cache / "cubin", cache / "cubin"]
    error = found[0][1]
    assert isinstance(error, CacheFolderError) and isinstance(error, OSError)
    assert f"{cache / 'cubin'} is a symbolic link (to {outside})" in str(error)
    assert "does not read, write or remove cache entries through a link" in str(error)
    with pytest.warns(RuntimeWarning, match=r"could not write the compile cache entry .*is a symbolic link"):
        module = compile_cuda(KERNEL)
    assert module.from_cache is False and module.cubin[:4] == b"\x7fELF"
    assert snapshot(outside) == before


def test_only_regular_entry_files_are_removed(cache, outside):
    before = snapshot(outside)
    folder = cache / "cubin"
    folder.mkdir()
    (folder / "a.cubin").write_bytes(b"entry")
    (folder / ".a.1234.tmp").write_bytes(b"half a write")  # an interrupted write: removed, not counted
    (folder / "x.cubin").mkdir()  # a directory named like an entry
    (folder / "x.cubin" / "inside").write_bytes(b"not an entry")
    (folder / "link.cubin").symlink_to(outside / "thesis.cubin")
    (folder / "folder-link.cubin").symlink_to(outside, target_is_directory=True)
    (folder / "README.txt").write_text("not ours")
    found, on_error = reports()
    assert clear_cache("cubin", on_error=on_error) == 1
    assert sorted(path.name for path, _ in found) == ["folder-link.cubin", "link.cubin", "x.cubin"]
    assert all(isinstance(error, CacheFolderError) for _, error in found)
    assert f"{folder / 'x.cubin'} is a directory, not a regular file" in str(dict(found)[folder / "x.cubin"])
    assert f"{folder / 'link.cubin'} is a symbolic link, not a regular file" in str(dict(found)[folder / "link.cubin"])
    assert sorted(p.name for p in folder.iterdir()) == ["README.txt", "folder-link.cubin", "link.cubin", "x.cubin"]
    assert (folder / "x.cubin" / "inside").read_bytes() == b"not an entry"
    assert snapshot(outside) == before


def test_a_huge_file_at_an_entry_name_is_never_read(cache):
    first = compile_cuda(KERNEL)
    entry = cache / "cubin" / f"{first.key}.cubin"
    with open(entry, "r+b") as file:
        file.truncate(4 * 2**30)  # sparse: 4 GiB that take no disk space
    tracemalloc.start()
    start = time.perf_counter()
    try:
        assert compiler._read_entry(entry, first.key) is None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.perf_counter() - start < 2 and peak < 2**20
    module = compile_cuda(KERNEL)  # a miss: compiled again, and the entry replaced
    assert module.from_cache is False and module.cubin == first.cubin
    assert entry.stat().st_size < 2**20 and compile_cuda(KERNEL).from_cache is True


@pytest.mark.parametrize("damage", ["truncated", "foreign", "other-magic", "longer-than-its-header-says"])
def test_an_entry_whose_header_does_not_match_is_a_miss(cache, damage):
    first = compile_cuda(KERNEL)
    entry = cache / "cubin" / f"{first.key}.cubin"
    data = entry.read_bytes()
    forged = {"truncated": data[:-10], "foreign": b"\x7fELF" + os.urandom(200),
              "other-magic": b"WSCUBIN1" + data[8:], "longer-than-its-header-says": data + b"\0"}[damage]
    entry.write_bytes(forged)
    assert compiler._read_entry(entry, first.key) is None
    module = compile_cuda(KERNEL)
    assert module.from_cache is False and module.cubin == first.cubin


def test_a_forged_entry_that_cuobjdump_cannot_read_is_named(cache):
    first = compile_cuda(KERNEL)
    entry = cache / "cubin" / f"{first.key}.cubin"
    # A complete entry with a valid header and checksum around bytes that only start like an ELF file.
    compiler._write_entry(entry, first.key, b"\x7fELF" + b"\x01" * 300, first.log)
    module, error, _, _, _ = _compile_job(KERNEL, "cache_safety_probe", True)
    assert module is None
    assert "could not read the cubin" in error
    assert f"the cubin was read from the compile cache entry {entry}; remove it" in error


def test_the_entry_layout_is_header_then_payload():
    """The header the size check relies on: magic (format version), key, both lengths, digest."""
    assert compiler._HEADER.format == "<8s32sQQ32s" and compiler._MAGIC == b"WSCUBIN2"
    assert struct.calcsize(compiler._HEADER.format) == compiler._HEADER.size == 88
