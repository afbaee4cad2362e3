"""``warpspec check``: run a kernel on the emulator with random inputs and print one verdict per schedule."""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from contextlib import contextmanager
from typing import NamedTuple

from warpspec.cli.failures import (EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_NOT_EXHAUSTIVE, EXIT_OK, UsageError,
                                   error_text, first_line, kernel_wide_error)
from warpspec.cli.inputs import DEFAULT_MAX_MEMORY, check_input_memory, pointer_arrays, pointer_sizes
from warpspec.cli.kernel_arguments import scalar_arguments, selected_scripts
from warpspec.cli.loading import kernel_parameters, load_function, load_script_class
from warpspec.cli.parser import add_kernel_arguments, non_negative_int, positive_int
from warpspec.cli.progress import RunProgress
from warpspec.cli.sizes import byte_size
from warpspec.emulator.reference import expected_outputs, mismatches
from warpspec.emulator.run import SEED_VARIABLE
from warpspec.errors import ArgumentError, CompileError, KernelError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``warpspec check``'s subparser, with ``check_command`` as its handler."""
    check = subparsers.add_parser(
        "check", help="run a kernel on the emulator and report deadlocks, races and barrier misuse",
        description="Run FILE.py's Script CLASS on the emulator with random inputs and print one verdict per "
                    "schedule. Scalar parameters are given as NAME=VALUE; pointer parameters get random arrays "
                    "sized from the kernel's global views.")
    add_kernel_arguments(check, "a scalar kernel argument (runtime or compile-time), e.g. m_size=300")
    which = check.add_mutually_exclusive_group()
    which.add_argument("--schedule", metavar="K=V,...",
                       help="pin one schedule of an autotuned kernel, e.g. num_stages=2,block_m=128,... (a "
                            "word value names one of the parameter's tuned words: variant=pingpong)")
    which.add_argument("--all-schedules", action="store_true",
                       help="check every schedule of an autotuned kernel (default: the first that compiles)")
    check.add_argument("--seeds", type=non_negative_int, default=0, metavar="N",
                       help="after the deterministic run, run N more with WARPSPEC_EMULATOR_SEED=0..N-1")
    check.add_argument("--max-memory", type=byte_size, default=DEFAULT_MAX_MEMORY, metavar="SIZE",
                       help="refuse arguments whose random input arrays would take more than SIZE in all, e.g. "
                            "512MiB or 16GiB (default: 4GiB)")
    check.add_argument("--allow-partial-writes", action="store_true",
                       help="accept a run after which elements of a view the kernel writes were written by no "
                            "block (for a kernel that writes only part of an output by design)")
    check.add_argument("--reference", metavar="REF.py:FUNCTION",
                       help="compare the kernel's outputs after every run with what FUNCTION writes into copies of "
                            "the inputs (called with the kernel's arguments by name, each pointer shaped as its "
                            "first global view); without it only hazards are checked, not the values")
    check.add_argument("--rtol", type=float, metavar="R",
                       help="with --reference: the relative tolerance of every output (default: by dtype, "
                            "1e-4 for float32, 4e-3 float16, 2e-2 bfloat16, 0.125-0.25 fp8, exact for integers)")
    check.add_argument("--atol", type=float, metavar="A",
                       help="with --reference: the absolute tolerance of every output (default: as --rtol's)")
    check.add_argument("--progress", action="store_true",
                       help="show which block a long run is in on stderr even when stderr is not a terminal "
                            "(on a terminal it is shown once a run takes more than a second)")
    _add_exhaustive_arguments(check)
    check.set_defaults(handler=check_command)


def _add_exhaustive_arguments(check: argparse.ArgumentParser) -> None:
    """``--exhaustive``, ``--budget`` and ``--witness``."""
    check.add_argument("--exhaustive", action="store_true",
                       help="instead of the deterministic and seeded runs, check every interleaving class of each "
                            "cluster's thread partitions and asynchronous operations: 'proved' or the first "
                            "counterexample (exit code 3 when the budget runs out first)")
    check.add_argument("--budget", type=positive_int, default=None, metavar="N",
                       help="with --exhaustive: at most N runs per cluster (default: 10000)")
    check.add_argument("--witness", metavar="DIR",
                       help="write the failing schedule (of --exhaustive, or of the run that failed) as a timeline: "
                            "DIR/trace.json, timeline.png and summary.txt")


