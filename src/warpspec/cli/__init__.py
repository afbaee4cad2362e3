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

Each subcommand is a subparser registered in ``build_parser`` with a ``<name>_command(args) -> int`` handler.
Whatever a handler raises ends in one line, never a traceback: a usage error (exit code 2), a compile error of the
kernel itself (a ``FAIL`` line), another warpspec error, an exception from the kernel's own Python code or an
internal error (1), Ctrl-C (130) or a closed output pipe (141, quietly: the codes a shell gives a process killed by
SIGINT and SIGPIPE).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import re
import sys
import sysconfig
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import numpy as np

import warpspec
from warpspec import dtypes
from warpspec.dtypes import PointerType
from warpspec.emulator.run import SEED_VARIABLE
from warpspec.errors import ArgumentError, CompileError, WarpspecError
from warpspec.ir.evaluate import wrap
from warpspec.ir.printer import format_kernel

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 128 + 2, 128 + 13  # as a shell reports death by SIGINT, SIGPIPE


class UsageError(Exception):
    """A command line that cannot be carried out: a bad target, argument or option (exit code 2)."""


class KernelFailure(Exception):
    """A compile error of the kernel itself, not of one schedule (its signature, or an error every schedule
    raises alike): reported once, as ``FAIL  label  error`` (exit code 1)."""

    def __init__(self, label: str, error: str):
        super().__init__(f"FAIL  {label}  {error}")


def main(argv=None) -> int:
    """Run the command line ``argv`` (``sys.argv[1:]`` when None) and return the process exit code."""
    parser = build_parser()
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


