"""ops.matmul's persistent kernel (3 stages, 128x256 tiles) at several rasterization band heights (``group_m``: tile
rows walked down one column band before moving right), against cuBLAS in the same process.

For each dtype and band height: the kernel pinned, checked against the fp32 torch reference, then timed with the
house protocol of benchmarks/gemm.py (``do_bench(warmup=100, rep=500)`` medians), cuBLAS (``a @ w.T``) timed right
before each row so drift shows. C = A·Bᵀ with A [M, K] and w [N, K], as ops.matmul's benchmark.

    python benchmarks/rasterization.py [--size 8192] [--groups 4,8,16,32] [--dtypes float16,bfloat16]
"""

from __future__ import annotations

import argparse
import importlib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--groups", default="4,8,16,32", help="comma-separated band heights in tile rows")
    parser.add_argument("--dtypes", default="float16,bfloat16")
    options = parser.parse_args()

    import support
    import torch

    import warpspec

    matmul = importlib.import_module("warpspec.ops.matmul")
    size, flops = options.size, 2.0 * options.size ** 3
    groups = [int(g) for g in options.groups.split(",")]
    rows = []
    with warpspec.use_backend("cuda"):
        for dtype_name in options.dtypes.split(","):
            dtype = getattr(torch, dtype_name)
            a = torch.randn(size, size, device="cuda").to(dtype)
            w = torch.randn(size, size, device="cuda").to(dtype)
            out = torch.empty(size, size, device="cuda", dtype=dtype)
            expected = support.reference(a, w)
            problem = matmul.validate(a, w.T, None, None, out, None)
            args = matmul.arguments(a, w.T, out, None, None, problem)
            for group in groups:
                kernel = matmul.gemm_script(problem, b_k_major=True, has_bias=False, activation=None,
                                            persistent=True, stream_k=False, num_stages=3, block_m=128, block_n=256,
                                            group_m=group)
                out.fill_(float("nan"))
                kernel(*args)
                torch.cuda.synchronize()
                error = support.relative_error(out, expected)
                assert error < 1e-2, (dtype_name, group, error)
                theirs = support.bench(lambda: a @ w.T, 100, 500)
                ours = support.bench(lambda: kernel(*args), 100, 500)  # noqa: B023 (timed before the loop moves on)
                rows.append((dtype_name, group, flops / ours / 1e9, flops / theirs / 1e9, theirs / ours))
                print(f"{dtype_name} group_m={group}: {rows[-1][2]:.0f} TFLOP/s, cuBLAS {rows[-1][3]:.0f} "
                      f"({rows[-1][4]:.3f}x)", flush=True)
    print(f"\n{torch.cuda.get_device_name()}, ops.matmul's kernel (3 stages, 128x256, persistent) at {size}^3")
    print(f"{'dtype':<10} {'group_m':>7} {'TFLOP/s':>8} {'cuBLAS':>7} {'ratio':>6}")
    for dtype_name, group, ours, theirs, ratio in rows:
        print(f"{dtype_name:<10} {group:>7} {ours:8.0f} {theirs:7.0f} {ratio:6.3f}")


if __name__ == "__main__":
    main()
