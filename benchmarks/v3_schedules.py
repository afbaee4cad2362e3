"""The seed's V3 at one size over its pipeline depths and tiles, on the GPU: the measurements the CPU timing model
(``warpspec.timeline.model``) is calibrated and checked against.

Schedules: 1-7 stages x (128, 128, 64) and 2-7 stages x (128, 64, 64). Each is pinned, checked against an fp32
torch reference, then timed with ``triton.testing.do_bench(warmup=50, rep=200, return_mode="median")`` (the house
protocol of docs/performance.md with a shorter budget), cuBLAS once for scale.

    python benchmarks/v3_schedules.py [--size 8192] [--json v3_8192.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

TILES = [((128, 128, 64), range(1, 8)), ((128, 64, 64), range(2, 8))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--json", help="write the measurements here")
    options = parser.parse_args()

    import torch

    import support
    import warpspec
    from matmul_v3 import MatmulWGMMAV3

    size = options.size
    a, b, c = support.operands(size)
    reference = support.reference(a, b)
    flops = 2.0 * size ** 3
    bench = functools.partial(support.bench, warmup=50, rep=200)

    cublas = bench(lambda: a @ b.T)
    rows = []
    with warpspec.use_backend("cuda"):
        for (block_m, block_n, block_k), stages in TILES:
            for num_stages in stages:
                kernel = MatmulWGMMAV3(num_stages=num_stages, block_m=block_m, block_n=block_n, block_k=block_k)
                c.fill_(float("nan"))
                kernel(size, size, size, a, b, c)
                error = support.relative_error(c, reference)
                assert error < 1e-2, (num_stages, block_m, block_n, block_k, error)
                ms = bench(lambda: kernel(size, size, size, a, b, c))
                rows.append(dict(num_stages=num_stages, block_m=block_m, block_n=block_n, block_k=block_k, ms=ms,
                                 tflops=flops / ms / 1e9, size=size))
                print(f"{num_stages} stages {block_m}x{block_n}x{block_k}: {ms:.3f} ms "
                      f"{rows[-1]['tflops']:.0f} TFLOP/s", flush=True)
    if options.json:
        with open(options.json, "w") as out:
            json.dump({"gpu": torch.cuda.get_device_name(), "cublas_ms": cublas, "schedules": rows}, out, indent=1)
    print(f"\n{torch.cuda.get_device_name()}, V3 at {size}^3 fp16 (cuBLAS {flops / cublas / 1e9:.0f} TFLOP/s)")
    print(f"{'stages':>6} {'tile':>12} {'ms':>8} {'TFLOP/s':>8}")
    for row in rows:
        tile = f"{row['block_m']}x{row['block_n']}x{row['block_k']}"
        print(f"{row['num_stages']:6d} {tile:>12} {row['ms']:8.3f} {row['tflops']:8.0f}")


if __name__ == "__main__":
    main()