def _add_kernel_arguments(command: argparse.ArgumentParser, arguments_help: str) -> None:
    """A subcommand's kernel positionals: FILE.py:CLASS, then the NAME=VALUE arguments (``arguments_help``)."""
    command.add_argument("target", metavar="FILE.py:CLASS", help="the file defining the kernel and its Script class")
    command.add_argument("arguments", nargs="*", metavar="NAME=VALUE", help=arguments_help)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with one subparser per subcommand."""
    parser = argparse.ArgumentParser(prog="warpspec", description="Write, check and run warp-specialized Hopper "
                                                                  "kernels.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = commands.add_parser(
        "check", help="run a kernel on the emulator and report deadlocks, races and barrier misuse",
        description="Run FILE.py's Script CLASS on the emulator with random inputs and print one verdict per "
                    "schedule. Scalar parameters are given as NAME=VALUE; pointer parameters get random arrays "
                    "sized from the kernel's global views.")
    _add_kernel_arguments(check, "a scalar kernel argument (runtime or compile-time), e.g. m_size=300")
    which = check.add_mutually_exclusive_group()
    which.add_argument("--schedule", metavar="K=V,...",
                       help="pin one schedule of an autotuned kernel, e.g. num_stages=2,block_m=128,... (a "
                            "word value names one of the parameter's tuned words: variant=pingpong)")
    which.add_argument("--all-schedules", action="store_true",
                       help="check every schedule of an autotuned kernel (default: the first that compiles)")
    check.add_argument("--seeds", type=_non_negative_int, default=0, metavar="N",
                       help="after the deterministic run, run N more with WARPSPEC_EMULATOR_SEED=0..N-1")
    check.add_argument("--max-memory", type=_byte_size, default=DEFAULT_MAX_MEMORY, metavar="SIZE",
                       help="refuse arguments whose random input arrays would take more than SIZE in all, e.g. "
                            "512MiB or 16GiB (default: 4GiB)")
    check.add_argument("--allow-partial-writes", action="store_true",
                       help="accept a run after which elements of a view the kernel writes were written by no "
                            "block (for a kernel that writes only part of an output by design)")
    check.add_argument("--progress", action="store_true",
                       help="show which block a long run is in on stderr even when stderr is not a terminal "
                            "(on a terminal it is shown once a run takes more than a second)")
    check.set_defaults(handler=check_command)

    build = commands.add_parser(
        "build", help="compile a kernel's schedules (no GPU needed) and report registers, spills and SASS",
        description="Compile FILE.py's Script CLASS for the compile-time arguments given as NAME=VALUE (runtime "
                    "arguments are not needed) and print one line per schedule: its fate (ok, spills, pruned or "
                    "failed, with the reason), registers, shared memory, spill bytes and counts of key SASS "
                    "instructions. Schedules are pruned and built as the autotuner does.")
    _add_kernel_arguments(build, "a compile-time kernel argument, e.g. n_size=8192 (runtime ones are accepted "
                                 "and ignored)")
    which = build.add_mutually_exclusive_group()
    which.add_argument("--schedule", metavar="K=V,...", help="build one schedule of an autotuned kernel")
    which.add_argument("--all-schedules", action="store_true",
                       help="build every schedule of an autotuned kernel (default: the first that is not pruned)")
    build.add_argument("--source", action="store_true", help="print the generated CUDA C++ of each schedule built")
    build.add_argument("--sass", action="store_true", help="print the SASS of each schedule built")
    build.add_argument("--ir", action="store_true", help="print the IR of each schedule built")
    build.set_defaults(handler=build_command)

    cache = commands.add_parser(
        "cache", help="show or clear warpspec's disk cache (compiled kernels and tuning winners)",
        description="The cache lives in $WARPSPEC_CACHE_DIR, else $XDG_CACHE_HOME/warpspec, else "
                    "~/.cache/warpspec.")
    actions = cache.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("info", help="print the cache folder and how many entries of each kind it holds")
    clear = actions.add_parser("clear", help="delete cache entries (both kinds unless one is chosen)")
    clear.add_argument("--tuning", action="store_true", help="delete the tuning winners")
    clear.add_argument("--cubins", action="store_true", help="delete the compiled kernels")
    cache.set_defaults(handler=cache_command)

    tune = commands.add_parser(
        "tune", help="tune a library operation (warpspec.ops) on the GPU for a list of shapes ahead of time",
        description="Tune warpspec.ops.matmul's kernel for each MxNxK of --shapes on the GPU and store the winners "
                    "in the tuning cache, where later calls find them; print the winners as the shipped defaults' "
                    "table (JSON), or merge them into the shipped defaults with --write-defaults.")
    tune.add_argument("--op", choices=["matmul"], default="matmul", help="the operation (default: matmul)")
    tune.add_argument("--shapes", required=True, metavar="MxNxK,...", help="e.g. 8192x8192x8192,4096x14336x4096")
    tune.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float8_e4m3"],
                      help="the input dtype (default: float16)")
    tune.add_argument("--b-layout", default="k-major", choices=["k-major", "n-major"],
                      help="b as w.T of an [N, K] tensor (k-major, default) or row-major [K, N] (n-major)")
    tune.add_argument("--out-dtype", default=None, help="the output dtype (default: the input's; bf16 for fp8)")
    tune.add_argument("--runs", type=int, default=10,
                      help="timed launches per schedule, whose median ranks it (default: 10; more separates close "
                           "schedules better)")
    tune.add_argument("--write-defaults", action="store_true",
                      help="merge the winners into warpspec/ops/defaults.json (the shipped defaults)")
    tune.set_defaults(handler=tune_command)

    timeline = commands.add_parser(
        "timeline", help="write a kernel's timeline: a Perfetto trace, a Gantt chart and a summary with a diagnosis",
        description="Run FILE.py's Script CLASS on the CPU timing model (--backend emulator, the default) or on "
                    "the GPU with an instrumented build (--backend cuda, random inputs as warpspec check makes "
                    "them) and write DIR/trace.json, DIR/timeline.png and DIR/summary.txt; the summary is printed.")
    _add_kernel_arguments(timeline, "a scalar kernel argument (runtime or compile-time), e.g. m_size=8192")
    timeline.add_argument("--schedule", metavar="K=V,...",
                          help="pin one schedule of an autotuned kernel (default: the first that compiles)")
    timeline.add_argument("--backend", choices=("emulator", "cuda"), default="emulator",
                          help="emulator: the CPU timing model (no GPU needed); cuda: measure on the GPU")
    timeline.add_argument("--out", metavar="DIR", default="timeline",
                          help="the folder to write trace.json, timeline.png and summary.txt to (default: timeline)")
    timeline.add_argument("--blocks", type=_positive_int, default=64, metavar="N",
                          help="with --backend cuda: record at most the first N blocks that run on the SM "
                               "(default: 64)")
    timeline.add_argument("--sm", type=_non_negative_int, default=0, metavar="S",
                          help="with --backend cuda: record the blocks that run on SM S (default: 0)")
    timeline.add_argument("--window", default="2", metavar="all|N|A:B",
                          help="what timeline.png shows: the first N waves of blocks (default: 2), A:B microseconds, "
                               "or all; trace.json always has every event")
    timeline.set_defaults(handler=timeline_command)
    # Further subcommands register here: commands.add_parser(...) and set_defaults(handler=<name>_command).
    return parser


# ------------------------------------------------------------------------------------------------------- check


#: The default of ``warpspec check --max-memory``: the random inputs' total size in bytes.
DEFAULT_MAX_MEMORY = 4 * 2**30


class Verdict(NamedTuple):
    """What ``warpspec check`` found for one schedule."""

    verdict: str  # ok, FAIL or skip
    detail: str  # the rest of its line: the time taken, or the first line of the error
    run: str = ""  # for FAIL: what failed ("compiling", "the deterministic run", "WARPSPEC_EMULATOR_SEED=2")
    error: str = ""  # for FAIL and skip: the whole error


def check_command(args) -> int:
    """``warpspec check``: run the kernel on the emulator for each selected schedule and print the verdicts."""
    script_cls = load_script_class(args.target)
    params = kernel_parameters(script_cls)
    scalars = scalar_arguments(script_cls.__name__, params, args.arguments)
    scripts = selected_scripts(script_cls, args.schedule)
    # Only a sweep over schedules the user did not pin skips one that does not compile for these arguments.
    may_skip = args.schedule is None and len(scripts) > 1
    progress = RunProgress(args.progress or sys.stderr.isatty())
    verdicts, failures = [], []
    # Skips are held back until a schedule compiles: if none does, they may all be one error of the kernel's.
    held: list[tuple[str, Verdict]] = []
    compiled = False

    def report(label: str, result: Verdict) -> None:
        progress.clear()
        print(f"{result.verdict:<5} {label}  {result.detail}", flush=True)
        verdicts.append(result.verdict)
        if result.verdict == "FAIL":
            failures.append((label, result))

    try:
        for label, script in scripts:
            result = check_schedule(label, script, params, scalars, args.seeds, may_skip, args.max_memory,
                                    progress, args.allow_partial_writes)
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
            held = [(f"{script_cls.__name__}, every schedule", Verdict("FAIL", _first_line(shared), "compiling",
                                                                       shared))]
        for label, result in held:
            report(label, result)
    print(f"{verdicts.count('ok')} ok, {verdicts.count('FAIL')} failed, {verdicts.count('skip')} skipped")
    if failures:
        label, result = failures[0]
        print(f"\nfirst failure: {label} ({result.run}):\n{result.error}")
        return EXIT_FAILURE
    if "ok" not in verdicts:
        print("no schedule compiles for these arguments")
        return EXIT_FAILURE
    return EXIT_OK


def check_schedule(label: str, script, params, scalars: dict, seeds: int, may_skip: bool, max_memory: int,
                   progress: RunProgress, allow_partial_writes: bool = False) -> Verdict:
    """Check one pinned Script: ``ok``, ``FAIL`` or ``skip`` (a CompileError when ``may_skip``). A run after which
    a view the kernel writes has elements no block wrote fails too, unless ``allow_partial_writes``. Raises
    UsageError for inputs over ``max_memory`` bytes or arguments the kernel cannot take; tells ``progress`` what it
    runs."""
    from warpspec.emulator.run import run_kernel
    from warpspec.frontend.kernel import bind_arguments
    from warpspec.runtime import kernel_for

    start = time.perf_counter()
    preparing = "building the kernel and its inputs"
    progress.start(label, preparing)
    try:
        check_input_memory(script, params, pointer_sizes(script, params, scalars), max_memory)
        arrays = pointer_arrays(script, params, scalars)
    except CompileError as error:
        text = error_text(error)
        return Verdict("skip" if may_skip else "FAIL", _first_line(text), "compiling", text)
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
                unwritten = run_kernel(kernel_for(script, compile_time), runtime, progress)
            except ArgumentError as error:  # a value the kernel cannot take (type, range, empty grid)
                raise UsageError(str(error)) from None
            except BrokenPipeError:  # the progress line's reader went away: the command's end
                raise
            except Exception as error:  # noqa: BLE001 - this schedule's verdict; the others are still checked
                return _failed(run, error)
            if unwritten and not allow_partial_writes:
                return _unwritten_verdict(run, unwritten)
    return Verdict("ok", f"({time.perf_counter() - start:.2f} s, 1+{seeds} runs)")


def _failed(run: str, error: Exception) -> Verdict:
    """The FAIL verdict of ``error``, raised in ``run``."""
    text = error_text(error)
    return Verdict("FAIL", _first_line(text), run, text)


def _unwritten_verdict(run: str, unwritten: list) -> Verdict:
    """The FAIL verdict of a run that left elements of written views unwritten (``UnwrittenOutput`` findings):
    the first finding on the line, every one in the error."""
    lines = [f"unwritten output: {finding.message()}" for finding in unwritten]
    hint = ("every element of a view the kernel writes through should be written by some block (a tile scheduler "
            "that skips tiles leaves them unwritten); pass --allow-partial-writes if the kernel writes only part "
            "of it by design")
    return Verdict("FAIL", lines[0], run, "\n".join(lines + [hint]))


def check_input_memory(script, params, sizes: dict[str, int], max_memory: int) -> None:
    """UsageError naming the pointer arguments and their sizes when the random arrays of ``sizes`` (elements by
    parameter name, as ``pointer_sizes`` gives them) would take more than ``max_memory`` bytes in all."""
    dtypes_by_name = {p.name: p.annotation.dtype for p in params if isinstance(p.annotation, PointerType)}
    needed = {name: count * dtypes_by_name[name].numpy.itemsize for name, count in sizes.items()}
    if sum(needed.values()) <= max_memory:
        return
    arrays = ", ".join(f"{name} {sizes[name]} {dtypes_by_name[name].name} elements ({_bytes_text(needed[name])})"
                       for name in sorted(needed, key=needed.get, reverse=True))
    raise UsageError(f"the random inputs of {type(script).__name__} for these arguments need "
                     f"{_bytes_text(sum(needed.values()))}, more than --max-memory {_bytes_text(max_memory)}: "
                     f"{arrays}; give smaller sizes or a larger --max-memory")


class RunProgress:
    """Where ``warpspec check`` is: the schedule, the run and the block the emulator is running (``run_kernel``
    calls it before each block). With ``show``, a run that has taken more than ``DELAY`` seconds is shown on
    stderr as ``block 37/256``: rewritten in place on a terminal (at most every ``TERMINAL_INTERVAL`` seconds, and
    erased before each verdict line), else a line every ``LOG_INTERVAL`` seconds."""

    DELAY, TERMINAL_INTERVAL, LOG_INTERVAL = 1.0, 0.1, 5.0

    def __init__(self, show: bool):
        self.show, self.terminal = show, sys.stderr.isatty()
        self.schedule, self.run, self.block = "", "", None
        self.started = self.shown_at = 0.0
        self.width = 0  # of the line on the terminal now (0: none)

    def start(self, schedule: str, run: str) -> None:
        """``run`` (what is being done: building, which seed) of ``schedule`` begins."""
        self.schedule, self.run, self.block = schedule, run, None
        self.started = time.monotonic()

    def __call__(self, index: int, total: int, block_idx: tuple[int, int, int]) -> None:
        self.block = index, total, block_idx
        if not self.show:
            return
        now = time.monotonic()
        interval = self.TERMINAL_INTERVAL if self.terminal else self.LOG_INTERVAL
        if now - self.started < self.DELAY or now - self.shown_at < interval:
            return
        self.shown_at = now
        line = f"{self.schedule}, {self.run}: block {index + 1}/{total}"
        if self.terminal:
            self.width = max(self.width, len(line))  # pad over the longer line it replaces
            print(f"\r{line.ljust(self.width)}", end="", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)

    def where(self) -> str:
        """The schedule, the run and the block, for a message."""
        text = f"{self.schedule}, {self.run}"
        if self.block is not None:
            index, total, (x, y, z) = self.block
            text += f", block {index + 1}/{total} (blockIdx.x={x}, blockIdx.y={y}, blockIdx.z={z})"
        return text

    def clear(self) -> None:
        """Erase the progress line from the terminal, so that what is printed next starts on a clean line."""
        if self.width:
            print(f"\r{' ' * self.width}\r", end="", file=sys.stderr, flush=True)
            self.width = 0


# ------------------------------------------------------------------------------------------------------- build


def build_command(args) -> int:
    """``warpspec build``: prune and compile the selected schedules, print their fates (and source or SASS)."""
    from warpspec.tune.tuner import TuningReport, build

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
    build(candidates, sass=_sass_tools_found(args.sass), **build_progress(script_cls.__name__, candidates))
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


def build_progress(kernel_name: str, candidates: list) -> dict:
    """The progress arguments of ``warpspec.tune.tuner.build``: on a terminal its one-line progress bar on
    stderr; elsewhere (a log, a pipe) a line on stderr per schedule as it finishes, so that a long build is
    seen while it runs, not all at its end."""
    if sys.stderr.isatty():
        return {}
    jobs = sum(c.fate.fate == "ok" for c in candidates)
    pruned = sum(c.fate.fate == "pruned" for c in candidates)
    if jobs > 1:
        print(f"{kernel_name}: building {jobs} of {len(candidates)} schedules ({pruned} pruned)", file=sys.stderr,
              flush=True)
    done = 0

    def on_built(candidate) -> None:
        nonlocal done
        done += 1
        fate = candidate.fate
        if fate.reason:
            detail = _first_line(fate.reason)
        else:
            detail = "built" if fate.registers is None else f"{fate.registers} registers"
        print(f"[{done}/{jobs}] {fate.fate:<6}  {fate.label}  ({detail}, {fate.build_s:.2f} s)", file=sys.stderr,
              flush=True)

    return {"progress": False, "on_built": on_built}


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


# ------------------------------------------------------------------------------------------------------- cache

#: The cache kinds ``warpspec cache`` knows: option name -> subfolder of the cache directory.
CACHE_KINDS = {"cubins": "cubin", "tuning": "tuning"}


def cache_command(args) -> int:
    """``warpspec cache info`` / ``warpspec cache clear [--tuning] [--cubins]``. A folder that cannot be read, or
    an entry that cannot be removed (a read-only cache), is named in a warning on stderr and makes the exit code
    1; the other entries are still shown or removed."""
    from warpspec.cuda.compiler import cache_dir, clear_cache
    from warpspec.tune.cache import entry_sizes

    root = cache_dir()
    failures = 0

    def warn(doing: str, path, error: OSError) -> None:
        nonlocal failures
        failures += 1
        print(f"warpspec cache {args.action}: warning: could not {doing} {path}: {error.strerror or error}",
              file=sys.stderr)

    if args.action == "info":
        print(f"cache directory: {root}")
        for option, kind in CACHE_KINDS.items():
            folder = root / kind
            try:
                sizes = entry_sizes(kind)
            except OSError as error:
                warn("read", folder, error)
                continue
            print(f"{option}: {len(sizes)} entries, {sum(sizes) / 2**20:.1f} MiB in {folder}")
        return EXIT_FAILURE if failures else EXIT_OK
    chosen = [option for option in CACHE_KINDS if getattr(args, option)] or list(CACHE_KINDS)
    for option in chosen:
        before = failures
        removed = clear_cache(CACHE_KINDS[option], on_error=lambda path, error: warn("remove", path, error))
        left = f" ({failures - before} could not be removed)" if failures > before else ""
        print(f"{option}: removed {removed} files from {root / CACHE_KINDS[option]}{left}")
    return EXIT_FAILURE if failures else EXIT_OK


# -------------------------------------------------------------------------------------------------------- tune


def tune_command(args) -> int:
    """``warpspec tune --op matmul --shapes MxNxK,... [--dtype D] [--b-layout L] [--out-dtype D] [--runs N]
    [--write-defaults]``: one progress line per shape on stderr (and the build progress of each tuning run), the
    winners' table as JSON on stdout last."""
    import json

    from warpspec import runtime
    from warpspec.ops.matmul import DEFAULTS_FILE, parse_shapes, tune_matmul, write_defaults
    from warpspec.tune.bench import CudaBench
    from warpspec.tune.tuner import configure

    try:
        shapes = parse_shapes(args.shapes)
    except WarpspecError as error:
        raise UsageError(str(error)) from None
    if args.runs < 1:
        raise UsageError(f"--runs must be at least 1, got {args.runs}")
    if runtime.get_backend() != "cuda":
        raise UsageError("tuning needs a Hopper GPU (the CUDA back end); none is selected or present")
    configure(verbose=True, bench=CudaBench(runs=args.runs))
    table = tune_matmul(shapes, args.dtype, b_layout=args.b_layout, out_dtype=args.out_dtype,
                        progress=lambda line: print(line, file=sys.stderr, flush=True))
    if args.write_defaults:
        write_defaults(table)
        print(f"merged {sum(len(v) for v in table.values())} schedules into {DEFAULTS_FILE}", file=sys.stderr)
    print(json.dumps(table, indent=1, sort_keys=True))
    return EXIT_OK


