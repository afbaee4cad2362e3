"""Test-wide setup: the disk cache is a temporary folder for the whole session, examples/ is importable, and tests
marked ``gpu`` need an NVIDIA Hopper GPU and are skipped cleanly without one, tests marked ``gpu2`` two GPUs."""

import os
import shutil
import sys
import tempfile

import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")
if EXAMPLES not in sys.path:
    sys.path.insert(0, EXAMPLES)

# Set at import, before any test compiles or tunes (and inherited by the subprocesses tests start), so that the
# suite never reads or fills the user's real cache (~/.cache/warpspec), even where WARPSPEC_CACHE_DIR names one.
# Compiled kernels and tuning records both live under this root (warpspec.cuda.compiler.cache_dir).
SESSION_CACHE = tempfile.mkdtemp(prefix="warpspec-test-cache-")
os.environ["WARPSPEC_CACHE_DIR"] = SESSION_CACHE


def pytest_unconfigure(config):
    shutil.rmtree(SESSION_CACHE, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    if any("gpu2" in item.keywords for item in items) and _visible_gpus() < 2:
        skip_two = pytest.mark.skip(reason="needs two GPUs (torch.cuda.device_count() >= 2)")
        for item in items:
            if "gpu2" in item.keywords:
                item.add_marker(skip_two)
    if not any("gpu" in item.keywords for item in items):
        return
    from warpspec.cuda.driver import has_hopper_gpu

    if has_hopper_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA Hopper GPU (compute capability 9.x)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def _visible_gpus() -> int:
    """torch.cuda.device_count(), 0 without torch."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count()
