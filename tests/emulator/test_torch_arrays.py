"""The emulator takes torch CPU tensors as it takes numpy arrays (skipped where torch is not installed)."""

import pytest

from tests.kernels import feature_kernels as fk
import warpspec

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def emulator():
    with warpspec.use_backend("emulator"):
        yield


def test_float16_tensors_are_read_and_written_back():
    from matmul_v3 import MatmulWGMMAV3

    generator = torch.Generator().manual_seed(0)
    a = torch.randn(200, 96, generator=generator).half()
    b = torch.randn(136, 96, generator=generator).half()
    c = torch.full((200, 136), float("nan")).half()
    MatmulWGMMAV3(num_stages=2, block_m=128, block_n=64, block_k=32)(200, 136, 96, a, b, c)
    reference = a.double() @ b.double().T
    assert ((c.double() - reference).norm() / reference.norm()).item() < 1e-2


def test_bfloat16_tensors_are_read_and_written_back():
    generator = torch.Generator().manual_seed(1)
    a = torch.randn(128, 64, generator=generator).bfloat16()
    b = torch.randn(64, 64, generator=generator).bfloat16()
    c = torch.full((128, 64), float("nan")).bfloat16()
    fk.MatmulBF16(num_stages=2, block_m=128, block_n=64, block_k=64)(128, 64, 64, a, b, c)
    reference = a.double() @ b.double().T
    assert c.dtype == torch.bfloat16
    assert ((c.double() - reference).norm() / reference.norm()).item() < 1e-2


def test_a_tensor_of_the_wrong_dtype_is_refused_by_name():
    from matmul_v3 import MatmulWGMMAV3

    a = torch.zeros(128, 64, dtype=torch.float32)
    b = torch.zeros(64, 64).half()
    c = torch.zeros(128, 64).half()
    with pytest.raises(warpspec.ArgumentError, match="argument 'a_ptr': expected a float16 tensor, got torch.float32"):
        MatmulWGMMAV3(num_stages=2, block_m=128, block_n=64, block_k=64)(128, 64, 64, a, b, c)