# ---------------------------------------------------------------------------------------------------- timeline


def timeline_command(args) -> int:
    """``warpspec timeline``: model (or, with ``--backend cuda``, record) one schedule's launch, write its trace,
    chart and summary into ``--out`` and print the summary."""
    from warpspec.timeline import write
    from warpspec.timeline.chart import parse_window
    from warpspec.timeline.model import model_launch

    try:
        window = parse_window(args.window)
    except ArgumentError as error:
        raise UsageError(str(error)) from None
    script_cls = load_script_class(args.target)
    params = kernel_parameters(script_cls)
    scalars = scalar_arguments(script_cls.__name__, params, args.arguments)
    errors = []
    for label, script in selected_scripts(script_cls, args.schedule):
        try:
            kernel, runtime = bound_kernel(script, params, scalars)
            break
        except CompileError as error:
            errors.append((label, error_text(error)))
    else:
        label, text = errors[0]
        raise KernelFailure(label if len(errors) == 1 else f"{script_cls.__name__}, every schedule", text)
    if args.backend == "emulator":
        timeline = model_launch(kernel, runtime)
    else:
        timeline = _gpu_timeline(script, params, scalars, args.blocks, args.sm)
        if timeline.flops is None:
            try:
                timeline.flops = model_launch(kernel, runtime).flops  # the model counts the WGMMA work exactly
            except CompileError:
                pass  # a launch the model cannot run (clusters): the recording stands, without TFLOP/s
    try:
        text = write(timeline, args.out, window)
    except ImportError as error:
        raise UsageError(str(error)) from None
    print(text, end="")
    print(f"wrote {Path(args.out) / 'trace.json'}, {Path(args.out) / 'timeline.png'} and "
          f"{Path(args.out) / 'summary.txt'}")
    return EXIT_OK


