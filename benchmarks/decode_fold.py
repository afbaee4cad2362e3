"""What split-KV decode's fold costs: the decode kernel (``warpspec.ops.attention_decode_kernel.Decode``) timed on the
GPU with its fold and with parts of it left out, over the number of key splits, and SDPA's cuDNN and flash kernels
beside it.

Each time is of the kernel alone: 50 launches captured in one CUDA graph, the median of 7 replays divided by 50, so
the host's cost per call (which bounds an eager decode call at batch 1) is not in it. Variants, timed like the
kernel but whose outputs are not the attention:

* ``no-fold``: the last split leaves its partial like the others and nothing folds them;
* ``wait-only``: the last split waits for the others' count and folds nothing;
* ``no-count``: no flags at all; the last split folds whatever partials are there, without waiting.

The kernel's own output is checked against a float32 SDPA reference (relative Frobenius error below 1e-2) at each
split count before it is timed. ``--fold-widths`` also times the kernel built with other ``FOLD_WIDTH`` values (the
partials the fold loads at once), ``--schedules`` with other key tiles and ring depths (``block_n:num_stages``; the
variants always run the shipped schedule).

    python benchmarks/decode_fold.py                       # batch 1, S_k 8192, splits 4-64
    python benchmarks/decode_fold.py --batch 32 --splits 2 --fold-widths 4,8,16
    python benchmarks/decode_fold.py --splits 16 --schedules 64:2,64:4,64:6,128:2
    python benchmarks/decode_fold.py --dry-run             # CPU: every variant once on the emulator, tiny shapes
"""

from __future__ import annotations

import argparse
import math

from warpspec.ops.attention_decode_kernel import Decode

TOLERANCE = 1e-2
GRAPH_LAUNCHES = 50


class NoFold(Decode):
    """The last split folds nothing."""

    def fold_partials(self, ws_o, ws_lse, go, glse, flags, pb, n_splits, rows):
        pass


class WaitOnly(Decode):
    """The last split waits for the others' count (and gives it back), then folds nothing."""

    def fold_partials(self, ws_o, ws_lse, go, glse, flags, pb, n_splits, rows):
        self.wait_for_partials(ws_lse, flags, pb, n_splits)


class NoCount(Decode):
    """No split counts its partial and the last one waits for none: it folds whatever is in the workspace."""

    def count_partial(self, flags, pb):
        pass

    def wait_for_partials(self, ws_lse, flags, pb, n_splits):
        self.sync()


VARIANTS = {"kernel": Decode, "no-fold": NoFold, "wait-only": WaitOnly, "no-count": NoCount}


