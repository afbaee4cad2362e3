"""Stream-K against the whole-tile persistent walk, with cuBLAS beside both, in one process.

ops.matmul's kernel pinned to its size rule's tile (persistent, 128×256, 3 stages) with and without the stream-K
split of the last wave (``warpspec.ops.kernels.StreamK``), at each shape: the house protocol's operands
(benchmarks/gemm.py: A [M, K], B = w.T of a row-major w [N, K], ``torch.randn``), each output checked against
cuBLAS first, then ``do_bench(warmup=100, rep=500)`` medians timed in the order cuBLAS, whole tiles, stream-K,
repeated ``--rounds`` times (the median of the rounds is reported, so a drift of the clock over the run does not
favour one side). The wave count says how full the whole-tile walk's last wave is.

    python benchmarks/stream_k.py [--dtypes float16,bfloat16] [--shapes MxNxK,...] [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics

SHAPES = [(8192, 8192, 8192), (4096, 4096, 4096), (16384, 16384, 8192), (8000, 8000, 8000), (8192, 8192, 8056),
          (4096, 14336, 4096), (4096, 4096, 14336), (16384, 4096, 4096), (8192, 8192, 1024)]
TOLERANCE = 1e-2  # relative Frobenius error against cuBLAS's result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="float16,bfloat16")
    parser.add_argument("--shapes", default=None, metavar="MxNxK,...")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", default=None)
    options = parser.parse_args()

    import torch

    import support
    import warpspec

    matmul = importlib.import_module("warpspec.ops.matmul")
    shapes = matmul.parse_shapes(options.shapes) if options.shapes else SHAPES
    rows = []
    with warpspec.use_backend("cuda"):
        num_sms = warpspec.ops.frame.sm_count()
        for dtype_name in options.dtypes.split(","):
            dtype = getattr(torch, dtype_name)
            for m, n, k in shapes:
                a = torch.randn(m, k, device="cuda").to(dtype)
                w = torch.randn(n, k, device="cuda").to(dtype)
                out = torch.empty(m, n, device="cuda", dtype=dtype)
                problem = matmul.validate(a, w.T, None, None, out, None)
                call_args = matmul.arguments(a, w.T, out, None, None, problem)
                kernels = {split: matmul.gemm_script(
                    problem, b_k_major=True, has_bias=False, activation=None, persistent=True, stream_k=split,
                    num_stages=3, block_m=128, block_n=256) for split in (False, True)}
                expected = a @ w.T
                for split, kernel in kernels.items():
                    out.fill_(float("nan"))
                    kernel(*call_args)
                    torch.cuda.synchronize()
                    error = support.relative_error(out, expected.float())
                    assert error < TOLERANCE, (dtype_name, (m, n, k), split, error)
                times = {"cublas": [], False: [], True: []}
                for _ in range(options.rounds):
                    times["cublas"].append(support.bench(lambda: a @ w.T, 100, 500))  # noqa: B023
                    for split, kernel in kernels.items():
                        times[split].append(support.bench(lambda: kernel(*call_args), 100, 500))  # noqa: B023
                ms = {key: statistics.median(values) for key, values in times.items()}
                flops = 2.0 * m * n * k
                tiles = -(-m // 128) * -(-n // 256)
                row = {"dtype": dtype_name, "shape": f"{m}x{n}x{k}", "waves": tiles / min(tiles, num_sms),
                       "cublas_tflops": flops / ms["cublas"] / 1e9, "whole_tflops": flops / ms[False] / 1e9,
                       "stream_k_tflops": flops / ms[True] / 1e9, "whole_ratio": ms["cublas"] / ms[False],
                       "stream_k_ratio": ms["cublas"] / ms[True]}
                rows.append(row)
                print(f"{dtype_name} {row['shape']}: cuBLAS {row['cublas_tflops']:.0f}, whole tiles "
                      f"{row['whole_tflops']:.0f} ({row['whole_ratio']:.3f}x), stream-K {row['stream_k_tflops']:.0f} "
                      f"({row['stream_k_ratio']:.3f}x) TFLOP/s", flush=True)
    print(f"\n{torch.cuda.get_device_name()}, ops.matmul's kernel at 3 stages, 128x256 tiles, persistent; medians of "
          f"{options.rounds} rounds of do_bench(100, 500)")
    print(f"{'dtype':<9} {'M·N·K':<17} {'waves':>6} {'cuBLAS':>7} {'whole':>7} {'ratio':>6} {'stream-K':>8} "
          f"{'ratio':>6}")
    for r in rows:
        print(f"{r['dtype']:<9} {r['shape']:<17} {r['waves']:6.2f} {r['cublas_tflops']:7.0f} {r['whole_tflops']:7.0f} "
              f"{r['whole_ratio']:6.3f} {r['stream_k_tflops']:8.0f} {r['stream_k_ratio']:6.3f}")
    if options.json:
        with open(options.json, "w") as handle:
            json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
