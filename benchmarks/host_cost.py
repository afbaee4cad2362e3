"""Host time of one eager ``ops.matmul`` call against torch's own call of the same product, in one process: the
linear layer ``x @ w.T`` allocating its output, writing into ``out=``, and with a bias (``torch.nn.functional.linear``
beside it), at the sizes issue-level figures quote (128×128×64, 2048³) and at decode sizes that run the split
family (1×4096×4096; 8×1024×4096 splits K and so takes the workspace).

    python benchmarks/host_cost.py [--shapes MxNxK,...] [--dtype float16] [--calls 200] [--profile CALLS]
                                   [--json out.json]

Each figure is ``warpspec.tune.bench.host_us_per_call``: the median of 25 loops of ``--calls`` calls, the GPU
waited for before and after each loop (what a call costs before the GPU sees it). Every output is checked against
torch's before anything is timed. ``--profile`` also runs cProfile over that many calls of each ops.matmul form at
the first shape and prints the functions with the most own time. Prints a Markdown table last (ours, torch's, and
ours / torch's: at most 1.00 is the goal).
"""

from __future__ import annotations

import argparse
import json

SHAPES = "128x128x64,2048x2048x2048,1x4096x4096,8x1024x4096"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=SHAPES, metavar="MxNxK,...")
    parser.add_argument("--dtype", default="float16", choices=("float16", "bfloat16"))
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--profile", type=int, default=0, metavar="CALLS")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import torch

    import warpspec
    from warpspec.ops import matmul
    from warpspec.ops.matmul import parse_shapes
    from warpspec.tune.bench import host_us_per_call

    warpspec.set_backend("cuda")
    dtype = getattr(torch, args.dtype)
    rows = []
    for m, n, k in parse_shapes(args.shapes):
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        w = torch.randn(n, k, device="cuda", dtype=dtype)
        bias = torch.randn(n, device="cuda", dtype=dtype)
        out = torch.empty(m, n, device="cuda", dtype=dtype)
        forms = {
            "x @ w.T": (lambda: matmul(x, w.T), lambda: torch.mm(x, w.T)),
            "x @ w.T, out=": (lambda: matmul(x, w.T, out=out), lambda: torch.mm(x, w.T, out=out)),
            "x @ w.T + bias": (lambda: matmul(x, w.T, bias=bias),
                               lambda: torch.nn.functional.linear(x, w, bias)),
        }
        for form, (ours, theirs) in forms.items():
            got, expected = ours(), theirs()
            if form.endswith("out="):
                got = out.clone()
                theirs()
                expected = out.clone()
            error = ((got.float() - expected.float()).norm() / expected.float().norm().clamp_min(1e-30)).item()
            if not error < 1e-2:
                raise SystemExit(f"{m}x{n}x{k} {form}: relative error {error:.2e} against torch")
            ours_us = host_us_per_call(ours, torch.cuda.synchronize, args.calls)
            torch_us = host_us_per_call(theirs, torch.cuda.synchronize, args.calls)
            rows.append({"shape": f"{m}x{n}x{k}", "form": form, "ours_us": ours_us, "torch_us": torch_us})
            print(f"{m}x{n}x{k} {form}: ours {ours_us:.1f} us, torch {torch_us:.1f} us", flush=True)
        if args.profile and len(rows) == len(forms):
            for form, (ours, _) in forms.items():
                profile(ours, form, args.profile, torch.cuda.synchronize)
    print(f"\n{torch.cuda.get_device_name()}, {args.dtype}, host us per eager call (median of 25 loops of "
          f"{args.calls})\n")
    print("| M×N×K | call | ops.matmul | torch | ratio |\n|---|---|---:|---:|---:|")
    for row in rows:
        print(f"| {row['shape']} | {row['form']} | {row['ours_us']:.1f} | {row['torch_us']:.1f} | "
              f"{row['ours_us'] / row['torch_us']:.2f} |")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(rows, file, indent=1)


def profile(call, label: str, calls: int, synchronize) -> None:
    """cProfile of ``calls`` calls of ``call``: the 25 functions with the most own time."""
    import cProfile
    import pstats

    synchronize()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        call()
    profiler.disable()
    synchronize()
    print(f"\n--- cProfile, {calls} calls of ops.matmul: {label}")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
