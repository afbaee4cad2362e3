"""Every error warpspec raises on purpose.

Two families: ``CompileError`` for a kernel that cannot be turned into IR or machine code (raised before anything
runs), and ``KernelError`` for a kernel that runs but breaks the rules of the hardware (found by the emulator).
``ArgumentError`` is a bad argument to a launch, raised before the launch. ``OutputMismatchError`` is an output
that differs from a reference's (``warpspec.emulator.reference``). ``UnwrittenOutputWarning`` is the one
warning: an emulator run after which part of a view the kernel writes was written by no block.
"""

from __future__ import annotations


class WarpspecError(Exception):
    """Base of all warpspec errors."""


class CompileError(WarpspecError):
    """A kernel that cannot be compiled: unknown names, wrong types, misplaced instructions, compiler failures.

    ``location`` is ``"file:line"`` of the kernel source when known; the message starts with it.
    """

    def __init__(self, message: str, location: str | None = None):
        self.location = location
        super().__init__(f"{location}: {message}" if location else message)


class ArgumentError(WarpspecError, ValueError):
    """A launch argument that does not fit the kernel: wrong type, dtype, shape, device, stride or alignment."""


class CacheFolderError(WarpspecError, OSError):
    """A folder of warpspec's disk cache that it will not read, write or clear through: a symbolic link (its entries
    would be another folder's files) or something other than a directory under the name. Also what ``clear_cache``
    reports for something under an entry's name that is not a regular file. An ``OSError``, as every other problem
    with a cache file is."""


class DefaultsFileError(WarpspecError, ValueError):
    """The shipped defaults file (``warpspec/ops/defaults.json``) is not what ``warpspec tune --write-defaults``
    writes: not JSON, not a table of schedules, or an entry that is not a schedule of its kernel (edited by hand,
    say). The message names the file, the entry and how to restore it."""


class KernelError(WarpspecError):
    """A kernel broke a hardware rule while it ran on the emulator.

    ``location`` is the kernel's ``file:line`` where the fault was found; ``tasks`` describes what every thread
    partition was doing at that moment (also part of the message).
    """

    def __init__(self, message: str, location: str | None = None, tasks: str | None = None):
        self.location = location
        self.tasks = tasks
        text = f"{location}: {message}" if location else message
        if tasks:
            text += "\n" + tasks
        super().__init__(text)


class DeadlockError(KernelError):
    """Every unfinished thread partition is blocked and no asynchronous operation is in flight."""


class RaceError(KernelError):
    """Shared memory read before any completed write filled it, written while an asynchronous operation still
    reads it, or accessed by two partitions without synchronisation between them; a global element written by one
    block and accessed by another, or a TMA store's destination read back before its wait_group."""


class BarrierError(KernelError):
    """An mbarrier used against its rules: too many arrivals for a phase, a wait on a barrier that was never
    allocated, a wait two or more phases behind, or a transaction count left non-zero when the kernel ends."""


class InFlightAtExitError(KernelError):
    """A block's threads all exited while an asynchronous copy they issued was still in flight: a TMA store no
    ``tma.wait_group`` waited for, or a TMA load whose barrier no thread waited on. ``location`` is the copy's
    line."""


class BoundsError(KernelError):
    """An index outside a shared, register or barrier array at run time, or a global view whose shape the kernel
    computes reaching outside its array (global accesses outside a view are clipped or read as zero, as TMA does,
    and are not errors)."""


class BarrierTimeoutError(KernelError):
    """In debug mode on the GPU, a barrier wait that did not pass within the debug bound: the kernel was stopped
    instead of hanging the GPU. ``location`` is the wait's kernel line."""


class OutputMismatchError(WarpspecError):
    """A kernel's output that differs from a reference's beyond the tolerance of its dtype
    (``warpspec.emulator.reference``): the message names the output, its worst element and the error."""


class UnwrittenOutputWarning(UserWarning):
    """An emulator run left elements of a global view the kernel writes through unwritten by every block (a tile
    scheduler that skips tiles): a warning rather than an error, since a kernel may write part of an output by
    design. ``warpspec check`` reports it as a failure unless given ``--allow-partial-writes``."""
