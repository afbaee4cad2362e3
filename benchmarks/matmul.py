"""Side-by-side GEMM and copy timings on the GPU: warpspec kernels, cuBLAS (torch) and a Triton matmul.

House protocol (docs/performance.md): C = A·Bᵀ with A [M, K], B [N, K] row-major fp16, ``torch.randn`` inputs, fp32
accumulation, ``triton.testing.do_bench(fn, warmup=100, rep=500, return_mode="median")``, cuBLAS as ``a @ b.T``
timed in the same process. Every warpspec result is checked against cuBLAS first (relative Frobenius error).

    python benchmarks/matmul.py [--size 8192] [--schedules all|quick] [--json out.json]

Prints a table last; writes every number to the JSON file.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))


def _build_one(args):
    """Compile one schedule of V3 (in a worker process) so the main process finds it in the disk cache."""
    schedule, n_size, k_size = args
    from matmul_v3 import MatmulWGMMAV3

    from warpspec.cuda.launch import compile_kernel
    from warpspec.runtime import kernel_for

    started = time.perf_counter()
    try:
        built = compile_kernel(kernel_for(MatmulWGMMAV3(**schedule), {"n_size": n_size, "k_size": k_size}))
        return schedule, time.perf_counter() - started, built.module.log, None
    except Exception as error:  # a schedule that fails to build is reported, not fatal
        return schedule, time.perf_counter() - started, "", f"{type(error).__name__}: {error}"


def spills(log: str) -> bool:
    """True when the ptxas report of a build shows spill stores or loads."""
    import re

    return any(int(n) > 0 for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", log))


def relative_error(out, ref) -> float:
    import torch

    return (torch.linalg.norm(out.float() - ref.float()) / torch.linalg.norm(ref.float())).item()


def triton_matmul():
    """A Triton matmul C = A·Bᵀ (fp16 in, fp32 accumulate), autotuned over common tiles."""
    import triton
    import triton.language as tl

    configs = [triton.Config({"BM": bm, "BN": bn, "BK": 64}, num_stages=s, num_warps=w)
               for bm, bn, s, w in [(128, 256, 3, 8), (128, 128, 4, 4), (128, 128, 4, 8), (256, 128, 3, 8)]]

    @triton.autotune(configs=configs, key=["M", "N", "K"])
    @triton.jit
    def kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pid_m = tl.program_id(0)
        pid_n = tl.program_id(1)
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, tl.cdiv(K, BK)):
            kk = k * BK + rk
            ta = tl.load(a + rm[:, None] * K + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
            tb = tl.load(b + rn[:, None] * K + kk[None, :], mask=(rn[:, None] < N) & (kk[None, :] < K), other=0.0)
            acc = tl.dot(ta, tl.trans(tb), acc)
        tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16), mask=(rm[:, None] < M) & (rn[None, :] < N))

    def run(a, b, c):
        M, K = a.shape
        N = b.shape[0]
        grid = lambda meta: (triton.cdiv(M, meta["BM"]), triton.cdiv(N, meta["BN"]))  # noqa: E731
        kernel[grid](a, b, c, M, N, K)

    return run


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--schedules", choices=("all", "quick"), default="quick")
    parser.add_argument("--json", default=None)
    parser.add_argument("--copy-size", type=int, default=16384)
    args = parser.parse_args(argv)

    import torch
    import triton
    from matmul_v3 import MatmulWGMMAV3
    from tma_copy import TmaCopy

    torch.manual_seed(0)
    results = {"gpu": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"), "matmul": [], "copy": []}
    size = args.size
    tuned = MatmulWGMMAV3()
    schedules = tuned.schedules()
    if args.schedules == "quick":
        schedules = [s for s in schedules if (s["block_m"], s["block_n"]) in ((128, 128), (128, 64))
                     and s["block_k"] == 64]
    started = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
        builds = list(pool.map(_build_one, [(s, size, size) for s in schedules]))
    print(f"built {len(builds)} schedules in {time.perf_counter() - started:.1f} s", flush=True)

    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    flops = 2.0 * size ** 3
    ref = a @ b.T
    cublas_ms = triton.testing.do_bench(lambda: a @ b.T, warmup=100, rep=500, return_mode="median")
    rows = [("cuBLAS (torch a @ b.T)", cublas_ms, 0.0)]
    results["matmul"].append({"name": "cublas", "ms": cublas_ms, "tflops": flops / cublas_ms / 1e9})
    triton_run = triton_matmul()
    c_triton = torch.empty(size, size, device="cuda", dtype=torch.float16)
    triton_run(a, b, c_triton)
    triton_ms = triton.testing.do_bench(lambda: triton_run(a, b, c_triton), warmup=100, rep=500,
                                        return_mode="median")
    rows.append(("Triton matmul", triton_ms, relative_error(c_triton, ref)))
    results["matmul"].append({"name": "triton", "ms": triton_ms, "tflops": flops / triton_ms / 1e9,
                              "rel_error": rows[-1][2]})
    best = None
    for schedule, build_s, log, error in builds:
        label = "V3 " + " ".join(f"{k}={v}" for k, v in schedule.items())
        entry = {"name": label, "schedule": schedule, "build_s": build_s, "spills": spills(log)}
        if error:
            entry["error"] = error
            results["matmul"].append(entry)
            print(f"{label}: build failed: {error}", flush=True)
            continue
        kernel = tuned.instantiate(schedule)
        c = torch.full((size, size), float("nan"), device="cuda", dtype=torch.float16)
        kernel(size, size, size, a, b, c)
        torch.cuda.synchronize()
        err = relative_error(c, ref)
        ms = triton.testing.do_bench(lambda: kernel(size, size, size, a, b, c), warmup=100, rep=500,
                                     return_mode="median")
        entry.update(ms=ms, tflops=flops / ms / 1e9, rel_error=err, vs_cublas=cublas_ms / ms)
        results["matmul"].append(entry)
        print(f"{label}: {flops / ms / 1e9:.0f} TFLOP/s, rel err {err:.2e}, spills={entry['spills']}", flush=True)
        if err < 1e-2 and (best is None or ms < best[1]):
            best = (label, ms, err)
    if best:
        rows.append(best)

    # Ragged shape: M, N, K not multiples of any tile (strides stay 16-byte aligned for TMA).
    rm, rn, rk = 8000, 7992, 8056
    ra = torch.randn(rm, rk, device="cuda", dtype=torch.float16)
    rb = torch.randn(rn, rk, device="cuda", dtype=torch.float16)
    rc = torch.full((rm, rn), float("nan"), device="cuda", dtype=torch.float16)
    pinned = MatmulWGMMAV3(num_stages=4, block_m=128, block_n=128, block_k=64)
    pinned(rm, rn, rk, ra, rb, rc)
    torch.cuda.synchronize()
    ragged_err = relative_error(rc, ra @ rb.T)
    results["ragged"] = {"shape": [rm, rn, rk], "rel_error": ragged_err}
    print(f"ragged {rm}x{rn}x{rk}: rel err {ragged_err:.2e}", flush=True)

    # Copy bandwidth: the blog's double-buffered TMA copy against torch's device-to-device copy.
    n = args.copy_size
    src = torch.randn(n, n, device="cuda", dtype=torch.float16)
    dst = torch.empty_like(src)
    moved = 2 * src.numel() * src.element_size()
    torch_ms = triton.testing.do_bench(lambda: dst.copy_(src), warmup=100, rep=500, return_mode="median")
    results["copy"].append({"name": "torch copy_", "ms": torch_ms, "gbps": moved / torch_ms / 1e6})
    copy_rows = [("torch dst.copy_(src)", torch_ms, moved / torch_ms / 1e6)]
    for schedule in TmaCopy().schedules():
        kernel = TmaCopy(**schedule)
        dst.fill_(float("nan"))
        kernel(n, n, src, dst)
        torch.cuda.synchronize()
        exact = bool(torch.equal(dst, src))
        ms = triton.testing.do_bench(lambda: kernel(n, n, src, dst), warmup=100, rep=500, return_mode="median")
        label = "TmaCopy " + " ".join(f"{k}={v}" for k, v in schedule.items())
        results["copy"].append({"name": label, "ms": ms, "gbps": moved / ms / 1e6, "exact": exact,
                                "vs_torch": torch_ms / ms})
        copy_rows.append((label + ("" if exact else " WRONG"), ms, moved / ms / 1e6))

    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print(f"\nGEMM fp16 {size}^3 on {results['gpu']} ({results['date']})")
    print(f"{'kernel':58s} {'ms':>8s} {'TFLOP/s':>8s} {'vs cuBLAS':>9s} {'rel err':>8s}")
    for label, ms, err in rows:
        print(f"{label:58s} {ms:8.3f} {flops / ms / 1e9:8.0f} {cublas_ms / ms:9.3f} {err:8.1e}")
    print(f"\ncopy fp16 {n}x{n} ({moved / 1e9:.2f} GB moved)")
    for label, ms, gbps in copy_rows:
        print(f"{label:58s} {ms:8.3f} {gbps:8.0f} GB/s {torch_ms / ms:6.3f}x torch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
