"""The ``warpspec`` command line.

``warpspec check FILE.py:CLASS [NAME=VALUE ...] [--schedule K=V,... | --all-schedules] [--seeds N]`` runs a kernel
on the emulator with random inputs and prints one verdict per schedule: ``ok``, ``FAIL`` (a deadlock, race, barrier
misuse or out-of-bounds index, with the kernel line) or ``skip`` (the schedule does not compile for these
arguments). Scalar parameters come from ``NAME=VALUE``; every pointer parameter gets a random array as large as the
kernel's global views of it need.

``warpspec build FILE.py:CLASS [NAME=VALUE ...] [--schedule K=V,... | --all-schedules] [--ir] [--source] [--sass]``
compiles a kernel without a GPU for the compile-time arguments given as ``NAME=VALUE`` and prints, per schedule,
its fate (``ok``, ``spills``, ``pruned`` or ``failed``, with the reason), registers, shared memory, spill bytes
and counts of key SASS instructions; ``--ir``, ``--source`` and ``--sass`` also print the IR, the CUDA C++ and the
SASS. Schedules
are pruned and built as the autotuner does (``warpspec.tune.tuner``): in parallel, one process per core.

``warpspec cache info`` shows the cache folder and its entries; ``warpspec cache clear [--tuning] [--cubins]``
deletes tuning winners, compiled kernels, or (with neither option) both.

Each subcommand is a subparser registered in ``build_parser`` with a ``<name>_command(args) -> int`` handler.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from warpspec import dtypes
from warpspec.dtypes import PointerType
from warpspec.emulator.run import SEED_VARIABLE
from warpspec.errors import ArgumentError, CompileError, WarpspecError
from warpspec.ir.printer import format_kernel

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A command line that cannot be carried out: a bad target, argument or option (exit code 2)."""


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
        return args.handler(args)
    except UsageError as error:
        print(f"warpspec {args.command}: error: {error}", file=sys.stderr)
        return EXIT_USAGE


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
    check.add_argument("target", metavar="FILE.py:CLASS", help="the file defining the kernel and its Script class")
    check.add_argument("arguments", nargs="*", metavar="NAME=VALUE",
                       help="a scalar kernel argument (runtime or compile-time), e.g. m_size=300")
    which = check.add_mutually_exclusive_group()
    which.add_argument("--schedule", metavar="K=V,...",
                       help="pin one schedule of an autotuned kernel, e.g. num_stages=2,block_m=128,...")
    which.add_argument("--all-schedules", action="store_true",
                       help="check every schedule of an autotuned kernel (default: the first that compiles)")
    check.add_argument("--seeds", type=_non_negative_int, default=0, metavar="N",
                       help="after the deterministic run, run N more with WARPSPEC_EMULATOR_SEED=0..N-1")
    check.set_defaults(handler=check_command)

    build = commands.add_parser(
        "build", help="compile a kernel's schedules (no GPU needed) and report registers, spills and SASS",
        description="Compile FILE.py's Script CLASS for the compile-time arguments given as NAME=VALUE (runtime "
                    "arguments are not needed) and print one line per schedule: its fate (ok, spills, pruned or "
                    "failed, with the reason), registers, shared memory, spill bytes and counts of key SASS "
                    "instructions. Schedules are pruned and built as the autotuner does.")
    build.add_argument("target", metavar="FILE.py:CLASS", help="the file defining the kernel and its Script class")
    build.add_argument("arguments", nargs="*", metavar="NAME=VALUE",
                       help="a compile-time kernel argument, e.g. n_size=8192 (runtime ones are accepted and "
                            "ignored)")
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
    # Further subcommands register here: commands.add_parser(...) and set_defaults(handler=<name>_command).
    return parser


# ------------------------------------------------------------------------------------------------------- check


def check_command(args) -> int:
    """``warpspec check``: run the kernel on the emulator for each selected schedule and print the verdicts."""
    from warpspec.frontend.kernel import parameters
    from warpspec.runtime import use_backend

    script_cls = load_script_class(args.target)
    params = parameters(script_cls)
    scalars = scalar_arguments(script_cls.__name__, params, args.arguments)
    scripts = selected_scripts(script_cls, args.schedule)
    # Only a sweep over schedules the user did not pin skips one that does not compile for these arguments.
    may_skip = args.schedule is None and len(scripts) > 1
    verdicts, failures = [], []
    with use_backend("emulator"):
        for label, script in scripts:
            verdict, detail, failure = check_schedule(script, params, scalars, args.seeds, may_skip)
            print(f"{verdict:<5} {label}  {detail}")
            verdicts.append(verdict)
            if failure is not None:
                failures.append((label, *failure))
            if verdict != "skip" and not args.all_schedules:
                break  # without --all-schedules, the first schedule that compiles is the one checked
    print(f"{verdicts.count('ok')} ok, {verdicts.count('FAIL')} failed, {verdicts.count('skip')} skipped")
    if failures:
        label, seed, error = failures[0]
        run = "the deterministic run" if seed is None else f"WARPSPEC_EMULATOR_SEED={seed}"
        print(f"\nfirst failure: {label} ({run}):\n{type(error).__name__}: {error}")
        return EXIT_FAILURE
    if "ok" not in verdicts:
        print("no schedule compiles for these arguments")
        return EXIT_FAILURE
    return EXIT_OK


