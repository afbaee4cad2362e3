"""Small kernels whose blocks touch global memory other blocks touch, for tests/emulator/test_global_races.py (and
tests/isa/test_tma.py's reduce-adds).

Whether they race depends on the arguments (which rows each block reads and writes, and which arrays alias), or on a
flag that drops a ``tma.wait_group``. A line that an error must name ends with ``# <<< name``; ``marker_line(name)``
finds its number.
"""

from warpspec import Script, cdiv, float16, float32, int32
from tests.support.markers import markers_of


marker_line = markers_of(__file__)


class MoveRows(Script):
    """``out[write_step·b + shift + i] = x[read_step·b + i] + 1`` for the 16 rows ``i`` of each of two blocks
    ``b``, 64 columns, through registers."""

    def __call__(self, m_size: int32, read_step: int32, write_step: int32, shift: int32, x_ptr: ~float32,
                 out_ptr: ~float32):
        self.attrs.blocks = [2]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[m_size, 64])
        out = self.global_view(out_ptr, dtype=float32, shape=[m_size, 64])
        tile = self.load_global(x, offsets=[read_step * self.blockIdx.x, 0], shape=[16, 64])  # <<< move-load
        self.store_global(out, tile + 1.0, offsets=[write_step * self.blockIdx.x + shift, 0])  # <<< move-store


class WidenRows(Script):
    """``out = float32(x)``, 16 rows of 64 columns per block over two blocks: float16 in, float32 out."""

    def __call__(self, m_size: int32, x_ptr: ~float16, out_ptr: ~float32):
        self.attrs.blocks = [2]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float16, shape=[m_size, 64])
        out = self.global_view(out_ptr, dtype=float32, shape=[m_size, 64])
        rows = [16 * self.blockIdx.x, 0]
        tile = self.load_global(x, offsets=rows, shape=[16, 64])  # <<< widen-load
        self.store_global(out, self.cast(tile, float32), offsets=rows)


