"""Files that several processes share (the compile and tuning caches, the shipped defaults): written whole or not at
all, and rewritten under a lock where a writer reads them first."""

from __future__ import annotations

import contextlib
import os
import pathlib
import stat
import tempfile
import warnings

from warpspec.errors import CacheFolderError

# O_NONBLOCK: should a FIFO appear under the name between the stat and the open, the open must not wait for a
# writer that may never come. Reading a regular file is not affected by it.
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


#: The kinds of cache entry, each a subfolder of the cache root: kind -> the file name suffix of its entries. Only
#: regular files directly inside a kind's folder and ending in its suffix are entries; nothing else is ever removed.
ENTRY_SUFFIXES = {"cubin": ".cubin", "tuning": ".json"}


def kind_folder(root: pathlib.Path, kind: str) -> pathlib.Path:
    """The subfolder ``kind`` of the cache root ``root``, which need not exist yet. Raises ``CacheFolderError``
    when that name is a symbolic link or not a directory: clearing it would delete, and writing it would create,
    files outside the cache."""
    folder = root / kind
    try:
        mode = os.lstat(folder).st_mode
    except FileNotFoundError:
        return folder
    except OSError as error:
        raise CacheFolderError(error.errno, error.strerror, str(folder)) from None
    if stat.S_ISLNK(mode):
        raise CacheFolderError(f"{folder} is a symbolic link (to {os.readlink(folder)}): warpspec does not read, "
                               f"write or remove cache entries through a link; remove the link, or set "
                               f"WARPSPEC_CACHE_DIR to the folder it points to")
    if not stat.S_ISDIR(mode):
        raise CacheFolderError(f"{folder} is not a directory: warpspec keeps its {kind} entries there; remove it")
    return folder


def problem_text(doing: str, path: pathlib.Path, error: OSError) -> str:
    """A one-line account of a cache operation that failed on ``path``: a ``CacheFolderError``'s own message, which
    names the path and says what is there, else ``could not {doing} {path}: {reason}``."""
    if isinstance(error, CacheFolderError) and error.strerror is None:
        return str(error)
    return f"could not {doing} {path}: {error.strerror or error}"


def read_regular_file(path: pathlib.Path, max_bytes: int) -> bytes | None:
    """The contents of the cache entry ``path`` if it is a regular file of at most ``max_bytes`` bytes in a folder
    that is not a link (no link is followed), else None: missing, unreadable, too large, or something else under
    that name. Cache readers treat whatever
    they find as a possible miss: opening anything but a regular file can hang (a FIFO waits for a writer) or never
    end (a link to ``/dev/zero``), and a huge file at an entry's name is damage, never read into memory."""
    try:
        kind_folder(path.parent.parent, path.parent.name)
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        descriptor = os.open(path, _READ_FLAGS | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        with os.fdopen(descriptor, "rb") as file:
            # Checked again on what was opened: the name may have been replaced since the stat.
            status = os.fstat(file.fileno())
            if not stat.S_ISREG(status.st_mode) or status.st_size > max_bytes:
                return None
            data = file.read(max_bytes + 1)  # a file grown since the fstat is still read no further than that
            return data if len(data) <= max_bytes else None
    except OSError:
        return None


def write_atomically(path: pathlib.Path, data: bytes, what: str) -> bool:
    """Write the cache entry ``data`` to ``path`` so that readers see the old file or the new one, never a part
    (``replace_file``). The folder must not be a link (``kind_folder``). A cache that cannot be written only costs
    work later, so failure warns (naming ``what``) and returns False."""
    try:
        kind_folder(path.parent.parent, path.parent.name)
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_file(path, data)
        return True
    except OSError as error:
        warnings.warn(f"warpspec could not write {what} {path}: {error}", RuntimeWarning, stacklevel=3)
        return False


def replace_file(path: pathlib.Path, data: bytes, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` whole: a temporary file in the same folder (``os.replace`` is atomic only within
    one file system), renamed over ``path``, so that a reader, or a crash, never meets a part. ``mode``: the new
    file's permission bits (else the temporary file's, readable by its owner alone). Raises ``OSError`` (the
    temporary file removed)."""
    temp_name = None
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.stem[:16]}.", suffix=".tmp",
                                         delete=False) as f:
            temp_name = f.name
            f.write(data)
        if mode is not None:
            os.chmod(temp_name, mode)
        os.replace(temp_name, path)
    except OSError:
        if temp_name is not None:
            try:
                os.unlink(temp_name)
            except OSError:
                pass
        raise


@contextlib.contextmanager
def exclusive(path: pathlib.Path):
    """Hold an exclusive lock on ``path``'s lock file (``path`` + ``.lock``, made when missing) for the block, so
    that processes which read, change and rewrite ``path`` take turns instead of losing each other's changes. An
    advisory ``flock``: every writer must take it. Where ``fcntl`` does not exist the block runs unlocked.
    Raises ``OSError`` when the lock file cannot be opened."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no advisory locks to take
        yield
        return
    descriptor = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0),
                         0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing the descriptor gives the lock back
