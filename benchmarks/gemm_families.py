"""ops.matmul's two kernel families side by side at the same shapes: the tile walk (``Gemm``: persistent tiles,
stream-K) and the split family (``SplitGemm``: one tile's part per block, split K, the transposed product), each
tuned at the shape, then timed as ``ops.matmul(x, w.T, out=)`` beside cuBLAS (``x @ w.T``) in one process. The
measurement behind ``Problem.split_family``'s rule (docs/ops.md, *The split family*).

    python benchmarks/gemm_families.py [--shapes MxNxK,...] [--dtype bfloat16] [--json out.json] [--dry-run]

Each family is forced for the whole measurement of its column (``forced_family``: the module's family bounds set so
that every shape takes it), tuned with ``tune_matmul`` (its winner stored, then run by ops.matmul), its output
checked against the float32 product, then timed with ``do_bench(warmup=25, rep=100)`` medians, which flush L2.
Printed per shape: cuBLAS's time, each family's time and ratio (cuBLAS / ours), the split family's winner, the
number of 128 x 128 output tiles, and which family ``Problem.split_family`` gives the shape. ``--dry-run`` needs no
GPU: both families checked on the emulator at a stand-in of each shape.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json

SHAPES = ("512x1024x4096,1024x1024x4096,2048x1024x4096,512x4096x4096,256x6144x4096,256x14336x4096,"
          "1024x6144x4096,1024x4096x4096")
TOLERANCE = 1e-2  # relative Frobenius error against the float32 product
FAMILIES = ("walk", "split")
#: --dry-run's stand-in of every shape on the emulator: sizes divided by this (at least 64).
DRY_RUN_DIVISOR = 32


@contextlib.contextmanager
def forced_family(matmul, family: str):
    """Every problem takes ``family`` ("walk" or "split") inside the block: the module's family bounds set past
    every shape (or to none), and the choices already made forgotten on the way in and out."""
    saved = matmul.SPLIT_FAMILY_M, matmul.SPLIT_FAMILY_TILES
    everything = 2**31
    matmul.SPLIT_FAMILY_M, matmul.SPLIT_FAMILY_TILES = (everything, everything) if family == "split" else (0, 0)
    matmul.forget_choices()
    try:
        yield
    finally:
        matmul.SPLIT_FAMILY_M, matmul.SPLIT_FAMILY_TILES = saved
        matmul.forget_choices()


def relative_error(out, a, w) -> float:
    """|out - a·wᵀ| / |a·wᵀ| (Frobenius), the product in float64."""
    expected = a.double() @ w.double().T
    return ((out.double() - expected).norm() / expected.norm()).item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=SHAPES, metavar="MxNxK,...")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    parser.add_argument("--json", default=None, help="also write every number to this file")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: check both families on the emulator")
    args = parser.parse_args()

    import torch

    import warpspec

    matmul = importlib.import_module("warpspec.ops.matmul")
    shapes = matmul.parse_shapes(args.shapes)
    dtype = getattr(torch, args.dtype)
    if args.dry_run:
        for m, n, k in shapes:
            m, n, k = (max(64, x // DRY_RUN_DIVISOR) for x in (m, n, k))
            x, w = torch.randn(m, k).to(dtype), torch.randn(n, k).to(dtype)
            for family in FAMILIES:
                with forced_family(matmul, family), warpspec.use_backend("emulator"):
                    out = matmul.matmul(x, w.T)
                    error = relative_error(out, x, w)
                    assert error < TOLERANCE, (m, n, k, family, error)
        print(f"dry run: {len(shapes)} stand-ins checked with both families on the emulator")
        return

    import triton

    def bench(fn) -> float:
        return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3

    rows = []
    with warpspec.use_backend("cuda"):
        for m, n, k in shapes:
            generator = torch.Generator(device="cuda").manual_seed(0)
            x = torch.randn(m, k, device="cuda", generator=generator).to(dtype)
            w = torch.randn(n, k, device="cuda", generator=generator).to(dtype)
            out = torch.empty(m, n, device="cuda", dtype=dtype)
            problem = matmul.validate(x, w.T, None, None, out, None)
            row = {"shape": f"{m}x{n}x{k}", "tiles": -(-m // 128) * -(-n // 128),
                   "rule": "split" if problem.split_family else "walk"}
            for family in FAMILIES:
                with forced_family(matmul, family):
                    matmul.tune_matmul([(m, n, k)], args.dtype)
                    matmul.matmul(x, w.T, out=out)
                    error = relative_error(out, x, w)
                    assert error < TOLERANCE, (m, n, k, family, error)
                    row[f"{family}_schedule"] = matmul.chosen_schedule(matmul.validate(x, w.T, None, None, out,
                                                                                       None))
                    row[f"{family}_us"] = bench(lambda: matmul.matmul(x, w.T, out=out))
                    row[f"{family}_error"] = error
            row["cublas_us"] = bench(lambda: x @ w.T)
            rows.append(row)
            print(row, flush=True)
    print(f"\n{torch.cuda.get_device_name()}; {args.dtype}; us (cuBLAS / ours)")
    print(f"{'M x N x K':<18} {'cuBLAS':>7} {'tile walk':>15} {'split family':>15} {'tiles':>6} {'rule':>6}  "
          f"split family's winner")
    for row in rows:
        cells = [f"{row[f + '_us']:7.1f} ({row['cublas_us'] / row[f + '_us']:.2f})" for f in FAMILIES]
        winner = ",".join(f"{key}={value}" for key, value in (row["split_schedule"] or {}).items())
        print(f"{row['shape']:<18} {row['cublas_us']:7.1f} {cells[0]:>15} {cells[1]:>15} {row['tiles']:>6} "
              f"{row['rule']:>6}  {winner}")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(rows, file, indent=1)


if __name__ == "__main__":
    main()
