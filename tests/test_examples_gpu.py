"""The examples on a Hopper GPU against torch (cuBLAS), and the emulator's results against the GPU's."""

import numpy as np
import pytest

import warpspec

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.gpu


def _relative_error(out, ref) -> float:
    out, ref = out.double(), ref.double()
    return (torch.linalg.norm(out - ref) / torch.linalg.norm(ref)).item()


def _matmul_case(script, m, n, k, seed=0):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16, generator=generator)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16, generator=generator)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.float16)
    with warpspec.use_backend("cuda"):
        script(m, n, k, a, b, c)
    torch.cuda.synchronize()
    return a, b, c


V3_SCHEDULES = [
    dict(num_stages=2, block_m=128, block_n=128, block_k=64),
    dict(num_stages=4, block_m=128, block_n=64, block_k=32),
    dict(num_stages=7, block_m=128, block_n=64, block_k=16),
    dict(num_stages=3, block_m=256, block_n=128, block_k=64),
]


@pytest.mark.parametrize("schedule", V3_SCHEDULES, ids=lambda s: "-".join(map(str, s.values())))
@pytest.mark.parametrize("shape", [(512, 512, 512), (300, 200, 200), (1000, 392, 1016)])
def test_v3_against_torch(schedule, shape):
    from matmul_v3 import MatmulWGMMAV3

    a, b, c = _matmul_case(MatmulWGMMAV3(**schedule), *shape)
    assert not torch.isnan(c).any(), "some outputs were never written"
    assert _relative_error(c, a.float() @ b.float().T) < 1e-2


@pytest.mark.parametrize("module, name", [("matmul_v1", "MatmulWGMMAV1"), ("matmul_v2", "MatmulWGMMAV2"),
                                          ("matmul_v4", "MatmulWGMMAV4"), ("matmul_v5", "MatmulWGMMAV5")])
def test_other_matmuls_against_torch(module, name):
    import importlib

    cls = getattr(importlib.import_module(module), name)
    for schedule in cls().schedules()[:4]:
        a, b, c = _matmul_case(cls(**schedule), 300, 200, 264)
        assert _relative_error(c, a.float() @ b.float().T) < 1e-2, schedule


def test_copy_is_exact():
    from tma_copy import TmaCopy

    for schedule in TmaCopy().schedules():
        src = torch.randn(300, 200, device="cuda", dtype=torch.float16)
        dst = torch.full_like(src, float("nan"))
        with warpspec.use_backend("cuda"):
            TmaCopy(**schedule)(300, 200, src, dst)
        torch.cuda.synchronize()
        assert torch.equal(dst, src), schedule


def test_emulator_and_gpu_agree():
    from matmul_v3 import MatmulWGMMAV3

    schedule = dict(num_stages=3, block_m=128, block_n=64, block_k=32)
    a, b, c_gpu = _matmul_case(MatmulWGMMAV3(**schedule), 200, 136, 96, seed=3)
    c_cpu = np.full((200, 136), np.nan, dtype=np.float16)
    with warpspec.use_backend("emulator"):
        MatmulWGMMAV3(**schedule)(200, 136, 96, a.cpu().numpy(), b.cpu().numpy(), c_cpu)
    difference = _relative_error(c_gpu.cpu().float(), torch.from_numpy(c_cpu).float())
    assert difference < 2e-3
