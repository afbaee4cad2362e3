"""``warpspec timeline`` through ``warpspec.cli.main``: the files it writes, the summary it prints, its errors."""

import json
import sys
from pathlib import Path

from warpspec.cli import main

ROOT = Path(__file__).parents[2]
V3 = f"{ROOT / 'examples' / 'matmul_v3.py'}:MatmulWGMMAV3"
SIZES = ["m_size=512", "n_size=512", "k_size=512"]


def timeline(capsys, *argv):
    code = main(["timeline", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_writes_trace_chart_and_summary(capsys, tmp_path):
    out = tmp_path / "v3"
    code, text, err = timeline(capsys, V3, *SIZES, "--schedule", "num_stages=3,block_m=128,block_n=128,block_k=64",
                               "--out", str(out))
    assert code == 0, err
    assert text.startswith("MatmulWGMMAV3 k_size=512 n_size=512 block_k=64 block_m=128 block_n=128 num_stages=3 "
                           "(CPU timing model)\nmodeled kernel time: ")
    assert text.endswith(f"wrote {out / 'trace.json'}, {out / 'timeline.png'} and {out / 'summary.txt'}\n")
    assert (out / "summary.txt").read_text() in text
    assert json.loads((out / "trace.json").read_text())["otherData"]["schedule"]["num_stages"] == "3"
    assert (out / "timeline.png").read_bytes().startswith(b"\x89PNG")


def test_first_schedule_that_compiles_without_schedule(capsys, tmp_path):
    code, text, err = timeline(capsys, V3, *SIZES, "--out", str(tmp_path))
    assert code == 0, err
    assert " num_stages=2 (CPU timing model)" in text.splitlines()[0]


def test_schedule_that_does_not_compile_is_a_fail_line(capsys, tmp_path):
    code, text, err = timeline(capsys, V3, *SIZES, "--schedule", "num_stages=7,block_m=256,block_n=256,block_k=64",
                               "--out", str(tmp_path))
    assert code == 1
    assert text.startswith("FAIL  num_stages=7 block_m=256 block_n=256 block_k=64  CompileError: ")
    assert "shared memory" in text
    assert not (tmp_path / "trace.json").exists()


def test_missing_argument_and_unknown_schedule_are_usage_errors(capsys, tmp_path):
    code, _, err = timeline(capsys, V3, "m_size=512", "--out", str(tmp_path))
    assert code == 2 and "missing kernel argument(s) n_size, k_size" in err
    code, _, err = timeline(capsys, V3, *SIZES, "--schedule", "num_stages=2", "--out", str(tmp_path))
    assert code == 2 and "--schedule must set exactly the tuned parameters" in err


def test_cuda_backend_records_a_kernel_the_model_cannot_run(capsys, tmp_path, monkeypatch):
    """A cluster kernel: the model refuses it (it runs one SM's blocks), yet the GPU recording is written; only
    the FLOP count, which the model supplies, is missing."""
    import warpspec.cli.timeline
    from warpspec.timeline.events import Event, Timeline

    recorded = Timeline(kernel="ClusterStream", source="gpu", schedule={}, kernel_ns=1000.0, roles=["group"],
                        events=[Event((0, 0, 0), "group", "wait", "wait full[0]", 0.0, 10.0, "k.py:1")])
    monkeypatch.setattr(warpspec.cli.timeline, "_gpu_timeline", lambda *args: recorded)
    monkeypatch.setattr(warpspec.cli.timeline, "_check_gpu", lambda: None)  # as on a machine with one
    target = f"{ROOT / 'tests' / 'kernels' / 'cluster_kernels.py'}:ClusterStream"
    with_model = timeline(capsys, target, "m_size=64", "n_size=128", "--out", str(tmp_path / "model"))
    assert with_model[0] == 1 and "does not model thread-block clusters" in with_model[2]
    code, text, err = timeline(capsys, target, "m_size=64", "n_size=128", "--backend", "cuda", "--out", str(tmp_path / "gpu"))
    assert code == 0, err
    assert "measured kernel time: 1.0 us" in text and recorded.flops is None
    assert (tmp_path / "gpu" / "timeline.png").exists()


def test_docs_quote_the_command_as_it_prints(capsys, tmp_path, monkeypatch):
    """docs/timeline.md's example output is what the command prints (with its --out folder)."""
    doc = (ROOT / "docs" / "timeline.md").read_text()
    block = doc.split("```\n$ warpspec timeline ", 1)[1].split("```", 1)[0]
    command, _, expected = block.partition("\n      ")[2].partition("\n")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    argv = ["examples/matmul_v3.py:MatmulWGMMAV3", "m_size=8192", "n_size=8192", "k_size=8192"] + command.split()
    code, text, err = timeline(capsys, *argv)
    assert code == 0, err
    assert text == expected


def test_without_matplotlib_the_chart_is_a_usage_error(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    code, _, err = timeline(capsys, V3, *SIZES, "--out", str(tmp_path))
    assert code == 2
    assert "the timeline chart needs matplotlib: pip install 'warpspec[timeline]'" in err


def test_a_bad_window_is_a_usage_error_naming_the_option(capsys, tmp_path):
    code, _, err = timeline(capsys, V3, *SIZES, "--window", "5:2", "--out", str(tmp_path))
    assert code == 2
    assert "--window must be 'all', a number of waves (1, 2, ...) or START:END in microseconds with START < END, " \
           "got '5:2'" in err
    assert not (tmp_path / "trace.json").exists()


def test_blocks_below_one_is_a_usage_error_naming_the_option(capsys, tmp_path):
    """A recording of no block is refused by the command line, before any kernel is loaded or run."""
    code, _, err = timeline(capsys, V3, *SIZES, "--backend", "cuda", "--blocks", "0", "--out", str(tmp_path))
    assert code == 2
    assert "--blocks: expected a positive integer, got 0" in err
    assert not (tmp_path / "trace.json").exists()


PINNED = ["--schedule", "num_stages=3,block_m=128,block_n=128,block_k=64"]


def occupancy_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("blocks per SM: "))


def test_timeline_reports_where_its_register_count_comes_from(capsys, tmp_path):
    """Without --registers the model's occupancy uses ptxas's count of the kernel's NVRTC build; --registers N
    replaces it (255 leaves room for one block per SM)."""
    from warpspec.cuda.launch import compile_kernel
    from warpspec.cuda.sass import parse_ptxas_log
    from warpspec.runtime import kernel_for

    sys.path.insert(0, str(ROOT / "examples"))
    from matmul_v3 import MatmulWGMMAV3

    built = compile_kernel(kernel_for(MatmulWGMMAV3(num_stages=3, block_m=128, block_n=128, block_k=64),
                                      {"n_size": 512, "k_size": 512}))
    (report,) = parse_ptxas_log(built.module.log).values()
    code, text, err = timeline(capsys, V3, *SIZES, *PINNED, "--out", str(tmp_path / "built"))
    assert code == 0, err
    assert occupancy_line(text).endswith(f" {report.registers} registers x 160 threads each; the model's count, "
                                         f"registers from ptxas); 1 at once on SM 0")
    code, text, err = timeline(capsys, V3, *SIZES, *PINNED, "--registers", "255", "--out", str(tmp_path / "given"))
    assert code == 0, err
    assert occupancy_line(text) == ("blocks per SM: 1 (limited by registers; 97 KB of shared memory, 255 registers x "
                                    "160 threads each; the model's count, registers from --registers); 1 at once "
                                    "on SM 0")


def test_without_a_build_the_model_estimates_registers(capsys, tmp_path, monkeypatch):
    """Where NVRTC cannot build the kernel (not installed, or the build fails) the count is the model's estimate,
    and the summary says that it is one."""
    import warpspec.cuda.launch
    from warpspec.errors import CompileError

    def no_nvrtc(kernel):
        raise CompileError("NVRTC is not installed")

    monkeypatch.setattr(warpspec.cuda.launch, "compile_kernel", no_nvrtc)
    code, text, err = timeline(capsys, V3, *SIZES, *PINNED, "--out", str(tmp_path))
    assert code == 0, err
    assert "160 registers x 160 threads each; the model's count, registers estimated)" in occupancy_line(text)


def test_registers_below_one_is_a_usage_error_naming_the_option(capsys, tmp_path):
    code, _, err = timeline(capsys, V3, *SIZES, "--registers", "0", "--out", str(tmp_path))
    assert code == 2
    assert "--registers: expected a positive integer, got 0" in err
