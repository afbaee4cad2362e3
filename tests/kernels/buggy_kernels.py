"""Kernels with planted bugs, for tests/emulator/test_planted_bugs.py and tests/cli/test_check.py.

Each class is the seed's V3 matmul or examples/tma_copy.py with one bug planted. ``V3`` and ``Copy`` split the
kernels into inlined helper methods (``produce``, ``consume``) so a variant overrides only the role it breaks.
Kernels must live in a real file: the front end reads their source.

A line that an error must name ends with a marker comment ``# <<< name``; ``marker_line(name)`` finds its number,
so the tests stay right when lines move.
"""

from warpspec import Script, autotune, cdiv, float16, float32, int32, uint32
from tests.support.markers import markers_of


marker_line = markers_of(__file__)


# ------------------------------------------------------------------------------------------------------ V3 matmul


class V3(Script):
    """The seed's V3 (one TMA producer warp, one consumer warpgroup), correct, with its roles as helpers."""

    def __init__(self, num_stages=2, block_m=128, block_n=64, block_k=64):
        super().__init__()
        self.num_stages = num_stages
        self.block_m = block_m
        self.block_n = block_n
        self.block_k = block_k
        self.empty_arrivals = 128  # every consumer thread arrives once to release a stage

    def __call__(self, m_size: int32, n_size: int, k_size: int, a_ptr: ~float16, b_ptr: ~float16,
                 c_ptr: ~float16):
        self.attrs.blocks = [cdiv(m_size, self.block_m), cdiv(n_size, self.block_n)]
        self.attrs.warps = 5
        offset_m: int32 = self.block_m * self.blockIdx.x
        offset_n: int32 = self.block_n * self.blockIdx.y
        ga = self.global_view(a_ptr, dtype=float16, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float16, shape=[n_size, k_size])
        sa = self.shared_tensor(dtype=float16, shape=[self.num_stages, self.block_m, self.block_k])
        sb = self.shared_tensor(dtype=float16, shape=[self.num_stages, self.block_n, self.block_k])
        acc = self.register_tensor(dtype=float32, shape=[self.block_m, self.block_n], init=0.0)
        consumer_barriers = self.mbarrier.alloc(counts=[1 for _ in range(self.num_stages)])
        producer_barriers = self.mbarrier.alloc(counts=[self.empty_arrivals for _ in range(self.num_stages)])
        with self.thread_group(thread_begin=128, num_threads=32):
            self.produce(ga, gb, sa, sb, consumer_barriers, producer_barriers,  # <<< v3-produce
                         offset_m, offset_n, k_size)
        with self.thread_group(thread_begin=0, num_threads=128):
            self.consume(sa, sb, acc, consumer_barriers, producer_barriers, k_size)  # <<< v3-consume
            self.sync()
            casted_acc = self.cast(acc, dtype=float16)
            gc = self.global_view(c_ptr, dtype=float16, shape=[m_size, n_size])
            self.store_global(gc, casted_acc, offsets=[offset_m, offset_n])

    def produce(self, ga, gb, sa, sb, consumer_barriers, producer_barriers, offset_m, offset_n, k_size):
        stage: int32 = 0
        producer_phases = self.register_tensor(dtype=uint32, shape=[self.num_stages], init=1)
        for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
            self.mbarrier.wait(producer_barriers[stage], phase=producer_phases[stage])  # <<< v3-producer-wait
            producer_phases[stage] ^= 1
            with self.single_thread():
                nbytes = sa[stage].nbytes + sb[stage].nbytes
                self.mbarrier.arrive_and_expect_tx(consumer_barriers[stage], transaction_bytes=nbytes)
                self.tma.global_to_shared(src=ga, dst=sa[stage], offsets=[offset_m, offset_k],  # <<< v3-load-a
                                          mbarrier=consumer_barriers[stage])
                self.tma.global_to_shared(src=gb, dst=sb[stage], offsets=[offset_n, offset_k],
                                          mbarrier=consumer_barriers[stage])
            stage = (stage + 1) % self.num_stages
        for _ in self.range(min(self.num_stages, cdiv(k_size, self.block_k))):
            self.mbarrier.wait(producer_barriers[stage], phase=producer_phases[stage])
            producer_phases[stage] ^= 1
            stage = (stage + 1) % self.num_stages

    def consume(self, sa, sb, acc, consumer_barriers, producer_barriers, k_size):
        consumer_phases = self.register_tensor(dtype=uint32, shape=[self.num_stages], init=0)
        stage: int32 = 0
        for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
            self.mbarrier.wait(consumer_barriers[stage], phase=consumer_phases[stage])  # <<< v3-consumer-wait
            consumer_phases[stage] ^= 1
            self.wgmma.fence()
            self.wgmma.mma(sa[stage], sb[stage].transpose(), acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            self.mbarrier.arrive(producer_barriers[stage])  # <<< v3-consumer-release
            stage = (stage + 1) % self.num_stages


class ConsumerStartsAtPhaseOne(V3):
    """The consumer's phases start at 1 (the producer's initial phase): its first wait passes on the fresh barrier
    before any TMA load has landed, so WGMMA reads an empty stage."""

    def consume(self, sa, sb, acc, consumer_barriers, producer_barriers, k_size):
        consumer_phases = self.register_tensor(dtype=uint32, shape=[self.num_stages], init=1)
        stage: int32 = 0
        for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
            self.mbarrier.wait(consumer_barriers[stage], phase=consumer_phases[stage])
            consumer_phases[stage] ^= 1
            self.wgmma.fence()
            self.wgmma.mma(sa[stage], sb[stage].transpose(), acc)  # <<< phase-one-mma
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            self.mbarrier.arrive(producer_barriers[stage])
            stage = (stage + 1) % self.num_stages


class ConsumerNeverReleases(V3):
    """The consumer never arrives on the "empty" barriers: once every stage was filled, the producer waits
    forever."""

    def consume(self, sa, sb, acc, consumer_barriers, producer_barriers, k_size):
        consumer_phases = self.register_tensor(dtype=uint32, shape=[self.num_stages], init=0)
        stage: int32 = 0
        for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
            self.mbarrier.wait(consumer_barriers[stage], phase=consumer_phases[stage])  # <<< never-release-wait
            consumer_phases[stage] ^= 1
            self.wgmma.fence()
            self.wgmma.mma(sa[stage], sb[stage].transpose(), acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            stage = (stage + 1) % self.num_stages


class ReleaseBeforeWgmmaWait(V3):
    """The consumer releases the stage right after committing the WGMMA, before ``wgmma.wait_group(0)``: the
    producer refills the stage while the tensor cores may still read it."""

    def consume(self, sa, sb, acc, consumer_barriers, producer_barriers, k_size):
        consumer_phases = self.register_tensor(dtype=uint32, shape=[self.num_stages], init=0)
        stage: int32 = 0
        for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
            self.mbarrier.wait(consumer_barriers[stage], phase=consumer_phases[stage])
            consumer_phases[stage] ^= 1
            self.wgmma.fence()
            self.wgmma.mma(sa[stage], sb[stage].transpose(), acc)
            self.wgmma.commit_group()  # <<< early-release-commit
            self.mbarrier.arrive(producer_barriers[stage])
            self.wgmma.wait_group(0)
            stage = (stage + 1) % self.num_stages


class ConsumerSkipsFullWait(V3):
    """The consumer never waits on the "full" barriers: WGMMA reads stages that TMA has not filled yet."""

    def consume(self, sa, sb, acc, consumer_barriers, producer_barriers, k_size):
        stage: int32 = 0
        for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
            self.wgmma.fence()
            self.wgmma.mma(sa[stage], sb[stage].transpose(), acc)  # <<< skip-wait-mma
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            self.mbarrier.arrive(producer_barriers[stage])
            stage = (stage + 1) % self.num_stages


class EmptyCountTooSmall(V3):
    """The "empty" barriers expect 64 arrivals but all 128 consumer threads arrive: one release would complete two
    phases."""

    def __init__(self):
        super().__init__()
        self.empty_arrivals = 64


class ExpectTxByTheWholeWarp(V3):
    """``arrive_and_expect_tx`` is issued by the whole producer warp instead of one thread: 32 arrivals on a barrier
    that expects one."""

    def produce(self, ga, gb, sa, sb, consumer_barriers, producer_barriers, offset_m, offset_n, k_size):
        stage: int32 = 0
        producer_phases = self.register_tensor(dtype=uint32, shape=[self.num_stages], init=1)
        for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
            self.mbarrier.wait(producer_barriers[stage], phase=producer_phases[stage])
            producer_phases[stage] ^= 1
            nbytes = sa[stage].nbytes + sb[stage].nbytes
            self.mbarrier.arrive_and_expect_tx(consumer_barriers[stage], transaction_bytes=nbytes)  # <<< warp-expect
            self.tma.global_to_shared(src=ga, dst=sa[stage], offsets=[offset_m, offset_k],
                                      mbarrier=consumer_barriers[stage])
            self.tma.global_to_shared(src=gb, dst=sb[stage], offsets=[offset_n, offset_k],
                                      mbarrier=consumer_barriers[stage])
            stage = (stage + 1) % self.num_stages
        for _ in self.range(min(self.num_stages, cdiv(k_size, self.block_k))):
            self.mbarrier.wait(producer_barriers[stage], phase=producer_phases[stage])
            producer_phases[stage] ^= 1
            stage = (stage + 1) % self.num_stages


class ExpectTooManyBytes(V3):
    """The producer declares 1024 bytes more than its two loads deliver: the "full" barrier's phase never
    completes, and the consumer waits forever."""

    def produce(self, ga, gb, sa, sb, consumer_barriers, producer_barriers, offset_m, offset_n, k_size):
        stage: int32 = 0
        producer_phases = self.register_tensor(dtype=uint32, shape=[self.num_stages], init=1)
        for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
            self.mbarrier.wait(producer_barriers[stage], phase=producer_phases[stage])
            producer_phases[stage] ^= 1
            with self.single_thread():
                nbytes = sa[stage].nbytes + sb[stage].nbytes + 1024
                self.mbarrier.arrive_and_expect_tx(consumer_barriers[stage], transaction_bytes=nbytes)
                self.tma.global_to_shared(src=ga, dst=sa[stage], offsets=[offset_m, offset_k],
                                          mbarrier=consumer_barriers[stage])
                self.tma.global_to_shared(src=gb, dst=sb[stage], offsets=[offset_n, offset_k],
                                          mbarrier=consumer_barriers[stage])
            stage = (stage + 1) % self.num_stages
        for _ in self.range(min(self.num_stages, cdiv(k_size, self.block_k))):
            self.mbarrier.wait(producer_barriers[stage], phase=producer_phases[stage])
            producer_phases[stage] ^= 1
            stage = (stage + 1) % self.num_stages


class StageNeverWraps(V3):
    """The consumer advances its stage without ``% num_stages``: after the last stage it names a barrier past the
    end of the array."""

    def consume(self, sa, sb, acc, consumer_barriers, producer_barriers, k_size):
        consumer_phases = self.register_tensor(dtype=uint32, shape=[self.num_stages], init=0)
        stage: int32 = 0
        for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
            self.mbarrier.wait(consumer_barriers[stage], phase=consumer_phases[stage])  # <<< no-wrap-wait
            consumer_phases[stage] ^= 1
            self.wgmma.fence()
            self.wgmma.mma(sa[stage], sb[stage].transpose(), acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            self.mbarrier.arrive(producer_barriers[stage])
            stage = stage + 1


class PhasesOneShort(V3):
    """The consumer's phase array has one entry fewer than there are stages: reading the last stage's phase
    indexes past its end."""

    def consume(self, sa, sb, acc, consumer_barriers, producer_barriers, k_size):
        consumer_phases = self.register_tensor(dtype=uint32, shape=[self.num_stages - 1], init=0)
        stage: int32 = 0
        for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
            self.mbarrier.wait(consumer_barriers[stage], phase=consumer_phases[stage])  # <<< short-phases-wait
            consumer_phases[stage] ^= 1
            self.wgmma.fence()
            self.wgmma.mma(sa[stage], sb[stage].transpose(), acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            self.mbarrier.arrive(producer_barriers[stage])
            stage = (stage + 1) % self.num_stages


# ------------------------------------------------------------------------------------------------ compile errors


class UnknownName(V3):
    """A typo: ``consumer_phase`` for ``consumer_phases``."""

    def consume(self, sa, sb, acc, consumer_barriers, producer_barriers, k_size):
        consumer_phases = self.register_tensor(dtype=uint32, shape=[self.num_stages], init=0)
        stage: int32 = 0
        for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
            phase = consumer_phase[stage]  # noqa: F821  # <<< unknown-name
            self.mbarrier.wait(consumer_barriers[stage], phase=phase)


class UsesThreadIdx(V3):
    """The producer picks its issuing thread with ``self.threadIdx`` instead of ``single_thread()``."""

    def produce(self, ga, gb, sa, sb, consumer_barriers, producer_barriers, offset_m, offset_n, k_size):
        if self.threadIdx.x == 128:  # <<< thread-idx
            self.mbarrier.arrive(consumer_barriers[0])


class WgmmaFromOneWarp(V3):
    """The producer warp runs a WGMMA itself: WGMMA needs whole warpgroups."""

    def produce(self, ga, gb, sa, sb, consumer_barriers, producer_barriers, offset_m, offset_n, k_size):
        self.wgmma.fence()  # <<< wgmma-one-warp


class TmaFromWarpgroup(Script):
    """A V1-style kernel whose whole warpgroup issues the TMA load, without ``single_thread()``: TMA is issued by
    one thread."""

    def __call__(self, m_size: int32, a_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        ga = self.global_view(a_ptr, dtype=float16, shape=[m_size, 64])
        sa = self.shared_tensor(dtype=float16, shape=[64, 64])
        tma_barriers = self.mbarrier.alloc(counts=[1])
        self.tma.global_to_shared(src=ga, dst=sa, offsets=[0, 0], mbarrier=tma_barriers[0])  # <<< tma-warpgroup


class WhileLoop(V3):
    """The consumer loops with ``while``; runtime loops are ``self.range``."""

    def consume(self, sa, sb, acc, consumer_barriers, producer_barriers, k_size):
        offset_k: int32 = 0
        while offset_k < k_size:  # <<< while-loop
            offset_k += self.block_k


class RuntimeSharedShape(Script):
    """A shared tile sized by a runtime parameter: shared memory is laid out at compile time."""

    def __call__(self, m_size: int32, a_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        self.shared_tensor(dtype=float16, shape=[m_size, 64])  # <<< runtime-shape


# ------------------------------------------------------------------------------------------------ TMA copy


class Copy(Script):
    """examples/tma_copy.py (producer warp 0, consumer warp 1, two buffers), correct, with its roles as helpers."""

    def __init__(self, tile_m=64, tile_n=64, num_buffers=2):
        super().__init__()
        self.tile_m = tile_m
        self.tile_n = tile_n
        self.num_buffers = num_buffers

    def __call__(self, m_size: int32, n_size: int32, src_ptr: ~float16, dst_ptr: ~float16):  # <<< copy-kernel
        self.attrs.blocks = [cdiv(m_size, self.tile_m)]
        self.attrs.warps = 2
        offset_m: int32 = self.tile_m * self.blockIdx.x
        num_tiles: int32 = cdiv(n_size, self.tile_n)
        src = self.global_view(src_ptr, dtype=float16, shape=[m_size, n_size])
        dst = self.global_view(dst_ptr, dtype=float16, shape=[m_size, n_size])
        buffers = self.shared_tensor(dtype=float16, shape=[self.num_buffers, self.tile_m, self.tile_n])
        full = self.mbarrier.alloc(counts=[1 for _ in range(self.num_buffers)])
        empty = self.mbarrier.alloc(counts=[1 for _ in range(self.num_buffers)])
        with self.thread_group(thread_begin=0, num_threads=32):
            self.produce(src, buffers, full, empty, offset_m, num_tiles)
        with self.thread_group(thread_begin=32, num_threads=32):
            self.consume(dst, buffers, full, empty, offset_m, num_tiles)

    def produce(self, src, buffers, full, empty, offset_m, num_tiles):
        for tile in self.range(num_tiles):
            buffer: int32 = tile % self.num_buffers
            lap_parity: uint32 = (tile // self.num_buffers) & 1
            self.mbarrier.wait(empty[buffer], phase=lap_parity ^ 1)  # <<< copy-producer-wait
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(full[buffer], transaction_bytes=buffers[buffer].nbytes)
                self.tma.global_to_shared(  # <<< copy-load
                    src=src, dst=buffers[buffer], offsets=[offset_m, tile * self.tile_n], mbarrier=full[buffer])

    def consume(self, dst, buffers, full, empty, offset_m, num_tiles):
        for tile in self.range(num_tiles):
            buffer: int32 = tile % self.num_buffers
            lap_parity: uint32 = (tile // self.num_buffers) & 1
            self.mbarrier.wait(full[buffer], phase=lap_parity)
            with self.single_thread():
                self.tma.shared_to_global(src=buffers[buffer], dst=dst, offsets=[offset_m, tile * self.tile_n])
                self.tma.commit_group()
                self.tma.wait_group(0)
                self.mbarrier.arrive(empty[buffer])


class CopyReleaseBeforeStoreWait(Copy):
    """The consumer releases the buffer before ``tma.wait_group(0)``: the next load overwrites it while the TMA
    store may still be reading it."""

    def consume(self, dst, buffers, full, empty, offset_m, num_tiles):
        for tile in self.range(num_tiles):
            buffer: int32 = tile % self.num_buffers
            lap_parity: uint32 = (tile // self.num_buffers) & 1
            self.mbarrier.wait(full[buffer], phase=lap_parity)
            with self.single_thread():
                self.tma.shared_to_global(src=buffers[buffer], dst=dst, offsets=[offset_m, tile * self.tile_n])
                self.tma.commit_group()
                self.mbarrier.arrive(empty[buffer])
                self.tma.wait_group(0)


class CopyReleaseWithExpectTx(Copy):
    """The consumer releases with ``arrive_and_expect_tx`` (pasted from the producer) instead of ``arrive``: the
    "empty" barrier then waits for bytes no copy delivers. With at most two tiles per band nobody waits on a
    released buffer and the kernel ends with the bytes outstanding; with more, the producer waits forever."""

    def consume(self, dst, buffers, full, empty, offset_m, num_tiles):
        for tile in self.range(num_tiles):
            buffer: int32 = tile % self.num_buffers
            lap_parity: uint32 = (tile // self.num_buffers) & 1
            self.mbarrier.wait(full[buffer], phase=lap_parity)
            with self.single_thread():
                self.tma.shared_to_global(src=buffers[buffer], dst=dst, offsets=[offset_m, tile * self.tile_n])
                self.tma.commit_group()
                self.tma.wait_group(0)
                self.mbarrier.arrive_and_expect_tx(empty[buffer], transaction_bytes=buffers[buffer].nbytes)


class CopyWithLateMonitor(Script):
    """The copy kernel plus a monitor warp that waits for the first tile to land on ``full[0]``, then for the
    consumer's "done" signal, then waits on ``full[0]`` again with the first lap's parity. By then ``full[0]`` has
    completed two more phases (an odd number of tiles per band), so parity cannot say which phase it means."""

    def __init__(self, tile_m=64, tile_n=64):
        super().__init__()
        self.tile_m = tile_m
        self.tile_n = tile_n

    def __call__(self, m_size: int32, n_size: int32, src_ptr: ~float16, dst_ptr: ~float16):
        self.attrs.blocks = [cdiv(m_size, self.tile_m)]
        self.attrs.warps = 3
        offset_m: int32 = self.tile_m * self.blockIdx.x
        num_tiles: int32 = cdiv(n_size, self.tile_n)
        src = self.global_view(src_ptr, dtype=float16, shape=[m_size, n_size])
        dst = self.global_view(dst_ptr, dtype=float16, shape=[m_size, n_size])
        buffers = self.shared_tensor(dtype=float16, shape=[2, self.tile_m, self.tile_n])
        full = self.mbarrier.alloc(counts=[1, 1])
        empty = self.mbarrier.alloc(counts=[1, 1])
        done = self.mbarrier.alloc(counts=[1])
        with self.thread_group(thread_begin=0, num_threads=32):
            for tile in self.range(num_tiles):
                buffer: int32 = tile % 2
                lap_parity: uint32 = (tile // 2) & 1
                self.mbarrier.wait(empty[buffer], phase=lap_parity ^ 1)
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(full[buffer], transaction_bytes=buffers[buffer].nbytes)
                    self.tma.global_to_shared(src=src, dst=buffers[buffer], offsets=[offset_m, tile * self.tile_n],
                                              mbarrier=full[buffer])
        with self.thread_group(thread_begin=32, num_threads=32):
            for tile in self.range(num_tiles):
                buffer: int32 = tile % 2
                lap_parity: uint32 = (tile // 2) & 1
                self.mbarrier.wait(full[buffer], phase=lap_parity)
                with self.single_thread():
                    self.tma.shared_to_global(src=buffers[buffer], dst=dst, offsets=[offset_m, tile * self.tile_n])
                    self.tma.commit_group()
                    self.tma.wait_group(0)
                    self.mbarrier.arrive(empty[buffer])
            with self.single_thread():
                self.mbarrier.arrive(done[0])
        with self.thread_group(thread_begin=64, num_threads=32):
            self.mbarrier.wait(full[0], phase=0)
            self.mbarrier.wait(done[0], phase=0)
            self.mbarrier.wait(full[0], phase=0)  # <<< late-wait


@autotune("block_n", [64, 512])
class V3TunedPastWgmmaWidth(V3):
    """V3 (correct) tuned over block_n = 64 and 512: WGMMA takes N up to 256, so the second schedule does not
    compile."""