def graphed_us(torch, fn, rounds: int = 7) -> float:
    """The kernel time of ``fn`` in µs: ``GRAPH_LAUNCHES`` calls in one CUDA graph, median of ``rounds`` replays."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(GRAPH_LAUNCHES):
            fn()
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000 / GRAPH_LAUNCHES)
    return sorted(times)[len(times) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq-k", type=int, default=8192)
    parser.add_argument("--heads", default="32/8", help="query heads / key-value heads")
    parser.add_argument("--splits", default="4,8,16,32,64")
    parser.add_argument("--fold-widths", default="", help="also time the kernel built with these FOLD_WIDTHs")
    parser.add_argument("--schedules", default="", metavar="N:S,...",
                        help="also time the kernel with these key tiles (block_n) and ring depths (num_stages)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="which variants to time at each split")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import warpspec
    from warpspec.dtypes import bfloat16
    from warpspec.ops import attention_decode, attention_decode_kernel

    schedules = [{"block_n": int(n), "num_stages": int(stages)}
                 for n, stages in (text.split(":") for text in args.schedules.split(",") if text)]
    heads, kv_heads = (int(h) for h in args.heads.split("/"))
    batch, seq_k, head_dim, pack = args.batch, args.seq_k, 128, heads // kv_heads
    device = "cpu" if args.dry_run else "cuda"
    if args.dry_run:
        batch, seq_k, heads, kv_heads, pack = 1, 256, 8, 2, 4
    schedule = attention_decode.DEFAULT_DECODE_SCHEDULES[head_dim]
    generator = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(batch * heads // pack, pack, head_dim, device=device, generator=generator).to(torch.bfloat16)
    k = torch.randn(batch * kv_heads, seq_k, head_dim, device=device, generator=generator).to(torch.bfloat16)
    v = torch.randn(batch * kv_heads, seq_k, head_dim, device=device, generator=generator).to(torch.bfloat16)
    scale = head_dim ** -0.5
    as_4d = (q.reshape(batch, heads, 1, head_dim), k.reshape(batch, kv_heads, seq_k, head_dim),
             v.reshape(batch, kv_heads, seq_k, head_dim))
    reference = torch.nn.functional.scaled_dot_product_attention(*(x.float() for x in as_4d), enable_gqa=True)
    packs = batch * heads // pack

    def launch(cls, splits, schedule=schedule):
        """(the kernel call, its output) of variant ``cls`` at ``splits`` key splits."""
        chunk = math.ceil(seq_k / splits / schedule["block_n"]) * schedule["block_n"]
        n_splits = math.ceil(seq_k / chunk)
        kernel = cls(bfloat16, head_dim=head_dim, causal=True, pack=pack, **schedule)
        out = torch.empty(batch * heads, head_dim, device=device, dtype=torch.bfloat16)
        lse = torch.empty(batch * heads, 1, device=device)
        ws_o = torch.empty(n_splits * packs * pack * head_dim, device=device)
        ws_lse = torch.empty(n_splits * packs * pack, device=device)
        flags = torch.zeros(packs, device=device, dtype=torch.int32)
        arguments = (1, seq_k, batch * heads, heads, heads // kv_heads, scale * math.log2(math.e), chunk, n_splits, q,
                     k, v, out, lse, ws_o, ws_lse, flags)

        def call():
            if cls is NoFold:  # its counts are never given back
                flags.zero_()
            kernel(*arguments)

        return call, out

    def checked(call, out) -> float:
        call()
        got = out.float().reshape(reference.shape)
        error = ((got - reference).norm() / reference.norm()).item()
        if not error < TOLERANCE:
            raise SystemExit(f"decode output off by {error:.2e} (relative Frobenius) against float32 SDPA")
        return error

    if args.dry_run:
        with warpspec.use_backend("emulator"):
            for name, cls in VARIANTS.items():
                call, out = launch(cls, 4)
                if cls is NoCount:  # the emulator refuses what the GPU times: reads no flag ordered
                    try:
                        call()
                    except warpspec.RaceError:
                        continue
                    raise SystemExit("no-count read the other splits' partials without a race reported")
                call()
                if cls is Decode:
                    checked(call, out)
            for other in schedules:
                checked(*launch(Decode, 2, other))
        print(f"dry run: {len(VARIANTS)} variants ran on the emulator (no-count's unordered reads reported as a race), "
              f"the kernel's output checked" + (f" at {len(schedules)} more schedules" if schedules else ""))
        return

    variants = {name: VARIANTS[name] for name in args.variants.split(",") if name}
    print(f"batch {batch}, {heads}/{kv_heads} heads, S_k {seq_k}, D {head_dim}, bf16; kernel µs (CUDA graph)")
    for splits in (int(s) for s in args.splits.split(",")):
        times = {}
        for name, cls in variants.items():
            call, out = launch(cls, splits)
            if cls is Decode:
                checked(call, out)
            times[name] = graphed_us(torch, call)
        fold = f"; fold {times['kernel'] - times['wait-only']:.2f}" if {"kernel", "wait-only"} <= set(times) else ""
        print(f"splits {splits:3d}: " + ", ".join(f"{name} {us:7.2f}" for name, us in times.items()) + fold)
    for other in schedules:
        for splits in (int(s) for s in args.splits.split(",")):
            call, out = launch(Decode, splits, other)
            checked(call, out)
            print(f"block_n {other['block_n']:3d}, {other['num_stages']} stages, splits {splits:3d}: kernel "
                  f"{graphed_us(torch, call):7.2f}")
    shipped = attention_decode_kernel.FOLD_WIDTH
    for width in (int(w) for w in args.fold_widths.split(",") if w):
        attention_decode_kernel.FOLD_WIDTH = width  # read when a new kernel instance is traced
        for splits in (int(s) for s in args.splits.split(",")):
            call, out = launch(Decode, splits)
            checked(call, out)
            print(f"FOLD_WIDTH {width:2d}, splits {splits:3d}: kernel {graphed_us(torch, call):7.2f}")
    attention_decode_kernel.FOLD_WIDTH = shipped
    for name, backend in (("cuDNN", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        with sdpa_kernel(backend):
            sdpa = graphed_us(torch, lambda: torch.nn.functional.scaled_dot_product_attention(*as_4d,
                                                                                             enable_gqa=True))
        print(f"SDPA {name}: {sdpa:7.2f}")


if __name__ == "__main__":
    main()