def check_schedule(script, params, scalars: dict, seeds: int, may_skip: bool):
    """Check one pinned Script: ``(verdict, detail, failure)`` with verdict ``ok``, ``FAIL`` or ``skip`` (a
    CompileError when ``may_skip``), and failure ``(seed or None, error)`` for a FAIL."""
    start = time.perf_counter()
    try:
        arrays = pointer_arrays(script, params, scalars)
    except CompileError as error:
        detail = f"CompileError: {_first_line(error)}"
        return ("skip", detail, None) if may_skip else ("FAIL", detail, (None, error))
    for seed in [None] + list(range(seeds)):
        with _environment(SEED_VARIABLE, None if seed is None else str(seed)):
            fresh = {name: array.copy() for name, array in arrays.items()}  # every run sees the same inputs
            try:
                script(**scalars, **fresh)
            except ArgumentError as error:  # a value the kernel cannot take (type, range, empty grid)
                raise UsageError(str(error)) from None
            except WarpspecError as error:
                return "FAIL", f"{type(error).__name__}: {_first_line(error)}", (seed, error)
    return "ok", f"({time.perf_counter() - start:.2f} s, 1+{seeds} runs)", None


# ------------------------------------------------------------------------------------------------------- build


def build_command(args) -> int:
    """``warpspec build``: prune and compile the selected schedules, print their fates (and source or SASS)."""
    from warpspec.frontend.kernel import parameters
    from warpspec.tune.tuner import TuningReport, build, prepare

    start = time.perf_counter()
    script_cls = load_script_class(args.target)
    params = parameters(script_cls)
    scalars = scalar_arguments(script_cls.__name__, params, args.arguments, runtime_required=False)
    compile_time = compile_time_arguments(script_cls, params, scalars)
    scripts = selected_scripts(script_cls, args.schedule)
    candidates = prepare([(script.schedule(), script) for _, script in scripts], compile_time)
    if not args.all_schedules and len(candidates) > 1:
        # Like check: without --all-schedules, the schedules up to the first that is not pruned.
        first = next((i for i, c in enumerate(candidates) if c.fate.fate != "pruned"), len(candidates) - 1)
        candidates = candidates[:first + 1]
    build(candidates, sass=_sass_tools_found(args.sass))
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


# ------------------------------------------------------------------------------------------- shared helpers


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
            raise UsageError(f"{class_name} has no parameter {name!r}; its scalar parameters: {', '.join(scalars)}")
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
    if schedule_text is None:
        return [(_schedule_label(s), instance.instantiate(s)) for s in instance.schedules()]
    schedule = {}
    for item in schedule_text.split(","):
        name, separator, value = item.partition("=")
        if not separator or not name.strip():
            raise UsageError(f"--schedule takes K=V,... pairs, got {item!r}")
        schedule[name.strip()] = _parse_value(name, value)
    unknown = [n for n in schedule if n not in names]
    missing = [n for n in names if n not in schedule]
    if unknown or missing:
        problems = ([f"unknown: {', '.join(unknown)}"] if unknown else []) + \
                   ([f"missing: {', '.join(missing)}"] if missing else [])
        raise UsageError(f"--schedule must set exactly the tuned parameters {', '.join(names)} "
                         f"({'; '.join(problems)})")
    ordered = {n: schedule[n] for n in names}
    return [(_schedule_label(ordered), instance.instantiate(ordered))]


def pointer_arrays(script, params, scalars: dict) -> dict:
    """A random array per pointer parameter, as large as the kernel's global views of it need, of the pointee's
    numpy type (ml_dtypes for bfloat16 and fp8, rounded as the GPU rounds). Builds the kernel IR for these arguments:
    raises CompileError when it does not compile."""
    from warpspec.arguments import elements_needed, view_shapes
    from warpspec.frontend.kernel import bind_arguments
    from warpspec.runtime import kernel_for

    pointers = {p.name: p.annotation.dtype for p in params if isinstance(p.annotation, PointerType)}
    try:
        runtime, compile_time = bind_arguments(type(script), (), {**scalars, **dict.fromkeys(pointers)})
    except ArgumentError as error:
        raise UsageError(str(error)) from None
    kernel = kernel_for(script, compile_time)
    env = {param.var.uid: 0 if param.name in pointers else runtime[param.name] for param in kernel.params}
    # Views are sized as the launch checks them: with the block index of the first block.
    sizes = dict.fromkeys(pointers, 1)
    names = {p.var.uid: p.name for p in kernel.params}
    for stmt, shape, strides in view_shapes(kernel, env):
        name = names[stmt.pointer.uid]
        if shape is None:
            raise UsageError(f"cannot size {name}: its view {stmt.decl.name} (line {stmt.loc.line}) depends on "
                             f"values computed inside the kernel")
        sizes[name] = max(sizes[name], elements_needed(shape, strides))
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
    if not fits:
        raise UsageError(f"{param.name} is a runtime {dtype.name} parameter, got {value!r}")


def _schedule_label(schedule: dict) -> str:
    return " ".join(f"{name}={value}" for name, value in schedule.items())


def _first_line(error: Exception) -> str:
    return str(error).splitlines()[0] if str(error) else type(error).__name__


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value}")
    return value


if __name__ == "__main__":
    sys.exit(main())
