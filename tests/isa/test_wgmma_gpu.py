"""The WGMMA forms of the attention kernel, one at a time on the GPU (tests/kernels/wgmma_form_kernels.py): MN-major B
from shared memory at N = 64 (one swizzle atom), 128 and 256 (four) and K = 64, 80, 128; A from shared memory
and A from registers (a cast m64nK accumulator, m64n80 among them); a [64, 1] row statistic of a [64, K]
accumulator applied to a [64, N] one. Each runs the emulator on the same inputs too: the pair states the
expected values (tests/isa/test_wgmma.py checks the emulator alone)."""

import numpy as np
import pytest

import warpspec
from tests.kernels import wgmma_form_kernels as wf

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("mode", wf.MODES)
@pytest.mark.parametrize("n, k", wf.SHAPES)
def test_gpu_matches_the_emulator_and_numpy(mode, n, k):
    a, b, x, y = wf.operands(n, k)
    on_cpu = np.full((64, n), np.nan, dtype=np.float32)
    with warpspec.use_backend("emulator"):
        wf.WgmmaForm(mode, n, k)(a, b, x, y, on_cpu)
    tensors = [torch.from_numpy(t).cuda() for t in (a, b, x, y)]
    on_gpu = torch.full((64, n), float("nan"), device="cuda", dtype=torch.float32)
    with warpspec.use_backend("cuda"):
        wf.WgmmaForm(mode, n, k)(*tensors, on_gpu)
    torch.cuda.synchronize()
    on_gpu = on_gpu.cpu().numpy()
    # float32 sums in another order; "registers" may round a score to the neighbouring float16 (1e-3 relative).
    tolerance = 2e-3 if mode == "registers" else 1e-4
    assert wf.max_error(mode, on_gpu, a, b, x, y) < tolerance, "GPU vs numpy"
    assert np.abs(on_gpu - on_cpu).max() / np.abs(on_cpu).max() < tolerance, "GPU vs emulator"
