"""What warpspec.profile()'s instrumentation costs: V3 at 8192^3 (fp16, 128 x 128 x 64 tiles, 2 and 6 stages), V6
(persistent, cooperative, 4 stages of 128 x 256 tiles) at the same size and the attention forward kernel (bf16, D
128, 2 x 16 heads of 8192 rows, not causal), the plain build against the instrumented build (every block that runs
on SM --sm records, up to --blocks; the others pay a comparison at their start and a predicate per site), timed in
one process. Each timed launch records: the slot counters carry the launch's tag, so every launch counts from zero.
Each record has room for the events its kernel's recorders make (``warpspec.timeline.sizing``), as a profile
session sizes it.

Each time is the house protocol of docs/performance.md (``warpspec.tune.bench.time_ms``: about 100 ms of warm-up,
then about 500 ms of calls, each after an L2 flush, the median), taken in three alternating rounds (plain,
instrumented, plain, ...) of which the median is kept, so clock drift over the run weighs on both alike. Then one
profiled call per schedule makes its timeline, written with ``warpspec.timeline.write`` (trace, chart, summary)
under --out, and one more records only the first block on the SM: where blocks are handed out as SMs free up, the
whole launch's time hides what recording costs the recorded SM (it just runs fewer blocks), and the SM's block
count in the two calls shows it. Exits non-zero when an overhead is above 5%.

    python benchmarks/profile_overhead.py [--size 8192] [--rounds 3] [--blocks 64] [--sm 0] [--out profile-overhead]
                                          [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

LIMIT = 0.05  # the instrumentation may cost at most 5% of the plain kernel's time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--blocks", type=int, default=64)
    parser.add_argument("--sm", type=int, default=0)
    parser.add_argument("--out", default="profile-overhead")
    parser.add_argument("--json", help="also write each kernel's times and its timeline's summary metrics here")
    options = parser.parse_args()

    import numpy as np
    import torch

    import support
    import warpspec
    from matmul_v3 import MatmulWGMMAV3
    from matmul_v6 import MatmulWGMMAV6
    from warpspec.cuda.driver import DeviceBuffer
    from warpspec.cuda.launch import compile_kernel, launch_kernel
    from warpspec.dtypes import bfloat16, int64
    from warpspec.frontend.kernel import bind_arguments
    from warpspec.ops.attention import DEFAULT_SCHEDULES
    from warpspec.ops.attention_kernel import LOG2_E, Attention
    from warpspec.timeline.instrument import PARAMETER
    from warpspec.runtime import kernel_for
    from warpspec.timeline import write
    from warpspec.timeline.summary import summarize
    from warpspec.timeline.gpu import buffer_words, instrumented, record_capacity
    from warpspec.tune.bench import time_ms

    size = options.size
    a, b, c = support.operands(size)
    gemm_args = (size, size, size, a, b, c)
    seq, heads, batch, head_dim = 8192, 16, 2, 128
    q, k, v, o = (torch.randn(batch * heads, seq, head_dim, device="cuda").to(torch.bfloat16) for _ in range(4))
    lse = torch.empty(batch * heads * seq, device="cuda")
    attention_args = (seq, seq, batch * heads, heads, 1, head_dim ** -0.5 * LOG2_E, q, k, v, o, lse)
    v3_schedules = [dict(num_stages=n, block_m=128, block_n=128, block_k=64) for n in (2, 6)]
    v6_schedule = dict(variant="cooperative", num_stages=4, block_m=128, block_n=256, epilogue_n=64)
    cases = [(f"V3, {s['num_stages']} stages", MatmulWGMMAV3(**s), s, gemm_args, 2.0 * size ** 3)
             for s in v3_schedules]
    cases.append(("V6, 4 stages 128x256", MatmulWGMMAV6(**v6_schedule), v6_schedule, gemm_args, 2.0 * size ** 3))
    cases.append(("attention D128", Attention(bfloat16, head_dim=head_dim, causal=False,
                                              **DEFAULT_SCHEDULES[head_dim]), dict(DEFAULT_SCHEDULES[head_dim]),
                  attention_args, 4.0 * batch * heads * seq * seq * head_dim))
    rows = []
    for label, script, schedule, args, flops in cases:
        runtime, compile_time = bind_arguments(type(script), args, {})
        kernel = kernel_for(script, compile_time)
        capacity, _ = record_capacity(kernel, runtime, options.blocks, options.sm)
        profiled = instrumented(kernel, options.blocks, capacity, options.sm)
        words = buffer_words(profiled)
        buffer = DeviceBuffer(8 * words)
        buffer.upload(np.zeros(words, np.uint64))
        recorded = dict(runtime, **{PARAMETER: buffer.array((words,), int64)})
        plain_built, profiled_built = compile_kernel(kernel), compile_kernel(profiled.kernel)
        plain, instrumented_ms = [], []
        for _ in range(options.rounds):
            plain.append(time_ms(lambda: launch_kernel(kernel, runtime, built=plain_built)))
            instrumented_ms.append(time_ms(lambda: launch_kernel(profiled.kernel, recorded, built=profiled_built)))
        row = dict(label=label, kernel=type(script).__name__, schedule=schedule, flops=flops,
                   plain=statistics.median(plain),
                   instrumented=statistics.median(instrumented_ms))
        row["overhead"] = row["instrumented"] / row["plain"] - 1
        rows.append(row)
        print(f"{label}: plain {row['plain']:.4f} ms, instrumented {row['instrumented']:.4f} ms "
              f"({100 * row['overhead']:+.2f}%)", flush=True)
        with warpspec.use_backend("cuda"), warpspec.profile(blocks=options.blocks, flops=flops,
                                                                  sm=options.sm) as session:
            script(*args)
        timeline = session.timelines[-1]
        # The whole launch's time hides what recording costs the recorded SM where blocks are handed out as SMs
        # free up: a slowed SM just runs fewer of them. Its block count with every block recorded, against one with
        # only its first block recorded, shows that cost.
        with warpspec.use_backend("cuda"), warpspec.profile(blocks=1, flops=flops, sm=options.sm) as first_only:
            script(*args)
        row["kernel_ms"] = timeline.kernel_ns / 1e6
        summary = summarize(timeline)
        row["metrics"], row["rule"] = summary.metrics, summary.rule()
        row["sm_blocks"] = timeline.sm_blocks
        row["sm_blocks_first_only"] = first_only.timelines[-1].sm_blocks
        out = os.path.join(options.out, label.split(",")[0].replace(" ", "-") + f"-{len(rows)}")
        write(timeline, out)
        print(f"  {len(timeline.events)} events, trace and summary written to {out}:")
        with open(os.path.join(out, "summary.txt")) as summary:
            print("    " + summary.read().strip().replace("\n", "\n    "), flush=True)

    print(f"\n{torch.cuda.get_device_name()}, V3 and V6 at {size}^3 fp16, attention at seq {seq}, up to "
          f"{options.blocks} blocks recorded on SM {options.sm}, median of {options.rounds} rounds")
    print(f"{'kernel':>22} {'plain ms':>9} {'instr. ms':>9} {'overhead':>8} {'TFLOP/s':>8} {'profile':>8} "
          f"{'SM blocks':>10}")
    for row in rows:
        print(f"{row['label']:>22} {row['plain']:9.4f} {row['instrumented']:9.4f} {100 * row['overhead']:+7.2f}% "
              f"{row['flops'] / row['plain'] / 1e9:8.0f} {row['flops'] / row['kernel_ms'] / 1e9:8.0f} "
              f"{row['sm_blocks']:>4} / {row['sm_blocks_first_only']:<4}")
    print(f"profile: the TFLOP/s the profiled call's timeline reports (its own timing of the plain build); SM "
          f"blocks: the blocks that ran on SM {options.sm} with each of them recorded / with only the first")
    if options.json:
        with open(options.json, "w") as out:
            json.dump(dict(device=torch.cuda.get_device_name(), size=size, sm=options.sm, kernels=rows), out, indent=1)
    worst = max(row["overhead"] for row in rows)
    if worst > LIMIT:
        sys.exit(f"the instrumentation costs {100 * worst:.1f}%, above the {100 * LIMIT:.0f}% limit")


if __name__ == "__main__":
    main()
