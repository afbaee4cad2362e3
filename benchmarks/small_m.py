"""Where a small-M linear layer's time goes: for each shape, the split family's schedules timed by the tuner, and
then one schedule several ways — the pinned kernel alone under ``do_bench``, ``ops.matmul(x, w.T, out=)`` under
``do_bench``, the same call replayed from a CUDA graph (no host work), cuBLAS beside — and ops.matmul's host time
per eager call.

    python benchmarks/small_m.py [--shapes MxNxK,...] [--dtype bfloat16] [--top 8] [--json out.json]

Each shape is tuned first (``tune_matmul``: its winner is stored and then runs in ops.matmul); the tuner's table
lists the ``--top`` fastest schedules and the size rule's (``split_schedule``). Outputs are checked against the
float32 product before anything is timed. ``do_bench(warmup=25, rep=100)`` medians, which flush L2 before each
run; the graph replay averages 200 back-to-back calls, the host time is the house timer's
(``warpspec.tune.bench.host_us_per_call``: the median of 25 loops of 200 calls).
"""

from __future__ import annotations

import argparse
import importlib
import json

SHAPES = "1x4096x4096,8x1024x4096,1x14336x4096,1x4096x14336,256x1024x4096"
TOLERANCE = 1e-2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=SHAPES, metavar="MxNxK,...")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--top", type=int, default=8, help="tuner rows to print per shape")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    import torch
    import triton

    import warpspec

    matmul = importlib.import_module("warpspec.ops.matmul")
    dtype = getattr(torch, args.dtype)
    rows = []
    with warpspec.use_backend("cuda"):
        for m, n, k in matmul.parse_shapes(args.shapes):
            rows.append(measure(torch, triton, matmul, dtype, args.dtype, m, n, k, args.top))
    print(f"\n{torch.cuda.get_device_name()}; {args.dtype}; us")
    print(f"{'M x N x K':<16} {'schedule':<58} {'tuner':>7} {'kernel':>7} {'op':>7} {'graph':>7} {'host':>6} "
          f"{'cuBLAS':>7}")
    for row in rows:
        print(f"{row['shape']:<16} {row['schedule']:<58} {row['tuner_us']:7.1f} {row['kernel_us']:7.1f} "
              f"{row['op_us']:7.1f} {row['graph_us']:7.1f} {row['host_us']:6.1f} {row['cublas_us']:7.1f}")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(rows, file, indent=1)


def measure(torch, triton, matmul, dtype, dtype_name, m, n, k, top) -> dict:
    from warpspec.tune.bench import host_us_per_call

    def bench(fn) -> float:
        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3

    generator = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", generator=generator).to(dtype)
    w = torch.randn(n, k, device="cuda", generator=generator).to(dtype)
    out = torch.empty(m, n, device="cuda", dtype=dtype)
    matmul.tune_matmul([(m, n, k)], dtype_name)
    problem = matmul.validate(x, w.T, None, None, out, None)
    report = matmul.tuned_script(problem).last_report
    timed = sorted((f for f in report.fates if f.time_ms is not None), key=lambda f: f.time_ms)
    rule = matmul.split_schedule(problem) if problem.split_family else None
    print(f"\n{m}x{n}x{k}: {report.summary()}")
    for fate in timed[:top] + [f for f in timed[top:] if rule is not None and f.schedule == rule]:
        mark = "  (size rule)" if fate.schedule == rule else ""
        print(f"  {fate.time_ms * 1e3:8.1f} us  {fate.label}{mark}")

    matmul.matmul(x, w.T, out=out)
    expected = x.float() @ w.float().T
    error = ((out.double() - expected.double()).norm() / expected.double().norm()).item()
    assert error < TOLERANCE, (m, n, k, error)
    found = matmul.signature(x, w.T, None, None, out, None)
    script = found.launcher[0]
    kernel_args = matmul.arguments(x, w.T, out, None, None, problem)
    kernel_us = bench(lambda: script(*kernel_args))
    op_us = bench(lambda: matmul.matmul(x, w.T, out=out))
    cublas_us = bench(lambda: x @ w.T)

    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        for _ in range(20):
            matmul.matmul(x, w.T, out=out)
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        graph.replay()
    stop.record()
    stop.synchronize()
    graph_us = start.elapsed_time(stop) * 1e3 / 200

    host_us = host_us_per_call(lambda: matmul.matmul(x, w.T, out=out), torch.cuda.synchronize, 200)
    schedule = script.schedule()
    label = ",".join(f"{key}={value}" for key, value in schedule.items())
    return {"shape": f"{m}x{n}x{k}", "schedule": label, "tuner_us": timed[0].time_ms * 1e3 if timed else float("nan"),
            "kernel_us": kernel_us, "op_us": op_us, "graph_us": graph_us, "host_us": host_us, "cublas_us": cublas_us,
            "error": error}


if __name__ == "__main__":
    main()
