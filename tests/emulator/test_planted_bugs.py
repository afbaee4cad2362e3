"""Planted bugs in V3 and the TMA copy (tests/kernels/buggy_kernels.py): each must raise its exact error class, at the
kernel source line that explains it, naming the barrier or tensor involved.

Kernel errors come from the emulator's default schedule (as late as the program allows), which is deterministic:
the line and the names reported are exact, not one of several possibilities.
"""

import re
import numpy as np
import pytest

from tests.kernels import buggy_kernels as bk
import warpspec
from warpspec import BarrierError, BoundsError, CompileError, DeadlockError, RaceError
from warpspec.emulator.run import SEED_VARIABLE

BUGGY_FILE = bk.__file__


def at(marker: str) -> str:
    """``buggy_kernels.py:LINE`` of the line carrying ``marker``, as error messages spell locations."""
    return f"buggy_kernels.py:{bk.marker_line(marker)}"


@pytest.fixture(autouse=True)
def deterministic_emulator(monkeypatch):
    """Every test runs on the emulator's deterministic schedule."""
    monkeypatch.delenv(SEED_VARIABLE, raising=False)
    with warpspec.use_backend("emulator"):
        yield


def run_matmul(kernel, m=128, n=64, k=256):
    """One block of V3's default schedule (2 stages, 128x64x64): four K-tiles, so every stage is refilled."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((n, k)).astype(np.float16)
    kernel(m, n, k, a, b, np.zeros((m, n), dtype=np.float16))


def run_copy(kernel, m=64, n=256):
    """One band of 64x64 tiles: n=256 gives four tiles, so each of the two buffers is reused."""
    source = np.random.default_rng(0).standard_normal((m, n)).astype(np.float16)
    kernel(m, n, source, np.zeros_like(source))


def test_the_unbroken_kernels_are_correct():
    """The bases of the variants below are correct: every error is the planted bug's."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((128, 256)).astype(np.float16)
    b = rng.standard_normal((64, 256)).astype(np.float16)
    c = np.zeros((128, 64), dtype=np.float16)
    bk.V3()(128, 64, 256, a, b, c)
    reference = a.astype(np.float32) @ b.astype(np.float32).T
    assert np.linalg.norm(c - reference) / np.linalg.norm(reference) < 1e-2
    source = rng.standard_normal((100, 296)).astype(np.float16)
    copied = np.zeros_like(source)
    bk.Copy()(100, 296, source, copied)
    np.testing.assert_array_equal(copied, source)


KERNEL_BUGS = [
    # (a) the consumer's first wait passes on the fresh barrier: WGMMA reads a stage no load has filled
    pytest.param(lambda: run_matmul(bk.ConsumerStartsAtPhaseOne()), RaceError, "phase-one-mma",
                 ["wgmma.mma operand a reads sa[0]", "no completed write has filled"], id="consumer-phase-one"),
    # (a) nobody releases a stage: the producer waits for its third tile forever; every partition's wait is listed
    pytest.param(lambda: run_matmul(bk.ConsumerNeverReleases()), DeadlockError, "never-release-wait",
                 ["every unfinished thread partition is blocked",
                  f"threads 0-127: blocked at {BUGGY_FILE}:{bk.marker_line('never-release-wait')} in mbarrier.wait "
                  f"on consumer_barriers[0] for phase parity 1",
                  f"threads 128-159: blocked at {BUGGY_FILE}:{bk.marker_line('v3-producer-wait')} in mbarrier.wait "
                  f"on producer_barriers[0] for phase parity 0",
                  "producer_barriers[0]: 0 phase(s) completed"], id="consumer-never-releases"),
    # (b) the stage is released while the WGMMA still reads it: the producer's refill is the racing write, and the
    # in-flight WGMMA group is listed at its mma, with the stage it reads
    pytest.param(lambda: run_matmul(bk.ReleaseBeforeWgmmaWait()), RaceError, "v3-load-a",
                 ["tma.global_to_shared writes sa[0]", "still in flight",
                  f"wgmma sa[0] @ sb[0].T -> acc (issued at {BUGGY_FILE}:"
                  f"{bk.marker_line('early-release-commit') - 1} by threads 0-127)"], id="release-before-wgmma-wait"),
    pytest.param(lambda: run_matmul(bk.ConsumerSkipsFullWait()), RaceError, "skip-wait-mma",
                 ["wgmma.mma operand a reads sa[0]", "no completed write has filled"], id="consumer-skips-full-wait"),
    pytest.param(lambda: run_copy(bk.CopyReleaseBeforeStoreWait()), RaceError, "copy-load",
                 ["tma.global_to_shared writes buffers[0]", "still in flight", "TMA store buffers[0] -> dst[0, 0]"],
                 id="copy-release-before-store-wait"),
    # (c) barrier misuse
    pytest.param(lambda: run_matmul(bk.EmptyCountTooSmall()), BarrierError, "v3-consumer-release",
                 ["128 arrival(s) on producer_barriers[0] but only 64 are pending", "more than one phase"],
                 id="empty-count-64"),
    pytest.param(lambda: run_matmul(bk.ExpectTxByTheWholeWarp()), BarrierError, "warp-expect",
                 ["32 arrival(s) on consumer_barriers[0] but only 1 are pending", "more than one phase"],
                 id="expect-tx-by-whole-warp"),
    pytest.param(lambda: run_copy(bk.CopyReleaseWithExpectTx(), n=128), BarrierError, "copy-kernel",
                 ["the kernel ended with the transaction count of empty[0] at 8192", "bytes that never arrived"],
                 id="leftover-transaction-count"),
    pytest.param(lambda: run_copy(bk.CopyWithLateMonitor(), n=320), BarrierError, "late-wait",
                 ["wait on full[0] with parity 0", "2 phases behind", "full[0]: 3 phase(s) completed"],
                 id="wait-two-phases-behind"),
    # An over-declared transaction count with a waiter is a deadlock; the listing shows the bytes still expected.
    pytest.param(lambda: run_matmul(bk.ExpectTooManyBytes()), DeadlockError, "v3-consumer-wait",
                 ["in mbarrier.wait on consumer_barriers[0] for phase parity 0",
                  "consumer_barriers[0]: 0 phase(s) completed, current phase parity 0, 0/1 arrivals pending, "
                  "tx-count 1024"], id="expect-too-many-bytes"),
    pytest.param(lambda: run_copy(bk.CopyReleaseWithExpectTx(), n=256), DeadlockError, "copy-producer-wait",
                 ["in mbarrier.wait on empty[0] for phase parity 0", "empty[0]: 0 phase(s) completed", "tx-count 8192"],
                 id="expect-tx-on-empty-deadlock"),
    # (d) indices running past the arrays
    pytest.param(lambda: run_matmul(bk.StageNeverWraps()), BoundsError, "no-wrap-wait",
                 ["barrier index 2 is out of bounds for consumer_barriers (2 barriers)"], id="stage-never-wraps"),
    pytest.param(lambda: run_matmul(bk.PhasesOneShort()), BoundsError, "short-phases-wait",
                 ["index 1 is out of bounds for dimension 0 of register tensor consumer_phases (size 1)"],
                 id="phases-one-short"),
]


