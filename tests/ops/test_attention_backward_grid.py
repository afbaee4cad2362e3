"""The dense backward kernels' block order (``_RowBlocks.grid_order``): every (rank, head) once; head-major
without a mask; under a causal mask ``LONGEST_FIRST_HEADS`` heads at a time, rank by rank, so the grid ends on its
shortest blocks. The emulator's order on the CPU, the GPU's beside it."""

import numpy as np
import pytest

import warpspec
from warpspec import int32
from warpspec.ops.attention_backward_kernel import LONGEST_FIRST_HEADS, _RowBlocks


class GridOrder(_RowBlocks):
    """Each block writes its (rank, head) at its linear index."""

    def __init__(self, causal):
        super().__init__()
        self.causal = causal

    def __call__(self, n_blocks: int32, n_heads: int32, out_ptr: ~int32):
        self.attrs.warps = 4
        rank, head = self.grid_order(n_blocks, n_heads)
        pair = self.register_tensor(dtype=int32, shape=[1, 2], init=0)
        pair[0, 0] = rank
        pair[0, 1] = head
        out = self.global_view(out_ptr, dtype=int32, shape=[n_blocks * n_heads, 2])
        self.store_global(out, pair, offsets=[self.blockIdx.x, 0])


#: (blocks a head, heads): groups of 16, 16 and 8 heads; fewer heads than a group; one block a head; one group.
CASES = [(5, 40), (3, 7), (1, 20), (64, 16)]


def _order(causal, n_blocks, n_heads, backend="emulator"):
    out = np.full((n_blocks * n_heads, 2), -1, np.int32)
    if backend == "cuda":
        torch = pytest.importorskip("torch")
        tensor = torch.from_numpy(out).cuda()
        with warpspec.use_backend(backend):
            GridOrder(causal)(n_blocks, n_heads, tensor)
        return tensor.cpu().numpy()
    with warpspec.use_backend(backend):
        GridOrder(causal)(n_blocks, n_heads, out)
    return out


def _check(order, causal, n_blocks, n_heads):
    pairs = sorted(map(tuple, order.tolist()))
    assert pairs == [(r, h) for r in range(n_blocks) for h in range(n_heads)]  # every block once
    ranks, heads = order[:, 0], order[:, 1]
    if not causal:
        linear = np.arange(n_blocks * n_heads)
        np.testing.assert_array_equal(ranks, linear % n_blocks)
        np.testing.assert_array_equal(heads, linear // n_blocks)
        return
    groups = heads // LONGEST_FIRST_HEADS
    assert np.all(np.diff(groups) >= 0)  # one group of heads after another
    for group in np.unique(groups):
        in_group = ranks[groups == group]
        assert np.all(np.diff(in_group) >= 0)  # longest (rank 0) first
    assert ranks[-1] == n_blocks - 1  # the grid ends on a shortest block


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_the_emulator_deals_every_block_once_longest_first_under_a_mask(causal, case):
    _check(_order(causal, *case), causal, *case)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_the_gpu_deals_the_blocks_as_the_emulator_does(causal, case):
    got = _order(causal, *case, backend="cuda")
    np.testing.assert_array_equal(got, _order(causal, *case))
