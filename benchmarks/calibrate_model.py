"""Fit the CPU timing model's parameters to measured V3 times, and report how well the model ranks and predicts.

    python benchmarks/calibrate_model.py [--data tests/data/v3_8192.json] [--fit [--rounds N]] [--write]
                                         [--breakdown tests/data/breakdown_h200.json]

The data is a list of measured V3 schedules (``num_stages``, ``block_m``, ``block_n``, ``block_k``, ``ms``, at
``size``³ fp16), as a bare list or under "schedules". Without ``--fit`` it prints, per schedule, the measured and
modeled times and the relative error, then the Spearman rank correlation over the 2-7 stage schedules and the
largest error. ``--fit`` searches the parameters named in ``FITTED`` (coordinate descent on multiplicative steps,
minimising the largest relative error with the rank correlation as a tie-breaker) starting from the current
h200.json; ``--write`` stores the result there. ``--breakdown`` compares the model's summaries of V3 and V6 with
the GPU's (a file ``benchmarks/profile_overhead.py --json`` wrote on the GPU): tensor cores' busy share,
stage occupancy and diagnosis rule, the model's of the instrumented build the GPU's come from (``model_launch``'s
``recorded``), beside the plain build's time; with ``--fit`` they count first.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT / "src"))

from matmul_v3 import MatmulWGMMAV3  # noqa: E402
from matmul_v6 import MatmulWGMMAV6  # noqa: E402

from warpspec.frontend.kernel import bind_arguments  # noqa: E402
from warpspec.runtime import kernel_for  # noqa: E402
from warpspec.timeline.model import H200, load_parameters, model_launch  # noqa: E402
from warpspec.timeline.summary import summarize  # noqa: E402

DATA = ROOT / "tests" / "data" / "v3_8192.json"
#: The parameters --fit searches; the others are datasheet figures or too small to matter at 8192³.
FITTED = ("load_bandwidth_gbps", "memory_latency_ns", "sm_port_gbps", "memory_burst_ns", "wake_ns", "wgmma_latency_ns",
          "statement_ns", "wgmma_issue_ns", "tma_issue_ns", "wait_ns", "arrive_ns",
          ("wgmma_tflops_16bit", "64"), ("wgmma_tflops_16bit", "128"), ("wgmma_tflops_16bit", "256"))


def measurements(path: str | Path = DATA) -> list[dict]:
    """The measured schedules of a calibration file."""
    data = json.loads(Path(path).read_text())
    return data["schedules"] if isinstance(data, dict) else data


def modeled_ms(row: dict, parameters: dict) -> float:
    """The model's time in ms for one measured schedule of V3."""
    schedule = {k: row[k] for k in ("num_stages", "block_m", "block_n", "block_k")}
    script = MatmulWGMMAV3().instantiate(schedule)
    size = row.get("size", 8192)
    runtime, compile_time = bind_arguments(type(script), (), dict(m_size=size, n_size=size, k_size=size,
                                                                  a_ptr=None, b_ptr=None, c_ptr=None))
    return model_launch(kernel_for(script, compile_time), runtime, parameters).kernel_ns / 1e6


def ranks(values: list[float]) -> list[float]:
    """1-based ranks, ties sharing their mean rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    result = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            result[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return result


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation of two equally long lists (Pearson's of their ranks)."""
    ra, rb = ranks(a), ranks(b)
    mean = (len(a) + 1) / 2
    cov = sum((x - mean) * (y - mean) for x, y in zip(ra, rb))
    var = (sum((x - mean) ** 2 for x in ra) * sum((y - mean) ** 2 for y in rb)) ** 0.5
    return cov / var if var else 0.0


def evaluate(rows: list[dict], parameters: dict) -> tuple[float, float, list[float]]:
    """(Spearman over the 2-7 stage schedules, largest relative error, modeled ms per row)."""
    modeled = [modeled_ms(row, parameters) for row in rows]
    ranked = [i for i, row in enumerate(rows) if 2 <= row["num_stages"] <= 7]
    rho = spearman([rows[i]["ms"] for i in ranked], [modeled[i] for i in ranked])
    worst = max(abs(m - row["ms"]) / row["ms"] for m, row in zip(modeled, rows))
    return rho, worst, modeled


#: The kernels a GPU breakdown file (``benchmarks/profile_overhead.py --json``) may name, and what item of each
#: summary the model must come close to: the tensor cores' busy share within 10 points, the stage occupancy within
#: one stage, and the same diagnosis rule.
BREAKDOWN_KERNELS = {"MatmulWGMMAV3": MatmulWGMMAV3, "MatmulWGMMAV6": MatmulWGMMAV6}
BUSY_POINTS, OCCUPANCY_STAGES = 0.10, 1.0


def breakdown_rows(path: str | Path) -> list[dict]:
    """The kernels of a GPU breakdown file that the model can run (the matmuls), each with its schedule, size,
    measured time and summary metrics."""
    data = json.loads(Path(path).read_text())
    return [dict(row, size=data["size"]) for row in data["kernels"] if row["kernel"] in BREAKDOWN_KERNELS]


