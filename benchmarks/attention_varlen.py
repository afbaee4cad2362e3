"""Packed variable-length attention on the GPU: warpspec.ops.attention_varlen against the dense ops.attention on
the same tokens, and against SDPA run once per sequence.

Protocol: B sequences (``--batch``, 16) of random lengths in [1, ``--max-len``] (4096; seeded, so every run draws
the same), S_q = S_k per sequence, H = H_kv = 2048 / D heads, bf16, ``torch.randn`` inputs. Useful FLOPs =
Σ_b 4 · H · L_b² · D (halved when causal): no work on padding counts. Three timings, ``do_bench`` medians:

* ``varlen``: one ``ops.attention_varlen`` call on the packed [Σ L_b, H, D] tokens;
* ``dense``: ``ops.attention`` on a dense batch of the same tokens, [B, H, L̄, D] with L̄ the mean length (its
  FLOPs are B · 4 · H · L̄² · D): the rate the packed kernel is measured against (TFLOP/s within 10% is the goal);
* ``per sequence``: ``ops.attention`` once per sequence, what a caller without varlen runs.

Before timing, every sequence of the packed output is checked against SDPA in float32 on its own tokens (max abs
error below 4e-2).

``--backward`` times forward + backward instead, one timed call being ``torch.autograd.grad(attention(...), (q, k,
v), dout)`` with a ``torch.randn`` output gradient: ``varlen`` is ``ops.attention_varlen`` with ``check=False`` and
the longest lengths given (the packed backward's three kernels, one launch each, and nothing read back: a training
step's call), ``dense`` ``ops.attention`` on the dense batch, ``per sequence`` ``ops.attention`` once per sequence.
FLOPs are 3.5 times the forward's (the backward's five GEMMs are 2.5 times its two). Before timing, the packed
gradients are checked against SDPA's float32 gradients of each sequence on its own tokens, and the dense batch's
against SDPA's on that batch (max abs error over max |SDPA's| below 4e-2).

    python benchmarks/attention_varlen.py                      # 16 sequences of 1-4096 keys, D 128, both masks
    python benchmarks/attention_varlen.py --head-dim 64 --causal yes
    python benchmarks/attention_varlen.py --equal             # every sequence of the mean length
    python benchmarks/attention_varlen.py --backward          # forward + backward, the packed backward's rate
    python benchmarks/attention_varlen.py --dry-run            # CPU: 3 short sequences on the emulator, no timing
"""

from __future__ import annotations

import argparse
import json

TOLERANCE = 4e-2
GRADIENT_TOLERANCE = 4e-2  # max abs error over max |SDPA's float32 gradient|, bf16
MODEL_WIDTH = 2048  # heads · head_dim
BACKWARD_FLOPS = 3.5  # forward + backward: seven GEMMs of the forward's two-GEMM size


def relative(got, want) -> float:
    """Max abs error of ``got`` over the max magnitude of ``want``."""
    return ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()


def sdpa_gradients(q, k, v, dout, causal):
    """SDPA's float32 gradients of [B, H, S, D] q, k, v for ``dout``, causal aligned at the bottom right."""
    import torch
    from torch.nn.attention.bias import causal_lower_right

    leaves = [x.detach().float().requires_grad_() for x in (q, k, v)]
    mask = causal_lower_right(q.shape[2], k.shape[2]) if causal else None
    out = torch.nn.functional.scaled_dot_product_attention(*leaves, attn_mask=mask)
    return torch.autograd.grad(out, leaves, dout.float())


