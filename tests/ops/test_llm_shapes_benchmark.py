"""benchmarks/llm_shapes.py's plumbing without a GPU: ``--dry-run`` lists the done-when shapes and checks
ops.matmul at a stand-in of each on the emulator, printing the table."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def test_dry_run_lists_the_shapes_and_checks_their_stand_ins():
    environment = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    found = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "llm_shapes.py"), "--dry-run"],
                           capture_output=True, text=True, timeout=600, env=environment)
    assert found.returncode == 0, found.stderr[-2000:]
    lines = found.stdout.splitlines()
    assert lines[0].startswith("80 shapes: bfloat16 M=1 4096x4096")  # 2 dtypes x 5 weights x 8 M values
    assert "bfloat16 M=1: geometric mean 1.000x, lowest 1.000x over 5 weights" in lines
    assert lines[-1] == "dry run: 80 stand-ins checked on the emulator (times are placeholders)"
