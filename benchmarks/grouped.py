"""warpspec.ops.grouped_matmul against torch._grouped_mm and a Python loop of cuBLAS calls on mixture-of-experts
shapes (bf16), in one process.

8 and 64 experts, hidden size 4096, expert width 14336 and 1536, 16 to 8192 tokens, balanced groups and skewed
ones (half the tokens to one expert, none to a quarter of them). ``a`` [tokens, 4096], expert weights [G, width,
4096] passed as ``w.transpose(1, 2)``, ``offs`` int32 on the GPU; ``triton.testing.do_bench`` medians (warmup 100,
rep 500 ms) of ours, then torch._grouped_mm, then the loop, every output checked against the float32 loop first.

    python benchmarks/grouped.py [--experts 8,64] [--tokens 16,...] [--widths 14336,1536] [--sweep [--depths 6,8]]
                                 [--json out.json] [--dry-run]

Printed per shape: TFLOP/s, the ratio to ``torch._grouped_mm`` (its time / ours) and to the loop, and the host time
of one eager call of each (``warpspec.tune.bench.host_us_per_call``); then the geometric mean and the lowest ratio
to each, and over the 64-expert shapes the lowest ratio to the loop. ``--sweep`` also times every schedule of the
kernel's space on each shape (``rep`` 100 ms) and prints the fastest beside the size rule's choice: the table the
size rule is set from; ``--depths`` adds every tiling at those ring depths too, where they fit in shared memory (the
space stops at 5 stages, and the deepest ring that fits won every tiling of the H200's sweep). ``--dry-run`` needs
no GPU: it lists the shapes and checks stand-ins (sizes divided by 64) on the emulator (with ``--sweep``, under
every schedule).
"""

from __future__ import annotations

import argparse
import json
import math

EXPERTS = [8, 64]
HIDDEN = 4096
WIDTHS = [14336, 1536]
TOKENS = [16, 128, 1024, 8192]
TOLERANCE = 1e-2
DRY_RUN_DIVISOR = 64


