"""``warpspec timeline``: one schedule's launch, from the CPU timing model or an instrumented GPU run, written as a
Perfetto trace, a Gantt chart and a summary with a diagnosis."""

from __future__ import annotations

import argparse
from pathlib import Path

import warpspec
from warpspec import dtypes
from warpspec.cli.failures import EXIT_OK, KernelFailure, UsageError, error_text
from warpspec.cli.inputs import DEFAULT_MAX_MEMORY, bound_kernel, check_input_memory, pointer_arrays, pointer_sizes
from warpspec.cli.kernel_arguments import scalar_arguments, selected_scripts
from warpspec.cli.loading import kernel_parameters, load_script_class
from warpspec.cli.parser import add_kernel_arguments, non_negative_int, positive_int
from warpspec.errors import ArgumentError, CompileError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``warpspec timeline``'s subparser, with ``timeline_command`` as its handler."""
    timeline = subparsers.add_parser(
        "timeline", help="write a kernel's timeline: a Perfetto trace, a Gantt chart and a summary with a diagnosis",
        description="Run FILE.py's Script CLASS on the CPU timing model (--backend emulator, the default) or on "
                    "the GPU with an instrumented build (--backend cuda, random inputs as warpspec check makes "
                    "them) and write DIR/trace.json, DIR/timeline.png and DIR/summary.txt; the summary is printed. "
                    "Given a trace.json that warpspec wrote instead of FILE.py:CLASS, read its timeline back and "
                    "write the three files again (with --tiles, --stages and --window as given).")
    add_kernel_arguments(timeline, "a scalar kernel argument (runtime or compile-time), e.g. m_size=8192")
    timeline.add_argument("--schedule", metavar="K=V,...",
                          help="pin one schedule of an autotuned kernel (default: the first that compiles)")
    timeline.add_argument("--backend", choices=("emulator", "cuda"), default="emulator",
                          help="emulator: the CPU timing model (no GPU needed); cuda: measure on the GPU")
    timeline.add_argument("--out", metavar="DIR", default="timeline",
                          help="the folder to write trace.json, timeline.png and summary.txt to (default: timeline)")
    timeline.add_argument("--blocks", type=positive_int, default=64, metavar="N",
                          help="with --backend cuda: record at most the first N blocks that run on the SM "
                               "(default: 64)")
    timeline.add_argument("--sm", type=non_negative_int, default=0, metavar="S",
                          help="with --backend cuda: record the blocks that run on SM S (default: 0)")
    timeline.add_argument("--registers", type=positive_int, default=None, metavar="N",
                          help="with the timing model: registers per thread, for the occupancy (default: ptxas's "
                               "count from an NVRTC build, or an estimate where NVRTC is not installed)")
    timeline.add_argument("--window", default="2", metavar="all|N|A:B",
                          help="what timeline.png shows: the first N waves of blocks (default: 2), A:B microseconds, "
                               "or all; trace.json always has every event")
    timeline.add_argument("--tiles", metavar="LIST", default=None,
                          help="keep only the events of these tiles of each role (0 is its first; e.g. 0-3,7): the "
                               "trace, chart and summary are of them alone (default: every tile)")
    timeline.add_argument("--stages", metavar="LIST", default=None,
                          help="keep only the events of these pipeline stages (a wait's barrier index, a TMA load's "
                               "or WGMMA's stage; e.g. 0,2): the trace, chart and summary are of them alone "
                               "(default: every event)")
    timeline.set_defaults(handler=timeline_command)


def timeline_command(args) -> int:
    """``warpspec timeline``: model (or, with ``--backend cuda``, record) one schedule's launch, or read back a
    trace.json warpspec wrote, write its trace, chart and summary into ``--out`` and print the summary."""
    from warpspec.timeline import write
    from warpspec.timeline.chart import parse_window
    from warpspec.timeline.events import parse_numbers

    try:
        window = parse_window(args.window)
        selected = {option: None if text is None else parse_numbers(option, text)
                    for option, text in (("--tiles", args.tiles), ("--stages", args.stages))}
    except ArgumentError as error:
        raise UsageError(str(error)) from None
    _check_out_folder(args.out)
    if args.target.endswith(".json"):
        timeline = _read_trace(args)
    else:
        timeline = _launch_timeline(args)
    if any(values is not None for values in selected.values()):
        timeline = _selected(timeline, selected["--tiles"], selected["--stages"])
    try:
        text = write(timeline, args.out, window)
    except ImportError as error:
        raise UsageError(str(error)) from None
    except OSError as error:
        raise UsageError(_write_error(args.out, error)) from None
    print(text, end="")
    print(f"wrote {Path(args.out) / 'trace.json'}, {Path(args.out) / 'timeline.png'} and "
          f"{Path(args.out) / 'summary.txt'}")
    return EXIT_OK


