"""Decode attention on the GPU: warpspec.ops.attention (split-KV for few query rows) against the fastest SDPA back
end on the same grouped-query inputs, with the effective K+V bandwidth.

Protocol: H / H_kv = 32 / 8 (``--heads``), D 128, bf16, ``torch.randn`` inputs, S_q query rows (1: decode, 4:
speculative decoding) against S_k keys; bytes = 2 · B · H_kv · S_k · D · 2 (K and V read once);
``triton.testing.do_bench(fn, warmup, rep, return_mode="median")``. Before timing, the output is checked against
a float32 reference (max abs error below 4e-2 in bf16); SDPA's back ends (cuDNN, flash, efficient, math, with
``enable_gqa=True``) are each checked and timed, the fastest reported.

    python benchmarks/attention_decode.py                                 # B 1-64, S_k 4096-131072, S_q 1 and 4
    python benchmarks/attention_decode.py --batches 32 --seq-ks 8192 --seq-qs 1 --heads 64/8
    python benchmarks/attention_decode.py --schedule block_n=128,num_stages=2   # another decode schedule
    python benchmarks/attention_decode.py --pages 16,64                   # also ops.attention_paged on the keys
                                                  # (check=False, and the default check=True: "_checked")
    python benchmarks/attention_decode.py --dry-run                       # CPU: tiny shapes on the emulator

``--dry-run`` checks warpspec on CPU tensors at B 1, 8 / 2 heads, S_k 300 (the emulator) and times nothing.
Prints one line per config; ``--json`` writes every number.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

TOLERANCE = 4e-2


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,8,32,64")
    parser.add_argument("--seq-ks", default="4096,8192,32768,131072")
    parser.add_argument("--seq-qs", default="1,4")
    parser.add_argument("--heads", default="32/8", help="query heads / key-value heads")
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=100, help="do_bench warmup, ms")
    parser.add_argument("--rep", type=int, default=500, help="do_bench repetitions, ms")
    parser.add_argument("--max-gb", type=float, default=40.0, help="skip configs whose K and V exceed this")
    parser.add_argument("--schedule", default=None, metavar="K=V,...",
                        help="the decode kernel's schedule for this run instead of the shipped one, e.g. "
                             "block_n=128,num_stages=2")
    parser.add_argument("--paged-schedule", default=None, metavar="K=V,...",
                        help="the paged decode kernel's schedule for this run instead of paged_schedule's (the dense "
                             "one), e.g. block_n=16,num_stages=8 (a tile of one 16-key load)")
    parser.add_argument("--max-splits", type=int, default=None,
                        help="the most key splits per pack of query heads for this run (default: MAX_SPLITS)")
    parser.add_argument("--kernels", action="store_true",
                        help="also list the GPU kernels one warpspec call runs, with their mean times (torch.profiler)")
    parser.add_argument("--pages", default="",
                        help="page sizes, e.g. 16,64: also time ops.attention_paged on the same keys in a paged cache "
                             "(pages dealt in a random order, the table exactly as long as the keys)")
    parser.add_argument("--dry-run", action="store_true", help="CPU tensors on the emulator, tiny shapes, no timing")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if not args.dry_run:
        import triton
    from torch.nn.attention.bias import causal_lower_right

    import warpspec
    from warpspec.ops import attention
    from warpspec.ops.attention import validate
    from warpspec.ops import attention_decode
    from warpspec.ops.attention_decode import pack_size, split_count, uses_decode
    from warpspec.tune.bench import host_us_per_call

    if args.max_splits:
        attention_decode.MAX_SPLITS = args.max_splits
    if args.schedule:
        pinned = {key: int(value) for key, value in (item.split("=") for item in args.schedule.split(","))}
        attention_decode.DEFAULT_DECODE_SCHEDULES[args.head_dim] = dict(
            attention_decode.DEFAULT_DECODE_SCHEDULES[args.head_dim], **pinned)

    if args.paged_schedule:
        pinned_paged = {key: int(value)
                        for key, value in (item.split("=") for item in args.paged_schedule.split(","))}
        attention_decode.paged_schedule = lambda head_dim: dict(pinned_paged)

    heads, kv_heads = (8, 2) if args.dry_run else (int(h) for h in args.heads.split("/"))
    batches = [1] if args.dry_run else [int(b) for b in args.batches.split(",")]
    seq_ks = [300] if args.dry_run else [int(s) for s in args.seq_ks.split(",")]
    seq_qs = [int(s) for s in args.seq_qs.split(",")]
    device = "cpu" if args.dry_run else "cuda"
    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
                "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
    results = {"gpu": None if args.dry_run else torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
               "schedule": attention_decode.DEFAULT_DECODE_SCHEDULES.get(args.head_dim),
               "max_splits": attention_decode.MAX_SPLITS, "rows": []}

    def reference(q, k, v):
        group = q.shape[1] // k.shape[1]
        return torch.nn.functional.scaled_dot_product_attention(
            q.float(), k.float().repeat_interleave(group, 1), v.float().repeat_interleave(group, 1),
            attn_mask=causal_lower_right(q.shape[2], k.shape[2]))

    failures = 0
    with warpspec.use_backend("emulator" if args.dry_run else "cuda"):
        for batch in batches:
            for seq_k in seq_ks:
                kv_bytes = 2 * batch * kv_heads * seq_k * args.head_dim * 2
                if kv_bytes > args.max_gb * 1e9:
                    continue
                generator = torch.Generator(device=device).manual_seed(0)
                k, v = (torch.randn(batch, kv_heads, seq_k, args.head_dim, device=device, dtype=torch.bfloat16,
                                    generator=generator) for _ in range(2))
                for seq_q in seq_qs:
                    q = torch.randn(batch, heads, seq_q, args.head_dim, device=device, dtype=torch.bfloat16,
                                    generator=generator)
                    row = {"batch": batch, "seq_q": seq_q, "seq_k": seq_k, "heads": f"{heads}/{kv_heads}",
                           "kv_mb": kv_bytes / 1e6}
                    problem = validate(q, k, v, True, None)
                    if uses_decode(problem):
                        row["pack"], row["splits"] = pack_size(problem), split_count(problem)
                    expected = reference(q, k, v)
                    row["error"] = (attention(q, k, v, causal=True).float() - expected).abs().max().item()
                    if row["error"] > TOLERANCE:
                        failures += 1
                        print(f"{row}: check FAILED, not timed", flush=True)
                        results["rows"].append(row)
                        continue
                    for page_size in [int(p) for p in args.pages.split(",") if p]:
                        paged = paged_operands(q, k, v, page_size)
                        # The first call takes the general launch and binds the one later calls take (the ones
                        # timed): both are checked.
                        row[f"paged{page_size}_error"] = max(
                            (warpspec.ops.attention_paged(*paged, check=check).float().transpose(1, 2) - expected)
                            .abs().max().item() for check in (True, False))
                        if row[f"paged{page_size}_error"] > TOLERANCE:
                            failures += 1
                            print(f"paged {page_size}: check FAILED, not timed", flush=True)
                        elif not args.dry_run:
                            # check=False: what a serving loop's decode step calls (nothing read back); checked:
                            # the default, whose copy of the table to the host waits for the GPU.
                            for label, check in (("", False), ("_checked", True)):
                                def paged_call(check=check):
                                    return warpspec.ops.attention_paged(*paged, check=check)

                                name = f"paged{page_size}{label}"
                                row[f"{name}_us"] = 1e3 * triton.testing.do_bench(
                                    paged_call, warmup=args.warmup, rep=args.rep, return_mode="median")
                                row[f"{name}_tb_s"] = kv_bytes / row[f"{name}_us"] / 1e6
                                row[f"{name}_host_us"] = host_us_per_call(paged_call, torch.cuda.synchronize,
                                                                          calls=20, repeats=5)
                                if args.kernels:
                                    row[f"{name}_kernels_us"] = kernel_times(paged_call)
                        del paged
                    if not args.dry_run:

                        def bench(fn):
                            return triton.testing.do_bench(fn, warmup=args.warmup, rep=args.rep,
                                                           return_mode="median")

                        row["warpspec_us"] = 1e3 * bench(lambda: attention(q, k, v, causal=True))
                        # Host time per call, to tell a host-bound figure from the kernel's own time.
                        row["warpspec_host_us"] = host_us_per_call(lambda: attention(q, k, v, causal=True),
                                                                   torch.cuda.synchronize, calls=20, repeats=5)
                        row["warpspec_tb_s"] = kv_bytes / row["warpspec_us"] / 1e6
                        if args.kernels:
                            row["kernels_us"] = kernel_times(lambda: attention(q, k, v, causal=True))
                        mask = causal_lower_right(seq_q, seq_k)
                        for name, backend in backends.items():
                            def call():
                                with sdpa_kernel(backend):
                                    return torch.nn.functional.scaled_dot_product_attention(
                                        q, k, v, attn_mask=mask if seq_q > 1 else None, enable_gqa=True)
                            try:
                                if (call().float() - expected).abs().max().item() > TOLERANCE:
                                    row[name + "_error"] = "check failed"
                                    continue
                                row[name + "_us"] = 1e3 * bench(call)
                            except RuntimeError as error:  # a back end that does not take this config
                                row[name + "_error"] = str(error).splitlines()[0]
                        timed = [name for name in backends if name + "_us" in row]
                        if timed:
                            best = min(timed, key=lambda name: row[name + "_us"])
                            row["sdpa_best"], row["vs_sdpa_best"] = best, row[best + "_us"] / row["warpspec_us"]
                    print(row, flush=True)
                    results["rows"].append(row)
    print_table(results["rows"])
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)
    return 1 if failures else 0


def print_table(rows) -> None:
    """The timed rows as one table: µs (and TB/s) of the dense call, SDPA's best, and each paged variant."""
    timed = [row for row in rows if "warpspec_us" in row]
    if not timed:
        return
    paged = sorted({key[:-3] for row in timed for key in row if key.startswith("paged") and key.endswith("_us")
                    and not key.endswith(("host_us", "kernels_us"))})
    print("\nbatch s_q   s_k  dense µs (TB/s)   SDPA best µs  " + "  ".join(f"{name} µs (TB/s)" for name in paged))
    for row in timed:
        best = row.get(row.get("sdpa_best", "") + "_us", float("nan"))
        cells = "  ".join(f"{row.get(name + '_us', float('nan')):9.1f} ({row.get(name + '_tb_s', float('nan')):.2f})"
                          for name in paged)
        print(f"{row['batch']:5d} {row['seq_q']:3d} {row['seq_k']:6d} {row['warpspec_us']:9.1f} "
              f"({row['warpspec_tb_s']:.2f})  {best:9.1f}  {cells}")


