"""Which GPU kernels torch runs where warpspec.ops is compared with it, and how long each takes on the device,
beside warpspec's own kernels: a linear layer ``x @ w.T`` (cuBLAS) against ``ops.matmul(x, w.T, out=)``, and with
``--attention`` a training step of attention (cuDNN SDPA's forward and backward) against ops.attention's.

    python benchmarks/torch_kernels.py [--m 32,64,256,1024] [--weights NxK,...] [--dtype bfloat16] [--calls 20]
                                       [--attention] [--json out.json] [--dry-run]

Each call runs under ``torch.profiler`` right after a 256 MB buffer is zeroed, as ``triton.testing.do_bench``
flushes L2, so a weight is read from HBM as in llm_shapes.py's timings. Printed per shape and side: every kernel
but the flush's (named once, found by profiling the flush alone), its median device time over ``--calls`` calls,
and the sum of the medians. For the linear layers also the time of ``w.sum(dtype=float32)`` under the same flush:
one read of the weight, a floor for a GEMM that streams it. Every output is checked against a float32 reference
before anything is profiled. ``--dry-run`` needs no GPU: the shapes listed and the table printed from made-up
events, so the script's plumbing is tested where it cannot time.
"""

from __future__ import annotations

import argparse
import json
import statistics

WEIGHTS = "4096x4096,14336x4096,4096x14336,6144x4096,1024x4096"
M_VALUES = "32,64,256,1024"
#: Attention's training step: batch, heads, seq, head dim (heads × D = 2048, as benchmarks/attention_backward.py).
ATTENTION = [(2, 32, 8192, 64), (2, 16, 8192, 128), (2, 32, 2048, 64), (2, 16, 2048, 128)]
TOLERANCE = 1e-2  # relative Frobenius error against the float32 reference
ATTENTION_TOLERANCE = 2e-2  # between two bf16 gradients, each within about 1e-2 of float32's
NAME_WIDTH = 90


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--m", default=M_VALUES, help="comma-separated M values")
    parser.add_argument("--weights", default=WEIGHTS, metavar="NxK,...")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    parser.add_argument("--calls", type=int, default=20, help="profiled calls per side and shape")
    parser.add_argument("--attention", action="store_true", help="also attention's forward + backward")
    parser.add_argument("--json", default=None, help="also write every kernel's times to this file")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: list the shapes, print a made-up table")
    args = parser.parse_args()
    m_values = [int(m) for m in args.m.split(",")]
    weights = [tuple(int(x) for x in part.lower().split("x")) for part in args.weights.split(",")]
    shapes = [(m, n, k) for n, k in weights for m in m_values]
    if args.dry_run:
        rows = [{"what": f"M={m} {n}x{k}", "calls": 2, "sides": {"torch": {"gemm_kernel": [1.0, 1.1]},
                                                     "ours": {"SplitGemm": [1.2, 1.2]}}, "floor_us": 0.5}
                for m, n, k in shapes]
        print(f"{len(shapes)} linear shapes; attention: {ATTENTION if args.attention else 'not asked'}")
        print(report(rows))
        return

    import torch
    from llm_shapes import operands  # the linear layers' operands: x [M, K] and a weight [N, K]

    from warpspec import ops
    from warpspec.tune.bench import L2_FLUSH_BYTES

    dtype = getattr(torch, args.dtype)
    flush_buffer = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")

    def flush():
        flush_buffer.zero_()

    flush_names = set(profiled(torch, flush, lambda: None, 3))
    rows = []
    for m, n, k in shapes:
        x, w = operands(torch, dtype, m, n, k, "cuda")
        out = torch.empty(m, n, device="cuda", dtype=dtype)
        ops.matmul(x, w.T, out=out)
        expected = x.float() @ w.float().T
        for result in (out, x @ w.T):
            error = ((result.float() - expected).norm() / expected.norm()).item()
            assert error < TOLERANCE, (m, n, k, error)
        sides = {"torch": profiled(torch, flush, lambda: x @ w.T, args.calls, flush_names),
                 "ours": profiled(torch, flush, lambda: ops.matmul(x, w.T, out=out), args.calls, flush_names)}
        floor = profiled(torch, flush, lambda: w.sum(dtype=torch.float32), args.calls, flush_names)
        rows.append({"what": f"M={m} {n}x{k}", "sides": sides, "calls": args.calls,
                     "floor_us": sum(statistics.median(t) for t in floor.values())})
        print(report(rows[-1:]), flush=True)
    if args.attention:
        for batch, heads, seq, dim in ATTENTION:
            for causal in (False, True):
                rows.append(attention_row(torch, ops, dtype, flush, flush_names, args.calls, batch, heads, seq, dim,
                                          causal))
                print(report(rows[-1:]), flush=True)
    print(f"\n{torch.cuda.get_device_name()}; {args.dtype}; median device µs over {args.calls} calls, L2 flushed "
          f"before each")
    print(report(rows))
    if args.json:
        with open(args.json, "w") as file:
            json.dump(rows, file, indent=1)


