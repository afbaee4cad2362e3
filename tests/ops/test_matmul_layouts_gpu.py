"""``ops.matmul``'s operand layouts on a Hopper GPU against torch (the GPU twin of test_matmul_layouts.py): A and B
each row- or column-major at aligned and ragged shapes, pitches staged through aligned copies, leading dimensions
and batched operands."""

import pytest

import warpspec

torch = pytest.importorskip("torch")

from warpspec import ops  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def cuda():
    with warpspec.use_backend("cuda"):
        yield


def as_layout(matrix, layout):
    return matrix.contiguous() if layout == "row" else matrix.T.contiguous().T


def relative_error(found, expected) -> float:
    return ((found.double() - expected.double()).norm() / expected.double().norm()).item()


@pytest.mark.parametrize("m, n, k", [(512, 384, 256), (1000, 520, 328), (4096, 4096, 4096), (50, 76, 60),
                                     (1, 4096, 4096)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("a_layout", ["row", "column"])
@pytest.mark.parametrize("b_layout", ["row", "column"])
def test_every_layout_matches_torch(m, n, k, dtype, a_layout, b_layout):
    generator = torch.Generator(device="cuda").manual_seed(0)
    a = as_layout(torch.randn(m, k, device="cuda", generator=generator).to(dtype), a_layout)
    b = as_layout(torch.randn(k, n, device="cuda", generator=generator).to(dtype), b_layout)
    c = ops.matmul(a, b, out_dtype=torch.float32)
    assert relative_error(c, a.float() @ b.float()) < 1e-5


def test_leading_dimensions_and_batches_match_torch():
    x = torch.randn(4, 512, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16)
    assert relative_error(ops.matmul(x, w.T), x.float() @ w.float().T) < 1e-2
    a = torch.randn(8, 256, 512, device="cuda", dtype=torch.float16)
    b = torch.randn(8, 512, 384, device="cuda", dtype=torch.float16)
    assert relative_error(ops.matmul(a, b), torch.bmm(a.float(), b.float())) < 1e-2
