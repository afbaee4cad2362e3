"""Every schedule of an autotuned matmul example, each pinned, on the GPU at one size: what the tuner chooses
among, measured with the house protocol so the choice can be read.

Each schedule is checked against an fp32 torch reference, then timed with
``triton.testing.do_bench(warmup=50, rep=200, return_mode="median")``; cuBLAS (``a @ b.T``) is timed before each
so drift shows. C = A·Bᵀ in fp16, the examples' seed signature.

    python benchmarks/every_schedule.py matmul_v6:MatmulWGMMAV6 [--size 8192] [--json out.json] [--set NAME=VALUE]

``--set`` passes a constructor argument that is not tuned to every schedule (``--set release=thread`` times V6 with
one empty-barrier arrival per consumer thread).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kernel", help="MODULE:CLASS of an example, e.g. matmul_v6:MatmulWGMMAV6")
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--json", help="write the measurements here")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a constructor argument for every schedule (an integer or a word), e.g. release=thread")
    options = parser.parse_args()
    fixed = {name: int(value) if value.lstrip("-").isdigit() else value
             for name, _, value in (item.partition("=") for item in options.set)}

    import support
    import torch

    import warpspec

    module_name, _, class_name = options.kernel.partition(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    size = options.size
    a, b, c = support.operands(size)
    reference = support.reference(a, b)
    flops = 2.0 * size ** 3
    bench = functools.partial(support.bench, warmup=50, rep=200)

    rows = []
    with warpspec.use_backend("cuda"):
        for schedule in cls._tune_space.schedules():
            kernel = cls(**fixed, **schedule)
            label = " ".join(f"{k}={v}" for k, v in schedule.items())
            c.fill_(float("nan"))
            try:
                kernel(size, size, size, a, b, c)
                torch.cuda.synchronize()
            except warpspec.WarpspecError as error:
                print(f"{label}: {type(error).__name__}: {error}", flush=True)
                continue
            error = support.relative_error(c, reference)
            if not error < 1e-2:
                print(f"{label}: WRONG (relative error {error:.2e})", flush=True)
                continue
            cublas = bench(lambda: a @ b.T)
            ms = bench(lambda kernel=kernel: kernel(size, size, size, a, b, c))
            rows.append({"schedule": schedule, "ms": ms, "tflops": flops / ms / 1e9, "cublas_ms": cublas,
                         "ratio": cublas / ms})
            print(f"{label}: {ms:.3f} ms {rows[-1]['tflops']:.0f} TFLOP/s ({rows[-1]['ratio']:.3f}x cuBLAS)",
                  flush=True)
    if options.json:
        with open(options.json, "w") as out:
            json.dump({"gpu": torch.cuda.get_device_name(), "kernel": options.kernel, "size": size, "fixed": fixed,
                       "rows": rows}, out, indent=1)
    print(f"\n{torch.cuda.get_device_name()}, {options.kernel} at {size}^3 fp16, every schedule")
    print(f"{'schedule':<60} {'ms':>7} {'TFLOP/s':>8} {'cuBLAS':>7} {'ratio':>6}")
    for row in sorted(rows, key=lambda r: r["ms"]):
        label = " ".join(f"{k}={v}" for k, v in row["schedule"].items())
        print(f"{label:<60} {row['ms']:7.3f} {row['tflops']:8.0f} {flops / row['cublas_ms'] / 1e9:7.0f} "
              f"{row['ratio']:6.3f}")


if __name__ == "__main__":
    main()