def attention_row(torch, ops, dtype, flush, flush_names, calls, batch, heads, seq, dim, causal) -> dict:
    """One training step of attention, forward and backward, on each side: cuDNN SDPA, then ops.attention; the
    gradients checked against each other first (both against float32 SDPA would need a third step per shape)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    generator = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, dout = (torch.randn(batch, heads, seq, dim, device="cuda", generator=generator).to(dtype)
                     for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(True)

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return torch.autograd.grad(out, (q, k, v), dout)

    def ours():
        out = ops.attention(q, k, v, causal=causal)
        return torch.autograd.grad(out, (q, k, v), dout)

    for theirs, mine in zip(cudnn(), ours()):
        error = ((mine.float() - theirs.float()).norm() / theirs.float().norm()).item()
        assert error < ATTENTION_TOLERANCE, (batch, heads, seq, dim, causal, error)
    return {"what": f"attention B{batch} H{heads} S{seq} D{dim}{' causal' if causal else ''}", "calls": calls,
            "sides": {"torch": profiled(torch, flush, cudnn, calls, flush_names),
                      "ours": profiled(torch, flush, ours, calls, flush_names)}}


def profiled(torch, flush, fn, calls: int, skip=frozenset()) -> dict:
    """{kernel name: [device µs per launch]} of ``calls`` calls of ``fn``, each after ``flush``, under
    torch.profiler; kernels named in ``skip`` (the flush's), copies and memsets left out. One warm-up call first,
    unprofiled."""
    from torch.profiler import ProfilerActivity, profile

    flush()
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flush()
            fn()
        torch.cuda.synchronize()
    times: dict = {}
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA or event.name in skip:
            continue
        if "memcpy" in event.name.lower() or "memset" in event.name.lower():
            continue
        times.setdefault(event.name, []).append(event.time_range.end - event.time_range.start)
    return times


def report(rows) -> str:
    """Per row and side: each kernel's median µs and launches per call, then the sums; the weight's read floor."""
    lines = []
    for row in rows:
        sums = {side: sum(statistics.median(t) for t in kernels.values()) for side, kernels in row["sides"].items()}
        floor = f", read floor {row['floor_us']:.1f}" if "floor_us" in row else ""
        ratio = sums["torch"] / sums["ours"] if sums.get("ours") else float("nan")
        lines.append(f"{row['what']}: torch {sums['torch']:.1f} µs, ours {sums['ours']:.1f} µs "
                     f"(torch / ours {ratio:.3f}){floor}")
        for side, kernels in row["sides"].items():
            for name, times in sorted(kernels.items(), key=lambda item: -statistics.median(item[1])):
                lines.append(f"    {side:<5} {statistics.median(times):8.1f} µs ×{len(times) / row['calls']:g}  "
                             f"{name[:NAME_WIDTH]}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
