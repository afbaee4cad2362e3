"""Kernels for tests/frontend/test_foundation.py: mistakes the front end must refuse at the user's line, and natural
Python it must accept.

Kernels that hold several mistakes take a compile-time ``case`` that picks one (a compile-time ``if`` builds only
its branch). A line that an error must name ends with ``# <<< name``; ``marker_line(name)`` finds it.
"""

import warpspec
from warpspec import cdiv, float8_e4m3, float16, float32, int32, uint32
from tests.support.markers import markers_of


marker_line = markers_of(__file__)


# ---------------------------------------------------------------------------- 1. missing and unknown arguments


class MisusedCalls(warpspec.Script):
    """Language calls with a missing, an unknown or a surplus argument."""

    def __call__(self, case: int):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        bars = self.mbarrier.alloc(counts=[1])
        sa = self.shared_tensor(dtype=float16, shape=[64, 16])
        sb = self.shared_tensor(dtype=float16, shape=[64, 16])
        with self.thread_group(thread_begin=0, num_threads=128):
            if case == 0:
                self.mbarrier.wait(bars[0])  # <<< wait-without-phase
            if case == 1:
                self.mbarrier.wait(bars[0], parity=0)  # <<< wait-with-parity
            if case == 2:
                self.wgmma.mma(sa, sb.transpose())  # <<< mma-without-d
            if case == 3:
                self.fence_proxy_async(sa)  # <<< fence-with-argument
            if case == 4:
                for i in self.range(0, 4, 1, 1, 1):  # <<< range-surplus
                    pass


# ------------------------------------------------------------------------------------- 2. helpers that recurse