def _gpu_timeline(script, params, scalars: dict, blocks: int, sm: int):
    """The timeline an instrumented GPU launch of ``script`` records (``warpspec.profile``), with random inputs."""
    check_input_memory(script, params, pointer_sizes(script, params, scalars), DEFAULT_MAX_MEMORY)
    try:
        import torch
    except ImportError:
        raise UsageError("--backend cuda passes the inputs as torch tensors: install torch") from None
    arrays = {name: dtypes.numpy_to_torch(array).cuda() for name, array in pointer_arrays(script, params,
                                                                                          scalars).items()}
    with warpspec.use_backend("cuda"), warpspec.profile(blocks=blocks, sm=sm) as session:
        script(**scalars, **arrays)
        torch.cuda.synchronize()
    if not session.timelines:
        raise UsageError("the profiled call recorded no launch")
    return session.timelines[-1]


# ------------------------------------------------------------------------------------------- shared helpers


def kernel_parameters(script_cls) -> list:
    """The kernel's parameters (``warpspec.frontend.kernel.parameters``). A signature the language refuses (a
    parameter type it has no runtime form of) is the kernel's error whatever the schedule: KernelFailure."""
    from warpspec.frontend.kernel import parameters

    try:
        return parameters(script_cls)
    except CompileError as error:
        raise KernelFailure(script_cls.__name__, f"CompileError: {error}") from None


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


