"""``warpspec timeline`` (and ``check``) errors the user caused: one line on stderr, exit code 2, never an internal
error; a failed write leaves no truncated file."""

import errno
from pathlib import Path

import pytest

import warpspec.timeline.trace
from warpspec.cli import main

ROOT = Path(__file__).parents[2]
COPY = [f"{ROOT / 'examples' / 'tma_copy.py'}:TmaCopy", "m_size=64", "n_size=64"]
LIBRARY_GEMM = f"{ROOT / 'src' / 'warpspec' / 'ops' / 'kernels.py'}:Gemm"
GEMM_SIZES = ["m_size=64", "n_size=64", "k_size=64", "lda=64", "ldb=64", "ldc=64"]


def run(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_line_error(err: str, command: str = "timeline") -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"warpspec {command}: error: ") and "internal error" not in err
    return lines[0]


def test_non_python_target_file(capsys, tmp_path):
    target = tmp_path / "kernel.txt"
    target.write_text("not python\n")
    code, _, err = run(capsys, "timeline", f"{target}:K", "--out", str(tmp_path / "out"))
    assert code == 2
    assert f"{target} is not a Python file: expected FILE.py:CLASS" in one_line_error(err)


@pytest.mark.parametrize("out, fragment", [
    ("file", "--out {tmp}/file: expected a folder"),
    ("file/below", "but it is not one ({tmp}/file is not a folder)"),
    ("/dev/null", "--out /dev/null: expected a folder"),
])
def test_out_that_is_not_a_folder(capsys, tmp_path, out, fragment):
    (tmp_path / "file").write_text("kept\n")
    out = out if out.startswith("/") else str(tmp_path / out)
    code, _, err = run(capsys, "timeline", *COPY, "--out", out)
    assert code == 2
    assert fragment.format(tmp=tmp_path) in one_line_error(err)
    assert (tmp_path / "file").read_text() == "kept\n"


def _failing_writer(error_number: int):
    """A write_trace that writes part of the trace, then fails as the operating system would with ``errno``."""
    def write_trace(timeline, path):
        Path(path).write_text('{"traceEvents": [')
        raise OSError(error_number, __import__("os").strerror(error_number), str(path))

    return write_trace


@pytest.mark.parametrize("error_number, reason", [(errno.ENOSPC, "No space left on device"),
                                                  (errno.EACCES, "Permission denied")])
def test_failed_write_is_one_line_and_leaves_no_truncated_trace(capsys, tmp_path, monkeypatch, error_number,
                                                                reason):
    out = tmp_path / "out"
    out.mkdir()
    (out / "trace.json").write_text("earlier run\n")
    monkeypatch.setattr(warpspec.timeline.trace, "write_trace", _failing_writer(error_number))
    code, _, err = run(capsys, "timeline", *COPY, "--out", str(out))
    assert code == 2
    line = one_line_error(err)
    assert f"--out {out}: could not write {out}/" in line and line.endswith(reason)
    assert sorted(p.name for p in out.iterdir()) == ["trace.json"]  # no temporary file left
    assert (out / "trace.json").read_text() == "earlier run\n"


def test_cuda_backend_without_a_gpu(capsys, tmp_path, monkeypatch):
    import warpspec.cuda.driver

    monkeypatch.setattr(warpspec.cuda.driver, "has_hopper_gpu", lambda *args: False)
    code, _, err = run(capsys, "timeline", *COPY, "--backend", "cuda", "--out", str(tmp_path))
    assert code == 2
    assert "--backend cuda records on an NVIDIA Hopper GPU, and none was found" in one_line_error(err)


@pytest.mark.parametrize("command", ["timeline", "check"])
def test_library_kernel_that_needs_constructor_arguments(capsys, tmp_path, command):
    out = ["--out", str(tmp_path)] if command == "timeline" else []
    code, _, err = run(capsys, command, LIBRARY_GEMM, *GEMM_SIZES, *out)
    assert code == 2
    line = one_line_error(err, command)
    assert "Gemm needs constructor argument(s) in_dtype, out_dtype, b_k_major, has_bias, activation" in line
    assert "run it through its warpspec.ops operation (e.g. warpspec.ops.matmul)" in line


def test_own_kernel_that_needs_constructor_arguments(capsys, tmp_path):
    kernel = tmp_path / "needs.py"
    kernel.write_text("import warpspec\n\n\nclass Needs(warpspec.Script):\n    def __init__(self, width):\n"
                      "        super().__init__()\n\n    def __call__(self, n: int):\n        pass\n")
    code, _, err = run(capsys, "check", f"{kernel}:Needs", "n=1")
    assert code == 2
    line = one_line_error(err, "check")
    assert "Needs needs constructor argument(s) width" in line and "define a subclass in the file" in line