class StoreThenRead(Script):
    """One warp, one block: TMA-load ``src`` [64, 64] into shared memory, TMA-store it to ``dst``, then read ``dst``
    back (with ``load_global``, or a TMA load when ``tma_reader``) into ``out``; ``wait`` says whether the store's
    bulk group is waited for before the read."""

    def __init__(self, wait: bool, tma_reader: bool):
        super().__init__()
        self.wait = wait
        self.tma_reader = tma_reader

    def __call__(self, src_ptr: ~float16, dst_ptr: ~float16, out_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 1
        src = self.global_view(src_ptr, dtype=float16, shape=[64, 64])
        dst = self.global_view(dst_ptr, dtype=float16, shape=[64, 64])
        out = self.global_view(out_ptr, dtype=float16, shape=[64, 64])
        tiles = self.shared_tensor(dtype=float16, shape=[2, 64, 64])
        loaded = self.mbarrier.alloc(counts=[1, 1])
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(loaded[0], transaction_bytes=tiles[0].nbytes)
            self.tma.global_to_shared(src=src, dst=tiles[0], offsets=[0, 0], mbarrier=loaded[0])
        self.mbarrier.wait(loaded[0], phase=0)
        with self.single_thread():
            self.tma.shared_to_global(src=tiles[0], dst=dst, offsets=[0, 0])  # <<< store-dst
            self.tma.commit_group()
            if self.wait:
                self.tma.wait_group(0)
        if self.tma_reader:
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(loaded[1], transaction_bytes=tiles[1].nbytes)
                self.tma.global_to_shared(src=dst, dst=tiles[1], offsets=[0, 0], mbarrier=loaded[1])  # <<< tma-read
            self.mbarrier.wait(loaded[1], phase=0)
            self.store_global(out, self.load_shared(tiles[1]), offsets=[0, 0])
        else:
            tile = self.load_global(dst, offsets=[0, 0], shape=[64, 64])  # <<< load-read
            self.store_global(out, tile, offsets=[0, 0])


class StoreThenReadElsewhere(Script):
    """Warp 0 TMA-stores ``src`` [64, 64] (through shared memory) to ``dst`` and waits for it; warp 1 then reads
    ``dst`` back into ``out`` with ``load_global``. With ``ordered``, warp 0 arrives on ``done`` after its wait and
    warp 1 waits on it; without, warp 1 only waits for a second TMA load that warp 0 issued before its wait, which
    orders nothing after the wait."""

    def __init__(self, ordered: bool):
        super().__init__()
        self.ordered = ordered

    def __call__(self, src_ptr: ~float16, dst_ptr: ~float16, out_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 2
        src = self.global_view(src_ptr, dtype=float16, shape=[64, 64])
        dst = self.global_view(dst_ptr, dtype=float16, shape=[64, 64])
        out = self.global_view(out_ptr, dtype=float16, shape=[64, 64])
        tiles = self.shared_tensor(dtype=float16, shape=[2, 64, 64])
        loaded = self.mbarrier.alloc(counts=[1, 1])
        done = self.mbarrier.alloc(counts=[32])
        with self.thread_group(thread_begin=0, num_threads=32):
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(loaded[0], transaction_bytes=tiles[0].nbytes)
                self.tma.global_to_shared(src=src, dst=tiles[0], offsets=[0, 0], mbarrier=loaded[0])
            self.mbarrier.wait(loaded[0], phase=0)
            with self.single_thread():
                self.tma.shared_to_global(src=tiles[0], dst=dst, offsets=[0, 0])
                self.tma.commit_group()
                self.mbarrier.arrive_and_expect_tx(loaded[1], transaction_bytes=tiles[1].nbytes)
                self.tma.global_to_shared(src=src, dst=tiles[1], offsets=[0, 0], mbarrier=loaded[1])
                self.tma.wait_group(0)  # <<< elsewhere-wait
            self.mbarrier.arrive(done[0])
        with self.thread_group(thread_begin=32, num_threads=32):
            if self.ordered:
                self.mbarrier.wait(done[0], phase=0)
                self.mbarrier.wait(loaded[1], phase=0)  # no copy may be in flight when the block exits
            else:
                self.mbarrier.wait(loaded[1], phase=0)
            tile = self.load_global(dst, offsets=[0, 0], shape=[64, 64])  # <<< elsewhere-read
            self.store_global(out, tile, offsets=[0, 0])


class DoubledView(Script):
    """Views ``x`` as ``2·m_size`` rows, a size computed through a local variable (the launch still computes it),
    and copies the 16 rows at ``row`` into ``out``."""

    def __call__(self, m_size: int32, row: int32, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        view_rows: int32 = 2 * m_size
        x = self.global_view(x_ptr, dtype=float32, shape=[view_rows, 64])
        out = self.global_view(out_ptr, dtype=float32, shape=[16, 64])
        self.store_global(out, self.load_global(x, offsets=[row, 0], shape=[16, 64]), offsets=[0, 0])  # <<< doubled


class BlockDependentView(Script):
    """Views ``x`` with as many rows as the block's index: a size only the block knows."""

    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = [2]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[self.blockIdx.x + 1, 64])  # <<< block-view
        self.store_global(x, self.load_global(x, offsets=[0, 0], shape=[1, 64]), offsets=[0, 0])


class ReduceTiles(Script):
    """dst[r, c] += sum over p of src[p, r, c] with TMA reduce-adds: block (p, t) adds part p's 64-row tile t of a
    [parts, m, 64] float32 tensor into the same rows of dst [m, 64], so the ``parts`` blocks of a tile add into the
    same elements. ``mistake`` plants one misuse: part 0 stores its tile ("store"), reads dst's tile before its add
    ("read"), or never waits for its reduce-add ("no-wait"); part 1 reads dst's tile after its add ("read-back")."""

    def __init__(self, mistake=None):
        super().__init__()
        self.mistake = mistake

    def __call__(self, parts: int32, m: int32, src_ptr: ~float32, dst_ptr: ~float32):
        self.attrs.blocks = [parts, cdiv(m, 64)]
        self.attrs.warps = 1
        src = self.global_view(src_ptr, dtype=float32, shape=[parts, m, 64])
        dst = self.global_view(dst_ptr, dtype=float32, shape=[1, m, 64])
        tile = self.shared_tensor(dtype=float32, shape=[1, 64, 64])
        full = self.mbarrier.alloc(counts=[1])
        plain = self.global_view(dst_ptr, dtype=float32, shape=[m, 64])  # dst as load_global reads it
        rows: int32 = 64 * self.blockIdx.y
        with self.single_thread():
            self.mbarrier.arrive_and_expect_tx(full[0], transaction_bytes=tile.nbytes)
            self.tma.global_to_shared(src=src, dst=tile, offsets=[self.blockIdx.x, rows, 0], mbarrier=full[0])
        self.mbarrier.wait(full[0], phase=0)
        if self.mistake == "read":
            if self.blockIdx.x == 0:
                self.load_global(plain, offsets=[rows, 0], shape=[64, 64])
        with self.single_thread():
            if self.mistake == "store":
                if self.blockIdx.x == 0:
                    self.tma.shared_to_global(src=tile, dst=dst, offsets=[0, rows, 0])
                else:
                    self.tma.shared_to_global(src=tile, dst=dst, offsets=[0, rows, 0], reduce="add")  # <<< add
            else:
                self.tma.shared_to_global(src=tile, dst=dst, offsets=[0, rows, 0], reduce="add")  # <<< reduce-add
            self.tma.commit_group()
            if self.mistake != "no-wait":
                self.tma.wait_group(0)
        if self.mistake == "read-back":
            if self.blockIdx.x == 1:
                self.load_global(plain, offsets=[rows, 0], shape=[64, 64])  # <<< read-back


class RewriteAfterThePartnerRead(Script):
    """Clusters of two blocks over x [64, 64]: both blocks read it, a cluster barrier, then rank 0 writes it back
    plus one. Rank 1's read lies between rank 0's own read and its write; the emulator tracks no global memory
    through a cluster barrier (docs/emulator.md), so the write races with it."""

    def __call__(self, x_ptr: ~float32):
        self.attrs.blocks = [2]
        self.attrs.cluster_blocks = [2]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[64, 64])
        tile = self.load_global(x, offsets=[0, 0], shape=[64, 64])  # <<< partner-read
        self.cluster_sync()
        if self.cluster_rank == 0:
            self.store_global(x, tile + 1.0, offsets=[0, 0])  # <<< rewrite
