"""Pinned schedules of ops.matmul's kernels at given shapes, beside cuBLAS and the schedule ops.matmul ships: the
measurement behind a new tile or stage count, before it enters a schedule space or the shipped defaults.

    python benchmarks/pinned_schedules.py --shapes 64x4096x4096,256x6144x4096 \
        --schedule swap_ab=0,block_m=64,block_n=32,split_k=1,num_stages=16 \
        --schedule block_m=128,block_n=192,num_stages=4,persistent=1,stream_k=0 [--dtype bfloat16] [--json out.json]
    python benchmarks/pinned_schedules.py --dry-run ...   # CPU: each schedule checked on the emulator, no timing

A schedule is ``name=value`` pairs: with ``split_k`` and ``swap_ab`` it is the split family's (``SplitGemm``), with
``persistent`` and ``stream_k`` the tile walk's (``Gemm``); it need not be in either space (a tile the space lacks
is what this measures). For each shape (M×N×K: x [M, K] times w.T for a weight w [N, K], ``torch.randn`` inputs):
cuBLAS (``x @ w.T``) and ``ops.matmul(x, w.T, out=)`` are timed, then each schedule's kernel called directly with
the same operands and a workspace of its own size; every output is checked against the float32 product before it
is timed (a wrong one is reported, not timed). Times are ``triton.testing.do_bench(fn, warmup=25, rep=100,
return_mode="median")`` in µs, which flushes L2 before each call; ratios are cuBLAS time / ours. The kernels are
compiled first, in parallel worker processes (NVRTC's disk cache then serves the timed process). A schedule that
does not build (shared memory, WGMMA's shape rules) is reported with the compiler's reason.

``--dry-run`` needs no GPU: every schedule runs on the emulator at a stand-in of each shape (M and N divided by 64,
K by 8, so that a split has K-tiles to share; at least 1 row, 64 columns and 64 of K) and is checked against the
float32 product, so the script's plumbing is tested where it cannot time.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor

TOLERANCE = 1e-2  # relative Frobenius error against the float32 product
DRY_RUN_DIVISOR = 64  # of M and N at --dry-run's stand-ins
DRY_RUN_K_DIVISOR = 8
SPLIT_KEYS = {"swap_ab", "block_m", "block_n", "split_k", "num_stages"}
WALK_KEYS = {"block_m", "block_n", "num_stages", "persistent", "stream_k"}


def parse_schedule(text: str) -> dict:
    """``"swap_ab=0,block_m=64,..."`` -> a schedule dict (booleans for swap_ab, persistent and stream_k); an
    ArgumentTypeError naming what is wrong otherwise."""
    schedule = {}
    for pair in text.split(","):
        name, _, value = pair.partition("=")
        if not value.strip().lstrip("-").isdigit():
            raise argparse.ArgumentTypeError(f"schedule {text!r}: {pair!r} is not name=integer")
        number = int(value)
        schedule[name.strip()] = bool(number) if name.strip() in ("swap_ab", "persistent", "stream_k") else number
    if set(schedule) not in (SPLIT_KEYS, WALK_KEYS):
        raise argparse.ArgumentTypeError(f"schedule {text!r}: give exactly {', '.join(sorted(SPLIT_KEYS))} (the split "
                                         f"family) or {', '.join(sorted(WALK_KEYS))} (the tile walk)")
    return schedule


def label(schedule: dict) -> str:
    return ",".join(f"{name}={int(value)}" for name, value in schedule.items())


def pinned(dtype, schedule: dict):
    """The kernel of ``schedule`` for ``dtype`` inputs and outputs, b = w.T, no epilogue: a pinned Script."""
    from warpspec.ops import kernels

    cls = kernels.gemm_class(dtype, split="split_k" in schedule)
    return cls(dtype, dtype, b_k_major=True, has_bias=False, activation=None, **schedule)


def build(job) -> str | None:
    """Compile one schedule's kernel (a worker process): None, or why it does not build."""
    dtype_name, schedule = job
    from warpspec.cuda.launch import compile_kernel
    from warpspec.dtypes import BY_NAME
    from warpspec.errors import CompileError
    from warpspec.runtime import kernel_for

    try:
        compile_kernel(kernel_for(pinned(BY_NAME[dtype_name], schedule), {}))
    except CompileError as error:
        return str(error).splitlines()[0]
    return None


def arguments(matmul, x, w, out, schedule: dict, num_sms: int, zeros) -> tuple:
    """The kernel's call arguments on these operands, with a zeroed workspace of the schedule's own size."""
    problem = matmul.validate(x, w.T, None, None, out, None)
    elements, flag_count = matmul.workspace_sizes(problem.m, problem.n, num_sms, schedule)
    workspace = zeros(max(elements, 1), "float32"), zeros(max(flag_count, 1), "int32")
    return matmul.Layout.of(x, w.T, out, problem).arguments(x, w.T, out, None, None, workspace, num_sms)


