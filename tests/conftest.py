"""Test-wide setup: tests marked ``gpu`` need an NVIDIA Hopper GPU and are skipped cleanly without one."""

import os
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples")
if EXAMPLES not in sys.path:
    sys.path.insert(0, EXAMPLES)


def pytest_collection_modifyitems(config, items):
    if not any("gpu" in item.keywords for item in items):
        return
    from warpspec.cuda.driver import has_hopper_gpu

    if has_hopper_gpu():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA Hopper GPU (compute capability 9.x)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