def load_script_class(target: str) -> type:
    """Import FILE.py (its folder on ``sys.path``, so it can import its neighbours) and return its Script CLASS."""
    from warpspec.script import Script

    path_text, separator, class_name = target.rpartition(":")
    if not separator or not path_text or not class_name:
        raise UsageError(f"expected FILE.py:CLASS, got {target!r}")
    path = Path(path_text).resolve()
    if not path.is_file():
        raise UsageError(f"no such file: {path_text}")
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    # A private module name: importing FILE must not replace a module of the same name the caller already loaded.
    module_name = f"_warpspec_check_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[module_name]
        raise UsageError(f"importing {path_text} failed: {type(error).__name__}: {error}") from None
    script_cls = getattr(module, class_name, None)
    if script_cls is None:
        names = sorted(n for n, v in vars(module).items() if isinstance(v, type) and issubclass(v, Script)
                       and v is not Script)
        raise UsageError(f"{path_text} has no class {class_name!r}; its Script classes: {', '.join(names) or 'none'}")
    if not (isinstance(script_cls, type) and issubclass(script_cls, Script)):
        raise UsageError(f"{class_name} in {path_text} is not a warpspec.Script subclass")
    return script_cls


def scalar_arguments(class_name: str, params, texts: list[str], runtime_required: bool = True) -> dict:
    """The NAME=VALUE arguments by name, checked against the kernel's scalar parameters. Every scalar parameter
    without a default must be given, runtime ones only when ``runtime_required`` (running needs them, building
    does not)."""
    values = {}
    for text in texts:
        name, separator, value = text.partition("=")
        if not separator or not name:
            raise UsageError(f"expected NAME=VALUE, got {text!r}")
        values[name] = _parse_value(name, value)
    by_name = {p.name: p for p in params}
    pointers = [p.name for p in params if isinstance(p.annotation, PointerType)]
    scalars = [p.name for p in params if not isinstance(p.annotation, PointerType)]
    for name in values:
        if name in pointers:
            raise UsageError(f"{name} is a pointer parameter: it takes no value (warpspec check fills it with "
                             f"random values)")
        if name not in by_name:
            raise UsageError(f"{class_name} has no parameter {name!r}; its scalar parameters: "
                             f"{', '.join(scalars) or 'none'}")
        _check_runtime_scalar(by_name[name], values[name])
    # warpspec.frontend.kernel.Parameter marks "no default" with the ast module as its sentinel.
    missing = [n for n in scalars if n not in values and by_name[n].default is ast
               and (runtime_required or not by_name[n].runtime)]
    if missing:
        raise UsageError(f"missing kernel argument(s) {', '.join(missing)}: give each as NAME=VALUE, e.g. "
                         f"{' '.join(f'{n}=...' for n in missing)}")
    return values


