"""Tuning results that outlive the process: one JSON file per tuning key under ``cache_dir()/tuning``.

The key covers everything that can change which schedule wins: the kernel's source (the text of the files
defining the Script class and its bases, and its qualified name), its autotune candidates, the constructor
arguments that are not tuned, the compile-time call arguments, a bucket of the runtime sizes (see
``size_bucket``), the GPU (name, compute capability and SM count), the driver version and the NVRTC version. Files
are written to a temporary name in the same folder and moved into place with ``os.replace`` (atomic on POSIX), so
concurrent processes tuning the same kernel never see a partial file: the last writer wins, and both wrote a
valid winner.

A record names its key and material, and is used only under that key, for that material, with the current format:
a record copied under another name, edited by hand or left by another version is a miss (tuning runs again and
replaces it), as is a file that is not a regular file, not JSON or nested deeper than any record.

``warpspec cache clear --tuning`` (or ``warpspec.cuda.compiler.clear_cache("tuning")``) forgets every winner.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import pathlib

from warpspec.cuda.compiler import cache_dir
from warpspec.files import ENTRY_SUFFIXES, kind_folder, read_regular_file, write_atomically

TUNING_KIND = "tuning"
#: Version of the record layout; a new layout gets a new number, which also changes every key.
FORMAT = 2
#: How deeply a record may nest. Records written by ``store`` nest about six levels (fates, a fate, its schedule,
#: a tuple value); anything far deeper is damage, and would make comparing or printing it recurse without bound.
MAX_DEPTH = 100
#: The largest record read: a record holds one fate per candidate schedule (a few KB); a file far larger at a
#: record's name is damage, and is never read into memory.
MAX_RECORD_BYTES = 16 * 2**20


def tuning_dir() -> pathlib.Path:
    """The folder holding the tuning records."""
    return cache_dir() / TUNING_KIND


def size_bucket(value: int) -> int:
    """The bucket a runtime size falls in: the next power of two at or above it (sizes up to 1 share bucket 1).

    Sizes in one bucket share a winner: tuning again for every distinct size would cost a tuning run per shape.
    """
    return 1 if value <= 1 else 1 << (value - 1).bit_length()


def source_identity(script_cls) -> dict:
    """What identifies a Script's code: its qualified name and one sha256 over the text of every file that
    defines it: the class's own file and the files of the functions of every class it inherits from (the kernel
    body and helpers may live in a base class elsewhere). Any edit to those files makes earlier winners
    unreachable."""
    files = set()
    for klass in script_cls.__mro__:
        for value in vars(klass).values():
            code = getattr(value, "__code__", None)
            if code is not None:
                files.add(code.co_filename)
    try:
        files.add(inspect.getsourcefile(script_cls))
    except (TypeError, OSError):
        pass  # a class whose module is not in sys.modules: its functions' files identify it
    # Contents only, not paths: one file reached by two spellings of its path (or a moved project) is one source.
    digests = set()
    for name in files:
        try:
            digests.add(hashlib.sha256(pathlib.Path(name).read_bytes()).hexdigest())
        except OSError:
            continue  # code compiled from a string has no file
    combined = hashlib.sha256(" ".join(sorted(digests)).encode()).hexdigest()
    return {"class": f"{script_cls.__module__}.{script_cls.__qualname__}", "source_sha256": combined}


def as_json(value):
    """``value`` as it reads back from JSON (tuples become lists, keys strings, other objects their repr): how
    stored schedules and key material compare with live ones."""
    return json.loads(json.dumps(value, sort_keys=True, default=repr))


def entry_key(material: dict) -> str:
    """The file name stem of the record for ``material`` (the JSON-able dict of everything in the key)."""
    text = json.dumps([FORMAT, material], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def entry_path(key: str) -> pathlib.Path:
    """Where the record of ``key`` lives."""
    return tuning_dir() / f"{key}.json"


def load(key: str, material: dict) -> dict | None:
    """The record stored under ``key``, or None when there is none or it is unreadable or describes something
    else (a record of another key or material, edited by hand, or of another format): tuning then runs again and
    replaces it, as does a file larger than ``MAX_RECORD_BYTES`` (not read). Only the record's envelope is checked here; its fields are the reader's to check."""
    data = read_regular_file(entry_path(key), MAX_RECORD_BYTES)
    if data is None:
        return None
    try:
        record = json.loads(data)
    except (ValueError, RecursionError):  # not UTF-8 or not JSON, or nested past what the parser takes
        return None
    if not _nests_at_most(record, MAX_DEPTH):
        return None
    if not isinstance(record, dict) or record.get("format") != FORMAT or record.get("key") != key:
        return None
    if record.get("material") != as_json(material):
        return None
    return record


def _nests_at_most(value, depth: int) -> bool:
    """Whether ``value`` (as JSON reads it) has no list or dict more than ``depth`` levels down. Iterative: the
    point is to refuse what recursion could not handle."""
    pending = [(value, 1)]
    while pending:
        item, level = pending.pop()
        if isinstance(item, (dict, list)):
            if level > depth:
                return False
            pending.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return True


def store(key: str, material: dict, record: dict) -> pathlib.Path | None:
    """Write ``record`` (a JSON-able dict) under ``key`` atomically and return its path. A cache that cannot be
    written costs a tuning run in the next process, so failure only warns (and returns None)."""
    path = entry_path(key)
    text = json.dumps({**record, "format": FORMAT, "key": key, "material": material}, sort_keys=True, indent=1,
                      default=repr)
    if not write_atomically(path, text.encode("utf-8"), "the tuning record"):
        return None
    return path


def entry_sizes(kind: str) -> list[int]:
    """The size in bytes of each cache entry of ``kind`` (``"cubin"``, ``"tuning"``): each regular file directly in
    that subfolder of ``cache_dir()`` whose name ends in the kind's suffix (``warpspec.files.ENTRY_SUFFIXES``), the
    entries ``clear_cache`` removes; links are not followed. Raises ``OSError`` when the folder exists but cannot be
    listed, and ``warpspec.files.CacheFolderError`` (an OSError) when it is a link."""
    suffix = ENTRY_SUFFIXES[kind]
    sizes = []
    try:
        with os.scandir(kind_folder(cache_dir(), kind)) as entries:
            for entry in entries:
                if entry.name.startswith(".") or not entry.name.endswith(suffix):
                    continue
                try:
                    if entry.is_file(follow_symlinks=False):
                        sizes.append(entry.stat(follow_symlinks=False).st_size)
                except FileNotFoundError:
                    continue  # removed by another process since it was listed
    except (FileNotFoundError, NotADirectoryError):
        return []  # nothing of this kind cached yet
    return sizes


def count_entries(kind: str) -> int:
    """How many cache entries of ``kind`` exist (see ``entry_sizes``)."""
    return len(entry_sizes(kind))
