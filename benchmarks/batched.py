"""Batched warpspec.ops.matmul (one launch of the grouped kernel) against torch.bmm and a Python loop of per-batch
ops.matmul calls, in one process.

``a`` [B, M, K] @ ``b`` [B, K, N] at shapes models call: attention's scores (B = batch × heads, M = N = the
sequence, K = the head dimension; ``b`` the transposed view of the keys [B, N, K]) and its P·V (``b`` row-major
[B, K, N]), a small per-head product, and a large batch of square GEMMs; bf16. Every output is checked against
torch.bmm in float32 first, then ``triton.testing.do_bench`` medians (warmup 100, rep 500 ms) of ours, torch.bmm
and the loop (each batch's ``ops.matmul`` into its slice of one output: the launches a batched call took before the
one-launch path), ours and torch.bmm replayed from a CUDA graph (the kernels without the host's launch cost, which
bounds an eager call at small shapes), and the host time of one eager call of ours and of torch.bmm
(``warpspec.tune.bench.host_us_per_call``).

    python benchmarks/batched.py [--shapes BxMxNxK:layout,...] [--json out.json] [--dry-run]

A table is printed last: TFLOP/s, the ratio to torch.bmm (its time / ours), eager and replayed, and to the loop, the
host times; then the geometric mean and the lowest ratio to each. ``--dry-run`` needs no GPU: it lists the shapes and
checks stand-ins (at most 4 batches, each size divided by 32 and rounded up to 16) on the emulator.
"""

from __future__ import annotations

import argparse
import json
import math

#: (B, M, N, K, layout of b): "weights" is the transposed view of [B, N, K], "row" a row-major [B, K, N].
SHAPES = [(32, 1024, 1024, 128, "weights"), (32, 1024, 128, 1024, "row"), (64, 128, 128, 64, "weights"),
          (64, 128, 64, 128, "row"), (8, 4096, 4096, 4096, "row"), (8, 4096, 4096, 4096, "weights")]
TOLERANCE = 1e-2  # relative Frobenius error against the float32 torch.bmm
DRY_RUN_BATCHES, DRY_RUN_DIVISOR, DRY_RUN_MULTIPLE = 4, 32, 16


def parse(text: str) -> list[tuple[int, int, int, int, str]]:
    """``"32x1024x1024x128:weights,8x4096x4096x4096:row"`` -> [(B, M, N, K, layout), ...]."""
    shapes = []
    for part in text.split(","):
        sizes, _, layout = part.strip().partition(":")
        batches, m, n, k = (int(s) for s in sizes.lower().split("x"))
        if layout not in ("row", "weights"):
            raise SystemExit(f"--shapes: {part!r} needs a layout, :row or :weights")
        shapes.append((batches, m, n, k, layout))
    return shapes


def stand_in(size: int) -> int:
    """A dry run's size: divided by ``DRY_RUN_DIVISOR``, rounded up to a multiple of ``DRY_RUN_MULTIPLE`` (TMA's
    16-byte pitches in 16-bit elements, so that the stand-in takes the one launch too)."""
    return -(-max(size // DRY_RUN_DIVISOR, 1) // DRY_RUN_MULTIPLE) * DRY_RUN_MULTIPLE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=None, metavar="BxMxNxK:layout,...")
    parser.add_argument("--json", default=None)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    shapes = parse(args.shapes) if args.shapes else SHAPES

    import torch

    from warpspec import ops

    print(f"{len(shapes)} shapes")
    device = "cpu" if args.dry_run else "cuda"
    bench = None
    if not args.dry_run:
        import triton

        from warpspec.tune.bench import host_us_per_call

        def bench(fn) -> float:
            return triton.testing.do_bench(fn, warmup=100, rep=500, return_mode="median")

    rows = []
    for batches, m, n, k, layout in shapes:
        if args.dry_run:
            batches, m, n, k = min(batches, DRY_RUN_BATCHES), stand_in(m), stand_in(n), stand_in(k)
        generator = torch.Generator(device=device).manual_seed(0)
        a = torch.randn(batches, m, k, device=device, generator=generator).to(torch.bfloat16)
        stored = torch.randn(*((batches, k, n) if layout == "row" else (batches, n, k)), device=device,
                             generator=generator).to(torch.bfloat16)
        b = stored if layout == "row" else stored.transpose(1, 2)
        c = ops.matmul(a, b)
        expected = torch.bmm(a.float(), b.float())
        error = ((c.double() - expected.double()).norm() / expected.double().norm()).item()
        assert error < TOLERANCE, (batches, m, n, k, layout, error)
        del expected
        row = {"batches": batches, "m": m, "n": n, "k": k, "layout": layout, "error": error}
        if bench is not None:
            out = torch.empty_like(c)

            def loop():
                for index in range(batches):
                    ops.matmul(a[index], b[index], out=out[index])

            row["ours_ms"] = bench(lambda: ops.matmul(a, b))
            row["bmm_ms"] = bench(lambda: torch.bmm(a, b))
            row["loop_ms"] = bench(loop)
            row["graph_ms"] = bench(replay_of(torch, lambda: ops.matmul(a, b)))
            row["bmm_graph_ms"] = bench(replay_of(torch, lambda: torch.bmm(a, b)))
            row["host_us"] = host_us_per_call(lambda: ops.matmul(a, b), torch.cuda.synchronize)
            row["bmm_host_us"] = host_us_per_call(lambda: torch.bmm(a, b), torch.cuda.synchronize)
            print(row, flush=True)
        rows.append(row)
    if args.dry_run:
        print(f"dry run: {len(rows)} stand-ins checked on the emulator")
    else:
        summarize(rows)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(rows, file, indent=1)


def replay_of(torch, call):
    """``call`` captured in a CUDA graph (after an eager call, which builds what it needs): the graph's replay."""
    call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    return graph.replay


def summarize(rows) -> None:
    """The table, then the geometric mean and lowest ratio to torch.bmm and to the loop."""
    print(f"{'B x M x N x K':>22} {'b':>7} {'TFLOP/s':>8} {'vs bmm':>7} {'graphed':>8} {'vs loop':>8} "
          f"{'host us':>8} {'bmm host':>8}")
    for row in rows:
        flops = 2.0 * row["batches"] * row["m"] * row["n"] * row["k"]
        shape = f"{row['batches']}x{row['m']}x{row['n']}x{row['k']}"
        print(f"{shape:>22} {row['layout']:>7} {flops / row['ours_ms'] / 1e9:8.0f} "
              f"{row['bmm_ms'] / row['ours_ms']:6.3f}x {row['bmm_graph_ms'] / row['graph_ms']:7.3f}x "
              f"{row['loop_ms'] / row['ours_ms']:7.3f}x "
              f"{row['host_us']:8.1f} {row['bmm_host_us']:8.1f}")
    for key, ours, name in (("bmm_ms", "ours_ms", "torch.bmm"), ("bmm_graph_ms", "graph_ms", "torch.bmm, replayed"),
                            ("loop_ms", "ours_ms", "the per-batch loop")):
        ratios = [row[key] / row[ours] for row in rows]
        print(f"against {name}: geometric mean {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}x, lowest "
              f"{min(ratios):.3f}x over {len(ratios)} shapes")


if __name__ == "__main__":
    main()
