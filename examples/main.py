"""The main job: the seed tutorial's V3 matmul, on the GPU when a Hopper GPU is present, on the emulator otherwise.

GPU: autotunes V3 at M = N = K = 8192 (fp16), checks sampled rows of the result against a numpy fp32 reference and
times it with the house protocol (docs/performance.md; CUDA events, no triton). Needs nothing beyond what
``pip install -e '.[test]'`` installs: without PyTorch the matrices live in device memory from the CUDA driver;
with PyTorch they are torch tensors, cuBLAS (``a @ b.T``) is timed beside V3, and so is ``warpspec.ops.matmul``.
Emulator: runs every one of V3's 90 schedules at M=300, N=200, K=200 (no dimension a multiple of the tiles) with
all of the emulator's checks on, and compares each result with numpy.

    python examples/main.py [--size 8192]
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import warpspec  # noqa: E402
from matmul_v3 import MatmulWGMMAV3  # noqa: E402

CHECKED_ROWS = 256  # rows of C compared with numpy: a full fp32 reference at 8192^3 would take minutes on the CPU


def _torch():
    """PyTorch when it is installed with CUDA, else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def on_gpu(size: int = 8192) -> None:
    from warpspec.cuda import driver
    from warpspec.tune.bench import time_ms

    torch = _torch()
    rows = np.sort(np.random.default_rng(1).choice(size, min(CHECKED_ROWS, size), replace=False))
    if torch is not None:
        a = torch.randn(size, size, device="cuda", dtype=torch.float16)
        b = torch.randn(size, size, device="cuda", dtype=torch.float16)
        c = torch.empty(size, size, device="cuda", dtype=torch.float16)
        a_rows, b_host = a[torch.from_numpy(rows).cuda()].cpu().numpy(), b.cpu().numpy()
    else:
        rng = np.random.default_rng(0)
        a_host, b_host = (rng.standard_normal((size, size), dtype=np.float32).astype(np.float16) for _ in "ab")
        buffers = [driver.DeviceBuffer(size * size * 2) for _ in "abc"]
        for buffer, host in zip(buffers, (a_host, b_host)):
            buffer.upload(host)
        a, b, c = (buffer.array((size, size), warpspec.float16) for buffer in buffers)
        a_rows = a_host[rows]
    kernel = MatmulWGMMAV3()
    started = time.perf_counter()
    kernel(size, size, size, a, b, c)
    driver.synchronize()
    print(f"first call (tuning included): {time.perf_counter() - started:.1f} s")
    c_rows = c[torch.from_numpy(rows).cuda()].cpu().numpy() if torch is not None else \
        buffers[2].download(np.empty((size, size), np.float16))[rows]
    reference = a_rows.astype(np.float32) @ b_host.astype(np.float32).T
    error = float(np.linalg.norm(c_rows.astype(np.float32) - reference) / np.linalg.norm(reference))
    flops = 2.0 * size ** 3
    ours = time_ms(lambda: kernel(size, size, size, a, b, c))
    line = f"V3 {size}^3 fp16: {flops / ours / 1e9:.0f} TFLOP/s"
    if torch is not None:
        cublas = time_ms(lambda: a @ b.T)
        line += f", cuBLAS {flops / cublas / 1e9:.0f} TFLOP/s ({cublas / ours:.3f}x)"
    print(f"{line}, relative error {error:.1e} vs an fp32 reference ({len(rows)} rows)")
    assert error < 1e-2
    if torch is not None:
        library_matmul(torch, a, b, size)


def library_matmul(torch, a, b, size: int) -> None:
    """warpspec.ops.matmul (the library GEMM, shipped or stored schedules, no tuning run) against cuBLAS."""
    from warpspec import ops
    from warpspec.tune.bench import time_ms

    c = ops.matmul(a, b.T)
    reference = a @ b.T
    error = ((c.float() - reference.float()).norm() / reference.float().norm()).item()
    flops = 2.0 * size ** 3
    ours, cublas = time_ms(lambda: ops.matmul(a, b.T, out=c)), time_ms(lambda: a @ b.T)
    print(f"ops.matmul {size}^3 fp16: {flops / ours / 1e9:.0f} TFLOP/s, cuBLAS {flops / cublas / 1e9:.0f} TFLOP/s "
          f"({cublas / ours:.3f}x), relative error {error:.1e} vs cuBLAS")
    assert error < 1e-2


def on_emulator(m: int = 300, n: int = 200, k: int = 200) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((n, k)).astype(np.float16)
    reference = a.astype(np.float32) @ b.astype(np.float32).T
    tuned = MatmulWGMMAV3()
    started = time.perf_counter()
    worst, passed, refused = 0.0, 0, []
    for schedule in tuned.schedules():
        c = np.full((m, n), np.nan, dtype=np.float16)
        try:
            tuned.instantiate(schedule)(m, n, k, a, b, c)
        except warpspec.CompileError as error:
            # Schedules whose stages need more shared memory than a block has are refused, as on the GPU.
            if "fit in a block" not in str(error):
                raise
            refused.append(schedule)
            continue
        error = np.linalg.norm(c.astype(np.float32) - reference) / np.linalg.norm(reference)
        assert error < 1e-2, (schedule, error)
        worst = max(worst, error)
        passed += 1
    print(f"emulator: {passed} schedules of V3 at {m}x{n}x{k} passed every check ({len(refused)} refused before "
          f"running: their shared memory does not fit in a block); worst relative error {worst:.1e} vs numpy; "
          f"{time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="The main job: V3 on the GPU, or all its schedules on the emulator.")
    parser.add_argument("--size", type=int, default=8192, help="M = N = K on the GPU (default 8192)")
    options = parser.parse_args()
    backend = warpspec.get_backend()
    print(f"backend: {backend}")
    on_gpu(options.size) if backend == "cuda" else on_emulator()
    print("OK")
