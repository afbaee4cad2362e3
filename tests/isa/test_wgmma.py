"""warpspec.isa.wgmma through the one-tile WGMMA form kernels (tests/kernels/wgmma_form_kernels.py): on the emulator
the values the GPU twins in tests/isa/test_wgmma_gpu.py (``gpu``-marked) must reproduce, the generated code and the
HGMMA instructions of the machine code those twins run. The planted WGMMA misuses in real pipelines (a stage released
before wgmma.wait_group, reading the accumulator in flight) are in tests/emulator/test_planted_bugs.py."""

import re

import numpy as np
import pytest

import warpspec
from tests.kernels import wgmma_form_kernels as wf
from warpspec.cuda import sass
from warpspec.cuda.codegen import generate
from warpspec.cuda.launch import compile_kernel
from warpspec.runtime import kernel_for

@pytest.mark.parametrize("mode", wf.MODES)
@pytest.mark.parametrize("n, k", wf.SHAPES)
def test_emulator_matches_numpy(mode, n, k):
    a, b, x, y = wf.operands(n, k)
    c = np.full((64, n), np.nan, dtype=np.float32)
    with warpspec.use_backend("emulator"):
        wf.WgmmaForm(mode, n, k)(a, b, x, y, c)
    # numpy's BLAS sums the scores in its own order, so "registers" may round one to the neighbouring float16
    # (1e-3 relative), as on the GPU (tests/isa/test_wgmma_gpu.py); a misplaced element is off by O(1).
    assert wf.max_error(mode, c, a, b, x, y) < (2e-3 if mode == "registers" else 1e-5)


@pytest.mark.parametrize("mode", wf.MODES)
def test_the_gpu_twins_generate_code(mode):
    """Every shape of the GPU twins generates CUDA (no GPU needed), one wgmma per N slice and k16 step."""
    for n, k in wf.SHAPES:
        source = generate(kernel_for(wf.WgmmaForm(mode, n, k), {})).source
        steps = {"shared": k // 16, "registers": 64 // 16 + k // 16, "rowstat": k // 16 + 64 // 16}[mode]
        assert source.count("wgmma.mma_async") == steps, (n, k)
        assert f"m64n{n}k16" in source


@pytest.mark.parametrize("mode", wf.MODES)
def test_each_wgmma_is_one_hgmma_of_the_machine_code(mode):
    """At N = 64, K = 64 each generated wgmma.mma_async is one HGMMA of N 64, with no local memory."""
    kernel = kernel_for(wf.WgmmaForm(mode, 64, 64), {})
    steps = generate(kernel).source.count("wgmma.mma_async")
    text = sass.disassemble(compile_kernel(kernel).module.cubin)
    counts = sass.count_instructions(text, ["HGMMA", "LDL", "STL"])
    assert counts == {"HGMMA": steps, "LDL": 0, "STL": 0}
    assert "HGMMA.64x64x16" in text


@pytest.mark.parametrize("n, k", [(64, 128), (256, 80), (128, 64)])
def test_a_row_reduction_reads_its_own_accumulator_whatever_the_width_it_is_applied_to(n, k):
    """rowmax(scores [64, K]) added to acc [64, N]: the max's row-slice layout is taken from acc (the two row
    slices hold the same rows), but the reduction must still combine every register of scores, K/4 per row half
    (register i holds row half (i >> 1) & 1), and no index past scores' K/2 registers. Reading acc's register
    count instead lost half of S's columns at N = 64 < K = 128 and read past the array at N = 256 > K = 80: the
    wrong and NaN attention outputs at D = 64 and D = 256."""
    source = generate(kernel_for(wf.WgmmaForm("rowstat", n, k), {})).source
    for half in (0, 1):
        line = next(text for text in source.splitlines() if text.strip().startswith(f"scores_max[{half}] = "))
        read = sorted(int(i) for i in re.findall(r"scores\[(\d+)\]", line))
        assert read == [i for i in range(k // 2) if (i >> 1) & 1 == half]


@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_every_row_reduction_of_the_attention_kernel_reads_the_whole_score_tile(head_dim):
    """In the shipped schedules the row maxima and sums of S [64, block_n] meet O [64, head_dim]: each of the
    kernel's reductions (peeled first tile and main loop, both warpgroups) combines all block_n/4 registers of
    its row half of S."""
    from warpspec.ops.attention import DEFAULT_SCHEDULES
    from warpspec.dtypes import float16
    from warpspec.ops.attention_kernel import Attention

    schedule = DEFAULT_SCHEDULES[head_dim]
    source = generate(kernel_for(Attention(float16, head_dim=head_dim, causal=True, **schedule), {})).source
    reductions = re.findall(r"^\s*\w+\[([01])\] = ((?:max_nan\(|\()+\w+\[.*);$", source, re.MULTILINE)
    assert len(reductions) == 2 * 2 * 2 * 2  # max and sum, first tile and loop, two warpgroups, two row halves
    for half, expression in reductions:
        read = sorted(int(i) for i in re.findall(r"\w+\[(\d+)\]", expression))
        assert read == [i for i in range(schedule["block_n"] // 2) if (i >> 1) & 1 == int(half)]
