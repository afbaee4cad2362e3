"""Host time per call on the GPU, in one process: warpspec Scripts (pinned and autotuned), a warpspec custom op
called eagerly and under torch.compile, warpspec.ops.matmul when it exists, torch.mm and a trivial Triton kernel
(when Triton is installed); then V4 at 2048^3 called eagerly against its CUDA-graph replay.

Each host time is the median of 25 loops of 200 calls at 128 x 128 x 64 (fp16): what a call costs before the GPU sees
it (``warpspec.tune.bench.host_us_per_call``; a loop short enough never to fill the GPU's launch queue).

    python benchmarks/launch.py [--calls 200] [--json out.json] [--breakdown]

``--breakdown`` also times the parts of the pinned call one by one (the Script call's dispatch, the plan entry,
the torch tensor reads, the device/stream/context queries and the driver's launch alone), and the layers of an
``ops.matmul`` call at 2048^3 (the call, the custom op's dispatch, which a plain eager call skips, the op's
implementation, the signature lookup, the arguments and the pinned Script call it ends in).

Prints a Markdown table last (the form docs/performance.md uses); writes every number to the JSON file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))

import torch  # noqa: E402

import warpspec  # noqa: E402
import warpspec.torch_ops  # noqa: E402
from warpspec.tune.bench import gpu_ms_per_call, host_us_per_call  # noqa: E402
from matmul_v3 import MatmulWGMMAV3  # noqa: E402
from matmul_v4 import MatmulWGMMAV4  # noqa: E402

M, N, K = 128, 128, 64
PINNED = dict(num_stages=2, block_m=128, block_n=128, block_k=64)


def host_us(call, calls: int) -> float:
    """Host time per call, in microseconds (``warpspec.tune.bench.host_us_per_call``: median of 5 loops)."""
    return host_us_per_call(call, torch.cuda.synchronize, calls)


def triton_trivial():
    """A one-block Triton kernel that adds 1 to 128 floats, or None without Triton."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def add_one(x, n, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(x + offsets, tl.load(x + offsets, mask=mask) + 1, mask=mask)

    x = torch.zeros(128, device="cuda")
    return lambda: add_one[(1,)](x, 128, BLOCK=128)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--breakdown", action="store_true", help="time the parts of the pinned call too")
    options = parser.parse_args()
    warpspec.set_backend("cuda")
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(N, K, device="cuda", dtype=torch.float16)
    c = torch.empty(M, N, device="cuda", dtype=torch.float16)
    pinned, tuned = MatmulWGMMAV3(**PINNED), MatmulWGMMAV3()
    tuned(M, N, K, a, b, c)  # tunes before anything is timed

    @warpspec.torch_ops.custom_op("warpspec_benchmarks::matmul_v3")
    def matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = x.new_empty((x.shape[0], y.shape[0]))
        pinned(x.shape[0], y.shape[0], x.shape[1], x, y, out)
        return out

    compiled = torch.compile(lambda x, y: matmul(x, y), fullgraph=True)
    rows = [
        ("warpspec V3 pinned (2, 128, 128, 64)", lambda: pinned(M, N, K, a, b, c)),
        ("warpspec V3 autotuned, after tuning", lambda: tuned(M, N, K, a, b, c)),
        ("warpspec custom op, eager (allocates C)", lambda: matmul(a, b)),
        ("warpspec custom op, torch.compile(fullgraph=True)", lambda: compiled(a, b)),
    ]
    try:
        from warpspec.ops import matmul as ops_matmul
    except ImportError:
        ops_matmul = None
    if ops_matmul is not None:
        rows.append(("warpspec.ops.matmul(a, b.T) (allocates C)", lambda: ops_matmul(a, b.T)))
    compiled_torch = torch.compile(lambda x, y: x @ y.T, fullgraph=True)
    rows += [("torch.mm(a, b.T, out=c)", lambda: torch.mm(a, b.T, out=c)), ("torch a @ b.T", lambda: a @ b.T),
             ("torch a @ b.T, torch.compile(fullgraph=True)", lambda: compiled_torch(a, b))]
    trivial = triton_trivial()
    if trivial is not None:
        rows.append(("Triton, a trivial one-block kernel", trivial))
    results = {}
    for label, call in rows:
        results[label] = host_us(call, options.calls)
        print(f"{label}: {results[label]:.1f} us", flush=True)
    if options.breakdown:
        for label, value in breakdown(pinned, (M, N, K, a, b, c), options.calls).items():
            results[f"pinned call part: {label}"] = value
            print(f"pinned call part: {label}: {value:.2f} us", flush=True)
        for label, value in ops_breakdown(options.calls).items():
            results[f"ops.matmul 2048^3 part: {label}"] = value
            print(f"ops.matmul 2048^3 part: {label}: {value:.2f} us", flush=True)
    eager, graph = eager_and_graph()
    print(f"\nHost time per call, {options.calls} calls in a loop, median of 25 loops, fp16 {M}x{N}x{K}:\n")
    print("| call | host us per call |\n|---|---:|")
    for label, value in results.items():
        print(f"| {label} | {value:.1f} |")
    flops = 2.0 * 2048 ** 3
    print(f"\nV4 (autotuned) at 2048^3: eager {flops / eager / 1e9:.0f} TFLOP/s, CUDA-graph replay "
          f"{flops / graph / 1e9:.0f} TFLOP/s (eager at {graph / eager:.3f} of the replay's speed)")
    if options.json:
        with open(options.json, "w") as out:
            json.dump({"host_us": results, "v4_2048_eager_ms": eager, "v4_2048_graph_ms": graph}, out, indent=1)