def median_bench(warmup, rep):
    """``bench(fn)``: ``triton.testing.do_bench``'s median of ``fn`` in ms, with these warmup and repetition
    budgets (ms)."""
    import triton

    return lambda fn: triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def backward_row(q, k, v, dout, cu, dense, dense_dout, causal, bench, flops):
    """One ``--backward`` row: the packed and the dense gradients checked against SDPA's, then (``bench`` given)
    forward + backward timed: packed, dense, and per sequence (``flops``: the forward's useful FLOPs of the packed
    tokens and of the dense batch)."""
    import torch

    import warpspec.ops

    bounds = list(zip(cu.tolist(), cu[1:].tolist()))
    lengths = [stop - start for start, stop in bounds]
    unchecked = {"check": False, "max_seqlen_q": max(lengths), "max_seqlen_k": max(lengths)}

    def varlen():
        return torch.autograd.grad(warpspec.ops.attention_varlen(q, k, v, cu, cu, causal=causal, **unchecked),
                                   (q, k, v), dout)

    def dense_step():
        return torch.autograd.grad(warpspec.ops.attention(*dense, causal=causal), dense, dense_dout)

    def heads_first(x, start, stop):
        return x[start:stop].transpose(0, 1)[None]

    expected = [torch.zeros(x.shape, dtype=torch.float32, device=x.device) for x in (q, k, v)]
    for start, stop in bounds:
        seq = [heads_first(x, start, stop) for x in (q, k, v, dout)]
        for total, grad in zip(expected, sdpa_gradients(*seq, causal)):
            total[start:stop] = grad[0].transpose(0, 1)
    row = {"causal": causal,
           "error": max(relative(got, want) for got, want in zip(varlen(), expected)),
           "dense_error": max(relative(got, want) for got, want in
                              zip(dense_step(), sdpa_gradients(*dense, dense_dout, causal)))}
    if max(row["error"], row["dense_error"]) > GRADIENT_TOLERANCE or bench is None:
        return row
    per_sequence = [([heads_first(x, start, stop).detach().contiguous().requires_grad_() for x in (q, k, v)],
                     heads_first(dout, start, stop).contiguous()) for start, stop in bounds]
    row["varlen_ms"] = bench(varlen)
    row["dense_ms"] = bench(dense_step)
    row["per_sequence_ms"] = bench(lambda: [torch.autograd.grad(warpspec.ops.attention(*seq, causal=causal), seq,
                                                                seq_dout) for seq, seq_dout in per_sequence])
    useful, dense_flops = flops
    for name, count in (("varlen", useful), ("dense", dense_flops), ("per_sequence", useful)):
        row[name + "_tflops"] = BACKWARD_FLOPS * count / row[name + "_ms"] / 1e9
    row["varlen_vs_dense_rate"] = row["varlen_tflops"] / row["dense_tflops"]
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--max-len", type=int, default=4096)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--equal", action="store_true",
                        help="every sequence of the random draw's mean length (no raggedness: the packed kernel's "
                             "cost per tile against the dense kernel's)")
    parser.add_argument("--warmup", type=int, default=25, help="do_bench warmup, ms")
    parser.add_argument("--rep", type=int, default=100, help="do_bench repetitions, ms")
    parser.add_argument("--backward", action="store_true",
                        help="forward + backward through autograd: the packed backward against the dense one")
    parser.add_argument("--dry-run", action="store_true", help="CPU tensors on the emulator, 3 short sequences")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    import torch
    from torch.nn.attention.bias import causal_lower_right

    import warpspec.ops

    device = "cpu" if args.dry_run else "cuda"
    generator = torch.Generator().manual_seed(args.seed)
    batch, max_len = (3, 40) if args.dry_run else (args.batch, args.max_len)
    heads, head_dim = (2, 64) if args.dry_run else (MODEL_WIDTH // args.head_dim, args.head_dim)
    lengths = torch.randint(1, max_len + 1, (batch,), generator=generator)
    if args.equal:
        lengths = torch.full_like(lengths, max(1, round(float(lengths.float().mean()))))
    cu = torch.zeros(batch + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(lengths, 0)
    total = int(cu[-1])
    q, k, v = (torch.randn(total, heads, head_dim, generator=generator).to(torch.bfloat16).to(device)
               for _ in range(3))
    cu = cu.to(device)
    mean = max(1, round(total / batch))
    dense = [torch.randn(batch, heads, mean, head_dim, generator=generator).to(torch.bfloat16).to(device)
             for _ in range(3)]
    results = {"lengths": lengths.tolist(), "total_tokens": total, "heads": heads, "head_dim": head_dim,
               "backward": args.backward, "rows": []}
    print(f"{batch} sequences, {total} tokens (lengths {min(lengths.tolist())}-{max(lengths.tolist())}, mean {mean}),"
          f" H {heads}, D {head_dim}, bf16{', forward + backward' if args.backward else ''}", flush=True)
    bench = None if args.dry_run else median_bench(args.warmup, args.rep)
    if args.backward:
        for x in (q, k, v, *dense):
            x.requires_grad_()
        dout, dense_dout = (torch.randn(shape, generator=generator).to(torch.bfloat16).to(device)
                            for shape in (q.shape, dense[0].shape))
    failures = 0
    for causal in {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]:
        half = 2 if causal else 1
        useful = sum(4.0 * heads * n * n * head_dim for n in lengths.tolist()) / half
        dense_flops = 4.0 * batch * heads * mean * mean * head_dim / half
        if args.backward:
            row = backward_row(q, k, v, dout, cu, dense, dense_dout, causal, bench, (useful, dense_flops))
            if max(row["error"], row["dense_error"]) > GRADIENT_TOLERANCE:
                failures += 1
                print(f"{row}: check FAILED, not timed", flush=True)
            else:
                print(row, flush=True)
            results["rows"].append(row)
            continue
        row = {"causal": causal}
        out = warpspec.ops.attention_varlen(q, k, v, cu, cu, causal=causal)
        error = 0.0
        for b in range(batch):
            rows = slice(int(cu[b]), int(cu[b + 1]))
            seq = (x[rows].float().transpose(0, 1)[None] for x in (q, k, v))
            mask = causal_lower_right(rows.stop - rows.start, rows.stop - rows.start) if causal else None
            want = torch.nn.functional.scaled_dot_product_attention(*seq, attn_mask=mask)[0].transpose(0, 1)
            error = max(error, (out[rows].float() - want).abs().max().item())
        row["error"] = error
        if error > TOLERANCE:
            failures += 1
            print(f"{row}: check FAILED, not timed", flush=True)
            results["rows"].append(row)
            continue
        if bench is not None:
            row["varlen_ms"] = bench(lambda: warpspec.ops.attention_varlen(q, k, v, cu, cu, causal=causal))
            row["dense_ms"] = bench(lambda: warpspec.ops.attention(*dense, causal=causal))
            bounds = [(int(cu[b]), int(cu[b + 1])) for b in range(batch)]
            per_sequence = [tuple(x[start:stop].transpose(0, 1)[None].contiguous() for x in (q, k, v))
                            for start, stop in bounds]
            row["per_sequence_ms"] = bench(
                lambda: [warpspec.ops.attention(*seq, causal=causal) for seq in per_sequence])
            row["varlen_tflops"] = useful / row["varlen_ms"] / 1e9
            row["dense_tflops"] = dense_flops / row["dense_ms"] / 1e9
            row["per_sequence_tflops"] = useful / row["per_sequence_ms"] / 1e9
            row["varlen_vs_dense_rate"] = row["varlen_tflops"] / row["dense_tflops"]
        print(row, flush=True)
        results["rows"].append(row)
    timed = [row for row in results["rows"] if "varlen_ms" in row]
    if timed:
        print("\ncausal  varlen ms (TFLOP/s)  dense ms (TFLOP/s)  per-sequence ms (TFLOP/s)  varlen rate / dense")
        for row in timed:
            print(f"{str(row['causal']):6}  {row['varlen_ms']:8.3f} ({row['varlen_tflops']:5.0f})  "
                  f"{row['dense_ms']:8.3f} ({row['dense_tflops']:5.0f})  {row['per_sequence_ms']:8.3f} "
                  f"({row['per_sequence_tflops']:5.0f})          {row['varlen_vs_dense_rate']:.3f}")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
