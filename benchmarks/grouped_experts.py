"""What a grouped GEMM costs beyond its product: one decode step's product (``--tokens`` rows × K ``--hidden`` ×
N ``--width``, bf16) on the last expert's weight, computed as a dense GEMM (``ops.matmul`` and cuBLAS) and as a
grouped one with that weight among 1, 8, 64 ... experts (``--experts``; ends 0 … 0, tokens: every other expert
empty), ``ops.grouped_matmul`` beside ``torch._grouped_mm``.

Each time is given twice: ``do_bench``'s median (L2 flushed before each call, as benchmarks/grouped.py times) and a
call's share of a CUDA graph of 50 replayed (no flush, no host time: ``decode_fold.graphed_us``). Every output is
checked against the float32 product first. ``--profile DIR`` also writes a GPU timeline of each grouped call (the
blocks of SMs 1 and 2) under DIR.

    python benchmarks/grouped_experts.py                       # 16 tokens, 1536 wide, 1, 8 and 64 experts
    python benchmarks/grouped_experts.py --width 14336 --profile grouped-timelines
    python benchmarks/grouped_experts.py --dry-run             # CPU: each call once on the emulator, tiny shapes
                                                               # (with --profile, the CPU timing model's timelines)
"""

from __future__ import annotations

import argparse
import os

from decode_fold import graphed_us

TOLERANCE = 1e-2
#: The blocks a ``--profile`` timeline records: a split tile's parts run on SMs whose block index is not known
#: before the launch, so two SMs are recorded, each with room for every event of its block.
PROFILED_SMS = (1, 2)
EVENT_CAPACITY = 512


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--experts", default="1,8,64", help="expert counts, comma-separated")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=4096)
    parser.add_argument("--width", type=int, default=1536)
    parser.add_argument("--profile", metavar="DIR", help="write a GPU timeline of each grouped call under DIR")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    experts = [int(e) for e in args.experts.split(",")]
    tokens, hidden, width = (4, 64, 48) if args.dry_run else (args.tokens, args.hidden, args.width)

    import torch

    from warpspec import ops

    device = "cpu" if args.dry_run else "cuda"
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(tokens, hidden, device=device, generator=generator).to(torch.bfloat16)
    weights = torch.randn(max(experts), width, hidden, device=device, generator=generator).to(torch.bfloat16)
    last = weights[-1]
    expected = a.float() @ last.float().T

    def checked(name, result):
        error = ((result.float() - expected).norm() / expected.norm()).item()
        assert error < TOLERANCE, (name, error)

    calls = {"dense ops.matmul": lambda: ops.matmul(a, last.T)}
    if not args.dry_run:
        calls["dense cuBLAS a @ w.T"] = lambda: a @ last.T
    for count in experts:
        stacked = weights[-count:].transpose(1, 2)
        offs = torch.zeros(count, dtype=torch.int32, device=device)
        offs[-1] = tokens
        calls[f"grouped_matmul, {count} experts"] = \
            lambda stacked=stacked, offs=offs: ops.grouped_matmul(a, stacked, offs)
        if not args.dry_run:
            calls[f"torch._grouped_mm, {count} experts"] = \
                lambda stacked=stacked, offs=offs: torch._grouped_mm(a, stacked, offs=offs)
    for name, call in calls.items():
        checked(name, call())
    if args.dry_run:
        print(f"dry run: {len(calls)} calls checked on the emulator")
        if args.profile:  # the timelines of the CPU timing model, which the same calls record on the emulator
            profile(args.profile, a, weights, experts, tokens, ops)
        return

    import triton

    print(f"{tokens} x {hidden} x {width} bf16 on {torch.cuda.get_device_name()}")
    print(f"{'call':36s} {'do_bench us':>12s} {'graph us':>9s}")
    for name, call in calls.items():
        flushed = triton.testing.do_bench(call, warmup=50, rep=200, return_mode="median") * 1e3
        print(f"{name:36s} {flushed:12.1f} {graphed_us(torch, call):9.1f}", flush=True)
    if args.profile:
        profile(args.profile, a, weights, experts, tokens, ops)


def profile(folder: str, a, weights, experts, tokens, ops) -> None:
    """A timeline of each grouped call (``warpspec.profile``: on the GPU, or the CPU timing model on the emulator),
    one folder per expert count and SM."""
    import torch

    import warpspec
    from warpspec import timeline

    for count in experts:
        offs = torch.zeros(count, dtype=torch.int32, device=a.device)
        offs[-1] = tokens
        for sm in PROFILED_SMS:
            with warpspec.profile(blocks=1, sm=sm, capacity=EVENT_CAPACITY) as session:
                ops.grouped_matmul(a, weights[-count:].transpose(1, 2), offs)
            path = os.path.join(folder, f"experts{count}_sm{sm}")
            timeline.write(session.timelines[0], path)
            print(f"timeline of {count} experts, SM {sm}: {path}")


if __name__ == "__main__":
    main()