def paged_operands(q, k, v, page_size: int) -> tuple:
    """(q, k_cache, v_cache, block_table, seq_lens) of ops.attention_paged holding dense ``q`` [B, H, S_q, D],
    ``k`` and ``v`` [B, H_kv, S_k, D]: q as [B, S_q, H, D], every sequence's S_k keys in pages of ``page_size``
    rows dealt to the sequences in a random order."""
    import torch

    batch, kv_heads, seq_k, head_dim = k.shape
    per_sequence = -(-seq_k // page_size)
    generator = torch.Generator(device=k.device).manual_seed(1)
    order = torch.randperm(batch * per_sequence, device=k.device, generator=generator)
    caches = []
    for x in (k, v):
        padded = torch.zeros(batch, kv_heads, per_sequence * page_size, head_dim, dtype=x.dtype, device=x.device)
        padded[:, :, :seq_k] = x
        pages = padded.view(batch, kv_heads, per_sequence, page_size, head_dim).permute(0, 2, 3, 1, 4)
        cache = torch.empty(batch * per_sequence, page_size, kv_heads, head_dim, dtype=x.dtype, device=x.device)
        cache[order] = pages.reshape(batch * per_sequence, page_size, kv_heads, head_dim)
        caches.append(cache)
    table = order.view(batch, per_sequence).to(torch.int32)
    seq_lens = torch.full((batch,), seq_k, dtype=torch.int32, device=k.device)
    return (q.transpose(1, 2).contiguous(), *caches, table, seq_lens)


def kernel_times(fn, calls: int = 20) -> dict:
    """{kernel name: mean GPU µs per call} of the kernels ``fn`` launches, from ``calls`` profiled calls: tells the
    kernel's own time from what else a call runs."""
    import collections

    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as profiled:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    totals = collections.Counter()
    for event in profiled.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name] += event.time_range.elapsed_us()
    return {name: round(total / calls, 2) for name, total in totals.items()}


if __name__ == "__main__":
    sys.exit(main())