def modeled_breakdown(row: dict, parameters: dict) -> tuple[dict, int, float]:
    """The model's summary metrics and diagnosis rule for one kernel of a breakdown file, as recorded (the GPU's
    summary is of its instrumented build, whose timestamps and stores slow the recorded SM), and its time in ms
    (the plain build's, as the file's time is)."""
    script = BREAKDOWN_KERNELS[row["kernel"]]().instantiate(row["schedule"])
    size = row["size"]
    runtime, compile_time = bind_arguments(type(script), (), dict(m_size=size, n_size=size, k_size=size,
                                                                  a_ptr=None, b_ptr=None, c_ptr=None))
    kernel = kernel_for(script, compile_time)
    summary = summarize(model_launch(kernel, runtime, parameters, recorded=True))
    return summary.metrics, summary.rule(), model_launch(kernel, runtime, parameters).kernel_ns / 1e6


def compare_breakdowns(rows: list[dict], parameters: dict) -> list[dict]:
    """For each kernel of a breakdown file: the GPU's and the model's busy share, occupancy and rule, and whether
    the model is within the bounds."""
    out = []
    for row in rows:
        metrics, rule, ms = modeled_breakdown(row, parameters)
        gpu = row["metrics"]
        busy = abs(metrics["tensor_busy"] - gpu["tensor_busy"])
        occupancy = abs(metrics["occupancy"] - gpu["occupancy"])
        out.append(dict(label=row["label"], gpu=gpu, gpu_rule=row["rule"], gpu_ms=row["plain"], model=metrics,
                        model_rule=rule, model_ms=ms, busy_off=busy, occupancy_off=occupancy,
                        ok=busy <= BUSY_POINTS and occupancy <= OCCUPANCY_STAGES and rule == row["rule"]))
    return out


def print_breakdowns(compared: list[dict]) -> None:
    """The GPU's and the model's breakdown side by side."""
    print(f"{'kernel':>22} {'ms gpu/model':>14} {'busy gpu/model':>15} {'stages full':>12} "
          f"{'cons. full wait':>16} {'prod. empty wait':>17} {'rule':>5}")
    for c in compared:
        g, m = c["gpu"], c["model"]
        print(f"{c['label']:>22} {c['gpu_ms']:6.3f}/{c['model_ms']:<7.3f} {g['tensor_busy']:6.0%}/{m['tensor_busy']:<8.0%}"
              f" {g['occupancy']:5.2f}/{m['occupancy']:<6.2f} {g['consumers_full_wait']:7.0%}/"
              f"{m['consumers_full_wait']:<8.0%} {g['producers_empty_wait']:8.0%}/{m['producers_empty_wait']:<8.0%}"
              f" {c['gpu_rule']}/{c['model_rule']} {'ok' if c['ok'] else 'OFF'}")


def _get(parameters: dict, key):
    return parameters[key[0]][key[1]] if isinstance(key, tuple) else parameters[key]


def _set(parameters: dict, key, value) -> dict:
    result = json.loads(json.dumps(parameters))
    if isinstance(key, tuple):
        result[key[0]][key[1]] = value
    else:
        result[key] = value
    return result


def fit(rows: list[dict], parameters: dict, rounds: int, breakdowns: list[dict] = ()) -> dict:
    """Coordinate descent over ``FITTED``: each round tries each parameter scaled by a few factors and keeps the
    best (lowest largest error; higher Spearman breaks ties). With ``breakdowns`` (a GPU breakdown file's rows),
    first the fewest kernels off their bounds, then the largest excess over a bound counts before the time."""
    def score(p):
        rho, worst, _ = evaluate(rows, p)
        if not breakdowns:
            return (round(worst, 3), -rho)
        compared = compare_breakdowns(breakdowns, p)
        excess = max(max(c["busy_off"] / BUSY_POINTS, c["occupancy_off"] / OCCUPANCY_STAGES) for c in compared)
        return (sum(not c["ok"] for c in compared), round(max(excess, 1.0), 2), round(worst, 3), -rho)

    best, best_score = parameters, score(parameters)
    for step in [0.3, 0.15, 0.07][:rounds]:
        for key in FITTED:
            for factor in (1 - step, 1 + step):
                trial = _set(best, key, round(_get(best, key) * factor, 2))
                trial_score = score(trial)
                if trial_score < best_score:
                    best, best_score = trial, trial_score
                    print(f"  {key} -> {_get(best, key)}: score {best_score}", flush=True)
    return best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--fit", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--parameters", help="start from this parameter file instead of h200.json")
    parser.add_argument("--breakdown", help="a GPU breakdown file (benchmarks/profile_overhead.py --json): compare "
                                            "the model's busy share, occupancy and diagnosis with it (and fit them)")
    args = parser.parse_args(argv)
    rows = measurements(args.data)
    breakdowns = breakdown_rows(args.breakdown) if args.breakdown else []
    parameters = load_parameters(args.parameters)
    if args.fit:
        parameters = fit(rows, parameters, args.rounds, breakdowns)
    rho, worst, modeled = evaluate(rows, parameters)
    print(f"{'stages':>6} {'tile':>10} {'measured ms':>12} {'modeled ms':>11} {'error':>7}")
    for row, m in zip(rows, modeled):
        tile = f"{row['block_m']}x{row['block_n']}x{row['block_k']}"
        print(f"{row['num_stages']:>6} {tile:>10} {row['ms']:>12.3f} {m:>11.3f} {(m - row['ms']) / row['ms']:>+7.1%}")
    print(f"Spearman (2-7 stages): {rho:.3f}; largest error: {worst:.1%}")
    if breakdowns:
        print_breakdowns(compare_breakdowns(breakdowns, parameters))
    if args.write:
        H200.write_text(json.dumps(parameters, indent=2) + "\n")
        print(f"wrote {os.path.relpath(H200)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
