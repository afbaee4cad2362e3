"""warpspec.ops.grouped_matmul against torch._grouped_mm and a Python loop of cuBLAS calls on mixture-of-experts
shapes (bf16), in one process.

8 and 64 experts, hidden size 4096, expert width 14336 and 1536, 16 to 8192 tokens, balanced groups and skewed
ones (half the tokens to one expert, none to a quarter of them). ``a`` [tokens, 4096], expert weights [G, width,
4096] passed as ``w.transpose(1, 2)``, ``offs`` int32 on the GPU; ``triton.testing.do_bench`` medians (warmup 100,
rep 500 ms), torch's calls timed right before ours, every output checked against the float32 loop first.

    python benchmarks/grouped.py [--experts 8,64] [--tokens 16,...] [--json out.json] [--dry-run]

``--dry-run`` needs no GPU: it lists the shapes and checks stand-ins (sizes divided by 64) on the emulator.
"""

from __future__ import annotations

import argparse
import json

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
    parser.add_argument("--json", default=None)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    shapes = [(g, t, HIDDEN, width, skewed) for g in map(int, args.experts.split(","))
              for t in map(int, args.tokens.split(",")) for width in WIDTHS for skewed in (False, True)]

    import torch

    from warpspec import ops

    print(f"{len(shapes)} shapes")
    device = "cpu" if args.dry_run else "cuda"
    rows = []
    bench = None
    if not args.dry_run:
        import triton

        def bench(fn) -> float:
            return triton.testing.do_bench(fn, warmup=100, rep=500, return_mode="median")

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
            flops = 2.0 * tokens * hidden * width
            print(f"G={experts} tokens={tokens} width={width} {'skewed' if skewed else 'balanced'}: "
                  f"{flops / row['ours_ms'] / 1e9:.0f} TFLOP/s, {row['grouped_mm_ms'] / row['ours_ms']:.3f}x "
                  f"_grouped_mm, {row['loop_ms'] / row['ours_ms']:.3f}x the loop", flush=True)
        rows.append(row)
    if args.dry_run:
        print(f"dry run: {len(rows)} stand-ins checked on the emulator")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(rows, file, indent=1)


if __name__ == "__main__":
    main()
