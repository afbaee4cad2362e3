"""The main job: the seed tutorial's V3 matmul, on the GPU when a Hopper GPU is present, on the emulator otherwise.

GPU: autotunes V3 at M = N = K = 8192 (fp16), checks it against cuBLAS and prints both speeds.
Emulator: runs every one of V3's 90 schedules at M=300, N=200, K=200 (no dimension a multiple of the tiles) with
all of the emulator's checks on, and compares each result with numpy.

    python examples/main.py
"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import warpspec  # noqa: E402
from matmul_v3 import MatmulWGMMAV3  # noqa: E402


def on_gpu(size: int = 8192) -> None:
    import torch
    import triton

    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    c = torch.empty(size, size, device="cuda", dtype=torch.float16)
    kernel = MatmulWGMMAV3()
    started = time.perf_counter()
    kernel(size, size, size, a, b, c)
    torch.cuda.synchronize()
    print(f"first call (tuning included): {time.perf_counter() - started:.1f} s")
    reference = a.float() @ b.float().T
    error = ((c.float() - reference).norm() / reference.norm()).item()
    flops = 2.0 * size ** 3
    ours = triton.testing.do_bench(lambda: kernel(size, size, size, a, b, c), warmup=100, rep=500,
                                   return_mode="median")
    cublas = triton.testing.do_bench(lambda: a @ b.T, warmup=100, rep=500, return_mode="median")
    print(f"V3 {size}^3 fp16: {flops / ours / 1e9:.0f} TFLOP/s, cuBLAS {flops / cublas / 1e9:.0f} TFLOP/s "
          f"({cublas / ours:.3f}x), relative error {error:.1e} vs an fp32 reference")
    assert error < 1e-2


def on_emulator(m: int = 300, n: int = 200, k: int = 200) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((n, k)).astype(np.float16)
    reference = a.astype(np.float32) @ b.astype(np.float32).T
    tuned = MatmulWGMMAV3()
    started = time.perf_counter()
    worst = 0.0
    for schedule in tuned.schedules():
        c = np.full((m, n), np.nan, dtype=np.float16)
        tuned.instantiate(schedule)(m, n, k, a, b, c)
        error = np.linalg.norm(c.astype(np.float32) - reference) / np.linalg.norm(reference)
        assert error < 1e-2, (schedule, error)
        worst = max(worst, error)
    print(f"emulator: all {len(tuned.schedules())} schedules of V3 at {m}x{n}x{k} passed every check; worst "
          f"relative error {worst:.1e} vs numpy; {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    backend = warpspec.get_backend()
    print(f"backend: {backend}")
    on_gpu() if backend == "cuda" else on_emulator()
    print("OK")
