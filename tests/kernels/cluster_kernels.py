"""Thread-block cluster kernels, correct and with planted bugs, for tests/isa/test_cluster.py.

``ClusterStream`` is the cluster form of examples/tma_copy.py: clusters of two blocks stream a band of X tile by
tile; rank 0 multicasts each tile into both blocks and each block stores it into its own output (rank 0 into Y0,
rank 1 into Y1), so Y0 = Y1 = X. A buffer's empty barrier counts the consumers of both blocks: each consumer
arrives on its own block's and its partner's (``cta=rank``), because rank 0 refills the buffer in both. Its roles
are helper methods so a variant overrides only what it breaks. A line an error must name ends with
``# <<< name`` (``marker_line(name)``).
"""

from warpspec import Script, cdiv, float16, int32, uint32
from tests.support.markers import markers_of

marker_line = markers_of(__file__)


class ClusterStream(Script):
    """Y0 = Y1 = X through TMA multicast in clusters of two blocks, correct."""

    def __init__(self, tile_m=32, tile_n=64, num_buffers=2):
        super().__init__()
        self.tile_m = tile_m
        self.tile_n = tile_n
        self.num_buffers = num_buffers
        self.empty_arrivals = 2  # the consumers of both blocks release each buffer

    def __call__(self, m_size: int32, n_size: int32, x_ptr: ~float16, y0_ptr: ~float16, y1_ptr: ~float16):
        self.attrs.blocks = [self.grid_x(m_size)]  # <<< grid
        self.attrs.cluster_blocks = [2]
        self.attrs.warps = 2
        tile_m, tile_n, num_buffers = self.tile_m, self.tile_n, self.num_buffers
        offset_m: int32 = tile_m * (self.blockIdx.x // 2)  # both blocks of a cluster handle the same band
        num_tiles: int32 = cdiv(n_size, tile_n)
        x = self.global_view(x_ptr, dtype=float16, shape=[m_size, n_size])
        y0 = self.global_view(y0_ptr, dtype=float16, shape=[m_size, n_size])
        y1 = self.global_view(y1_ptr, dtype=float16, shape=[m_size, n_size])
        buffers = self.shared_tensor(dtype=float16, shape=[num_buffers, tile_m, tile_n])
        full = self.mbarrier.alloc(counts=[1 for _ in range(num_buffers)])
        empty = self.mbarrier.alloc(counts=[self.empty_arrivals for _ in range(num_buffers)])
        self.after_init()
        with self.thread_group(thread_begin=0, num_threads=32):  # producer warp
            for tile in self.range(num_tiles):
                buffer: int32 = tile % num_buffers
                lap: uint32 = (tile // num_buffers) & 1
                self.mbarrier.wait(empty[buffer], phase=lap ^ 1)
                with self.single_thread():
                    self.expect(full[buffer], buffers[buffer].nbytes)
                    if self.cluster_rank == 0:
                        self.load(x, buffers[buffer], offset_m, tile * tile_n, full[buffer])
        with self.thread_group(thread_begin=32, num_threads=32):  # consumer warp
            for tile in self.range(num_tiles):
                buffer: int32 = tile % num_buffers
                lap: uint32 = (tile // num_buffers) & 1
                self.mbarrier.wait(full[buffer], phase=lap)  # <<< stream-consumer-wait
                with self.single_thread():
                    if self.cluster_rank == 0:
                        self.tma.shared_to_global(src=buffers[buffer], dst=y0, offsets=[offset_m, tile * tile_n])
                    else:
                        self.tma.shared_to_global(src=buffers[buffer], dst=y1, offsets=[offset_m, tile * tile_n])
                    self.tma.commit_group()
                    self.tma.wait_group(0)
                    self.release(empty[buffer])
        self.before_exit()

    def grid_x(self, m_size):
        """Two blocks per band of rows."""
        return 2 * cdiv(m_size, self.tile_m)

    def after_init(self):
        """Every block's barriers are initialised before any block signals another's."""
        self.cluster_sync()

    def expect(self, barrier, nbytes):
        """Each block expects the bytes of the multicast copy on its own barrier."""
        self.mbarrier.arrive_and_expect_tx(barrier, transaction_bytes=nbytes)

    def load(self, x, buffer, offset_m, offset_n, barrier):
        """Rank 0 loads the tile into the buffer of both blocks."""
        self.tma.global_to_shared(src=x, dst=buffer, offsets=[offset_m, offset_n], mbarrier=barrier,  # <<< multicast
                                  multicast=[0, 1])

    def release(self, barrier):
        """Free the buffer in both blocks: rank 0 refills both."""
        for rank in range(2):
            self.mbarrier.arrive(barrier, cta=rank)  # <<< release

    def before_exit(self):
        """No block exits while the other may still signal its barriers."""
        self.cluster_sync()


class NoSyncAfterInit(ClusterStream):
    """Rank 0 multicasts (and signals rank 1's barrier) before rank 1's mbarrier.alloc is ordered before it."""

    def after_init(self):
        pass


class NoSyncBeforeExit(ClusterStream):
    """Rank 1 may exit while rank 0's consumer still arrives on its empty barriers."""

    def before_exit(self):
        pass


class ReleasesOnlyLocally(ClusterStream):
    """Each consumer frees the buffer in its own block only, and the empty barriers count one arrival: rank 0
    refills rank 1's buffer while rank 1's consumer may still be storing it out."""

    def __init__(self):
        super().__init__(num_buffers=1)
        self.empty_arrivals = 1

    def release(self, barrier):
        self.mbarrier.arrive(barrier)


class ExpectsHalf(ClusterStream):
    """Rank 1 expects half the bytes the multicast delivers into it."""

    def expect(self, barrier, nbytes):
        if self.cluster_rank == 0:
            self.mbarrier.arrive_and_expect_tx(barrier, transaction_bytes=nbytes)
        else:
            self.mbarrier.arrive_and_expect_tx(barrier, transaction_bytes=nbytes // 2)


class ReleasesPastTheCluster(ClusterStream):
    """The partner's rank computed as rank + 1: rank 1 arrives on a rank 2 that the cluster does not have."""

    def release(self, barrier):
        self.mbarrier.arrive(barrier)
        self.mbarrier.arrive(barrier, cta=self.cluster_rank + 1)  # <<< past-the-cluster


class ConstantRankPastTheCluster(ClusterStream):
    """A compile-time rank outside the cluster of two."""

    def release(self, barrier):
        self.mbarrier.arrive(barrier, cta=2)  # <<< constant-rank


class MulticastPastTheCluster(ClusterStream):
    """A multicast list naming a rank outside the cluster of two."""

    def load(self, x, buffer, offset_m, offset_n, barrier):
        self.tma.global_to_shared(src=x, dst=buffer, offsets=[offset_m, offset_n], mbarrier=barrier,  # <<< mc-rank
                                  multicast=[0, 2])


class OddGrid(ClusterStream):
    """One block per band: an odd grid cannot be cut into clusters of two."""

    def grid_x(self, m_size):
        return cdiv(m_size, self.tile_m)


class SyncInGroup(ClusterStream):
    """cluster_sync called by the producer warp only."""

    def expect(self, barrier, nbytes):
        self.cluster_sync()  # <<< sync-in-group


class LeavingPartner(Script):
    """Rank 0 multicasts a tile into both blocks, but rank 1 neither expects nor waits for it: it leaves right after
    the init sync, and the copy lands in a block that has exited."""

    def __call__(self, m_size: int32, n_size: int32, x_ptr: ~float16, y_ptr: ~float16):
        self.attrs.blocks = [2]
        self.attrs.cluster_blocks = [2]
        self.attrs.warps = 1
        x = self.global_view(x_ptr, dtype=float16, shape=[m_size, n_size])
        y = self.global_view(y_ptr, dtype=float16, shape=[m_size, n_size])
        tile = self.shared_tensor(dtype=float16, shape=[32, 64])
        full = self.mbarrier.alloc(counts=[1])
        self.cluster_sync()
        if self.cluster_rank == 0:
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(full[0], transaction_bytes=tile.nbytes)
                self.tma.global_to_shared(src=x, dst=tile, offsets=[0, 0], mbarrier=full[0],  # <<< leaving-multicast
                                          multicast=[0, 1])
            self.mbarrier.wait(full[0], phase=0)
            with self.single_thread():
                self.tma.shared_to_global(src=tile, dst=y, offsets=[0, 0])
                self.tma.commit_group()
                self.tma.wait_group(0)


class SplitGroupStore(Script):
    """Y = X through shared memory, stored by a 256-thread group that a nested group splits into two partitions, as
    V7's per-warpgroup release splits its consumers: each partition stores its own rows of the tile."""

    def __call__(self, x_ptr: ~float16, y_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 8
        x = self.global_view(x_ptr, dtype=float16, shape=[128, 64])
        y = self.global_view(y_ptr, dtype=float16, shape=[128, 64])
        tile = self.shared_tensor(dtype=float16, shape=[128, 64])
        with self.thread_group(thread_begin=0, num_threads=256):
            self.store_shared(tile, self.load_global(x, offsets=[0, 0], shape=[128, 64]))
            with self.thread_group(thread_begin=128, num_threads=128):
                self.sync()
            self.fence_proxy_async()
            self.sync()
            with self.single_thread():
                self.tma.shared_to_global(src=tile, dst=y, offsets=[0, 0])
                self.tma.commit_group()
                self.tma.wait_group(0)


class WithoutClusters(Script):
    """Y = X by blocks of 64 rows with no cluster shape: every block is rank 0 of a cluster of one, and
    cluster_sync() is a barrier of its own block."""

    def __call__(self, m_size: int32, x_ptr: ~float16, y_ptr: ~float16):
        self.attrs.blocks = [cdiv(m_size, 64)]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float16, shape=[m_size, 64])
        y = self.global_view(y_ptr, dtype=float16, shape=[m_size, 64])
        tile = self.shared_tensor(dtype=float16, shape=[64, 64])
        self.store_shared(tile, self.load_global(x, offsets=[64 * self.blockIdx.x, 0], shape=[64, 64]))
        self.fence_proxy_async()
        self.cluster_sync()
        if self.cluster_rank == 0:
            with self.single_thread():
                self.tma.shared_to_global(src=tile, dst=y, offsets=[64 * self.blockIdx.x, 0])
                self.tma.commit_group()
                self.tma.wait_group(0)
