"""The tutorial's matmuls (V3-V7) against cuBLAS in one process, at one size.

House protocol (docs/performance.md): C = A·Bᵀ, A [M, K] and B [N, K] row-major fp16 from ``torch.randn``,
``triton.testing.do_bench(fn, warmup=100, rep=500, return_mode="median")``, cuBLAS as ``a @ b.T`` timed right
before each kernel. Each kernel is autotuned first (its tuning time is printed) and checked against an fp32
reference before it is timed.

    python benchmarks/tutorial.py [--size 8192]
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8192)
    args = parser.parse_args()

    import torch

    import support
    import warpspec
    from matmul_v3 import MatmulWGMMAV3
    from matmul_v4 import MatmulWGMMAV4
    from matmul_v5 import MatmulWGMMAV5
    from matmul_v6 import MatmulWGMMAV6
    from matmul_v7 import MatmulWGMMAV7

    size = args.size
    a, b, _ = support.operands(size)
    reference = support.reference(a, b)
    flops = 2.0 * size ** 3
    bench = functools.partial(support.bench, warmup=100, rep=500)

    rows = []
    kernels = [("V3 pinned 2/128/128/64", MatmulWGMMAV3(num_stages=2, block_m=128, block_n=128, block_k=64)),
               ("V3 autotuned", MatmulWGMMAV3()), ("V4 autotuned", MatmulWGMMAV4()),
               ("V5 autotuned", MatmulWGMMAV5()), ("V6 autotuned", MatmulWGMMAV6()),
               ("V6 cooperative 3/128/256", MatmulWGMMAV6("cooperative", 3, 128, 256, 256)),
               ("V6 cooperative 4/128/256, 64-column epilogue", MatmulWGMMAV6("cooperative", 4, 128, 256, 64)),
               ("V6 ping-pong 4/128/128", MatmulWGMMAV6("pingpong", 4, 128, 128, 128)),
               ("V7 autotuned", MatmulWGMMAV7())]
    with warpspec.use_backend("cuda"):
        for name, kernel in kernels:
            c = torch.full((size, size), float("nan"), device="cuda", dtype=torch.float16)
            started = time.perf_counter()
            kernel(size, size, size, a, b, c)
            torch.cuda.synchronize()
            first = time.perf_counter() - started
            error = support.relative_error(c, reference)
            assert error < 1e-2, (name, error)
            schedule = getattr(getattr(kernel, "last_report", None), "winner", None)
            cublas = bench(lambda: a @ b.T)
            ours = bench(lambda: kernel(size, size, size, a, b, c))
            rows.append((name, flops / ours / 1e9, flops / cublas / 1e9, cublas / ours, error, first,
                         schedule.label if schedule is not None else ""))
            print(f"{name}: {rows[-1][1]:.0f} TFLOP/s, cuBLAS {rows[-1][2]:.0f}", flush=True)

    print(f"\n{torch.cuda.get_device_name()}, {size}^3 fp16")
    print(f"{'kernel':<24} {'TFLOP/s':>8} {'cuBLAS':>8} {'ratio':>6} {'rel err':>8} {'first call':>10}  winner")
    for name, ours, cublas, ratio, error, first, winner in rows:
        print(f"{name:<24} {ours:8.0f} {cublas:8.0f} {ratio:6.3f} {error:8.1e} {first:9.1f}s  {winner}")


if __name__ == "__main__":
    main()
