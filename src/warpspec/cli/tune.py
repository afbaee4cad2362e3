"""``warpspec tune``: tune a library operation (``warpspec.ops``) on the GPU for a list of shapes ahead of time."""

from __future__ import annotations

import argparse
import sys

from warpspec.cli.failures import EXIT_FAILURE, EXIT_OK, UsageError
from warpspec.errors import WarpspecError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Add ``warpspec tune``'s subparser, with ``tune_command`` as its handler."""
    tune = subparsers.add_parser(
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
    from warpspec.cuda.driver import has_hopper_gpu

    if not has_hopper_gpu():  # WARPSPEC_BACKEND=cuda selects the back end whether or not a GPU is there
        raise UsageError(f"tuning needs a Hopper GPU, and none was found (WARPSPEC_BACKEND="
                         f"{runtime.mode()} selects the CUDA back end, but there is no driver or no Hopper device)")
    configure(verbose=True, bench=CudaBench(runs=args.runs))
    table = tune_matmul(shapes, args.dtype, b_layout=args.b_layout, out_dtype=args.out_dtype,
                        progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(json.dumps(table, indent=1, sort_keys=True), flush=True)  # the winners first, whatever the write does
    if args.write_defaults:
        try:
            write_defaults(table)
        except (OSError, ValueError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else error
            print(f"warpspec tune: error: could not merge the winners into {DEFAULTS_FILE}: {reason} (they are "
                  f"stored in the tuning cache, and printed above)", file=sys.stderr)
            return EXIT_FAILURE
        print(f"merged {sum(len(v) for v in table.values())} schedules into {DEFAULTS_FILE}", file=sys.stderr)
    return EXIT_OK