def selected_scripts(script_cls, schedule_text: str | None) -> list[tuple[str, object]]:
    """(label, pinned Script instance) for each schedule that may be checked, in the Script's schedule order: the
    one pinned by ``schedule_text`` (``K=V,...``) if given, else all of them."""
    from warpspec.tune.tuned import TunedScript

    try:
        instance = script_cls()
    except TypeError as error:
        raise UsageError(f"{script_cls.__name__}() cannot be constructed without arguments: {error}") from None
    if not isinstance(instance, TunedScript):
        if schedule_text is not None:
            raise UsageError(f"{script_cls.__name__} is not autotuned; --schedule needs an @autotune kernel")
        return [(_schedule_label(instance.schedule()) or script_cls.__name__, instance)]
    names = instance.space.names
    schedules = instance.schedules()
    if schedule_text is None:
        return [(_schedule_label(s), instance.instantiate(s)) for s in schedules]
    texts = {}
    for item in schedule_text.split(","):
        name, separator, value = item.partition("=")
        if not separator or not name.strip():
            raise UsageError(f"--schedule takes K=V,... pairs, got {item!r}")
        texts[name.strip()] = value
    unknown = [n for n in texts if n not in names]
    missing = [n for n in names if n not in texts]
    if unknown or missing:
        problems = ([f"unknown: {', '.join(unknown)}"] if unknown else []) + \
                   ([f"missing: {', '.join(missing)}"] if missing else [])
        raise UsageError(f"--schedule must set exactly the tuned parameters {', '.join(names)} "
                         f"({'; '.join(problems)})")
    ordered = {n: _schedule_value(n, texts[n], [s[n] for s in schedules]) for n in names}
    return [(_schedule_label(ordered), instance.instantiate(ordered))]