def group_sizes(torch, experts: int, tokens: int, skewed: bool):
    """Rows per expert: even, or half to expert 0, none to experts 1 .. G/4 - 1, the rest even."""
    sizes = torch.zeros(experts, dtype=torch.int64)
    if skewed:
        sizes[0] = tokens // 2
        rest = torch.arange(max(experts // 4, 1), experts)
        sizes[rest] = (tokens - tokens // 2) // len(rest)
    else:
        sizes[:] = tokens // experts
    sizes[-1] += tokens - int(sizes.sum())
    return sizes


def loop_reference(torch, a, w, ends):
    """The float32 (or input-dtype, cuBLAS) loop over groups."""
    pieces, start = [], 0
    for group, end in enumerate(ends):
        pieces.append(a[start:end] @ w[group].T)
        start = end
    return torch.cat(pieces)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experts", default=",".join(map(str, EXPERTS)))
    parser.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    parser.add_argument("--widths", default=",".join(map(str, WIDTHS)), help="expert widths (N), comma-separated")
    parser.add_argument("--json", default=None)
    parser.add_argument("--sweep", action="store_true", help="time every schedule of the kernel's space too")
    parser.add_argument("--depths", default="", help="with --sweep: ring depths beyond the space's to time every "
                                                     "tiling at as well (comma-separated; those that fit)")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    depths = [int(depth) for depth in args.depths.split(",") if depth]
    if depths and not args.sweep:
        parser.error("--depths extends --sweep: give both")
    shapes = [(g, t, HIDDEN, width, skewed) for g in map(int, args.experts.split(","))
              for t in map(int, args.tokens.split(",")) for width in map(int, args.widths.split(","))
              for skewed in (False, True)]

    import torch

    from warpspec import ops

    print(f"{len(shapes)} shapes")
    device = "cpu" if args.dry_run else "cuda"
    rows = []
    bench = None
    if not args.dry_run:
        import triton

        from warpspec.tune.bench import host_us_per_call

        def bench(fn, rep=500) -> float:
            return triton.testing.do_bench(fn, warmup=100, rep=rep, return_mode="median")

    for experts, tokens, hidden, width, skewed in shapes:
        if args.dry_run:
            tokens, hidden, width = max(tokens // DRY_RUN_DIVISOR, 1), hidden // DRY_RUN_DIVISOR, \
                max(width // DRY_RUN_DIVISOR, 16)
        sizes = group_sizes(torch, experts, tokens, skewed)
        offs = sizes.cumsum(0).to(torch.int32).to(device)
        ends = offs.tolist()
        generator = torch.Generator(device=device).manual_seed(0)
        a = torch.randn(tokens, hidden, device=device, generator=generator).to(torch.bfloat16)
        w = torch.randn(experts, width, hidden, device=device, generator=generator).to(torch.bfloat16)
        c = ops.grouped_matmul(a, w.transpose(1, 2), offs)
        expected = loop_reference(torch, a.float(), w.float(), ends)
        error = ((c.double() - expected.double()).norm() / expected.double().norm().clamp_min(1e-30)).item()
        assert error < TOLERANCE, (experts, tokens, width, skewed, error)
        row = {"experts": experts, "tokens": tokens, "width": width, "skewed": skewed, "error": error}
        if bench is not None:
            row["ours_ms"] = bench(lambda: ops.grouped_matmul(a, w.transpose(1, 2), offs))
            row["grouped_mm_ms"] = bench(lambda: torch._grouped_mm(a, w.transpose(1, 2), offs=offs))
            row["loop_ms"] = bench(lambda: loop_reference(torch, a, w, ends))
            row["host_us"] = host_us_per_call(lambda: ops.grouped_matmul(a, w.transpose(1, 2), offs),
                                              torch.cuda.synchronize)
            row["grouped_mm_host_us"] = host_us_per_call(lambda: torch._grouped_mm(a, w.transpose(1, 2), offs=offs),
                                                         torch.cuda.synchronize)
            flops = 2.0 * tokens * hidden * width
            print(f"G={experts} tokens={tokens} width={width} {'skewed' if skewed else 'balanced'}: "
                  f"{flops / row['ours_ms'] / 1e9:.0f} TFLOP/s, {row['grouped_mm_ms'] / row['ours_ms']:.3f}x "
                  f"_grouped_mm, {row['loop_ms'] / row['ours_ms']:.3f}x the loop; host {row['host_us']:.1f} us a "
                  f"call ({row['grouped_mm_host_us']:.1f} for _grouped_mm)", flush=True)
        if args.sweep:
            row["sweep"] = sweep(torch, bench, a, w.transpose(1, 2), offs, depths)
        rows.append(row)
    if args.dry_run:
        print(f"dry run: {len(rows)} stand-ins checked on the emulator")
    else:
        summarize(rows)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(rows, file, indent=1)


def sweep(torch, bench, a, b, offs, depths=()) -> dict:
    """Every buildable schedule of the grouped kernel timed on these operands (output checked against the size
    rule's), and every tiling at each of ``depths`` stages that builds: ``{"block_m x block_n / stages / split":
    ms}``, with the fastest and the size rule's choice printed."""
    from warpspec.dtypes import bfloat16
    from warpspec.errors import CompileError
    from warpspec.ops import grouped
    from warpspec.ops.grouped_kernel import GROUPED_TILINGS, GroupedGemm, grouped_schedule, grouped_workspace
    from warpspec.ops.frame import sm_count
    from warpspec.ops.workspace import placeholders_like, workspace_like

    def name_of(schedule) -> str:
        return "{block_m}x{block_n}/{num_stages}/split{max_split}".format(**schedule)

    problem = grouped.call_for(a, b, offs, None).problem
    reference = torch.empty(a.shape[0], b.shape[2], dtype=a.dtype, device=a.device)
    grouped.write(problem, a, b, offs, reference)
    times = {}
    deeper = [{"block_m": block_m, "block_n": block_n, "num_stages": depth, "max_split": max_split}
              for block_m, block_n, max_split in GROUPED_TILINGS for depth in depths]
    for schedule in [*GroupedGemm._tune_space.schedules(), *deeper]:
        out = torch.empty_like(reference)
        elements, flag_count = grouped_workspace(sm_count(), schedule)
        work = workspace_like(out, elements, flag_count) if elements else placeholders_like(out)
        arguments = grouped.kernel_arguments(problem, a, b, offs, out, work)
        script = GroupedGemm(bfloat16, bfloat16, problem.b_k_major).instantiate(schedule)
        try:
            script(*arguments)
        except CompileError:  # does not fit in shared memory
            continue
        error = ((out.double() - reference.double()).norm() / reference.double().norm().clamp_min(1e-30)).item()
        assert error < TOLERANCE, (name_of(schedule), error)
        times[name_of(schedule)] = bench(lambda: script(*arguments), rep=100) if bench is not None else 0.0
    rule = name_of(grouped_schedule(problem.total, problem.groups, problem.n, problem.out_dtype, sm_count()))
    if bench is None:  # --dry-run: every schedule checked, nothing timed
        return times
    best = min(times, key=times.get)
    print(f"    sweep: fastest {best} {times[best]:.4f} ms; size rule {rule} {times[rule]:.4f} ms "
          f"({times[best] / times[rule]:.3f}x of the fastest)", flush=True)
    return times


def summarize(rows) -> None:
    """The geometric mean and lowest ratio to torch._grouped_mm and to the loop; the lowest to the loop over the
    64-expert shapes."""
    for key, name in (("grouped_mm_ms", "torch._grouped_mm"), ("loop_ms", "the cuBLAS loop")):
        ratios = [row[key] / row["ours_ms"] for row in rows]
        print(f"against {name}: geometric mean {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}x, lowest "
              f"{min(ratios):.3f}x over {len(ratios)} shapes")
    many = [row["loop_ms"] / row["ours_ms"] for row in rows if row["experts"] == 64]
    if many:
        print(f"64 experts against the cuBLAS loop: lowest {min(many):.3f}x over {len(many)} shapes")


if __name__ == "__main__":
    main()
