"""Test kernels mark the lines errors must name with a trailing ``# <<< name`` comment."""

from functools import partial
from pathlib import Path


def marker_line(path: str, name: str) -> int:
    """The 1-based line of ``path`` that ends with ``# <<< name`` (exactly one must)."""
    lines = Path(path).read_text().splitlines()
    found = [number for number, line in enumerate(lines, 1) if line.rstrip().endswith(f"# <<< {name}")]
    if len(found) != 1:
        raise LookupError(f"marker {name!r} found {len(found)} times in {path}")
    return found[0]


def markers_of(path: str):
    """``marker_line`` bound to one file, for a kernel module's ``marker_line = markers_of(__file__)``."""
    return partial(marker_line, path)
