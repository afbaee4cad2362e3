"""``warpspec build``: compile a kernel's schedules without a GPU, as the autotuner prunes and builds them, and
print each one's fate, registers, shared memory, spills and SASS counts."""

from __future__ import annotations

import argparse
import sys
import time

from warpspec.cli.failures import EXIT_FAILURE, EXIT_OK, KernelFailure, UsageError, error_text, kernel_wide_error
from warpspec.cli.kernel_arguments import scalar_arguments, selected_scripts
from warpspec.cli.loading import kernel_parameters, load_script_class
from warpspec.cli.parser import add_kernel_arguments
from warpspec.cli.progress import build_progress
from warpspec.errors import ArgumentError
from warpspec.ir.printer import format_kernel


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``warpspec build``'s subparser, with ``build_command`` as its handler."""
    build = subparsers.add_parser(
        "build", help="compile a kernel's schedules (no GPU needed) and report registers, spills and SASS",
        description="Compile FILE.py's Script CLASS for the compile-time arguments given as NAME=VALUE (runtime "
                    "arguments are not needed) and print one line per schedule: its fate (ok, spills, pruned or "
                    "failed, with the reason), registers, shared memory, spill bytes and counts of key SASS "
                    "instructions. Schedules are pruned and built as the autotuner does.")
    add_kernel_arguments(build, "a compile-time kernel argument, e.g. n_size=8192 (runtime ones are accepted "
                                "and ignored)")
    which = build.add_mutually_exclusive_group()
    which.add_argument("--schedule", metavar="K=V,...", help="build one schedule of an autotuned kernel")
    which.add_argument("--all-schedules", action="store_true",
                       help="build every schedule of an autotuned kernel (default: the first that is not pruned)")
    build.add_argument("--source", action="store_true", help="print the generated CUDA C++ of each schedule built")
    build.add_argument("--sass", action="store_true", help="print the SASS of each schedule built")
    build.add_argument("--ir", action="store_true", help="print the IR of each schedule built")
    build.set_defaults(handler=build_command)


def build_command(args) -> int:
    """``warpspec build``: prune and compile the selected schedules, print their fates (and source or SASS)."""
    from warpspec.tune.tuner import TuningReport, build_candidates

    start = time.perf_counter()
    script_cls = load_script_class(args.target)
    params = kernel_parameters(script_cls)
    scalars = scalar_arguments(script_cls.__name__, params, args.arguments, runtime_required=False)
    compile_time = compile_time_arguments(script_cls, params, scalars)
    scripts = selected_scripts(script_cls, args.schedule)
    candidates = [prepare_schedule(script, compile_time) for _, script in scripts]
    if args.schedule is None:
        # A kernel whose IR builds for no schedule, all failing alike: the kernel's error, not its schedules'.
        shared = kernel_wide_error([c.fate.reason for c in candidates if c.kernel is None and c.fate.fate == "pruned"],
                                   len(candidates))
        if shared is not None:
            label = script_cls.__name__ + (", every schedule" if len(candidates) > 1 else "")
            raise KernelFailure(label, f"CompileError: {shared}")  # prune keeps the message, not the error
    if not args.all_schedules and len(candidates) > 1:
        # Like check: without --all-schedules, the schedules up to the first that is not pruned.
        first = next((i for i, c in enumerate(candidates) if c.fate.fate != "pruned"), len(candidates) - 1)
        candidates = candidates[:first + 1]
    build_candidates(candidates, sass=_sass_tools_found(args.sass), **build_progress(script_cls.__name__, candidates))
    built = [c for c in candidates if c.module is not None]
    for candidate in built:
        header = f"// ===== {candidate.fate.label} =====\n" if len(built) > 1 else ""
        if args.ir and candidate.kernel is not None:
            print(header + format_kernel(candidate.kernel))
        if args.source:
            print(header + candidate.generated.source)
        if args.sass:
            print(header + candidate.sass)
    report = TuningReport(script_cls.__name__, [c.fate for c in candidates], seconds=time.perf_counter() - start)
    print(report.table())
    fates = report.counts()
    return EXIT_FAILURE if "failed" in fates or not built else EXIT_OK


def prepare_schedule(script, compile_time: dict):
    """``warpspec.tune.tuner.prepare`` for one pinned Script: its Candidate, pruned or generated. An exception
    prepare does not turn into a fate (anything but a CompileError) makes the schedule ``failed`` with it, and
    the others are still built."""
    from warpspec.tune.tuner import Candidate, ScheduleFate, prepare

    try:
        return prepare([(script.schedule(), script)], compile_time)[0]
    except Exception as error:  # noqa: BLE001 - this schedule's fate; the others are still built
        return Candidate(ScheduleFate(dict(script.schedule()), "failed", error_text(error)))


def compile_time_arguments(script_cls, params, scalars: dict) -> dict:
    """The compile-time argument values among the NAME=VALUE ``scalars`` (checked and defaulted as a call
    would); runtime and pointer parameters may be missing, since building does not need them."""
    from warpspec.frontend.kernel import bind_arguments

    placeholders = {p.name: None for p in params if p.runtime and p.name not in scalars}
    try:
        return bind_arguments(script_cls, (), {**scalars, **placeholders})[1]
    except ArgumentError as error:
        raise UsageError(str(error)) from None


def _sass_tools_found(required: bool) -> bool:
    """Whether cuobjdump and nvdisasm are there to disassemble; without them the SASS counts are left out (with a
    note), and ``--sass`` (``required``) is a usage error."""
    from warpspec.cuda.sass import tool_path

    try:
        tool_path("cuobjdump")
        tool_path("nvdisasm")
    except FileNotFoundError as error:
        if required:
            raise UsageError(str(error)) from None
        print(f"note: no SASS instruction counts: {error}", file=sys.stderr)
        return False
    return True
