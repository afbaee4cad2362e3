"""V3 under code-generation variants: global stores of the epilogue (quad-gathered 16-byte vs 4-byte pairs), the
launch order of blocks (plain vs grouped for L2 reuse) and the tensor maps' L2 promotion.

Same protocol as benchmarks/matmul.py (fp16 C = A·Bᵀ, randn inputs, do_bench median, cuBLAS in the same process).

    python benchmarks/codegen_variants.py [--size 8192]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

SCHEDULES = [dict(num_stages=2, block_m=128, block_n=128, block_k=64),
             dict(num_stages=3, block_m=128, block_n=128, block_k=64)]
VARIANTS = {"default": ({}, 128), "4-byte pair stores": ({"quad_stores": False}, 128),
            "grouped order 8": ({"block_group": 8}, 128), "L2 promotion 256": ({}, 256)}


def _build(job):
    schedule, variant, size = job
    from matmul_v3 import MatmulWGMMAV3

    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import parse_ptxas_log
    from warpspec.runtime import kernel_for

    options = VARIANTS[variant][0]
    built = compile_kernel(kernel_for(MatmulWGMMAV3(**schedule), {"n_size": size, "k_size": size}), **options)
    report = next(iter(parse_ptxas_log(built.module.log).values()))
    return report.registers, report.spill_store_bytes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8192)
    args = parser.parse_args(argv)
    import torch
    import triton
    from matmul_v3 import MatmulWGMMAV3

    from warpspec.cuda.launch import compile_kernel, launch_kernel
    from warpspec.frontend.kernel import bind_arguments
    from warpspec.runtime import kernel_for

    size = args.size
    jobs = list(itertools.product(SCHEDULES, VARIANTS, [size]))
    with concurrent.futures.ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
        resources = dict(zip(((str(s), m) for s, m, _ in jobs), pool.map(_build, jobs)))
    torch.manual_seed(0)
    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    c = torch.empty(size, size, device="cuda", dtype=torch.float16)
    ref = a @ b.T
    flops = 2.0 * size ** 3
    cublas = triton.testing.do_bench(lambda: a @ b.T, warmup=100, rep=500, return_mode="median")
    rows = []
    for schedule, variant, _ in jobs:
        script = MatmulWGMMAV3(**schedule)
        runtime, compile_time = bind_arguments(MatmulWGMMAV3, (size, size, size, a, b, c), {})
        kernel = kernel_for(script, compile_time)
        options, l2 = VARIANTS[variant]
        built = compile_kernel(kernel, **options)
        c.fill_(float("nan"))
        launch_kernel(kernel, runtime, built=built, l2_promotion=l2)
        torch.cuda.synchronize()
        error = ((c.float() - ref.float()).norm() / ref.float().norm()).item()
        ms = triton.testing.do_bench(lambda: launch_kernel(kernel, runtime, built=built, l2_promotion=l2),
                                     warmup=100, rep=500, return_mode="median")
        regs, spill = resources[(str(schedule), variant)]
        rows.append((schedule, variant, regs, spill, ms, error))
    print(f"\nV3 fp16 {size}^3; cuBLAS {cublas:.3f} ms = {flops / cublas / 1e9:.0f} TFLOP/s")
    print(f"{'stages bm bn bk':16s} {'variant':20s} {'regs':>4s} {'spill':>5s} {'ms':>7s} {'TFLOP/s':>7s} "
          f"{'/cuBLAS':>7s} {'err':>8s}")
    for schedule, variant, regs, spill, ms, error in rows:
        label = " ".join(str(v) for v in schedule.values())
        print(f"{label:16s} {variant:20s} {regs:4d} {spill:5d} {ms:7.3f} {flops / ms / 1e9:7.0f} "
              f"{cublas / ms:7.3f} {error:8.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
