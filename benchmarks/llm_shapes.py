"""warpspec.ops.matmul against cuBLAS on the linear layers of a language model: bf16 and fp16 ``x @ w.T`` with
Llama-sized weights at every M from decode to prefill, in one process.

Weights w [N, K] (N × K: 4096×4096, 14336×4096, 4096×14336, 6144×4096 and 1024×4096, a grouped-query K/V
projection) times activations x [M, K] for M in 1, 8, 32, 64, 256, 1024, 2048 and 8192, ``torch.randn`` inputs,
``triton.testing.do_bench(fn, warmup=100, rep=500, return_mode="median")`` with cuBLAS (``x @ w.T``) timed right
before ``ops.matmul(x, w.T, out=out)``. Every output is checked against the float32 product before anything is
timed. Printed per row: both times, the ratio (cuBLAS time / ours), and for M <= 16 the effective weight bandwidth
(the weight's bytes over the time: a decode GEMM streams the weight once, so HBM's 4.8 TB/s on the H200 bounds it);
then per dtype and M the geometric mean of the ratios and the lowest one.

do_bench flushes L2 by zeroing 256 MB, so a timed kernel starts with L2 full of dirty lines and writes them back
(up to L2's 50 MB) while it reads: at M <= 16 that write-back shares HBM with the weight's read and caps the
bandwidth do_bench shows (117 MB read beside 50 MB written is at most 117 / 167 of HBM's rate). The decode rows
are therefore timed a second way too (``cold_clean_ms``, the "clean" columns): L2 emptied by *reading* 256 MB
before each call, so the weight still comes from HBM but nothing is written back during the call.

    python benchmarks/llm_shapes.py [--dtypes bfloat16,float16] [--m 1,8,...] [--weights NxK,...] [--no-tune]
                                    [--json out.json] [--dry-run]

Each shape is tuned first unless ``--no-tune`` (then ops.matmul runs its shipped defaults or size rule).
``--dry-run`` needs no GPU: it lists the shapes and runs the checks on CPU tensors at a small stand-in of each
(the emulator), so the script's plumbing is tested where it cannot time.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import time

#: Linear layers' weights (N, K).
WEIGHTS = [(4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096), (1024, 4096)]
M_VALUES = [1, 8, 32, 64, 256, 1024, 2048, 8192]
DECODE_M = 16  # at and below: report the effective weight bandwidth
TOLERANCE = 1e-2  # relative Frobenius error against the float32 product
#: --dry-run's stand-in of every shape on the emulator: sizes divided by this (at least 1 row, 64 columns).
DRY_RUN_DIVISOR = 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="bfloat16,float16", help="comma-separated subset of bfloat16, float16")
    parser.add_argument("--m", default=",".join(map(str, M_VALUES)), help="comma-separated M values")
    parser.add_argument("--weights", default=",".join(f"{n}x{k}" for n, k in WEIGHTS), metavar="NxK,...")
    parser.add_argument("--no-tune", action="store_true", help="time what ops.matmul picks without tuning")
    parser.add_argument("--json", default=None, help="also write every number to this file")
    parser.add_argument("--dry-run", action="store_true",
                        help="no GPU: list the shapes and check ops.matmul on the emulator at stand-ins")
    args = parser.parse_args()
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    m_values = [int(m) for m in args.m.split(",")]
    weights = [tuple(int(x) for x in part.lower().split("x")) for part in args.weights.split(",")]
    shapes = [(dtype, m, n, k) for dtype in dtypes for n, k in weights for m in m_values]

    import torch

    matmul_module = importlib.import_module("warpspec.ops.matmul")
    if args.dry_run:
        dry_run(torch, matmul_module, shapes)
        return

    import triton

    import warpspec
    from warpspec.tune.tuner import configure

    configure(verbose=True)

    def bench(fn) -> float:
        return triton.testing.do_bench(fn, warmup=100, rep=500, return_mode="median")

    rows = []
    with warpspec.use_backend("cuda"):
        for dtype_name, m, n, k in shapes:
            rows.append(measure(torch, bench, matmul_module, dtype_name, m, n, k, tune=not args.no_tune))
            row = rows[-1]
            print(f"{dtype_name} M={m} {n}x{k}: {row['ours_us']:.1f} us, cuBLAS {row['reference_us']:.1f} us "
                  f"({row['ratio']:.3f}x)", flush=True)
    print(f"\n{torch.cuda.get_device_name()}; reference cuBLAS (x @ w.T); "
          f"{'shipped defaults / size rule' if args.no_tune else 'tuned'}")
    print(table(rows))
    if args.json:
        with open(args.json, "w") as file:
            json.dump(rows, file, indent=1)


def operands(torch, dtype, m, n, k, device):
    generator = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(m, k, device=device, generator=generator).to(dtype)
    w = torch.randn(n, k, device=device, generator=generator).to(dtype)
    return x, w


def check(torch, matmul_module, x, w, out) -> float:
    """ops.matmul into ``out`` against the float32 product: the relative error, asserted below TOLERANCE."""
    matmul_module.matmul(x, w.T, out=out)
    expected = x.float() @ w.float().T
    error = ((out.double() - expected.double()).norm() / expected.double().norm()).item()
    assert error < TOLERANCE, (tuple(x.shape), tuple(w.shape), error)
    return error


def measure(torch, bench, matmul_module, dtype_name: str, m: int, n: int, k: int, tune: bool) -> dict:
    """One row: tune (unless not ``tune``), check, time cuBLAS then ours."""
    dtype = getattr(torch, dtype_name)
    x, w = operands(torch, dtype, m, n, k, "cuda")
    out = torch.empty(m, n, device="cuda", dtype=dtype)
    if tune:
        matmul_module.tune_matmul([(m, n, k)], dtype_name)
    started = time.perf_counter()
    error = check(torch, matmul_module, x, w, out)
    torch.cuda.synchronize()
    if time.perf_counter() - started > 0.5:
        bench(lambda: matmul_module.matmul(x, w.T, out=out))  # what follows a build is not the figure
    reference_ms = bench(lambda: x @ w.T)
    ours_ms = bench(lambda: matmul_module.matmul(x, w.T, out=out))
    clean = {}
    if m <= DECODE_M:
        clean = {"reference": cold_clean_ms(torch, lambda: x @ w.T),
                 "ours": cold_clean_ms(torch, lambda: matmul_module.matmul(x, w.T, out=out))}
    row = {"dtype": dtype_name, "m": m, "n": n, "k": k, "ours_us": ours_ms * 1e3, "reference_us": reference_ms * 1e3,
           "ratio": reference_ms / ours_ms, "error": error, "tflops": 2.0 * m * n * k / ours_ms / 1e9}
    if m <= DECODE_M:
        weight_bytes = n * k * w.element_size()
        row["ours_tb_s"] = weight_bytes / ours_ms / 1e9
        row["reference_tb_s"] = weight_bytes / reference_ms / 1e9
        for who, ms in clean.items():
            row[f"{who}_clean_us"] = ms * 1e3
            row[f"{who}_clean_tb_s"] = weight_bytes / ms / 1e9
    return row


#: ``cold_clean_ms``'s L2 eviction buffer (bytes read before each call: five times the H200's 50 MB L2) and calls.
CLEAN_FLUSH_BYTES = 256 << 20
CLEAN_CALLS = 200


def cold_clean_ms(torch, fn, calls: int = CLEAN_CALLS) -> float:
    """Median milliseconds of ``fn`` between CUDA events, L2 emptied before each call by reading (``sum``)
    ``CLEAN_FLUSH_BYTES``: cold like do_bench's flush, without the dirty lines its zeroing leaves to write back."""
    flush = torch.ones(CLEAN_FLUSH_BYTES // 4, device="cuda", dtype=torch.int32)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
    for _ in range(5):
        fn()
    for start, end in events:
        flush.sum()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    times = sorted(start.elapsed_time(end) for start, end in events)
    return times[len(times) // 2]


def table(rows) -> str:
    """The rows, then per dtype and M the geometric mean and the lowest ratio."""
    lines = [f"{'dtype':<9} {'M':>5} {'N x K':<11} {'ours us':>9} {'cuBLAS us':>9} {'ratio':>6} {'TB/s':>6} "
             f"{'cuBLAS TB/s':>11} {'clean TB/s':>10} {'cuBLAS clean':>12}"]
    for row in rows:
        bandwidth = (f"{row['ours_tb_s']:6.2f} {row['reference_tb_s']:11.2f}" if "ours_tb_s" in row else
                     f"{'':>6} {'':>11}")
        if "ours_clean_tb_s" in row:
            bandwidth += f" {row['ours_clean_tb_s']:10.2f} {row['reference_clean_tb_s']:12.2f}"
        lines.append(f"{row['dtype']:<9} {row['m']:>5} {row['n']}x{row['k']:<6} {row['ours_us']:9.1f} "
                     f"{row['reference_us']:9.1f} {row['ratio']:6.3f} {bandwidth}")
    for dtype in dict.fromkeys(row["dtype"] for row in rows):
        for m in dict.fromkeys(row["m"] for row in rows if row["dtype"] == dtype):
            ratios = [row["ratio"] for row in rows if row["dtype"] == dtype and row["m"] == m]
            mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
            lines.append(f"{dtype} M={m}: geometric mean {mean:.3f}x, lowest {min(ratios):.3f}x over "
                         f"{len(ratios)} weights")
    return "\n".join(lines)


def dry_run(torch, matmul_module, shapes) -> None:
    """The shape list, and ``check`` on CPU tensors (the emulator) at each shape's stand-in: every size divided
    by ``DRY_RUN_DIVISOR`` (M at least 1, N and K at least 64); the table printed from made-up times."""
    print(f"{len(shapes)} shapes: " + ", ".join(f"{d} M={m} {n}x{k}" for d, m, n, k in shapes))
    rows = []
    for dtype_name, m, n, k in shapes:
        small = (max(m // DRY_RUN_DIVISOR, 1), max(n // DRY_RUN_DIVISOR, 64), max(k // DRY_RUN_DIVISOR, 64))
        dtype = getattr(torch, dtype_name)
        x, w = operands(torch, dtype, *small, "cpu")
        out = torch.empty(small[0], small[1], dtype=dtype)
        error = check(torch, matmul_module, x, w, out)
        row = {"dtype": dtype_name, "m": m, "n": n, "k": k, "ours_us": 1.0, "reference_us": 1.0, "ratio": 1.0,
               "error": error}
        if m <= DECODE_M:
            row["ours_tb_s"] = row["reference_tb_s"] = row["ours_clean_tb_s"] = row["reference_clean_tb_s"] = 0.0
        rows.append(row)
    print(table(rows))
    print(f"dry run: {len(rows)} stand-ins checked on the emulator (times are placeholders)")


if __name__ == "__main__":
    main()
