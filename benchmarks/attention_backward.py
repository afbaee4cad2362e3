"""Attention forward + backward on the GPU: warpspec.ops.attention (differentiable) against torch SDPA's cuDNN back
end, timed the same way for both.

Protocol: batch 2, heads · head_dim = 2048, S_q = S_k = seq, ``torch.randn`` inputs and output gradient; one timed
call is ``torch.autograd.grad(attention(q, k, v), (q, k, v), dout)`` (forward and backward; ops.attention's
autograd takes the accumulating dQ path at D 64 unless ``torch.use_deterministic_algorithms(True)`` is in force,
which ``--deterministic`` turns on around our steps alone);
FLOPs = 3.5 · 4 · B · H · seq² · D (the backward's five GEMMs are 2.5 times the forward's two), halved when causal;
``triton.testing.do_bench(fn, warmup, rep, return_mode="median")``; ``*_host_ms`` is the host's wall time per step
of back-to-back steps (``warpspec.tune.bench.host_us_per_call``): where it is the larger, the step is host-bound.
Before timing, the output and the three gradients are checked against SDPA's (max abs error over max |SDPA's| below
2e-2 in fp16, 4e-2 in bf16); a config whose check fails is reported and not timed.

    python benchmarks/attention_backward.py                     # D 64 and 128, seq 2048-16384, causal and not
    python benchmarks/attention_backward.py --head-dims 128 --seqs 4096 --causal yes --dtypes bf16
    python benchmarks/attention_backward.py --deterministic     # under torch.use_deterministic_algorithms(True)
    python benchmarks/attention_backward.py --dry-run           # CPU: tiny shapes on the emulator, checks only
    python benchmarks/attention_backward.py --schedule 128:kv.num_stages=3 --schedule 64:q.block_n=128

``--schedule D:KERNEL.PARAM=VALUE`` (repeatable) replaces one entry of the shipped backward schedules
(``DEFAULT_BACKWARD_SCHEDULES``: KERNEL is kv, kvdq, fused or q; a flag such as ``64:fused.transposed=1`` takes
0 or 1) for this run, to time a schedule before shipping it; each row records the schedule of its head dim.

``--accumulating-dims 64,128`` sets the head dims whose autograd takes the accumulating dQ path at every length
for this run (the shipped ``AUTOGRAD_ACCUMULATES``: D 64, and D 128 from 4096 keys); ``--accumulating-dims ''`` none.
Each row records the path it took.

``--kernels`` also times the parts, each with do_bench: our forward alone and each backward kernel alone (the
pinned Scripts of the path autograd took, called with the arrays of one checked backward: ``Dot``, on the
accumulating path ``DotZeroingDQ``, which also zeroes the dQ accumulator, then the dK/dV kernel with dQ shares and
``ConvertDQ``; on the deterministic path the dK/dV kernel and the dQ kernel), and cuDNN's forward alone
(its backward is the step's time less the forward's). The parts run after each config's end-to-end timing, and
on an H100 (2026-12-06) later short configs' end-to-end figures in the same process read slower after them (host-
bound steps): take the ratios from a run without ``--kernels``.

``--dry-run`` runs the same checks on CPU tensors at batch 1, 2 heads, seq 96 (the emulator; SDPA on CPU in
float32 as the reference) and times nothing. Prints one line per config; ``--json`` writes every number.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time

BATCH = 2
MODEL_WIDTH = 2048  # heads · head_dim
TOLERANCE = {"fp16": 2e-2, "bf16": 4e-2}


def relative(got, want) -> float:
    """Max abs error of ``got`` over the max magnitude of ``want``."""
    return ((got.float() - want.float()).abs().max() / want.float().abs().max()).item()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head-dims", default="64,128")
    parser.add_argument("--seqs", default="2048,4096,8192,16384")
    parser.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    parser.add_argument("--dtypes", default="fp16,bf16", help="comma-separated: fp16, bf16")
    parser.add_argument("--warmup", type=int, default=100, help="do_bench warmup, ms")
    parser.add_argument("--rep", type=int, default=500, help="do_bench repetitions, ms")
    parser.add_argument("--deterministic", action="store_true",
                        help="our steps under torch.use_deterministic_algorithms(True): the backward on the "
                             "deterministic path (a dQ kernel that recomputes S and dP) at every head dim")
    parser.add_argument("--kernels", action="store_true", help="also time the forward and each backward kernel")
    parser.add_argument("--accumulating-dims", default=None, metavar="D,...",
                        help="head dims whose autograd takes the accumulating dQ path at every length in this run "
                             "(default: the shipped AUTOGRAD_ACCUMULATES)")
    parser.add_argument("--dry-run", action="store_true", help="CPU tensors on the emulator, tiny shapes, no timing")
    parser.add_argument("--schedule", action="append", default=[], metavar="D:KERNEL.PARAM=VALUE",
                        help="replace one entry of the shipped backward schedules, e.g. 128:kv.num_stages=3")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    try:
        schedules = override_schedules(args.schedule)
    except ValueError as error:
        parser.error(str(error))
    backward_module = importlib.import_module("warpspec.ops.attention_backward")  # ops exports the function
    if args.accumulating_dims is not None:
        try:
            backward_module.AUTOGRAD_ACCUMULATES = {int(d): 0 for d in args.accumulating_dims.split(",") if d}
        except ValueError:
            parser.error(f"--accumulating-dims takes comma-separated head dims, got {args.accumulating_dims!r}")

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import warpspec
    from warpspec.ops import attention, attention_backward

    device = "cpu" if args.dry_run else "cuda"
    torch_dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    causals = {"both": [False, True], "yes": [True], "no": [False]}[args.causal]
    seqs = [96] if args.dry_run else [int(s) for s in args.seqs.split(",")]
    results = {"gpu": None if args.dry_run else torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
               "deterministic": args.deterministic, "rows": []}

    def forward_backward(attend, q, k, v, dout, deterministic=False):
        if not deterministic:
            return lambda: torch.autograd.grad(attend(q, k, v), (q, k, v), dout)

        def step():
            # PyTorch's switch around our step alone: its backward then takes the deterministic kernels.
            torch.use_deterministic_algorithms(True)
            try:
                return torch.autograd.grad(attend(q, k, v), (q, k, v), dout)
            finally:
                torch.use_deterministic_algorithms(False)
        return step

    def ours(causal):
        return lambda q, k, v: attention(q, k, v, causal=causal)

    def sdpa(causal):
        if args.dry_run:  # the float32 math back end on CPU, as the reference
            return lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
                q.float(), k.float(), v.float(), is_causal=causal)

        def call(q, k, v):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return call

    failures = 0
    with warpspec.use_backend("emulator" if args.dry_run else "cuda"):
        for name in args.dtypes.split(","):
            for head_dim in (int(d) for d in args.head_dims.split(",")):
                heads = 2 if args.dry_run else MODEL_WIDTH // head_dim
                batch = 1 if args.dry_run else BATCH
                for seq in seqs:
                    generator = torch.Generator(device=device).manual_seed(0)
                    q, k, v, dout = (torch.randn(batch, heads, seq, head_dim, device=device, generator=generator,
                                                 dtype=torch_dtypes[name]) for _ in range(4))
                    for x in (q, k, v):
                        x.requires_grad_()
                    for causal in causals:
                        row = {"dtype": name, "head_dim": head_dim, "seq": seq, "causal": causal,
                               "schedule": schedules[head_dim],
                               "accumulating": not args.deterministic and backward_module.autograd_accumulates(
                                   head_dim, seq)}
                        flops = 3.5 * 4 * batch * heads * seq * seq * head_dim / (2 if causal else 1)
                        ours_out, sdpa_out = ours(causal)(q, k, v), sdpa(causal)(q, k, v)
                        errors = [relative(ours_out, sdpa_out)]
                        errors += [relative(a, b) for a, b in zip(
                            forward_backward(ours(causal), q, k, v, dout, args.deterministic)(),
                            forward_backward(sdpa(causal), q, k, v, dout)())]
                        row["errors"] = dict(zip(("out", "dq", "dk", "dv"), errors))
                        if max(errors) > TOLERANCE[name]:
                            failures += 1
                            print(f"{row}: check FAILED, not timed", flush=True)
                            results["rows"].append(row)
                            continue
                        if not args.dry_run:
                            import triton

                            from warpspec.tune.bench import host_us_per_call

                            for label, attend, deterministic in (("warpspec", ours(causal), args.deterministic),
                                                                 ("cudnn", sdpa(causal), False)):
                                step = forward_backward(attend, q, k, v, dout, deterministic)
                                ms = triton.testing.do_bench(step, warmup=args.warmup, rep=args.rep,
                                                             return_mode="median")
                                row[label + "_ms"], row[label + "_tflops"] = ms, flops / ms / 1e9
                                # Host time per step, to tell a host-bound figure from the kernels' own time.
                                row[label + "_host_ms"] = 1e-3 * host_us_per_call(step, torch.cuda.synchronize,
                                                                                  calls=10, repeats=5)
                            row["vs_cudnn"] = row["cudnn_ms"] / row["warpspec_ms"]
                            if args.kernels:
                                row.update(part_times(torch, triton, q, k, v, dout, causal, args))
                        print(row, flush=True)
                        results["rows"].append(row)
    if args.json:
        with open(args.json, "w") as file:
            json.dump(results, file, indent=1)
    return 1 if failures else 0


def override_schedules(entries) -> dict:
    """Apply ``--schedule`` entries ("D:KERNEL.PARAM=VALUE") to the shipped backward schedules in place (before any
    kernel is built); returns them. A ValueError names an entry that is malformed or names no shipped entry."""
    from warpspec.ops.attention_backward import DEFAULT_BACKWARD_SCHEDULES

    for entry in entries:
        try:
            head_dim, rest = entry.split(":", 1)
            path, value = rest.split("=", 1)
            kernel, param = path.split(".", 1)
            schedule = DEFAULT_BACKWARD_SCHEDULES[int(head_dim)][kernel]
            if param not in schedule:
                raise KeyError(param)
            if isinstance(schedule[param], bool):  # a flag: 0 or 1, nothing else read as True
                if value not in ("0", "1"):
                    raise ValueError(f"{param} is a flag: 0 or 1")
                schedule[param] = value == "1"
            else:
                schedule[param] = int(value)
        except (ValueError, KeyError) as error:
            raise ValueError(f"--schedule {entry!r}: expected D:KERNEL.PARAM=VALUE naming a shipped entry, e.g. "
                             f"128:kv.num_stages=3 ({error!r})") from None
    return DEFAULT_BACKWARD_SCHEDULES


def part_times(torch, triton, q, k, v, dout, causal, args) -> dict:
    """ms of our forward and of each backward kernel alone, and of cuDNN's forward (``--kernels``)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from warpspec.ops import attention
    from warpspec.ops.attention import LOG2_E
    from warpspec.ops.attention_backward import launch_backward, validate_backward

    backward_module = importlib.import_module("warpspec.ops.attention_backward")

    def bench(fn) -> float:
        return triton.testing.do_bench(fn, warmup=args.warmup, rep=args.rep, return_mode="median")

    q, k, v = q.detach(), k.detach(), v.detach()
    times = {"fwd_ms": bench(lambda: attention(q, k, v, causal=causal))}
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        times["cudnn_fwd_ms"] = bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v,
                                                                                               is_causal=causal))
    out, lse = attention(q, k, v, causal=causal, return_lse=True)
    deterministic = args.deterministic or not backward_module.autograd_accumulates(q.shape[-1], k.shape[2])
    problem = validate_backward(q, k, v, out, dout, lse, causal, None, deterministic)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    dq_accum = None if deterministic else torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    dd = torch.empty(lse.shape, dtype=torch.float32, device=q.device)
    launches = launch_backward(q, k, v, out, dout, (lse * LOG2_E).contiguous(), dq, dk, dv, problem, dd, dq_accum)
    for script, arguments in launches:
        name = type(script).__name__
        times[f"{name}_ms"] = bench(lambda: script(*arguments))
    if dq_accum is not None and not getattr(launches[0][0], "zeroes_dq", False):  # a tree that zeroes it apart
        times["zero_dq_accum_ms"] = bench(dq_accum.zero_)
    return times


if __name__ == "__main__":
    sys.exit(main())
