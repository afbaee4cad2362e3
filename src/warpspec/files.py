"""Files that several processes share (the compile and tuning caches): written whole or not at all."""

from __future__ import annotations

import os
import pathlib
import stat
import tempfile
import warnings

# O_NONBLOCK: should a FIFO appear under the name between the stat and the open, the open must not wait for a
# writer that may never come. Reading a regular file is not affected by it.
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


def read_regular_file(path: pathlib.Path) -> bytes | None:
    """The contents of ``path`` if it is a regular file (links followed), else None: missing, unreadable, or
    something else under that name. Cache readers treat whatever they find as a possible miss, and opening anything
    but a regular file can hang (a FIFO waits for a writer) or never end (a link to ``/dev/zero``)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        descriptor = os.open(path, _READ_FLAGS)
    except OSError:
        return None
    try:
        with os.fdopen(descriptor, "rb") as file:
            # Checked again on what was opened: the name may have been replaced since the stat.
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                return None
            return file.read()
    except OSError:
        return None


def write_atomically(path: pathlib.Path, data: bytes, what: str) -> bool:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never a part: write a temporary
    file in the same folder, then rename it over ``path``. A cache that cannot be written only costs work later,
    so failure warns (naming ``what``) and returns False."""
    temp_name = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # The temporary file must be in the same folder: os.replace is only atomic within one file system.
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.stem[:16]}.", suffix=".tmp",
                                         delete=False) as f:
            temp_name = f.name
            f.write(data)
        os.replace(temp_name, path)
        return True
    except OSError as error:
        if temp_name is not None:
            try:
                os.unlink(temp_name)
            except OSError:
                pass
        warnings.warn(f"warpspec could not write {what} {path}: {error}", RuntimeWarning, stacklevel=3)
        return False