class SelfCallingHelper(warpspec.Script):
    """A helper that calls itself under runtime control flow: it can never be inlined."""

    def countdown(self, n):
        with self.thread_group(thread_begin=0, num_threads=128):
            for i in self.range(n):
                if i > 0:
                    self.countdown(n - 1)  # <<< recursive-call

    def __call__(self, n: int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        self.countdown(n)  # <<< recursion-entry


class MutuallyRecursiveHelpers(warpspec.Script):
    """``ping`` calls ``pong`` calls ``ping``..."""

    def ping(self, n):
        self.pong(n + 1)  # <<< ping-calls-pong

    def pong(self, n):
        self.ping(n * 2)

    def __call__(self, n: int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        self.ping(n)  # <<< ping-entry


class CompileTimeRecursion(warpspec.Script):
    """A helper that recurses on a compile-time count: unrolled at compile time, as Python would run it.
    out[8 * (k - 1): 8 * k] = k for k = 1..depth."""

    def fill(self, out, k):
        if k > 0:
            block = self.register_tensor(dtype=float32, shape=[8], init=float(k))
            self.store_global(out, block, offsets=[8 * (k - 1)])
            self.fill(out, k - 1)

    def __call__(self, depth: int, out_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        out = self.global_view(out_ptr, dtype=float32, shape=[8 * depth])
        self.fill(out, depth)


# ------------------------------------------------------------------------------ 3. floats into integer operands


class FloatOperands(warpspec.Script):
    """A float where an integer operand belongs; each case one."""

    def __call__(self, case: int, m_size: int32, x_ptr: ~float16):
        if case == 1:
            self.attrs.blocks = [m_size / 64.0]  # <<< float-grid
        else:
            self.attrs.blocks = [1]
        self.attrs.warps = 4
        gx = self.global_view(x_ptr, dtype=float16, shape=[m_size, m_size])
        sx = self.shared_tensor(dtype=float16, shape=[64, 64])
        bars = self.mbarrier.alloc(counts=[1])
        with self.thread_group(thread_begin=0, num_threads=32):
            for offset_k in self.range(0, m_size, 64):
                with self.single_thread():
                    if case == 0:
                        self.tma.global_to_shared(src=gx, dst=sx, offsets=[0, offset_k + 1.5],  # <<< float-tma-offset
                                                  mbarrier=bars[0])
                    if case == 2:
                        self.mbarrier.arrive_and_expect_tx(bars[0], transaction_bytes=1024.5)  # <<< float-tx-bytes
                if case == 3:
                    self.mbarrier.wait(bars[0], phase=0.5)  # <<< float-phase
            if case == 4:
                count: int32 = 2.5  # <<< float-declared-int
            if case == 5:
                count: int32 = 0
                count = m_size * 0.5  # <<< float-assigned-int
            if case == 6:
                phases = self.register_tensor(dtype=uint32, shape=[2], init=1.5)  # <<< float-register-init
            if case == 7:
                phases = self.register_tensor(dtype=uint32, shape=[2], init=1)
                phases[0] = 0.5  # <<< float-element
            if case == 8:
                phases = self.register_tensor(dtype=uint32, shape=[2], init=1)
                shifted = phases + 0.5  # <<< float-tensor-operand


# ------------------------------------------------------------------------------- 4. errors inside library code


class PipelineMisuse(warpspec.Script):
    """Pipelines built where they cannot be: errors inside ``Pipeline.__init__`` name the user's line first."""

    def make_pipeline(self):
        return warpspec.Pipeline(num_stages=0)  # <<< pipeline-in-helper

    def __call__(self, case: int):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        if case == 0:
            pipe = warpspec.Pipeline(num_stages=0)  # <<< pipeline-no-stages
        if case == 1:
            with self.thread_group(thread_begin=0, num_threads=128):
                pipe = warpspec.Pipeline(num_stages=2)  # <<< pipeline-in-group
        if case == 2:
            pipe = self.make_pipeline()  # <<< pipeline-helper-call
        if case == 3:
            pipe = warpspec.Pipeline(num_stages=2)
            pipe.consumer_acquire(1)  # <<< pipeline-surplus-argument


class PipelineRunMisuse(warpspec.Script):
    """Pipelines misused at run time: a consumer waits for a stage nobody fills (case 0: directly, case 1: from a
    helper), or 128 threads release a stage that expects one arrival (case 2)."""

    def consume(self, pipe):
        pipe.consumer_acquire()  # <<< helper-consumer-acquire

    def __call__(self, case: int, n: int32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        pipe = warpspec.Pipeline(num_stages=1, consumer_arrivals=1)
        with self.thread_group(thread_begin=0, num_threads=128):
            if case == 0:
                pipe.consumer_acquire()  # <<< consumer-acquire-deadlock
            if case == 1:
                self.consume(pipe)  # <<< consume-helper-call
            if case == 2:
                pipe.consumer_release()  # <<< release-too-many


# -------------------------------------------------------------------------- 5. stores by part of the holders


class PartialStores(warpspec.Script):
    """store_global by threads that do not hold the whole tensor (cases 0, 1), and a replicated tensor stored by
    one thread, which is fine (case 2: out[0:8] = 3)."""

    def __call__(self, case: int, x_ptr: ~float32, out_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 8
        x = self.global_view(x_ptr, dtype=float32, shape=[512])
        out = self.global_view(out_ptr, dtype=float32, shape=[512])
        with self.thread_group(thread_begin=0, num_threads=128):
            if case == 0:
                tile = self.load_global(x, offsets=[0], shape=[512])
                with self.single_thread():
                    self.store_global(out, tile, offsets=[0])  # <<< store-from-single-thread
            if case == 2:
                small = self.register_tensor(dtype=float32, shape=[8], init=3.0)
                with self.single_thread():
                    self.store_global(out, small, offsets=[0])
        if case == 1:
            tile = self.load_global(x, offsets=[0], shape=[512])
            with self.thread_group(thread_begin=128, num_threads=128):
                self.store_global(out, tile, offsets=[0])  # <<< store-from-half-the-block


class HalfAccumulatorStore(warpspec.Script):
    """Two warpgroups hold the accumulator; only the first stores it."""

    def __call__(self, c_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 8
        sa = self.shared_tensor(dtype=float16, shape=[128, 16])
        sb = self.shared_tensor(dtype=float16, shape=[64, 16])
        acc = self.register_tensor(dtype=float32, shape=[128, 64], init=0.0)
        gc = self.global_view(c_ptr, dtype=float32, shape=[128, 64])
        with self.thread_group(thread_begin=0, num_threads=256):
            self.wgmma.fence()
            self.wgmma.mma(sa, sb.transpose(), acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)
            with self.thread_group(thread_begin=0, num_threads=128):
                self.store_global(gc, acc, offsets=[0, 0])  # <<< store-half-accumulator


# ---------------------------------------------------------------------------------- 6. shared memory overflow


class TooMuchShared(warpspec.Script):
    """Shared tensors beyond what a block has: 256 KB in one tensor, 128 KB + 128 KB, and 4 GB."""

    def __call__(self, case: int):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        if case == 0:
            whole = self.shared_tensor(dtype=float16, shape=[16, 128, 64])  # <<< shared-256k
        if case == 1:
            first = self.shared_tensor(dtype=float16, shape=[8, 128, 64])
            second = self.shared_tensor(dtype=float16, shape=[8, 128, 64])  # <<< shared-second-half
        if case == 2:
            huge = self.shared_tensor(dtype=float16, shape=[262144, 128, 64])  # <<< shared-4g


# ------------------------------------------------------------------------------------- 7. natural Python


class GridThroughLocal(warpspec.Script):
    """The grid through a local variable: plain (case 0), annotated (case 1), reassigned at the top level
    (case 2), computed from a parameter the kernel changed first (case 3). Block b writes out[b] = b + 1."""

    def __call__(self, case: int, m_size: int32, out_ptr: ~float32):
        if case == 0:
            tiles = cdiv(m_size, 64)
        if case == 1:
            tiles: int32 = cdiv(m_size, 64)
        if case == 2:
            tiles = cdiv(m_size, 128)
            tiles = tiles * 2
        if case == 3:
            m_size = m_size * 2
            tiles = cdiv(m_size, 128)
        self.attrs.blocks = [tiles]
        self.attrs.warps = 4
        out = self.global_view(out_ptr, dtype=float32, shape=[8])
        mark = self.register_tensor(dtype=float32, shape=[1], init=float(self.blockIdx.x + 1))
        self.store_global(out, mark, offsets=[self.blockIdx.x])


class GridThroughChangingLocal(warpspec.Script):
    """Grids that cannot be computed on the host: a local changed in a runtime loop (case 0) or in a thread group
    (case 1), one that depends on blockIdx (case 2, through another local in case 3), a parameter changed in a
    runtime loop (case 4)."""

    def __call__(self, case: int, m_size: int32):
        tiles = cdiv(m_size, 64)
        if case == 0:
            for i in self.range(2):
                tiles = tiles + 1
            self.attrs.blocks = [tiles]  # <<< grid-after-loop
        if case == 1:
            self.attrs.warps = 4
            with self.thread_group(thread_begin=0, num_threads=32):
                tiles = tiles + 1
            self.attrs.blocks = [tiles]  # <<< grid-after-group
        if case == 2:
            first_tile = self.blockIdx.x * 2
            self.attrs.blocks = [first_tile + 1]  # <<< grid-from-block-index
        if case == 3:
            first_tile = self.blockIdx.x * 2
            last_tile = first_tile + tiles
            self.attrs.blocks = [last_tile]  # <<< grid-through-two-locals
        if case == 4:
            for i in self.range(2):
                m_size = m_size - 1
            self.attrs.blocks = [cdiv(m_size, 64)]  # <<< grid-from-changed-parameter
        self.attrs.warps = 4


class UnpackAndRebind(warpspec.Script):
    """``_`` taking a tensor and a scalar in one unpacking, and a name moving from a runtime scalar to a tensor:
    out = [2] * 8 + [5] * 8 + [n + 1] * 8."""

    def pieces(self, n):
        """A tensor, a runtime scalar and another tensor."""
        return self.register_tensor(dtype=float32, shape=[8], init=2.0), n + 1, \
            self.register_tensor(dtype=float32, shape=[8], init=5.0)

    def __call__(self, n: int32, out_ptr: ~float32):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        out = self.global_view(out_ptr, dtype=float32, shape=[24])
        two, _, _ = self.pieces(n)
        _, count, _ = self.pieces(n)
        _, _, five = self.pieces(n)
        value = count * 2
        value = self.register_tensor(dtype=float32, shape=[8], init=float(count))
        self.store_global(out, two, offsets=[0])
        self.store_global(out, five, offsets=[8])
        self.store_global(out, value, offsets=[16])


# -------------------------------------------------------------------------------------------- 8. named barriers


class GroupSyncs(warpspec.Script):
    """``groups`` one-warp thread groups, each synchronising on its own (a named barrier each), plus syncs of the
    whole block (barrier 0, however spelled) and a repeated group, which need no new barrier."""

    def __call__(self, groups: int):
        self.attrs.blocks = [1]
        self.attrs.warps = 16
        for g in range(groups):
            with self.thread_group(thread_begin=32 * g, num_threads=32):
                self.sync()  # <<< group-sync
        with self.thread_group(thread_begin=0, num_threads=32):
            self.sync()
        with self.thread_group(thread_begin=0, num_threads=512):
            self.sync()
        self.sync()


# ------------------------------------------------------------------------------------------- 9. float8 casts


class CastToFloat8(warpspec.Script):
    """y = x rounded to float8_e4m3 (saturating)."""

    def __call__(self, x_ptr: ~float32, y_ptr: ~float8_e4m3):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[512])
        y = self.global_view(y_ptr, dtype=float8_e4m3, shape=[512])
        tile = self.load_global(x, offsets=[0], shape=[512])
        self.store_global(y, self.cast(tile, dtype=float8_e4m3), offsets=[0])