def _schedule_value(name: str, text: str, candidates: list):
    """A ``--schedule`` value of tuned parameter ``name``: a word naming one of its string ``candidates``
    (``variant=pingpong``), else what ``_parse_value`` reads (a number or true/false). A parameter whose tuned
    values are all words takes only those."""
    tuned = list(dict.fromkeys(candidates))
    words = [c for c in tuned if isinstance(c, str)]
    text = text.strip()
    if text in words:
        return text
    if words and len(words) == len(tuned):
        raise UsageError(f"{name}={text!r}: expected one of the tuned values {', '.join(words)}")
    return _parse_value(name, text)


def bound_kernel(script, params, scalars: dict):
    """``(kernel IR, runtime arguments by name)`` of ``script`` for the scalar arguments ``scalars``, pointers
    given as None. Raises CompileError when the kernel does not compile for them, UsageError when it cannot take
    them."""
    from warpspec.frontend.kernel import bind_arguments
    from warpspec.runtime import kernel_for

    pointers = [p.name for p in params if isinstance(p.annotation, PointerType)]
    try:
        runtime, compile_time = bind_arguments(type(script), (), {**scalars, **dict.fromkeys(pointers)})
    except ArgumentError as error:
        raise UsageError(str(error)) from None
    return kernel_for(script, compile_time), runtime


