"""The ``warpspec`` command line.

``warpspec check FILE.py:CLASS [NAME=VALUE ...] [--schedule K=V,... | --all-schedules] [--seeds N]
[--max-memory SIZE] [--allow-partial-writes] [--progress]`` runs a kernel on the emulator with random inputs and
prints one verdict per schedule, as each finishes: ``ok``, ``FAIL`` (a deadlock, race, barrier misuse or
out-of-bounds index, with the kernel line, or elements of a view the kernel writes that no block wrote) or ``skip``
(the schedule does not compile for these arguments). Scalar parameters come from
``NAME=VALUE``; every pointer parameter gets a random array as large as the kernel's global views of it need, up to
``--max-memory`` in all. A compile error every schedule shares is the kernel's own: one ``FAIL`` line.

``warpspec build FILE.py:CLASS [NAME=VALUE ...] [--schedule K=V,... | --all-schedules] [--ir] [--source] [--sass]``
compiles a kernel without a GPU for the compile-time arguments given as ``NAME=VALUE`` and prints, per schedule,
its fate (``ok``, ``spills``, ``pruned`` or ``failed``, with the reason), registers, shared memory, spill bytes
and counts of key SASS instructions; ``--ir``, ``--source`` and ``--sass`` also print the IR, the CUDA C++ and the
SASS. Schedules
are pruned and built as the autotuner does (``warpspec.tune.tuner``): in parallel, one process per core, each
reported on stderr as it finishes.

``warpspec timeline FILE.py:CLASS [NAME=VALUE ...] [--schedule K=V,...] [--backend emulator|cuda] [--out DIR]
[--window all|N|A:B] [--sm S] [--blocks N]``
writes a timeline of one schedule's launch, from the CPU timing model or an instrumented GPU run, as
DIR/trace.json (Perfetto), DIR/timeline.png and DIR/summary.txt, and prints the summary.

``warpspec cache info`` shows the cache folder and its entries; ``warpspec cache clear [--tuning] [--cubins]``
deletes tuning winners, compiled kernels, or (with neither option) both.

``warpspec tune --op matmul --shapes MxNxK,... [--dtype D] [--b-layout k-major|n-major] [--out-dtype D]
[--runs N] [--write-defaults]`` tunes ``warpspec.ops.matmul``'s kernel on the GPU for each shape, stores the winners in the
tuning cache and prints them as the shipped defaults' table (docs/ops.md).

``warpspec --version`` prints ``warpspec`` and the version (``warpspec.__version__``).

Each command is a module of this package (``check``, ``build``, ``timeline``, ``cache``, ``tune``) with an
``add_parser(subparsers)`` that adds its subparser and a ``<name>_command(args) -> int`` handler; ``COMMANDS`` below
lists them and ``parser`` assembles them, with the arguments they share. What the commands share lives beside them:
``loading`` (the ``FILE.py:CLASS`` target), ``kernel_arguments`` (``NAME=VALUE`` and ``--schedule``), ``inputs``
(random input arrays), ``progress`` (progress on stderr), ``sizes`` (byte sizes) and ``failures`` (exit codes and
how errors read). Whatever a handler raises ends in one line, never a traceback: a usage error (exit code 2), a
compile error of the kernel itself (a ``FAIL`` line), another warpspec error, an exception from the kernel's own
Python code or an internal error (1), Ctrl-C (130) or a closed output pipe (141, quietly: the codes a shell gives a
process killed by SIGINT and SIGPIPE).
"""

from __future__ import annotations

import os
import sys

from warpspec.cli import build, cache, check, timeline, tune
from warpspec.cli.failures import (EXIT_BROKEN_PIPE, EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE, KernelFailure,
                                   UsageError, unexpected_error)
from warpspec.cli.parser import build_parser
from warpspec.errors import WarpspecError

#: The command modules, in the order ``warpspec --help`` lists them. A new command is a module with an
#: ``add_parser(subparsers)`` that sets its handler (``set_defaults(handler=<name>_command)``), listed here.
COMMANDS = (check, build, cache, tune, timeline)

__all__ = ["main"]


def main(argv=None) -> int:
    """Run the command line ``argv`` (``sys.argv[1:]`` when None) and return the process exit code."""
    parser = build_parser(COMMANDS)
    try:
        # parse_known_args lets NAME=VALUE arguments follow options; leftovers are checked below.
        args, extra = parser.parse_known_args(argv)
        unknown = [e for e in extra if e.startswith("-") or not hasattr(args, "arguments")]
        if unknown:
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        if extra:
            args.arguments = args.arguments + extra
    except SystemExit as exit_request:  # argparse has printed the usage error (code 2) or the help (code 0)
        return exit_request.code if isinstance(exit_request.code, int) else EXIT_USAGE
    try:
        code = args.handler(args)
        sys.stdout.flush()  # a reader that went away shows here, not in the interpreter's flush at exit
        return code
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except UsageError as error:
        print(f"warpspec {args.command}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KernelFailure as failure:
        print(failure, flush=True)
        return EXIT_FAILURE
    except KeyboardInterrupt:  # check_command says where it was; elsewhere (loading, building) this is enough
        print(f"warpspec {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except WarpspecError as error:
        print(f"warpspec {args.command}: error: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as error:  # noqa: BLE001 - one line saying whose error it is, instead of a traceback
        print(f"warpspec {args.command}: {unexpected_error(error)}", file=sys.stderr)
        return EXIT_FAILURE


def _quiet_broken_pipe() -> int:
    """The reader of our output went away (``warpspec check ... | head -1``): point stdout and stderr at the null
    device, so that the interpreter's last flush at exit does not fail again, and end as a process killed by
    SIGPIPE would."""
    null = os.open(os.devnull, os.O_WRONLY)
    for stream in (sys.stdout, sys.stderr):
        try:
            os.dup2(null, stream.fileno())
        except (OSError, ValueError):  # not a file descriptor (a test's capture): nothing will flush to a pipe
            pass
    os.close(null)
    return EXIT_BROKEN_PIPE

