"""Attention forward on the GPU: warpspec.ops.attention's kernel against torch SDPA's cuDNN and flash back ends, in
one process.

Protocol (docs/performance.md): batch 2, heads · head_dim = 2048, S_q = S_k = seq, ``torch.randn`` inputs,
FLOPs = 4 · B · H · seq² · D (halved when causal), ``triton.testing.do_bench(fn, warmup, rep,
return_mode="median")``. Before timing, every output is checked against SDPA's (max abs error below 2e-2 in
fp16, 4e-2 in bf16); a config whose check fails is reported and not timed. warpspec is timed as the pinned one-tile
kernel at the schedule ops.attention would give it, called on preallocated tensors (``--api`` times
``warpspec.ops.attention`` itself, whichever kernel it picks, allocation and validation included, its output
checked first). ``--tokens N`` sets the batch to N / seq instead (FlashAttention-3's grid: ``--tokens 16384``);
``--persistent`` also times the persistent kernel (``AttentionPersistent``, one block per SM walking the (query
tile, head) tiles) at its shipped schedule (``--persistent-schedules all``: the fastest of its space), checked the
same way first; ``--window-waves`` times it with the walk's windows of each given number of waves of tiles instead
of the shipped ``window_waves`` (every walk's figure in the JSON, the fastest in the table).

    python benchmarks/attention.py                                  # the full table (~4 minutes on an H200)
    python benchmarks/attention.py --head-dims 128 --seqs 8192 --causal both --dtypes fp16,bf16
    python benchmarks/attention.py --head-dims 128 --seqs 8192 --schedules all   # every schedule of the space
    python benchmarks/attention.py --schedule block_n=96,num_stages=2,unroll=1 --head-dims 128 --seqs 4096
    python benchmarks/attention.py --head-dims 64 --seqs 8192 --consumers 64:2   # D 64's two-warpgroup kernel
    python benchmarks/attention.py --tokens 16384 --seqs 512,1024,2048 --head-dims 128 --persistent \
        --persistent-consumers 128:3                             # the persistent kernel's 192-row tiles at D 128
    python benchmarks/attention.py --tokens 16384 --seqs 512,1024,2048 --persistent   # short sequences
    python benchmarks/attention.py --tokens 16384 --seqs 512 --head-dims 128 --causal yes --persistent \
        --window-waves 0.5,1,2                                   # the persistent walk's windows of 1/2, 1, 2 waves

Prints one line per config as it goes and a table last, then per dtype the geometric mean of the ratios to cuDNN,
the lowest and how many lie below 0.90; ``--json`` writes every number.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import itertools
import json
import math
import os
import sys
import time

BATCH = 2
MODEL_WIDTH = 2048  # heads · head_dim
TOLERANCE = {"fp16": 2e-2, "bf16": 4e-2}


def _build_one(job):
    """Compile one kernel (in a worker process) so that the main process finds it in the disk cache."""
    dtype_name, head_dim, causal, schedule, consumers = job
    from warpspec.cuda.launch import compile_kernel
    from warpspec.dtypes import BY_NAME
    from warpspec.ops.attention_kernel import Attention
    from warpspec.runtime import kernel_for

    started = time.perf_counter()
    try:
        compile_kernel(kernel_for(Attention(BY_NAME[dtype_name], head_dim=head_dim, causal=causal, **schedule,
                                            consumers=consumers), {}))
        return job, time.perf_counter() - started, None
    except Exception as error:  # a schedule that does not build (shared memory, registers) is reported, not fatal
        return job, time.perf_counter() - started, f"{type(error).__name__}: {error}"


def parse_schedule(text: str) -> dict:
    """``"block_n=96,num_stages=2,unroll=1"`` -> {"block_n": 96, "num_stages": 2, "unroll": 1}."""
    pairs = [part.split("=") for part in text.split(",")]
    return {name.strip(): int(value) for name, value in pairs}


def parse_consumers(text: str) -> tuple[int, int]:
    """``"64:3"`` -> (64, 3): head dim 64's one-tile kernel with three consumer warpgroups."""
    try:
        head_dim, count = (int(part) for part in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected D:N (a head dim and 2 or 3), got {text!r}") from None
    if count not in (2, 3):
        raise argparse.ArgumentTypeError(f"the consumer warpgroups must be 2 or 3, got {count}")
    return head_dim, count


def parse_waves(text: str) -> list[float]:
    """``"0.5,1,2"`` -> [0.5, 1.0, 2.0]: window sizes of the persistent kernel's walk, in waves of tiles."""
    try:
        waves = [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected positive numbers of waves, e.g. 0.5,1,2, got {text!r}") from None
    if not all(w > 0 for w in waves):
        raise argparse.ArgumentTypeError(f"the windows' waves must be positive, got {text!r}")
    return waves


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head-dims", default="64,128,256")
    parser.add_argument("--seqs", default="1024,2048,4096,8192,16384")
    parser.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    parser.add_argument("--dtypes", default="fp16", help="comma-separated: fp16, bf16")
    parser.add_argument("--schedules", choices=("default", "all"), default="default",
                        help="default: the schedule ops.attention picks (a stored tuning winner, else the shipped "
                             "default of the head dim); all: every schedule of the space")
    parser.add_argument("--schedule", default=None,
                        help="one schedule for every head dim, e.g. block_n=96,num_stages=2,unroll=1")
    parser.add_argument("--consumers", action="append", default=[], metavar="D:N", type=parse_consumers,
                        help="the one-tile kernel's consumer warpgroups at head dim D (2, or 3 at D 64 and 128) "
                             "instead of ops.attention's (warpspec.ops.attention.FORWARD_CONSUMERS); repeatable")
    parser.add_argument("--persistent-consumers", action="append", default=[], metavar="D:N", type=parse_consumers,
                        help="the persistent kernel's consumer warpgroups at head dim D (2 or 3; at D 128, three "
                             "take K/V tiles up to 80 keys) at every length instead of ops.attention's "
                             "(warpspec.ops.attention.PERSISTENT_ROWS); repeatable")
    parser.add_argument("--backends", default="cudnn,flash", help="SDPA back ends to time: cudnn, flash")
    parser.add_argument("--warmup", type=int, default=100, help="do_bench warmup, ms")
    parser.add_argument("--rep", type=int, default=500, help="do_bench repetitions, ms")
    parser.add_argument("--api", action="store_true", help="time warpspec.ops.attention instead of the kernel")
    parser.add_argument("--tokens", type=int, default=None,
                        help=f"batch x seq for every seq (default: batch {BATCH})")
    parser.add_argument("--persistent", action="store_true", help="also time the persistent kernel")
    parser.add_argument("--persistent-schedules", choices=("default", "all"), default="default",
                        help="the persistent kernel at the head dim's shipped tile and stages (default) or at "
                             "every schedule of its space, the fastest reported")
    parser.add_argument("--window-waves", default=None, type=parse_waves, metavar="W,...",
                        help="with --persistent: walk the tiles in windows of W waves of tiles each (e.g. 0.5,1,2), "
                             "each timed, instead of the shipped window_waves")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    if args.window_waves and not args.persistent:
        parser.error("--window-waves times the persistent kernel's walk: give --persistent too")

    import torch
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import warpspec
    from warpspec.ops import attention
    from warpspec.ops.attention import (FORWARD_CONSUMERS, PERSISTENT_ROWS, Problem, arguments, consumers_of,
                                        default_schedule, persistent_schedule, script_for, uses_persistent, validate)
    from warpspec.dtypes import BY_NAME, float16
    from warpspec.ops.attention_kernel import LOG2_E, Attention
    from warpspec.ops.attention_persistent_kernel import AttentionPersistent, tile_walk

    head_dims = [int(d) for d in args.head_dims.split(",")]
    seqs = [int(s) for s in args.seqs.split(",")]
    causals = {"both": [False, True], "yes": [True], "no": [False]}[args.causal]
    dtype_names = args.dtypes.split(",")
    torch_dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    kernel_dtypes = {"fp16": "float16", "bf16": "bfloat16"}
    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
    chosen_backends = [b for b in args.backends.split(",") if b]

    def schedules_of(head_dim):
        """The schedules to time; None: the one ops.attention picks (a stored tuning winner, else the default)."""
        if args.schedule:
            return [parse_schedule(args.schedule)]
        if args.schedules == "all":
            return Attention(float16).schedules()
        return [None]

    # The overrides reach ops.attention's kernel choice (consumers_of, tuned_script) too, masked or not.
    for head_dim, count in args.consumers:
        FORWARD_CONSUMERS[(head_dim, False)] = FORWARD_CONSUMERS[(head_dim, True)] = count
    for head_dim, count in args.persistent_consumers:
        for mask in (False, True):
            PERSISTENT_ROWS[(head_dim, mask)] = tuple((rows, count, schedule) for rows, _, schedule in
                                                      PERSISTENT_ROWS.get((head_dim, mask), ()))

    def one_tile(head_dim, causal):
        """The one-tile kernel's shipped (schedule, consumer warpgroups) at a head dim and mask."""
        problem = Problem(1, 1, 1, 4096, 4096, head_dim, float16, causal, 1.0)
        return default_schedule(problem, persistent=False), consumers_of(problem, persistent=False)

    jobs = [(kernel_dtypes[name], d, causal, schedule or one_tile(d, causal)[0], one_tile(d, causal)[1])
            for name in dtype_names for d in head_dims for causal in causals for schedule in schedules_of(d)]
    started = time.perf_counter()
    with concurrent.futures.ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
        builds = {(job[0], job[1], job[2], tuple(job[3].items())): error for job, _, error in
                  pool.map(_build_one, jobs)}
    print(f"built {len(builds)} kernels in {time.perf_counter() - started:.1f} s", flush=True)

    results = {"gpu": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
               "batch": BATCH if args.tokens is None else f"{args.tokens} / seq", "model_width": MODEL_WIDTH,
               "consumers": {f"{d}{' causal' if causal else ''}": FORWARD_CONSUMERS.get((d, causal), 2)
                             for d in head_dims for causal in causals},
               # The persistent kernel's consumer warpgroups by the query rows they run up to, "1024:2, 8192:3".
               "persistent_consumers": {f"{d}{' causal' if causal else ''}": ", ".join(
                   f"{rows}:{count}" for rows, count, _ in PERSISTENT_ROWS.get((d, causal), ()))
                   for d in head_dims for causal in causals}, "rows": []}
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count

    def bench(fn):
        return triton.testing.do_bench(fn, warmup=args.warmup, rep=args.rep, return_mode="median")

    def persistent_tflops(q, k, v, causal, head_dim, reference, name, flops, walks):
        """The persistent kernel at its shipped schedule (``persistent_schedule``: where ops.attention would not run
        it, the longest rows' of the head dim and mask, else the one-tile kernel's tile and stages), or with
        ``--persistent-schedules all`` the fastest of its schedules that fit, walked in the shipped windows or in
        each of ``--window-waves``' (every walk's TFLOP/s into ``walks``, by label): (TFLOP/s, schedule), or
        (None, None) when none matches ``reference``."""
        problem = validate(q, k, v, causal, None)
        if args.persistent_schedules == "all":
            schedules = AttentionPersistent(float16).schedules()
        else:
            schedules = [persistent_schedule(problem)]
        batch, heads, seq, _ = q.shape
        best = (None, None)
        for schedule, waves in itertools.product(schedules, args.window_waves or [None]):
            label = ",".join(f"{key}={value}" for key, value in schedule.items())
            if waves is not None:
                label += f" waves={waves:g}"
            out, lse = torch.full_like(q, float("nan")), torch.empty(q.shape[:3], device="cuda")
            try:
                kernel = AttentionPersistent(BY_NAME[kernel_dtypes[name]], head_dim=head_dim, causal=causal,
                                             **schedule, consumers=consumers_of(problem, persistent=True))
                walk = torch.from_numpy(tile_walk(seq, seq, batch * heads, kernel.block_m, causal, num_sms,
                                                  waves).copy())
                call_args = (seq, seq, batch * heads, heads, 1, head_dim ** -0.5 * LOG2_E, q, k, v, out, lse,
                             walk.cuda(), num_sms)
                kernel(*call_args)
            except warpspec.WarpspecError as error:  # a schedule whose buffers do not fit this head dim
                print(f"{name} D={head_dim} persistent {label}: {str(error).splitlines()[0]}", flush=True)
                continue
            torch.cuda.synchronize()
            if reference is not None and not (out.float() - reference.float()).abs().max().item() < TOLERANCE[name]:
                print(f"{name} D={head_dim} seq={seq} causal={causal} persistent {label}: WRONG", flush=True)
                continue
            tflops = flops / bench(lambda: kernel(*call_args)) / 1e9
            walks[label] = tflops
            if args.window_waves:
                print(f"{name} D={head_dim} seq={seq} causal={causal} persistent {label}: {tflops:.0f} TFLOP/s",
                      flush=True)
            if best[0] is None or tflops > best[0]:
                best = (tflops, label)
        return best

    torch.manual_seed(0)
    with warpspec.use_backend("cuda"):
        for name in dtype_names:
            for head_dim in head_dims:
                heads = MODEL_WIDTH // head_dim
                for seq in seqs:
                    batch = BATCH if args.tokens is None else max(1, args.tokens // seq)
                    shape = (batch, heads, seq, head_dim)
                    q, k, v = (torch.randn(shape, device="cuda", dtype=torch_dtypes[name]) for _ in range(3))
                    for causal in causals:
                        flops = 4.0 * batch * heads * seq * seq * head_dim / (2 if causal else 1)
                        row = {"dtype": name, "head_dim": head_dim, "seq": seq, "causal": causal, "batch": batch}
                        reference = None
                        for backend in chosen_backends:
                            try:
                                with sdpa_kernel(backends[backend]):
                                    call = lambda: torch.nn.functional.scaled_dot_product_attention(
                                        q, k, v, is_causal=causal)
                                    out = call()
                                    row[backend] = flops / bench(call) / 1e9
                                reference = out if reference is None else reference
                            except RuntimeError as error:  # a back end that does not take this config
                                row[backend] = None
                                row[backend + "_error"] = str(error).splitlines()[0]
                        problem = validate(q, k, v, causal, None)
                        out = torch.empty_like(q)
                        best = None
                        for schedule in schedules_of(head_dim):
                            kernel_args = arguments(q, k, v, out, torch.empty(q.shape[:3], device="cuda"),
                                                    problem, persistent=False)
                            if schedule is not None:
                                label = ",".join(f"{key}={value}" for key, value in schedule.items())
                                error = builds[(kernel_dtypes[name], head_dim, causal, tuple(schedule.items()))]
                                if error:
                                    row.setdefault("build_errors", {})[label] = error
                                    continue
                            script = script_for(problem, kernel_args, schedule, persistent=False)
                            label = ",".join(f"{key}={value}" for key, value in script.schedule().items())
                            out.fill_(float("nan"))
                            script(*kernel_args)
                            torch.cuda.synchronize()
                            if reference is not None:
                                max_error = (out.float() - reference.float()).abs().max().item()
                                row.setdefault("max_abs_error", {})[label] = max_error
                                if not max_error < TOLERANCE[name]:
                                    print(f"{name} D={head_dim} seq={seq} causal={causal} {label}: WRONG, max abs "
                                          f"error {max_error:.3g} vs SDPA", flush=True)
                                    continue
                            if args.api and schedule is None:
                                api_error = (attention(q, k, v, causal=causal).float()
                                             - reference.float()).abs().max().item() if reference is not None else 0
                                if not api_error < TOLERANCE[name]:
                                    print(f"{name} D={head_dim} seq={seq} causal={causal} ops.attention: WRONG, "
                                          f"max abs error {api_error:.3g} vs SDPA", flush=True)
                                    continue
                                ms = bench(lambda: attention(q, k, v, causal=causal))
                                if uses_persistent(problem):  # name the kernel ops.attention ran, not the one-tile
                                    runs = script_for(problem, arguments(q, k, v, out, kernel_args[-1], problem))
                                    label = "persistent " + ",".join(f"{key}={value}" for key, value in
                                                                     runs.schedule().items())
                            else:
                                ms = bench(lambda: script(*kernel_args))
                            tflops = flops / ms / 1e9
                            row.setdefault("warpspec", {})[label] = tflops
                            if best is None or tflops > best[1]:
                                best = (label, tflops)
                        row["best"] = best
                        if args.persistent:
                            row["persistent"], row["persistent_schedule"] = persistent_tflops(
                                q, k, v, causal, head_dim, reference, name, flops,
                                row.setdefault("persistent_walks", {}))
                        results["rows"].append(row)
                        cudnn = row.get("cudnn")
                        ratio = f"{best[1] / cudnn:.3f}x cuDNN" if best and cudnn else "-"
                        print(f"{name} D={head_dim} seq={seq} causal={causal}: warpspec "
                              f"{best[1] if best else float('nan'):.0f} TFLOP/s ({best[0] if best else 'failed'}), "
                              f"cuDNN {cudnn or float('nan'):.0f}, flash {row.get('flash') or float('nan'):.0f}, "
                              f"{ratio}" + (f", persistent {row['persistent'] or float('nan'):.0f} "
                                            f"({row['persistent_schedule']})" if args.persistent else ""), flush=True)

    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print(f"\nattention forward, batch {results['batch']}, heads x head_dim = {MODEL_WIDTH}, on {results['gpu']} "
          f"({results['date']}); consumer warpgroups by head dim {results['consumers']}"
          + (f", the persistent kernel's {results['persistent_consumers']}" if args.persistent else "") + "; TFLOP/s")
    extra = f" {'persist.':>8s} {'vs cuDNN':>9s} {'persistent schedule':22s}" if args.persistent else ""
    print(f"{'dtype':5s} {'D':>4s} {'seq':>6s} {'causal':>6s} {'warpspec':>9s} {'cuDNN':>7s} {'flash':>7s} "
          f"{'vs cuDNN':>9s}{extra}  schedule")
    for row in results["rows"]:
        best = row["best"]
        cells = [f"{row[key]:7.0f}" if row.get(key) else f"{'-':>7s}" for key in ("cudnn", "flash")]
        ratio = f"{best[1] / row['cudnn']:9.3f}" if best and row.get("cudnn") else f"{'-':>9s}"
        if args.persistent:
            persistent = row.get("persistent")
            extra = (f" {persistent:8.0f} {persistent / row['cudnn']:9.3f}" if persistent and row.get("cudnn") else
                     f" {'-':>8s} {'-':>9s}")
            extra += f" {row.get('persistent_schedule') or '':22s}"
        print(f"{row['dtype']:5s} {row['head_dim']:4d} {row['seq']:6d} {row['causal']!s:>6s} "
              f"{best[1] if best else float('nan'):9.0f} {cells[0]} {cells[1]} {ratio}{extra}  "
              f"{best[0] if best else ''}")
    for name in dtype_names:
        ratios = [row["best"][1] / row["cudnn"] for row in results["rows"]
                  if row["dtype"] == name and row["best"] and row.get("cudnn")]
        if ratios:
            print(f"{name}: {ratio_summary(ratios)}")
    return 0


def ratio_summary(ratios: list[float], floor: float = 0.90) -> str:
    """The geometric mean of warpspec / cuDNN rates over the points, the lowest, and how many fall below
    ``floor`` (issue targets read: geometric mean at least 1.00, no point below 0.90)."""
    mean = math.exp(sum(map(math.log, ratios)) / len(ratios))
    below = sum(ratio < floor for ratio in ratios)
    return (f"geometric mean {mean:.3f}x cuDNN over {len(ratios)} points, lowest {min(ratios):.3f}x, "
            f"{below} below {floor:.2f}x")


if __name__ == "__main__":
    sys.exit(main())
