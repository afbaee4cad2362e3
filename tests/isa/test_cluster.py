"""warpspec.isa.cluster: thread-block clusters on the emulator (tests/kernels/cluster_kernels.py): the blocks of a
cluster run together, TMA multicast fills every listed block, remote arrivals reach the partner's barriers, and each
way to get them wrong is its exact error class at the line that explains it. Without a seed the schedule is deterministic; the correct
kernel is also checked under random interleavings across the blocks of a cluster; the CUDA build's multicast,
remote arrivals and cluster barrier are read from its SASS, and a ``gpu``-marked run checks multicast on a GPU."""

import re

import numpy as np
import pytest

from tests.kernels import cluster_kernels as ck
from tests.support.example_checks import emulator  # noqa: F401  (autouse: the emulator, its deterministic schedule)
import warpspec
from warpspec import ArgumentError, BarrierError, BoundsError, CompileError, RaceError
from warpspec.cuda import sass
from warpspec.cuda.codegen import generate
from warpspec.cuda.launch import compile_kernel
from warpspec.emulator.run import SEED_VARIABLE, cluster_blocks, cluster_origins
from warpspec.runtime import kernel_for

# Ragged: the last band and the last tile of each band are partial; rows of 592 bytes keep TMA's 16-byte pitch.
M, N = 100, 296


def run_stream(kernel, m=M, n=N):
    """Run a ClusterStream kernel; returns (X, Y0, Y1), Y0 and Y1 starting as NaN so unwritten tiles show."""
    x = np.random.default_rng(0).standard_normal((m, n)).astype(np.float16)
    y0, y1 = np.full_like(x, np.nan), np.full_like(x, np.nan)
    kernel(m, n, x, y0, y1)
    return x, y0, y1


def at(marker: str) -> str:
    """Where an error names the marked line of cluster_kernels.py (the innermost frame of its location)."""
    return f"cluster_kernels.py:{ck.marker_line(marker)}"


def test_clusters_are_cut_from_the_grid_in_rank_order():
    assert cluster_origins((4, 2, 1), (2, 1, 1)) == [(0, 0, 0), (2, 0, 0), (0, 1, 0), (2, 1, 0)]
    assert cluster_blocks((2, 2, 0), (2, 2, 1)) == [(2, 2, 0), (3, 2, 0), (2, 3, 0), (3, 3, 0)]


def test_multicast_fills_both_blocks():
    x, y0, y1 = run_stream(ck.ClusterStream())
    assert np.array_equal(y0, x) and np.array_equal(y1, x)


@pytest.mark.parametrize("seed", range(4))
def test_multicast_fills_both_blocks_under_random_interleavings(seed, monkeypatch):
    monkeypatch.setenv(SEED_VARIABLE, str(seed))
    x, y0, y1 = run_stream(ck.ClusterStream(tile_m=32, tile_n=32, num_buffers=3))
    assert np.array_equal(y0, x) and np.array_equal(y1, x)


KERNEL_BUGS = [
    pytest.param(ck.NoSyncAfterInit, BarrierError, "multicast",
                 ["tma.global_to_shared multicast to ranks [0, 1] by threads 0-31 of block rank 0 signals full[0] "
                  "of block rank 1, but that block's mbarrier.alloc is not ordered before it",
                  "call self.cluster_sync() after mbarrier.alloc"], id="no-cluster-sync-after-init"),
    pytest.param(ck.NoSyncBeforeExit, RaceError, "release",
                 ["mbarrier.arrive(cta=0) by threads 32-63 of block rank 1 reaches block rank 0, which may have "
                  "exited by then", "end the kernel with self.cluster_sync()"], id="no-cluster-sync-before-exit"),
    pytest.param(ck.ReleasesOnlyLocally, RaceError, "multicast",
                 ["tma.global_to_shared multicast to ranks [0, 1] writes buffers[0] of block rank 1 while an "
                  "asynchronous read of it (a wgmma or a TMA store) is still in flight"], id="release-in-one-block"),
    pytest.param(ck.ExpectsHalf, BarrierError, "multicast",
                 ["tma.global_to_shared multicast to ranks [0, 1] delivered 4096 bytes to full[0] of block rank 1 "
                  "after every arrival of its phase was in, driving its transaction count to -2048"],
                 id="multicast-tx-mismatch"),
    pytest.param(ck.ReleasesPastTheCluster, BoundsError, "past-the-cluster",
                 ["mbarrier.arrive(cta=2): cluster rank 2 is outside the cluster of 2 block(s) (ranks 0-1)"],
                 id="rank-outside-the-cluster"),
]


@pytest.mark.parametrize("kernel, error_class, marker, fragments", KERNEL_BUGS)
def test_kernel_error(kernel, error_class, marker, fragments):
    with pytest.raises(warpspec.KernelError) as caught:
        run_stream(kernel())
    error = caught.value
    assert type(error) is error_class, f"{type(error).__name__}: {error}"
    assert error.location.endswith(at(marker)), error.location
    text = str(error)
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in:\n{text}"
    assert error.tasks.startswith("thread partitions:\n  threads 0-31 of block rank 0: ")


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kernel, error_class, marker", [
    pytest.param(ck.NoSyncAfterInit, BarrierError, "multicast", id="no-cluster-sync-after-init"),
    pytest.param(ck.NoSyncBeforeExit, RaceError, "release", id="no-cluster-sync-before-exit"),
    pytest.param(ck.ReleasesOnlyLocally, RaceError, "multicast", id="release-in-one-block"),
])
def test_cluster_mistakes_are_caught_under_every_seed(kernel, error_class, marker, seed, monkeypatch):
    monkeypatch.setenv(SEED_VARIABLE, str(seed))
    with pytest.raises(error_class) as caught:
        run_stream(kernel())
    assert caught.value.location.endswith(at(marker)), caught.value.location


