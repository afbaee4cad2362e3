"""Byte sizes as the command line reads them (``--max-memory 4GiB``) and prints them (``4 GiB``)."""

from __future__ import annotations

import argparse
import re

#: ``--max-memory`` units: powers of 1024, with or without the ``iB`` (``4G``, ``4GiB``, ``4GB`` all mean 2**32).
_BYTE_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def byte_size(text: str) -> int:
    """A size such as ``4GiB``, ``512M`` or ``1000000`` (bytes), for ``--max-memory``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if match is None:
        raise argparse.ArgumentTypeError(f"expected a size such as 4GiB, 512MiB or a number of bytes, got {text!r}")
    return int(float(match[1]) * _BYTE_UNITS[match[2].upper()])


def bytes_text(count: int) -> str:
    """``count`` bytes in the largest binary unit that keeps the number at least 1: ``4 GiB``, ``745.1 GiB``."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        scale = _BYTE_UNITS[unit[0]]
        if count >= scale:
            return f"{count / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{count} bytes"
