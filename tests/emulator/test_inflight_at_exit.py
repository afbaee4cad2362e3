"""An asynchronous copy still in flight when its block's threads have all exited is an error at the copy's line, in
the plain deterministic run too: a TMA store no tma.wait_group waited for, a TMA load whose barrier nobody waits
on."""

import inspect
from pathlib import Path

import numpy as np
import pytest

from tests.kernels import buggy_kernels as bk
from tests.support.example_checks import emulator  # noqa: F401  (autouse: the emulator, its deterministic schedule)
import warpspec
from warpspec import float16, int32
from warpspec.errors import InFlightAtExitError

THIS = Path(__file__).name


def line_of(cls, text: str) -> int:
    """The source line of ``cls`` holding ``text``."""
    lines, first = inspect.getsourcelines(cls)
    return first + next(i for i, line in enumerate(lines) if text in line)


class CopyNeverWaitsForItsStores(bk.Copy):
    """The copy kernel with its last store never waited for: no wait_group after the final commit."""

    def consume(self, dst, buffers, full, empty, offset_m, num_tiles):
        for tile in self.range(num_tiles):
            buffer: int32 = tile % self.num_buffers
            lap_parity = (tile // self.num_buffers) & 1
            self.mbarrier.wait(full[buffer], phase=lap_parity)
            with self.single_thread():
                self.tma.shared_to_global(src=buffers[buffer], dst=dst, offsets=[offset_m, tile * self.tile_n])
                self.tma.commit_group()
                self.mbarrier.arrive(empty[buffer])


class LoadNobodyWaitsOn(warpspec.Script):
    """One TMA load into shared memory whose barrier no thread waits on."""

    def __call__(self, m_size: int32, src_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        src = self.global_view(src_ptr, dtype=float16, shape=[m_size, 64])
        tile = self.shared_tensor(dtype=float16, shape=[64, 64])
        full = self.mbarrier.alloc(counts=[1])
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(full[0], transaction_bytes=tile.nbytes)
            self.tma.global_to_shared(src=src, dst=tile, offsets=[0, 0], mbarrier=full[0])


def test_a_store_not_waited_for_is_an_error_at_its_line():
    source = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float16)
    with pytest.raises(InFlightAtExitError) as caught:
        CopyNeverWaitsForItsStores()(64, 128, source, np.zeros_like(source))
    assert caught.value.location.endswith(f"{THIS}:{line_of(CopyNeverWaitsForItsStores, 'shared_to_global')}")
    assert "TMA store buffers[1] -> dst[0, 64]" in str(caught.value)
    assert "is still in flight" in str(caught.value) and "tma.wait_group(0)" in str(caught.value)


def test_a_load_nobody_waits_on_is_an_error_at_its_line():
    with pytest.raises(InFlightAtExitError) as caught:
        LoadNobodyWaitsOn()(64, np.zeros((64, 64), np.float16))
    assert caught.value.location == f"{Path(__file__)}:{line_of(LoadNobodyWaitsOn, 'global_to_shared')}"
    assert "TMA load" in str(caught.value) and "a wait on its mbarrier" in str(caught.value)


def test_the_copy_that_waits_is_fine():
    source = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float16)
    copied = np.zeros_like(source)
    bk.Copy()(64, 128, source, copied)
    np.testing.assert_array_equal(copied, source)