def assert_names_line(error, marker: str) -> None:
    """The error's location is the marked line, reached from the kernel body: bugs inside a helper method are
    named as ``<call in the kernel body> -> Class.helper at <marked line>``."""
    frames = error.location.split(" -> ")
    assert frames[0].startswith(f"{BUGGY_FILE}:"), error.location
    assert frames[-1].endswith(f"{BUGGY_FILE}:{bk.marker_line(marker)}"), error.location
    assert str(error).startswith(f"{error.location}: ")


@pytest.mark.parametrize("run, error_class, marker, fragments", KERNEL_BUGS)
def test_kernel_error(run, error_class, marker, fragments):
    with pytest.raises(warpspec.KernelError) as caught:
        run()
    error = caught.value
    assert type(error) is error_class, f"{type(error).__name__}: {error}"
    assert_names_line(error, marker)
    # Fragments name innermost lines; drop the call sites that lead to them ("kernel.py:55 -> V3.consume at ").
    text = re.sub(r"\S+:\d+ -> [\w.]+ at ", "", str(error))
    assert f"{at(marker)}:" in text
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in:\n{text}"
    assert error.tasks.startswith("thread partitions:")


COMPILE_BUGS = [
    pytest.param(lambda: run_matmul(bk.UnknownName()), "unknown-name", "unknown name 'consumer_phase'",
                 id="unknown-name"),
    pytest.param(lambda: run_matmul(bk.UsesThreadIdx()), "thread-idx", "self.threadIdx is not part of the language",
                 id="thread-idx"),
    pytest.param(lambda: run_matmul(bk.WgmmaFromOneWarp()), "wgmma-one-warp",
                 "wgmma.fence must be executed by whole warpgroups", id="wgmma-from-one-warp"),
    pytest.param(lambda: bk.TmaFromWarpgroup()(64, np.zeros((64, 64), dtype=np.float16)), "tma-warpgroup",
                 "tma.global_to_shared is issued by one thread", id="tma-from-warpgroup"),
    pytest.param(lambda: bk.RuntimeSharedShape()(64, np.zeros((64, 64), dtype=np.float16)), "runtime-shape",
                 "shared_tensor shape must be known at compile time, but it depends on runtime values",
                 id="runtime-shared-shape"),
    pytest.param(lambda: run_matmul(bk.WhileLoop()), "while-loop", "while loops are not supported",
                 id="while-loop"),
]


@pytest.mark.parametrize("run, marker, phrase", COMPILE_BUGS)
def test_compile_error(run, marker, phrase):
    with pytest.raises(CompileError) as caught:
        run()
    error = caught.value
    assert_names_line(error, marker)
    assert f"{at(marker)}:" in re.sub(r"\S+:\d+ -> [\w.]+ at ", "", str(error))
    assert phrase in str(error)


def test_wgmma_from_one_warp_names_the_group():
    with pytest.raises(CompileError, match=r"not threads \[128, 160\)"):
        run_matmul(bk.WgmmaFromOneWarp())


def test_tma_from_warpgroup_counts_the_threads():
    with pytest.raises(CompileError, match="not from 128 threads"):
        bk.TmaFromWarpgroup()(64, np.zeros((64, 64), dtype=np.float16))


@pytest.mark.parametrize("seed", range(20))
def test_releases_before_async_reads_finish_are_caught_under_every_seed(seed, monkeypatch):
    """However early a seeded run completes the copy engine's or the tensor cores' read, the program only knows it
    at wait_group: a buffer released before that races with its refill in every schedule."""
    monkeypatch.setenv("WARPSPEC_EMULATOR_SEED", str(seed))
    # Either the read is still in flight at the refill, or it ended (was observed) after the release the refill
    # is ordered by: both say the same thing about the same buffer.
    expected = r"writes {0}\[0\] while an asynchronous read|touches {0}\[0\], which threads \d+-\d+ read without"
    with pytest.raises(RaceError, match=expected.format("sa")):
        run_matmul(bk.ReleaseBeforeWgmmaWait())
    with pytest.raises(RaceError, match=expected.format("buffers")):
        run_copy(bk.CopyReleaseBeforeStoreWait())