class Reference(NamedTuple):
    """``--reference``: the function, its target as given, and the tolerances that override the dtype's."""

    function: object
    target: str
    rtol: float | None
    atol: float | None


class ScheduleOutcome(NamedTuple):
    """What ``warpspec check`` found for one schedule."""

    verdict: str  # ok, FAIL or skip; with --exhaustive proved or unproved for ok
    detail: str  # the rest of its line: the time taken, or the first line of the error
    run: str = ""  # for FAIL: what failed ("compiling", "the deterministic run", "WARPSPEC_EMULATOR_SEED=2")
    error: str = ""  # for FAIL and skip: the whole error


def check_command(args) -> int:
    """``warpspec check``: run the kernel on the emulator for each selected schedule and print the verdicts."""
    script_cls = load_script_class(args.target)
    if args.reference is None and (args.rtol is not None or args.atol is not None):
        raise UsageError("--rtol and --atol set the tolerance of --reference's comparison: give --reference too")
    for option, value in (("--rtol", args.rtol), ("--atol", args.atol)):
        if value is not None and not value >= 0:
            raise UsageError(f"{option} must be a non-negative number, got {value}")
    reference = None if args.reference is None else Reference(load_function(args.reference, "--reference"),
                                                               args.reference, args.rtol, args.atol)
    params = kernel_parameters(script_cls)
    scalars = scalar_arguments(script_cls.__name__, params, args.arguments)
    scripts = selected_scripts(script_cls, args.schedule)
    # Only a sweep over schedules the user did not pin skips one that does not compile for these arguments.
    may_skip = args.schedule is None and len(scripts) > 1
    progress = RunProgress(args.progress or sys.stderr.isatty())
    verdicts, failures = [], []
    # Skips are held back until a schedule compiles: if none does, they may all be one error of the kernel's.
    held: list[tuple[str, ScheduleOutcome]] = []
    compiled = False

    def report(label: str, result: ScheduleOutcome) -> None:
        progress.clear()
        print(f"{result.verdict:<4}  {label}  {result.detail}", flush=True)
        verdicts.append(result.verdict)
        if result.verdict == "FAIL":
            failures.append((label, result))

    try:
        for label, script in scripts:
            if args.exhaustive:
                result = prove_schedule(label, script, params, scalars, may_skip, args, progress)
            else:
                result = check_schedule(label, script, params, scalars, args.seeds, may_skip, args.max_memory,
                                        progress, args.allow_partial_writes, reference, args.witness)
            if result.verdict == "skip" and not compiled:
                held.append((label, result))
                continue
            if not compiled:
                compiled = True
                for held_label, held_result in held:
                    report(held_label, held_result)
            report(label, result)
            if result.verdict != "skip" and not args.all_schedules:
                break  # without --all-schedules, the first schedule that compiles is the one checked
    except KeyboardInterrupt:
        progress.clear()
        print(f"warpspec check: interrupted in {progress.where()}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if not compiled:
        shared = kernel_wide_error([result.error for _, result in held], len(scripts))
        if shared is not None:
            held = [(f"{script_cls.__name__}, every schedule", ScheduleOutcome("FAIL", first_line(shared),
                                                                               "compiling", shared))]
        for label, result in held:
            report(label, result)
    passed = ("proved", "unproved") if args.exhaustive else ("ok",)
    if args.exhaustive:
        print(", ".join(f"{verdicts.count(v)} {v}" for v in passed) +
              f", {verdicts.count('FAIL')} failed, {verdicts.count('skip')} skipped")
    else:
        found = ("no hazard found, outputs match the reference" if reference else
                 "no hazard found, outputs not compared")
        print(f"{verdicts.count('ok')} ok ({found}), {verdicts.count('FAIL')} failed, {verdicts.count('skip')} "
              f"skipped")
    if failures:
        label, result = failures[0]
        print(f"\nfirst failure: {label} ({result.run}):\n{result.error}")
        return EXIT_FAILURE
    if not any(verdict in passed for verdict in verdicts):
        print("no schedule compiles for these arguments")
        return EXIT_FAILURE
    if "unproved" in verdicts:
        return EXIT_NOT_EXHAUSTIVE
    return EXIT_OK


def check_schedule(label: str, script, params, scalars: dict, seeds: int, may_skip: bool, max_memory: int,
                   progress: RunProgress, allow_partial_writes: bool = False,
                   reference: Reference | None = None, witness: str | None = None) -> ScheduleOutcome:
    """Check one pinned Script: ``ok``, ``FAIL`` or ``skip`` (a CompileError when ``may_skip``). A run after which
    a view the kernel writes has elements no block wrote fails too, unless ``allow_partial_writes``, and so does
    one whose outputs differ from what ``reference`` writes (it is called once, before the first run). Raises
    UsageError for inputs over ``max_memory`` bytes or arguments the kernel cannot take; tells ``progress`` what it
    runs. A run failing with a ``KernelError`` is written as a timeline into ``witness`` (a folder) if given."""
    from warpspec.emulator.run import emulate_kernel
    from warpspec.frontend.kernel import bind_arguments
    from warpspec.runtime import kernel_for

    start = time.perf_counter()
    preparing = "building the kernel and its inputs"
    progress.start(label, preparing)
    try:
        check_input_memory(script, params, pointer_sizes(script, params, scalars), max_memory)
        arrays = pointer_arrays(script, params, scalars)
        expected = None if reference is None else _expected_outputs(script, scalars, arrays, reference)
    except CompileError as error:
        text = error_text(error)
        return ScheduleOutcome("skip" if may_skip else "FAIL", first_line(text), "compiling", text)
    except (UsageError, BrokenPipeError):  # the command's end, not this schedule's verdict
        raise
    except Exception as error:  # noqa: BLE001 - this schedule's verdict; the others are still checked
        return _failed(preparing, error)
    for seed in [None] + list(range(seeds)):
        run = "the deterministic run" if seed is None else f"{SEED_VARIABLE}={seed}"
        progress.start(label, run)
        with _environment(SEED_VARIABLE, None if seed is None else str(seed)):
            fresh = {name: array.copy() for name, array in arrays.items()}  # every run sees the same inputs
            try:
                # The emulator itself rather than script(...): its progress hook tells which block is running.
                runtime, compile_time = bind_arguments(type(script), (), {**scalars, **fresh})
                kernel = kernel_for(script, compile_time)
                unwritten = emulate_kernel(kernel, runtime, progress)
            except ArgumentError as error:  # a value the kernel cannot take (type, range, empty grid)
                raise UsageError(str(error)) from None
            except BrokenPipeError:  # the progress line's reader went away: the command's end
                raise
            except Exception as error:  # noqa: BLE001 - this schedule's verdict; the others are still checked
                if witness is not None and isinstance(error, KernelError):
                    return _failed(run, error, _run_witness(kernel, script, scalars, arrays, witness))
                return _failed(run, error)
            if unwritten and not allow_partial_writes:
                return _unwritten_verdict(run, unwritten)
            if expected is not None:
                found = mismatches(kernel, arrays, fresh, expected, reference.rtol, reference.atol)
                if found:
                    lines = [f"OutputMismatchError: {m.message()} (against {reference.target})" for m in found]
                    return ScheduleOutcome("FAIL", lines[0], run, "\n".join(lines))
    return ScheduleOutcome("ok", f"({time.perf_counter() - start:.2f} s, 1+{seeds} runs)")


def _expected_outputs(script, scalars: dict, arrays: dict, reference: Reference) -> dict:
    """What ``reference`` writes into copies of the input ``arrays`` (``warpspec.emulator.reference``). An error
    of the reference, or a reference the kernel's arguments do not fit, is a UsageError naming it."""
    from warpspec.frontend.kernel import bind_arguments
    from warpspec.runtime import kernel_for

    runtime, compile_time = bind_arguments(type(script), (), {**scalars, **arrays})
    kernel = kernel_for(script, compile_time)
    try:
        return expected_outputs(kernel, runtime, compile_time, arrays, reference.function)
    except ArgumentError as error:
        raise UsageError(f"--reference {reference.target}: {error}") from None
    except Exception as error:  # noqa: BLE001 - the reference's own error, at its line
        raise UsageError(f"--reference {reference.target} raised {_where_raised(error, reference.function)}"
                         ) from None


def _where_raised(error: Exception, function) -> str:
    """``ValueError at ref.py:12: ...``: ``error`` and the innermost line of ``function``'s file that raised it."""
    filename = getattr(getattr(function, "__code__", None), "co_filename", None)
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == filename]
    where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"{type(error).__name__}{where}: {error}"


