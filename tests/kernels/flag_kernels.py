"""Kernels whose blocks hand data to each other through global memory and flags, for tests/isa/test_flag.py.

``RunningSum`` chains its blocks: block b waits for block b-1's flag, reads the running sum that block left in a
workspace, adds its own rows of x and leaves the result for block b+1. Its constructor plants the mistakes a flag
user can make. A line that an error must name ends with ``# <<< name``; ``marker_line(name)`` finds its number.
"""

from warpspec import Script, float32, int32
from tests.support.markers import markers_of


marker_line = markers_of(__file__)

ROWS = 16  # rows per block, split between two thread groups of 64 threads
HALF = ROWS // 2


class RunningSum(Script):
    """``out[b] = x[0] + ... + x[b]`` over blocks b, each ``x[b]`` a [16, 64] float32 tile; ``ws`` [blocks·16, 64]
    holds each block's sum for the next, ``flags`` [blocks] says it is there. Two thread groups each handle eight
    rows, so the signal must come after a sync to cover both groups' stores.

    Planted mistakes: ``wait=False`` reads without waiting; ``sync_before_signal=False`` signals before the other
    group's stores are ordered before the signal; ``wait_for="next"`` waits for the next block instead of the
    previous one; ``reset=False`` leaves the flags set for the next launch."""

    def __init__(self, wait=True, sync_before_signal=True, wait_for="previous", reset=True):
        super().__init__()
        self.wait = wait
        self.sync_before_signal = sync_before_signal
        self.wait_for = wait_for
        self.reset = reset

    def __call__(self, blocks: int32, x_ptr: ~float32, ws_ptr: ~float32, flags_ptr: ~int32, out_ptr: ~float32):
        self.attrs.blocks = [blocks]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[blocks * ROWS, 64])
        ws = self.global_view(ws_ptr, dtype=float32, shape=[blocks * ROWS, 64], scratch=True)
        flags = self.global_view(flags_ptr, dtype=int32, shape=[blocks])
        out = self.global_view(out_ptr, dtype=float32, shape=[blocks * ROWS, 64])
        block = self.blockIdx.x
        waited = block - 1 if self.wait_for == "previous" else block + 1
        if block > 0:
            if self.wait:
                with self.single_thread():
                    self.flag.wait(flags, min(waited, blocks - 1), 1)  # <<< wait
            self.sync()
        for group in range(2):
            with self.thread_group(thread_begin=64 * group, num_threads=64):
                row = block * ROWS + group * HALF
                total = self.load_global(x, offsets=[row, 0], shape=[HALF, 64])
                if block > 0:
                    total = total + self.load_global(ws, offsets=[row - ROWS, 0], shape=[HALF, 64])  # <<< read
                self.store_global(ws, total, offsets=[row, 0])  # <<< leave
                self.store_global(out, total, offsets=[row, 0])
        if self.sync_before_signal:
            self.sync()
        with self.single_thread():
            if block < blocks - 1:
                self.flag.signal(flags, block, 1)  # <<< signal
            if self.reset and block > 0:
                self.flag.signal(flags, block - 1, 0)  # block b-1's sum was read: the flag is ready for the next launch


class SignalBeforeSync(RunningSum):
    """``RunningSum`` that signals before a sync orders the other thread group's stores before the signal: for
    the command line, which makes kernels without constructor arguments."""

    def __init__(self):
        super().__init__(sync_before_signal=False)


class ReadWithoutWait(RunningSum):
    """``RunningSum`` that reads the previous block's sum without waiting for its flag (for the command line)."""

    def __init__(self):
        super().__init__(wait=False)


class CountedSum(Script):
    """``out = x[0] + ... + x[blocks-1]`` over [16, 64] float32 tiles: every block but the last leaves its tile in
    ``ws`` and counts it on ``flags[0]`` (``flag.add``); the last block waits once for the count of all of them,
    gives the flag back, and sums the tiles. Planted: ``counted`` below ``blocks - 1`` waits for fewer adds than
    the blocks make."""

    def __init__(self, counted=None):
        super().__init__()
        self.counted = counted

    def __call__(self, blocks: int32, x_ptr: ~float32, ws_ptr: ~float32, flags_ptr: ~int32, out_ptr: ~float32):
        self.attrs.blocks = [blocks]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[blocks * ROWS, 64])
        ws = self.global_view(ws_ptr, dtype=float32, shape=[blocks * ROWS, 64], scratch=True)
        flags = self.global_view(flags_ptr, dtype=int32, shape=[1])
        out = self.global_view(out_ptr, dtype=float32, shape=[ROWS, 64])
        block = self.blockIdx.x
        mine = self.load_global(x, offsets=[block * ROWS, 0], shape=[ROWS, 64])
        if block < blocks - 1:
            self.store_global(ws, mine, offsets=[block * ROWS, 0])
            self.sync()
            with self.single_thread():
                self.flag.add(flags, 0, 1)
        else:
            with self.single_thread():
                self.flag.wait(flags, 0, blocks - 1 if self.counted is None else self.counted)  # <<< count
                self.flag.signal(flags, 0, 0)
            self.sync()
            total = mine + 0.0
            for earlier in self.range(blocks - 1):
                total = total + self.load_global(ws, offsets=[earlier * ROWS, 0], shape=[ROWS, 64])
            self.store_global(out, total, offsets=[0, 0])
