"""What a launch does, counted from its trip counts (warpspec.timeline.sizing): the events a GPU record must hold
(the instrumented kernel's trip counts times its events per trip, per recording thread; a profile session sizes its
record with it unless given a capacity) and the whole grid's WGMMA work."""

from collections import Counter

import pytest

import matmul_v3
import matmul_v5
import matmul_v6
from warpspec.runtime import kernel_for
from warpspec.timeline import gpu
from warpspec.timeline.instrument import instrument
from warpspec.timeline.model import model_launch
from warpspec.timeline.sizing import events_needed, grid_flops


@pytest.mark.parametrize("script", [matmul_v3.MatmulWGMMAV3, matmul_v5.MatmulWGMMAV5])
@pytest.mark.parametrize("num_stages", [2, 4])
def test_the_count_is_the_most_events_a_role_of_a_block_records(script, num_stages):
    # The timing model records the events the GPU instrumentation does (one epilogue per role, as these kernels
    # run one tile per block): the most of any role of its blocks is the count.
    kernel = kernel_for(script(num_stages=num_stages, block_m=128, block_n=128, block_k=64),
                        {"n_size": 1024, "k_size": 1024})
    modeled = Counter((e.block, e.role) for e in model_launch(kernel, {"m_size": 1024}).events)
    assert events_needed(instrument(kernel, 64, 1), {"m_size": 1024}) == max(modeled.values())


def test_a_persistent_kernels_count_grows_with_the_tiles_its_first_block_takes():
    kernel = kernel_for(matmul_v6.MatmulWGMMAV6(variant="cooperative", num_stages=3, block_m=128, block_n=256,
                                                epilogue_n=256), {"n_size": 2048, "k_size": 2048})
    build = instrument(kernel, 64, 1)
    # 2048^2 / (128 x 256) = 128 tiles: 32, 16 and 8 for block 0 of 4, 8 and 16 blocks, each the same events.
    counts = [events_needed(build, {"m_size": 2048, "num_sms": sms}) for sms in (4, 8, 16)]
    assert counts[0] - counts[1] == 2 * (counts[1] - counts[2]) > 0
    per_tile = (counts[1] - counts[2]) // 8
    assert per_tile >= 3 * 2048 // 64  # at least a wait and two TMA issues per K tile for the producer
    # Exactly: the consumers' 32 K-tiles of a wait, a WGMMA run and a wait_group(1) each, then a wait_group(0), the
    # epilogue, its tma.wait_group, two syncs and the TMA store, per tile; one last tma.wait_group. The tile counter
    # at the head of each tile is no event.
    assert per_tile == 32 * 3 + 6 and counts[1] == 16 * per_tile + 1


def test_a_session_without_a_capacity_sizes_the_record_from_the_kernel():
    kernel = kernel_for(matmul_v3.MatmulWGMMAV3(num_stages=2, block_m=128, block_n=128, block_k=64),
                        {"n_size": 8192, "k_size": 8192})
    arguments = {"m_size": 8192, "n_size": 8192, "k_size": 8192}
    needed = events_needed(instrument(kernel, 64, 1), arguments)
    assert needed > gpu.DEFAULT_CAPACITY // 8 and gpu.ProfileSession()._capacity(kernel, arguments) == (needed, [])
    assert gpu.ProfileSession(capacity=64)._capacity(kernel, arguments) == (64, [])


def test_a_persistent_kernels_work_is_the_whole_grids_not_its_first_blocks_times_the_grid():
    # 128 tiles over 132 blocks: blocks 128-131 take none, so block 0's tile times the grid would be 132 tiles.
    kernel = kernel_for(matmul_v6.MatmulWGMMAV6(variant="cooperative", num_stages=3, block_m=128, block_n=256,
                                                epilogue_n=256), {"n_size": 2048, "k_size": 2048})
    assert grid_flops(kernel, {"m_size": 2048, "num_sms": 132}) == 2.0 * 2048 ** 3
    assert model_launch(kernel, {"m_size": 2048, "num_sms": 132}).flops == 2.0 * 2048 ** 3