def pointer_sizes(script, params, scalars: dict) -> dict[str, int]:
    """How many elements each pointer parameter's array needs: as many as the kernel's global views of it reach.
    Builds the kernel IR for these arguments: raises CompileError when it does not compile."""
    from warpspec.arguments import elements_needed, view_shapes

    pointers = {p.name: p.annotation.dtype for p in params if isinstance(p.annotation, PointerType)}
    kernel, runtime = bound_kernel(script, params, scalars)
    env = {param.var.uid: 0 if param.name in pointers else runtime[param.name] for param in kernel.params}
    # Views are sized as the launch checks them.
    sizes = dict.fromkeys(pointers, 1)
    names = {p.var.uid: p.name for p in kernel.params}
    for stmt, shape, strides in view_shapes(kernel, env):
        name = names[stmt.pointer.uid]
        sizes[name] = max(sizes[name], elements_needed(shape, strides))
    return sizes


def pointer_arrays(script, params, scalars: dict) -> dict:
    """A random array per pointer parameter, as large as the kernel's global views of it need, of the pointee's
    numpy type (ml_dtypes for bfloat16 and fp8, rounded as the GPU rounds). Builds the kernel IR for these
    arguments: raises CompileError when it does not compile."""
    pointers = {p.name: p.annotation.dtype for p in params if isinstance(p.annotation, PointerType)}
    sizes = pointer_sizes(script, params, scalars)
    rng = np.random.default_rng(0)
    return {name: dtypes.round_to(dtype, rng.standard_normal(sizes[name])) for name, dtype in pointers.items()}


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


def _parse_value(name: str, text: str):
    """An int (decimal or 0x...), a float, or true/false; anything else is a usage error naming ``name``."""
    text = text.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for parse in (lambda t: int(t, 0), float):
        try:
            return parse(text)
        except ValueError:
            continue
    raise UsageError(f"{name}={text!r}: expected an integer, a number or true/false")


def _check_runtime_scalar(param, value) -> None:
    """Reject a value a runtime scalar parameter cannot hold (compile-time ones are checked when binding)."""
    if not param.runtime:
        return
    dtype = param.annotation
    if dtype.kind == "bool":
        fits = isinstance(value, bool)
    elif dtype.is_float:
        fits = not isinstance(value, bool)
    else:
        fits = isinstance(value, int) and not isinstance(value, bool)
        if fits and wrap(value, dtype) != value:  # before it sizes (and allocates) arrays, not at the launch
            raise UsageError(f"{param.name} is a runtime {dtype.name} parameter, got {value}, which does not fit")
    if not fits:
        raise UsageError(f"{param.name} is a runtime {dtype.name} parameter, got {value!r}")


def _schedule_label(schedule: dict) -> str:
    return " ".join(f"{name}={value}" for name, value in schedule.items())


def _first_line(text: str) -> str:
    return text.splitlines()[0] if text else ""


#: ``--max-memory`` units: powers of 1024, with or without the ``iB`` (``4G``, ``4GiB``, ``4GB`` all mean 2**32).
_BYTE_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _byte_size(text: str) -> int:
    """A size such as ``4GiB``, ``512M`` or ``1000000`` (bytes), for ``--max-memory``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if match is None:
        raise argparse.ArgumentTypeError(f"expected a size such as 4GiB, 512MiB or a number of bytes, got {text!r}")
    return int(float(match[1]) * _BYTE_UNITS[match[2].upper()])


def _bytes_text(count: int) -> str:
    """``count`` bytes in the largest binary unit that keeps the number at least 1: ``4 GiB``, ``745.1 GiB``."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        scale = _BYTE_UNITS[unit[0]]
        if count >= scale:
            return f"{count / scale:.1f}".removesuffix(".0") + f" {unit}"
    return f"{count} bytes"


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


def _int_at_least(low: int, what: str):
    """An argparse ``type``: an integer of at least ``low`` (``what`` names such a number in its error)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected {what}, got {value}")
        return value

    return parse


_non_negative_int = _int_at_least(0, "a non-negative integer")
_positive_int = _int_at_least(1, "a positive integer")
