"""The GPU benchmarks' plumbing without a GPU: ``--dry-run`` of benchmarks/llm_shapes.py and benchmarks/grouped.py
lists the done-when shapes and checks ops.matmul (ops.grouped_matmul) at a stand-in of each on the emulator,
benchmarks/gemm_families.py checks both of ops.matmul's kernel families at stand-ins of its shapes,
grouped.py's ``--sweep`` runs every schedule of the grouped kernel there, benchmarks/grouped_experts.py checks its
dense and grouped calls and writes their timelines, and benchmarks/attention_decode.py checks
ops.attention and ops.attention_paged (``--pages``) at its tiny shapes, benchmarks/attention_varlen.py checks every
sequence of a packed call, benchmarks/attention_timeline.py checks and records the persistent attention kernel
on the CPU timing model, benchmarks/torch_kernels.py prints its table from made-up kernel events, and
benchmarks/pinned_schedules.py checks pinned schedules of both ops.matmul families (or says why one does not
build), benchmarks/attention_backward.py checks the gradients under a replaced backward schedule, and
benchmarks/attention.py refuses a consumer count it cannot build and sums its ratios to cuDNN up."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def dry_run(script, *arguments):
    environment = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    return subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", script), "--dry-run", *arguments],
                          capture_output=True, text=True, timeout=600, env=environment)


def test_llm_shapes_lists_the_shapes_and_checks_their_stand_ins():
    found = dry_run("llm_shapes.py")
    assert found.returncode == 0, found.stderr[-2000:]
    lines = found.stdout.splitlines()
    assert lines[0].startswith("80 shapes: bfloat16 M=1 4096x4096")  # 2 dtypes x 5 weights x 8 M values
    assert "bfloat16 M=1: geometric mean 1.000x, lowest 1.000x over 5 weights" in lines
    assert lines[-1] == "dry run: 80 stand-ins checked on the emulator (times are placeholders)"


def test_torch_kernels_sums_each_sides_medians_into_its_table():
    found = dry_run("torch_kernels.py", "--m", "32,64", "--weights", "1024x4096")
    assert found.returncode == 0, found.stderr[-2000:]
    lines = found.stdout.splitlines()
    assert lines[0] == "2 linear shapes; attention: not asked"
    # torch's one kernel ran at 1.0 and 1.1 µs (median 1.05), ours at 1.2 twice: 1.05 / 1.2 = 0.875
    assert lines[1] == "M=32 1024x4096: torch 1.1 µs, ours 1.2 µs (torch / ours 0.875), read floor 0.5"
    assert lines[2].split() == ["torch", "1.1", "µs", "×1", "gemm_kernel"]
    assert lines[3].split() == ["ours", "1.2", "µs", "×1", "SplitGemm"]
    assert lines[4].startswith("M=64 1024x4096: ")


def test_pinned_schedules_checks_each_schedule_or_says_why_it_does_not_build():
    found = dry_run("pinned_schedules.py", "--shapes", "64x4096x4096",
                    "--schedule", "swap_ab=0,block_m=64,block_n=32,split_k=2,num_stages=16",
                    "--schedule", "block_m=128,block_n=176,num_stages=3,persistent=1,stream_k=1",
                    "--schedule", "block_m=128,block_n=224,num_stages=4,persistent=1,stream_k=0")
    assert found.returncode == 0, found.stderr[-2000:]
    lines = found.stdout.splitlines()
    assert lines[0].startswith("64x4096x4096 swap_ab=0,block_m=64,block_n=32,split_k=2,num_stages=16: checked at "
                               "1x64x512 (error ")
    assert lines[1].startswith("64x4096x4096 block_m=128,block_n=176,num_stages=3,persistent=1,stream_k=1: checked ")
    assert lines[2].startswith("64x4096x4096 block_m=128,block_n=224,num_stages=4,persistent=1,stream_k=0: does not "
                               "build: ") and "at most 231424 fit in a block on sm90a" in lines[2]
    bad = dry_run("pinned_schedules.py", "--shapes", "64x64x64", "--schedule", "block_m=64,split_k=2")
    assert bad.returncode == 2 and "give exactly block_m, block_n, num_stages, split_k, swap_ab" in bad.stderr


def test_gemm_families_checks_both_families_at_each_stand_in():
    found = dry_run("gemm_families.py", "--shapes", "1024x1024x4096,256x14336x4096")
    assert found.returncode == 0, found.stderr[-2000:]
    assert found.stdout.splitlines() == ["dry run: 2 stand-ins checked with both families on the emulator"]


def test_grouped_checks_stand_ins_of_balanced_and_skewed_groups():
    found = dry_run("grouped.py", "--experts", "8,64", "--tokens", "1024")
    assert found.returncode == 0, found.stderr[-2000:]
    assert found.stdout.splitlines() == ["8 shapes", "dry run: 8 stand-ins checked on the emulator"]


def test_grouped_sweep_checks_every_schedule_of_the_kernel(tmp_path):
    """Every schedule of the space, and with ``--depths`` every tiling at 8 stages where that fits in shared memory
    (64 × 128 does, 128 × 256 does not)."""
    table = tmp_path / "sweep.json"
    found = dry_run("grouped.py", "--experts", "8", "--tokens", "1024", "--widths", "1536", "--sweep", "--depths", "8",
                    "--json", str(table))
    assert found.returncode == 0, found.stderr[-2000:]
    assert found.stdout.splitlines() == ["2 shapes", "dry run: 2 stand-ins checked on the emulator"]
    for row in json.loads(table.read_text()):
        assert {"64x128/5/split8", "64x128/8/split8", "128x256/3/split1"} <= set(row["sweep"])
        assert "128x256/8/split1" not in row["sweep"]
    refused = dry_run("grouped.py", "--depths", "8")
    assert refused.returncode == 2 and "--depths extends --sweep" in refused.stderr


def test_grouped_experts_checks_the_dense_and_grouped_calls_and_writes_their_timelines(tmp_path):
    found = dry_run("grouped_experts.py", "--experts", "1,8", "--profile", str(tmp_path))
    assert found.returncode == 0, found.stderr[-2000:]
    lines = found.stdout.splitlines()
    assert lines[0] == "dry run: 3 calls checked on the emulator"
    assert len(lines) == 5 and all(line.startswith("timeline of ") for line in lines[1:])  # 2 expert counts x 2 SMs
    summary = (tmp_path / "experts8_sm1" / "summary.txt").read_text()
    assert summary.startswith("GroupedGemmBF16 ") and "(CPU timing model)" in summary


def test_attention_decode_checks_dense_and_paged_decode():
    found = dry_run("attention_decode.py", "--pages", "16,64")
    assert found.returncode == 0, found.stderr[-2000:]
    rows = [line for line in found.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 2  # S_q 1 and 4
    assert all("'paged16_error'" in row and "'paged64_error'" in row for row in rows)


def test_attention_varlen_checks_every_sequence_of_the_packed_call():
    found = dry_run("attention_varlen.py")
    assert found.returncode == 0, found.stderr[-2000:]
    rows = [line for line in found.stdout.splitlines() if line.startswith("{")]
    assert [row.split(",")[0] for row in rows] == ["{'causal': False", "{'causal': True"]
    assert all(float(row.split("'error': ")[1].rstrip("}")) < 4e-2 for row in rows)


def test_decode_fold_runs_every_variant_and_the_emulator_reports_the_unordered_one():
    found = dry_run("decode_fold.py")
    assert found.returncode == 0, found.stderr[-2000:]
    assert found.stdout.splitlines() == ["dry run: 4 variants ran on the emulator (no-count's unordered reads reported "
                                         "as a race), the kernel's output checked"]


def test_decode_fold_checks_the_kernel_at_each_other_schedule():
    found = dry_run("decode_fold.py", "--schedules", "64:4,128:2")
    assert found.returncode == 0, found.stderr[-2000:]
    assert found.stdout.splitlines()[-1].endswith("the kernel's output checked at 2 more schedules")


def test_attention_timeline_checks_and_records_both_causal_modes(tmp_path):
    found = dry_run("attention_timeline.py", "--out", str(tmp_path))
    assert found.returncode == 0, found.stderr[-2000:]
    headers = [line for line in found.stdout.splitlines() if line.startswith("===")]
    assert [header.split(", ")[4] for header in headers] == ["causal=True", "causal=False"]
    for causal in (True, False):
        summary = (tmp_path / f"causal-{causal}" / "summary.txt").read_text()
        assert summary.startswith("AttentionPersistentF16") and "tensor cores busy:" in summary
        assert (tmp_path / f"causal-{causal}" / "timeline.png").stat().st_size > 0


def test_attention_backward_checks_gradients_under_a_replaced_schedule_and_names_a_bad_entry():
    found = dry_run("attention_backward.py", "--head-dims", "64", "--dtypes", "bf16", "--causal", "yes",
                    "--schedule", "64:q.block_n=64", "--schedule", "64:kv.num_stages=2",
                    "--schedule", "64:fused.num_stages=3", "--schedule", "64:fused.transposed=1")
    assert found.returncode == 0, found.stderr[-2000:]
    (line,) = found.stdout.splitlines()
    assert "'schedule': {'kv': {'block_m': 64, 'num_stages': 2}, 'kvdq': {'block_m': 64, 'num_stages': 2}, " \
           "'fused': {'num_stages': 3, 'transposed': True}, 'q': {'block_n': 64, 'num_stages': 2}}, " \
           "'accumulating': True" in line and "'errors'" in line and "FAILED" not in line
    refused = dry_run("attention_backward.py", "--schedule", "64:q.stages=3")
    assert refused.returncode == 2
    assert "--schedule '64:q.stages=3': expected D:KERNEL.PARAM=VALUE naming a shipped entry" in refused.stderr
    refused = dry_run("attention_backward.py", "--accumulating-dims", "64,x")
    assert refused.returncode == 2 and "--accumulating-dims takes comma-separated head dims, got '64,x'" in \
        refused.stderr
    refused = dry_run("attention_backward.py", "--schedule", "64:fused.transposed=2")
    assert refused.returncode == 2
    assert "--schedule '64:fused.transposed=2'" in refused.stderr and "transposed is a flag: 0 or 1" in refused.stderr


@pytest.mark.parametrize("value, message", [("64:4", "the consumer warpgroups must be 2 or 3, got 4"),
                                            ("64", "expected D:N (a head dim and 2 or 3), got '64'")])
def test_attention_refuses_a_consumer_count_it_cannot_build(value, message):
    """benchmarks/attention.py's ``--consumers D:N`` is checked before anything runs (no GPU needed to refuse)."""
    environment = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    found = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "attention.py"), "--consumers", value],
                           capture_output=True, text=True, timeout=120, env=environment)
    assert found.returncode == 2 and f"argument --consumers: {message}" in found.stderr, found.stderr


@pytest.mark.parametrize("args, message", [
    (["--persistent", "--window-waves", "1,0"], "argument --window-waves: the windows' waves must be positive, got '1,0'"),
    (["--persistent", "--window-waves", "one"], "argument --window-waves: expected positive numbers of waves"),
    (["--window-waves", "1"], "--window-waves times the persistent kernel's walk: give --persistent too")])
def test_attention_refuses_window_waves_it_cannot_time(args, message):
    """benchmarks/attention.py's ``--window-waves`` (the persistent walk's windows) is checked before anything
    runs."""
    environment = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    found = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "attention.py"), *args],
                           capture_output=True, text=True, timeout=120, env=environment)
    assert found.returncode == 2 and message in found.stderr, found.stderr


def test_attention_summarizes_its_ratios_to_cudnn():
    """benchmarks/attention.py's last lines: geometric mean, lowest ratio and the points below 0.90."""
    sys.path.insert(0, ROOT)
    try:
        from benchmarks.attention import ratio_summary
    finally:
        sys.path.remove(ROOT)
    assert ratio_summary([0.8, 1.25, 1.0]) == ("geometric mean 1.000x cuDNN over 3 points, lowest 0.800x, "
                                               "1 below 0.90x")