def breakdown(script, args: tuple, calls: int) -> dict[str, float]:
    """Host microseconds per call of the parts of ``script(*args)`` through its plan entry, each timed alone."""
    entry = script.__dict__["_warpspec_calls"][0]
    space = entry.__globals__  # the plan's namespace: what the generated entry calls
    tensors = [value for value in args if isinstance(value, torch.Tensor)]
    launch, config, function, params = space["_launch"], space["_CFG"], space["_FN"], space["_PARAMS"]
    ctx_get, ctx_ref = space["_ctx_get"], space["_ctx_ref"]
    get_device, get_stream = space["_get_device"], space["_get_stream"]

    def reads():
        for t in tensors:
            t.__class__, t.dtype, t.get_device(), t.shape, t.stride(), t.data_ptr()

    parts = {
        "the whole call": lambda: script(*args),
        "the plan entry alone": lambda: entry(args),
        "torch tensor reads (class, dtype, device, shape, strides, pointer)": reads,
        "current device and stream": lambda: get_stream(get_device()),
        "cuCtxGetCurrent": lambda: ctx_get(ctx_ref),
        "cuLaunchKernelEx alone": lambda: launch(config, function, params, None),
    }
    return {label: host_us(part, calls) for label, part in parts.items()}


def ops_breakdown(calls: int, size: int = 2048) -> dict[str, float]:
    """Host microseconds per call of the layers of ``ops.matmul(a, w.T, out=c)`` (fp16, ``size``^3), outermost
    first, each timed alone, and of a custom op that does nothing (what PyTorch's dispatch costs by itself)."""
    import importlib

    module = importlib.import_module("warpspec.ops.matmul")
    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    w_t = torch.randn(size, size, device="cuda", dtype=torch.float16).T
    c = torch.empty(size, size, device="cuda", dtype=torch.float16)
    module.matmul(a, w_t, out=c)  # builds the kernel and sets the signature's launcher
    found = module.signature(a, w_t, None, None, c, None)
    script, num_sms, (elements, flag_count) = found.launcher
    work = module.workspace_like(c, elements, flag_count) if elements else module.placeholders_like(c)
    args = found.layout.arguments(a, w_t, c, None, None, work, num_sms)
    op = module._torch_op()
    nothing = warpspec.torch_ops.custom_op("warpspec_benchmarks::nothing", lambda x: None, schema="(Tensor x) -> ()")
    parts = {
        "ops.matmul(a, w.T, out=c)": lambda: module.matmul(a, w_t, out=c),
        "ops.matmul(a, w.T) (allocates C)": lambda: module.matmul(a, w_t),
        "the custom op called directly": lambda: op(a, w_t, c, None, None, ""),
        "a custom op that does nothing": lambda: nothing(a),
        "the op's implementation, not through torch": lambda: module._op_implementation(a, w_t, c, None, None, ""),
        "the check that the dispatcher may be skipped": lambda: warpspec.torch_ops.dispatch_is_plain(a, w_t, c, None, None),
        "run(signature): checks, arguments, the pinned call": lambda: module.run(found, a, w_t, c, None, None),
        "the pinned Script call alone": lambda: script(*args),
        "signature lookup": lambda: module.signature(a, w_t, None, None, c, None),
        "Layout.arguments": lambda: found.layout.arguments(a, w_t, c, None, None, work, num_sms),
        "torch.empty of C": lambda: torch.empty((size, size), dtype=torch.float16, device="cuda"),
        "runtime.get_backend": warpspec.runtime.get_backend,
    }
    return {label: host_us(part, calls) for label, part in parts.items()}


def eager_and_graph(size: int = 2048, calls: int = 200) -> tuple[float, float]:
    """Milliseconds per call of the autotuned V4 at ``size``^3: ``calls`` eager calls in a row, and the same
    number replayed from a CUDA graph of 20 calls (CUDA events around all of them; median of 5)."""
    kernel = MatmulWGMMAV4()
    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    c = torch.empty(size, size, device="cuda", dtype=torch.float16)
    kernel(size, size, size, a, b, c)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        kernel(size, size, size, a, b, c)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(20):
            kernel(size, size, size, a, b, c)

    eager = gpu_ms_per_call(lambda: [kernel(size, size, size, a, b, c) for _ in range(calls)], calls)
    graph_ms = gpu_ms_per_call(lambda: [graph.replay() for _ in range(calls // 20)], calls)
    return eager, graph_ms


if __name__ == "__main__":
    main()