def test_multicast_into_a_block_that_has_exited():
    x = np.zeros((64, 64), dtype=np.float16)
    with pytest.raises(RaceError) as caught:
        ck.LeavingPartner()(64, 64, x, np.zeros_like(x))
    assert caught.value.location.endswith(at("leaving-multicast"))
    assert ("tma.global_to_shared multicast to ranks [0, 1] by threads 0-31 of block rank 0 reaches block rank 1, "
            "whose threads have all exited") in str(caught.value)


@pytest.mark.parametrize("seed", range(3))
def test_multicast_into_a_block_that_may_exit_first_under_every_seed(seed, monkeypatch):
    monkeypatch.setenv(SEED_VARIABLE, str(seed))
    x = np.zeros((64, 64), dtype=np.float16)
    with pytest.raises(RaceError, match="block rank 1") as caught:
        ck.LeavingPartner()(64, 64, x, np.zeros_like(x))
    assert caught.value.location.endswith(at("leaving-multicast"))


@pytest.mark.parametrize("kernel, marker, phrase", [
    pytest.param(ck.ConstantRankPastTheCluster, "constant-rank",
                 "mbarrier.arrive cta: cluster rank 2 is outside the cluster of 2 block(s)", id="arrive-rank"),
    pytest.param(ck.MulticastPastTheCluster, "mc-rank",
                 "tma.global_to_shared multicast: cluster rank 2 is outside the cluster of 2 block(s)",
                 id="multicast-rank"),
    pytest.param(ck.SyncInGroup, "sync-in-group", "self.cluster_sync() must be executed by every thread of the block",
                 id="cluster-sync-in-a-group"),
])
def test_compile_error(kernel, marker, phrase):
    with pytest.raises(CompileError) as caught:
        run_stream(kernel())
    assert caught.value.location.endswith(at(marker)), caught.value.location
    assert phrase in str(caught.value)


def test_a_grid_that_is_no_multiple_of_the_cluster_is_refused_before_any_block_runs():
    """The message names the line that set the grid (ClusterStream's, which OddGrid's grid_x feeds)."""
    with pytest.raises(ArgumentError) as raised:
        run_stream(ck.OddGrid(), m=70)
    assert str(raised.value) == (f"grid [3, 1, 1] (self.attrs.blocks at {ck.__file__}:{ck.marker_line('grid')}) is not a "
                                 f"multiple of the cluster shape [2, 1, 1] in dimension x")


# ------------------------------------------------------------------------------------------------ CUDA back end


def test_cuda_emits_multicast_remote_arrive_and_the_cluster_barrier():
    kernel = kernel_for(ck.ClusterStream(), {})
    source = generate(kernel).source
    assert ("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster "
            "[%0], [%1, {%2, %3}], [%4], %5;") in source
    assert '"h"((unsigned short)3u)' in source  # ranks 0 and 1
    assert source.count("mapa.shared::cluster.u32 remote, %0, %1;") == 2
    assert source.count("barrier.cluster.arrive.release.aligned;") == 2
    assert "if ((cluster_ctarank() == 0))" in source
    counts = sass.count_instructions(sass.disassemble(compile_kernel(kernel).module.cubin),
                                     ["UTMALDG.2D.MULTICAST", "UCGABAR_ARV", "UCGABAR_WAIT", "LDL", "STL"])
    assert counts["UTMALDG.2D.MULTICAST"] == 1
    assert counts["UCGABAR_ARV"] == 2 and counts["UCGABAR_WAIT"] == 2
    assert counts["LDL"] == 0 and counts["STL"] == 0


def test_a_group_split_into_partitions_stores_its_rows_to_shared_memory():
    # Each partition writes only its own rows: no race between them (the check once covered the whole tile).
    x = np.random.default_rng(0).standard_normal((128, 64)).astype(np.float16)
    y = np.full_like(x, np.nan)
    ck.SplitGroupStore()(x, y)
    assert np.array_equal(y, x)


def test_without_clusters_every_block_is_rank_0_and_cluster_sync_compiles_to_the_cluster_barrier():
    x = np.random.default_rng(0).standard_normal((200, 64)).astype(np.float16)
    y = np.full_like(x, np.nan)
    ck.WithoutClusters()(200, x, y)
    assert np.array_equal(y, x)
    source = generate(kernel_for(ck.WithoutClusters(), {})).source
    assert "barrier.cluster.arrive.release.aligned;" in source and "if ((cluster_ctarank() == 0))" in source
    assert sass.count_instructions(sass.disassemble(compile_kernel(kernel_for(ck.WithoutClusters(), {})).module.cubin),
                                   ["UCGABAR_ARV"])["UCGABAR_ARV"] == 1


@pytest.mark.gpu
def test_gpu_multicast_fills_both_blocks():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal((M, N)).astype(np.float16)
    y0, y1 = (torch.full((M, N), float("nan"), device="cuda", dtype=torch.float16) for _ in range(2))
    with warpspec.use_backend("cuda"):
        ck.ClusterStream()(M, N, torch.from_numpy(x).cuda(), y0, y1)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(y0.cpu().numpy(), x)
    np.testing.assert_array_equal(y1.cpu().numpy(), x)