def _failed(run: str, error: Exception, note: str = "") -> ScheduleOutcome:
    """The FAIL verdict of ``error``, raised in ``run`` (``note``: lines to add to the error)."""
    text = error_text(error)
    return ScheduleOutcome("FAIL", first_line(text), run, text + note)


def _run_witness(kernel, script, scalars: dict, arrays: dict, folder: str) -> str:
    """Run the schedule that just failed once more, recording it (the environment still names its seed), write its
    timeline into ``folder``, and say where (the error's last line)."""
    from warpspec.emulator.explore import record_run
    from warpspec.frontend.kernel import bind_arguments
    from warpspec.timeline.witness import write_witness

    fresh = {name: array.copy() for name, array in arrays.items()}
    runtime, _ = bind_arguments(type(script), (), {**scalars, **fresh})
    recorded = record_run(kernel, runtime)
    if recorded is None:
        return ""
    write_witness(recorded, folder)
    return f"\nwitness: {folder}/timeline.png, trace.json, summary.txt"


def prove_schedule(label: str, script, params, scalars: dict, may_skip: bool, args,
                   progress: RunProgress) -> ScheduleOutcome:
    """``--exhaustive`` for one pinned Script: ``proved``, ``unproved`` (the budget ran out), ``FAIL`` (a
    counterexample, written as a timeline into ``args.witness`` if given) or ``skip``, as ``check_schedule`` says
    it for its runs."""
    from warpspec.emulator.explore import Budget, format_choices, prove
    from warpspec.frontend.kernel import bind_arguments
    from warpspec.runtime import kernel_for
    from warpspec.timeline.witness import write_witness

    if args.reference is not None:
        raise UsageError("--reference compares the outputs of the deterministic and seeded runs; --exhaustive "
                         "searches for hazards only: give one of them")
    progress.start(label, "building the kernel and its inputs")
    try:
        check_input_memory(script, params, pointer_sizes(script, params, scalars), args.max_memory)
        runtime, compile_time = bind_arguments(type(script), (), {**scalars, **pointer_arrays(script, params,
                                                                                               scalars)})
        kernel = kernel_for(script, compile_time)
    except CompileError as error:
        text = error_text(error)
        return ScheduleOutcome("skip" if may_skip else "FAIL", first_line(text), "compiling", text)
    except ArgumentError as error:
        raise UsageError(str(error)) from None
    progress.start(label, "the exhaustive search")
    with _environment(SEED_VARIABLE, None):  # the search makes every decision; a seed would make none
        result = prove(kernel, runtime, Budget(runs=args.budget or Budget.runs))
    if result.error is not None:
        text = (f"{error_text(result.error)}\nchoices that reproduce it in block {result.block}: "
                f"{format_choices(result.choices)}")
        if args.witness is not None and result.steps:
            write_witness(result, args.witness)
            text += f"\nwitness: {args.witness}/timeline.png, trace.json, summary.txt"
        return ScheduleOutcome("FAIL", result.detail(), "the exhaustive search", text)
    if result.unwritten and not args.allow_partial_writes:
        return _unwritten_verdict("the exhaustive search", result.unwritten)
    return ScheduleOutcome(result.verdict, result.detail())


def _unwritten_verdict(run: str, unwritten: list) -> ScheduleOutcome:
    """The FAIL verdict of a run that left elements of written views unwritten (``UnwrittenOutput`` findings):
    the first finding on the line, every one in the error."""
    lines = [f"unwritten output: {finding.message()}" for finding in unwritten]
    hint = ("every element of a view the kernel writes through should be written by some block (a tile scheduler "
            "that skips tiles leaves them unwritten); pass --allow-partial-writes if the kernel writes only part "
            "of it by design")
    return ScheduleOutcome("FAIL", lines[0], run, "\n".join(lines + [hint]))


@contextmanager
def _environment(name: str, value: str | None):
    """Set (or, with None, remove) an environment variable for the duration of the block."""
    saved = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved
