"""Files that several processes share (the compile and tuning caches): written whole or not at all."""

from __future__ import annotations

import os
import pathlib
import tempfile
import warnings


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
