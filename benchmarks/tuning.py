"""How long the autotuner takes and how good its pick is: the seed's V3 at 8192³ (90 schedules).

    WARPSPEC_CACHE_DIR=$(mktemp -d) python benchmarks/tuning.py --mode first [--json out.json]
    WARPSPEC_CACHE_DIR=<same dir>   python benchmarks/tuning.py --mode second

``first`` (cold caches): the time from the first call to its result (compiling and timing included), the tuning
report, then every schedule the tuner could time, timed again with the house protocol (do_bench median, warmup
100 ms, rep 500 ms) to compare the tuner's winner with the exhaustive best. ``second`` (a new process, warm caches):
the time from the call to its first result.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("first", "second"), required=True)
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    process_start = time.perf_counter()
    import torch
    import triton
    from matmul_v3 import MatmulWGMMAV3

    size = args.size
    torch.manual_seed(0)
    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    c = torch.full((size, size), float("nan"), device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    tuned = MatmulWGMMAV3()
    started = time.perf_counter()
    tuned(size, size, size, a, b, c)
    torch.cuda.synchronize()
    first_call = time.perf_counter() - started
    reference = a.float() @ b.float().T
    error = ((c.float() - reference).norm() / reference.norm()).item()
    report = tuned.last_report
    winner = report.winner.schedule
    print(f"{args.mode} process: call to result {first_call:.2f} s (process start to result "
          f"{time.perf_counter() - process_start:.2f} s); winner {winner}; rel. error {error:.1e} vs fp32")
    result = {"mode": args.mode, "call_to_result_s": first_call, "winner": winner, "rel_error": error,
              "from_cache": report.from_cache, "gpu": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d")}
    if args.mode == "first":
        print(report.summary())
        flops = 2.0 * size ** 3
        exhaustive = []
        for fate in report.fates:
            if fate.time_ms is None:
                continue
            script = tuned.instantiate(fate.schedule)
            ms = triton.testing.do_bench(lambda: script(size, size, size, a, b, c), warmup=100, rep=500,
                                         return_mode="median")
            exhaustive.append((ms, fate.schedule, fate.time_ms))
        exhaustive.sort(key=lambda row: row[0])
        best_ms, best_schedule, _ = exhaustive[0]
        winner_ms = next(ms for ms, schedule, _ in exhaustive if schedule == winner)
        cublas = triton.testing.do_bench(lambda: a @ b.T, warmup=100, rep=500, return_mode="median")
        print(f"exhaustive best {best_schedule}: {best_ms:.3f} ms; tuner's winner {winner_ms:.3f} ms "
              f"({winner_ms / best_ms - 1:+.1%}); cuBLAS {cublas:.3f} ms")
        print(f"{'schedule':60s} {'tuner ms':>9s} {'do_bench ms':>11s} {'TFLOP/s':>8s}")
        for ms, schedule, tuner_ms in exhaustive[:10]:
            label = " ".join(f"{k}={v}" for k, v in schedule.items())
            print(f"{label:60s} {tuner_ms:9.3f} {ms:11.3f} {flops / ms / 1e9:8.0f}")
        result.update(report=report.summary(), exhaustive=[{"schedule": s, "do_bench_ms": ms, "tuner_ms": t}
                                                           for ms, s, t in exhaustive],
                      winner_ms=winner_ms, best_ms=best_ms, cublas_ms=cublas)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
