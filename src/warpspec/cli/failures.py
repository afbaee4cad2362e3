"""How a ``warpspec`` command ends: its exit codes, the exceptions that end it early, and the one line an error
reads as in a verdict, a fate or a message."""

from __future__ import annotations

import sysconfig
import traceback
from pathlib import Path

import warpspec
from warpspec.errors import WarpspecError

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
#: ``warpspec check --exhaustive`` whose budget ran out before a proof or a counterexample: not a pass, and told
#: apart from a counterexample (1) so that a script can raise the budget and try again.
EXIT_NOT_EXHAUSTIVE = 3
EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 128 + 2, 128 + 13  # as a shell reports death by SIGINT, SIGPIPE


class UsageError(Exception):
    """A command line that cannot be carried out: a bad target, argument or option (exit code 2)."""


class KernelFailure(Exception):
    """A compile error of the kernel itself, not of one schedule (its signature, or an error every schedule
    raises alike): reported once, as ``FAIL  label  error`` (exit code 1)."""

    def __init__(self, label: str, error: str):
        super().__init__(f"FAIL  {label}  {error}")


def kernel_wide_error(messages: list[str], schedules: int) -> str | None:
    """The compile error of the kernel itself rather than of its schedules: the one message that every one of
    its ``schedules`` failed with (``messages``: one per schedule that did not compile). None when some schedule
    compiled or was not tried, or when they failed differently, as schedule values in the messages show."""
    if schedules == 0 or len(messages) != schedules or len(set(messages)) != 1:
        return None
    return messages[0]


def error_text(error: Exception) -> str:
    """How an error reads in a verdict or a fate: a warpspec error as ``Class: message`` (the message starts with
    the kernel's ``file:line``), any other exception as ``unexpected_error`` says whose it is."""
    return f"{type(error).__name__}: {error}" if isinstance(error, WarpspecError) else unexpected_error(error)


def unexpected_error(error: Exception) -> str:
    """One line for an exception that is not a warpspec error, saying whose it is: raised by the kernel's own
    Python code (its constructor, a helper it calls), or an internal error of warpspec, with the line that
    raised it. Library frames (numpy, the standard library) are passed over to find that line."""
    internal = f"internal error (a bug in warpspec, not in the kernel or the command line): {type(error).__name__}"
    package = Path(warpspec.__file__).resolve().parent
    libraries = {Path(sysconfig.get_path(name)).resolve() for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        path = Path(frame.filename).resolve()
        if path.is_relative_to(package):
            return f"{internal}: {error} (at {path.relative_to(package.parent)}:{frame.lineno})"
        if not any(path.is_relative_to(library) for library in libraries) and frame.filename[:1] != "<":
            return f"{type(error).__name__} raised by the kernel's code at {frame.filename}:{frame.lineno}: {error}"
    return f"{internal}: {error}"


def first_line(text: str) -> str:
    """The first line of an error's text, for the one line of a verdict or a fate ("" for no text)."""
    return text.splitlines()[0] if text else ""
