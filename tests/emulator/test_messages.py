"""Emulator messages that name what went wrong as the author wrote it: a consumer whose mbarrier.wait passes on a
stale parity and then reads a buffer a TMA copy is still filling is told the phase its wait expected and the
barrier's current phase, not to "wait on the copy's mbarrier first" (it did wait); one whose wait was right, but on
a phase that an arrival without transaction bytes completed before the copy was issued, is told that arrival."""

import inspect

import numpy as np
import pytest

from tests.kernels.buggy_kernels import Copy
from warpspec import int32, uint32
from warpspec.emulator.run import SEED_VARIABLE
from warpspec.errors import RaceError


class FirstLapWrongParity(Copy):
    """The consumer waits on ``full`` with the producer's parity (``lap_parity ^ 1``): a fresh barrier passes parity
    1 at once, so the first read finds the copy still in flight."""

    def consume(self, dst, buffers, full, empty, offset_m, num_tiles):
        for tile in self.range(num_tiles):
            buffer: int32 = tile % self.num_buffers
            lap_parity: uint32 = (tile // self.num_buffers) & 1
            self.mbarrier.wait(full[buffer], phase=lap_parity ^ 1)
            with self.single_thread():
                self.tma.shared_to_global(src=buffers[buffer], dst=dst, offsets=[offset_m, tile * self.tile_n])  # read
                self.tma.commit_group()
                self.tma.wait_group(0)
                self.mbarrier.arrive(empty[buffer])


class ParityNeverFlips(Copy):
    """The consumer always waits with phase 0: right on the first lap, stale on the second, where the wait passes
    on the completed phase 0 while the second lap's copy is still writing the buffer."""

    def consume(self, dst, buffers, full, empty, offset_m, num_tiles):
        for tile in self.range(num_tiles):
            buffer: int32 = tile % self.num_buffers
            self.mbarrier.wait(full[buffer], phase=0)
            with self.single_thread():
                self.tma.shared_to_global(src=buffers[buffer], dst=dst, offsets=[offset_m, tile * self.tile_n])  # read
                self.tma.commit_group()
                self.tma.wait_group(0)
                self.mbarrier.arrive(empty[buffer])


class AnnouncesNoBytes(Copy):
    """The producer arrives on ``full`` without announcing the copy's bytes: each phase completes on that arrival
    alone, before the copy is issued, and the consumer's correct wait passes while the copy is still writing."""

    def produce(self, src, buffers, full, empty, offset_m, num_tiles):
        for tile in self.range(num_tiles):
            buffer: int32 = tile % self.num_buffers
            lap_parity: uint32 = (tile // self.num_buffers) & 1
            self.mbarrier.wait(empty[buffer], phase=lap_parity ^ 1)
            with self.single_thread():
                self.mbarrier.arrive(full[buffer])  # arrive
                self.tma.global_to_shared(
                    src=src, dst=buffers[buffer], offsets=[offset_m, tile * self.tile_n], mbarrier=full[buffer])


def line_of(method, marker: str) -> str:
    lines, first = inspect.getsourcelines(method)
    return f"{__file__}:{first + next(i for i, line in enumerate(lines) if line.rstrip().endswith('# ' + marker))}"


def read_line(cls) -> str:
    lines, first = inspect.getsourcelines(cls.consume)
    return f"{__file__}:{first + next(i for i, line in enumerate(lines) if line.rstrip().endswith('# read'))}"


@pytest.fixture(autouse=True)
def no_seed(monkeypatch):
    monkeypatch.delenv(SEED_VARIABLE, raising=False)


def run(cls, n_size):
    with pytest.raises(RaceError) as caught:
        cls()(64, n_size, np.ones((64, n_size), np.float16), np.zeros((64, n_size), np.float16))
    return str(caught.value).splitlines()[0]


def test_a_wait_that_passes_a_fresh_barrier_names_the_phase_it_should_wait_for():
    first = run(FirstLapWrongParity, 256)
    assert f"{read_line(FirstLapWrongParity)}: tma.shared_to_global reads buffers[0], which holds elements" in first
    assert first.endswith("; the last mbarrier.wait on full[0] by these threads passed with phase=1, which a fresh "
                          "barrier passes at once (no phase of full[0] has completed), but the copy completes "
                          "full[0]'s current phase 0 (parity 0): that wait expected the wrong phase, and must use "
                          "phase=0 here")


def test_a_wait_on_a_completed_phase_names_it_and_the_current_one():
    first = run(ParityNeverFlips, 512)
    assert f"{read_line(ParityNeverFlips)}: tma.shared_to_global reads buffers[0] while an async copy is still " \
           f"writing it; the last mbarrier.wait on full[0] by these threads passed with phase=0, which phase 0 of " \
           f"full[0] had already completed, but the copy completes full[0]'s current phase 1 (parity 1): that wait " \
           f"expected the wrong phase, and must use phase=1 here" in first
    assert "wait on the copy's mbarrier first" not in first


def test_a_phase_completed_by_an_arrival_without_bytes_names_that_arrival():
    with pytest.raises(RaceError) as caught:
        AnnouncesNoBytes()(64, 256, np.ones((64, 256), np.float16), np.zeros((64, 256), np.float16))
    first = str(caught.value).splitlines()[0]
    assert "-> Copy.consume at " in first and ": tma.shared_to_global reads buffers[0], which holds elements" in first
    assert "; the last mbarrier.wait on full[0] by these threads passed phase 0, which completed on its arrivals " \
           "alone, with no transaction bytes announced (its last arrival: " in first
    assert first.endswith(f"-> AnnouncesNoBytes.produce at {line_of(AnnouncesNoBytes.produce, 'arrive')}), so the "
                          f"copy, issued after, completes full[0]'s current phase 1 (parity 1): announce the copy's "
                          f"bytes on that arrival (mbarrier.arrive_and_expect_tx) so that the phase waits for "
                          f"them"), first