def relative_error(out, expected) -> float:
    return float(((out.double() - expected.double()).norm() / expected.double().norm()).item())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", required=True, metavar="MxNxK,...")
    parser.add_argument("--schedule", action="append", type=parse_schedule, default=[], metavar="NAME=VALUE,...",
                        help="a pinned schedule (repeat the option for more)")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    parser.add_argument("--json", default=None, help="also write every number to this file")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: check each schedule on the emulator")
    args = parser.parse_args()
    shapes = [tuple(int(x) for x in part.lower().split("x")) for part in args.shapes.split(",")]

    import torch
    from llm_shapes import operands  # the linear layers' operands: x [M, K] and a weight [N, K]

    import warpspec
    from warpspec.dtypes import BY_NAME
    from warpspec.errors import CompileError

    matmul = importlib.import_module("warpspec.ops.matmul")
    dtype, torch_dtype = BY_NAME[args.dtype], getattr(torch, args.dtype)
    device = "cpu" if args.dry_run else "cuda"

    def zeros(count, name):
        return torch.zeros(count, dtype=getattr(torch, name), device=device)

    if args.dry_run:
        for m, n, k in shapes:
            small = (max(m // DRY_RUN_DIVISOR, 1), max(n // DRY_RUN_DIVISOR, 64), max(k // DRY_RUN_K_DIVISOR, 64))
            x, w = operands(torch, torch_dtype, *small, device)
            out = torch.empty(small[0], small[1], dtype=torch_dtype)
            expected = x.float() @ w.float().T
            for schedule in args.schedule:
                with warpspec.use_backend("emulator"):
                    try:
                        pinned(dtype, schedule)(*arguments(matmul, x, w, out, schedule, 4, zeros))
                    except CompileError as error:
                        print(f"{m}x{n}x{k} {label(schedule)}: does not build: {str(error).splitlines()[0]}")
                        continue
                error = relative_error(out, expected)
                assert error < TOLERANCE, (small, schedule, error)
                print(f"{m}x{n}x{k} {label(schedule)}: checked at {'x'.join(map(str, small))} (error {error:.1e})")
        return

    import triton

    started = time.perf_counter()
    jobs = [(args.dtype, schedule) for schedule in args.schedule]
    with ProcessPoolExecutor(max(1, min(len(jobs), os.cpu_count() or 1))) as pool:
        reasons = dict(zip((label(s) for s in args.schedule), pool.map(build, jobs))) if jobs else {}
    print(f"built {len(jobs)} schedules in {time.perf_counter() - started:.0f} s", flush=True)

    def bench(fn) -> float:
        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3

    rows = []
    num_sms = matmul.sm_count()
    with warpspec.use_backend("cuda"):
        for m, n, k in shapes:
            x, w = operands(torch, torch_dtype, m, n, k, device)
            out = torch.empty(m, n, device=device, dtype=torch_dtype)
            expected = x.float() @ w.float().T
            matmul.matmul(x, w.T, out=out)
            assert relative_error(out, expected) < TOLERANCE
            shipped = matmul.chosen_schedule(matmul.validate(x, w.T, None, None, out, None))
            cublas = bench(lambda: x @ w.T)
            row = {"shape": f"{m}x{n}x{k}", "cublas_us": cublas, "shipped": shipped,
                   "shipped_us": bench(lambda: matmul.matmul(x, w.T, out=out)), "pinned": []}
            print(f"{row['shape']}: cuBLAS {cublas:.1f} µs; shipped {row['shipped_us']:.1f} "
                  f"({cublas / row['shipped_us']:.3f}) {shipped}", flush=True)
            for schedule in args.schedule:
                entry = {"schedule": schedule, "reason": reasons[label(schedule)]}
                if entry["reason"] is None:
                    script = pinned(dtype, schedule)
                    call = arguments(matmul, x, w, out, schedule, num_sms, zeros)
                    out.fill_(float("nan"))
                    script(*call)
                    entry["error"] = relative_error(out, expected)
                    if entry["error"] < TOLERANCE:
                        entry["us"] = bench(lambda: script(*call))
                row["pinned"].append(entry)
                print(f"    {label(schedule)}: {describe(entry, cublas)}", flush=True)
            rows.append(row)
    print(f"\n{torch.cuda.get_device_name()}; {args.dtype}; do_bench medians, µs (cuBLAS / ours)")
    for row in rows:
        print(f"{row['shape']}: cuBLAS {row['cublas_us']:.1f}; shipped {row['shipped_us']:.1f} "
              f"({row['cublas_us'] / row['shipped_us']:.3f})")
        for entry in row["pinned"]:
            print(f"    {label(entry['schedule'])}: {describe(entry, row['cublas_us'])}")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(rows, file, indent=1)


def describe(entry: dict, cublas: float) -> str:
    if entry["reason"] is not None:
        return f"does not build: {entry['reason']}"
    if "us" not in entry:
        return f"WRONG (relative error {entry['error']:.2e}), not timed"
    return f"{entry['us']:.1f} ({cublas / entry['us']:.3f})"


if __name__ == "__main__":
    main()
