"""Where the persistent attention kernel's time goes at short sequences: GPU timelines (``warpspec.profile``) of
``AttentionPersistent`` at its shipped schedule (``warpspec.ops.attention.persistent_schedule``), causal and not,
on FlashAttention-3's grid (batch × seq = 16384 tokens, heads × D = 2048, fp16). Writes each trace, chart and
summary under ``--out``/causal-{True,False} and prints the summaries (the tensor cores' busy share, each role's
waits). Each output is checked against float32 SDPA (largest error below 2e-2) before it is recorded.
``--dry-run`` runs a small shape on the emulator and the CPU timing model instead.

    python benchmarks/attention_timeline.py [--seq 512] [--head-dim 128] [--out attention-timeline] [--dry-run]
"""

from __future__ import annotations

import argparse
import os

TOKENS = 16384
MODEL_WIDTH = 2048  # heads · head_dim


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--head-dim", type=int, default=128, choices=(64, 128))
    parser.add_argument("--out", default=os.environ.get("OUT", "attention-timeline"))
    parser.add_argument("--dry-run", action="store_true", help="a small shape on the CPU timing model")
    args = parser.parse_args()

    import torch

    import warpspec
    from warpspec.dtypes import float16
    from warpspec.ops.attention import persistent_schedule, validate
    from warpspec.ops.attention_kernel import LOG2_E
    from warpspec.ops.attention_persistent_kernel import AttentionPersistent, tile_walk
    from warpspec.timeline import write

    on_gpu = not args.dry_run
    device, backend = ("cuda", "cuda") if on_gpu else ("cpu", "emulator")
    d = args.head_dim
    batch, heads, seq = (TOKENS // args.seq, MODEL_WIDTH // d, args.seq) if on_gpu else (1, 2, 256)
    q, k, v = (torch.randn(batch, heads, seq, d, device=device, dtype=torch.float16) for _ in range(3))
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count if on_gpu else 4
    for causal in (True, False):
        schedule = persistent_schedule(validate(q, k, v, causal, None))
        kernel = AttentionPersistent(float16, head_dim=d, causal=causal, **schedule)
        out, lse = torch.empty_like(q), torch.empty(q.shape[:3], device=device)
        walk = torch.from_numpy(tile_walk(seq, seq, batch * heads, kernel.block_m, causal, num_sms).copy())
        call = (seq, seq, batch * heads, heads, 1, d ** -0.5 * LOG2_E, q, k, v, out, lse, walk.to(device), num_sms)
        flops = 4.0 * batch * heads * seq * seq * d / (2 if causal else 1)
        with warpspec.use_backend(backend):
            kernel(*call)  # built, run and checked once before it is recorded
        reference = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                                     is_causal=causal)
        error = (out.float() - reference).abs().max().item()
        if not error < 2e-2:
            raise SystemExit(f"causal={causal}: largest error {error:.2e} against float32 SDPA")
        with warpspec.use_backend(backend):
            with warpspec.profile(blocks=1, flops=flops, sm=0) as session:
                kernel(*call)
        timeline = session.timelines[-1]
        path = os.path.join(args.out, f"causal-{causal}")
        write(timeline, path)
        print(f"=== batch {batch}, {heads} heads, seq {seq}, D {d}, causal={causal}, {schedule}: written to {path}")
        with open(os.path.join(path, "summary.txt")) as summary:
            print(summary.read())


if __name__ == "__main__":
    main()
