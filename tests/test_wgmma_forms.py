"""The one-tile WGMMA form kernels (tests/wgmma_form_kernels.py) on the emulator: the values the GPU twins in
tests/gpu/test_wgmma_forms_gpu.py must reproduce, and the generated code those twins run."""

import numpy as np
import pytest

import warpspec
import wgmma_form_kernels as wf
from warpspec.cuda.codegen import generate
from warpspec.runtime import kernel_for

SHAPES = [(n, k) for n in (64, 128, 256) for k in (64, 80, 128)]


@pytest.mark.parametrize("mode", wf.MODES)
@pytest.mark.parametrize("n, k", SHAPES)
def test_emulator_matches_numpy(mode, n, k):
    a, b, x, y = wf.operands(n, k)
    c = np.full((64, n), np.nan, dtype=np.float32)
    with warpspec.use_backend("emulator"):
        wf.WgmmaForm(mode, n, k)(a, b, x, y, c)
    assert wf.max_error(mode, c, a, b, x, y) < 1e-5


@pytest.mark.parametrize("mode", wf.MODES)
def test_the_gpu_twins_generate_code(mode):
    """Every shape of the GPU twins generates CUDA (no GPU needed), one wgmma per N slice and k16 step."""
    for n, k in SHAPES:
        source = generate(kernel_for(wf.WgmmaForm(mode, n, k), {})).source
        steps = {"shared": k // 16, "registers": 64 // 16 + k // 16, "rowstat": k // 16 + 64 // 16}[mode]
        assert source.count("wgmma.mma_async") == steps, (n, k)
        assert f"m64n{n}k16" in source