def _read_trace(args):
    """The timeline of the trace.json ``args.target`` names; UsageError when options that run a kernel are given
    too, or the file is not such a trace."""
    from warpspec.timeline.trace import read_trace

    given = [option for option, value, default in (
        ("NAME=VALUE arguments", args.arguments, []), ("--schedule", args.schedule, None),
        ("--backend", args.backend, "emulator"), ("--registers", args.registers, None), ("--blocks", args.blocks, 64),
        ("--sm", args.sm, 0)) if value != default]
    if given:
        raise UsageError(f"{args.target} is a trace: {', '.join(given)} apply to running a kernel, not to reading "
                         f"a recorded timeline")
    try:
        return read_trace(args.target)
    except ArgumentError as error:
        raise UsageError(str(error)) from None


def _launch_timeline(args):
    """The timeline of the kernel ``args`` name: modeled, or recorded on the GPU with ``--backend cuda``."""
    from warpspec.timeline.model import built_registers, model_launch

    if args.backend == "cuda":
        _check_gpu()
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
        if args.registers is not None:
            timeline = model_launch(kernel, runtime, registers=args.registers, registers_from="from --registers")
        else:
            timeline = model_launch(kernel, runtime, registers=built_registers(kernel))
    else:
        timeline = _gpu_timeline(script, params, scalars, args.blocks, args.sm)
        if timeline.flops is None:
            try:
                timeline.flops = model_launch(kernel, runtime).flops  # the model counts the WGMMA work exactly
            except CompileError:
                pass  # a launch the model cannot run (clusters): the recording stands, without TFLOP/s
    return timeline


def _selected(timeline, tiles, stages):
    """``timeline`` filtered to ``tiles`` and ``stages`` (``--tiles``, ``--stages``); UsageError naming the
    option and what the timeline has when nothing is left."""
    from warpspec.timeline.events import numbers_text

    selected = timeline.select(tiles=tiles, stages=stages)
    if selected.events:
        return selected
    for option, values, what in (("--tiles", tiles, "tile"), ("--stages", stages, "stage")):
        has = {getattr(e, what) for e in timeline.events} - {None}
        if values is not None and not has & values:
            raise UsageError(f"{option} {numbers_text(values)}: no event of the timeline has such a {what} (its "
                             f"events' {what}s: {numbers_text(has) or 'none'})")
    raise UsageError(f"--tiles {numbers_text(tiles)} --stages {numbers_text(stages)}: no event of the timeline has "
                     f"both such a tile and such a stage")


def _check_out_folder(out: str) -> None:
    """UsageError, before anything runs, when ``--out`` names something that is not a folder (a file,
    ``/dev/null``) or sits below one."""
    path = Path(out)
    for place in (path, *path.parents):
        if place.exists():
            if not place.is_dir():
                where = "" if place == path else f" ({place} is not a folder)"
                raise UsageError(f"--out {out}: expected a folder to write trace.json, timeline.png and summary.txt "
                                 f"into, but it is not one{where}")
            return


def _write_error(out: str, error: OSError) -> str:
    """The one line of an OSError from writing into ``--out`` (read-only, full disk): the file and the reason."""
    reason = error.strerror or str(error)
    filename = f" {error.filename}" if error.filename else ""
    return f"--out {out}: could not write{filename}: {reason}"


def _check_gpu() -> None:
    """UsageError unless a Hopper GPU and a CUDA build of torch are there for ``--backend cuda``."""
    from warpspec.cuda.driver import has_hopper_gpu

    if not has_hopper_gpu():
        raise UsageError("--backend cuda records on an NVIDIA Hopper GPU, and none was found; --backend emulator "
                         "(the default) models the launch on the CPU")
    try:
        import torch
    except ImportError:
        raise UsageError("--backend cuda passes the inputs as torch tensors: install torch") from None
    if not torch.cuda.is_available():
        raise UsageError(f"--backend cuda passes the inputs as CUDA torch tensors, but this torch "
                         f"({torch.__version__}) has no CUDA support: install a CUDA build of torch")


def _gpu_timeline(script, params, scalars: dict, blocks: int, sm: int):
    """The timeline an instrumented GPU launch of ``script`` records (``warpspec.profile``), with random inputs."""
    import torch  # _check_gpu found it

    check_input_memory(script, params, pointer_sizes(script, params, scalars), DEFAULT_MAX_MEMORY)
    arrays = {name: dtypes.numpy_to_torch(array).cuda() for name, array in pointer_arrays(script, params,
                                                                                          scalars).items()}
    with warpspec.use_backend("cuda"), warpspec.profile(blocks=blocks, sm=sm) as session:
        script(**scalars, **arrays)
        torch.cuda.synchronize()
    if not session.timelines:
        raise UsageError("the profiled call recorded no launch")
    return session.timelines[-1]
