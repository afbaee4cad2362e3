"""A two-block hand-off through a flag, with every thread of the block on both sides (one thread partition), for
tests/isa/test_flag_ordering.py. Block b adds its rows of x to what block b-1 left in ``ws`` and leaves the sum for
block b+1. A line that an error must name ends with ``# <<< name``.

Planted mistakes: ``sync_after_wait=False`` lets the 127 threads that did not wait read the previous block's rows;
``sync_before_signal=False`` signals from one thread before the other threads' stores are ordered before it."""

from warpspec import Script, float32, int32
from tests.support.markers import markers_of

marker_line = markers_of(__file__)

ROWS = 16


class HandOff(Script):
    """``out[b] = x[0] + ... + x[b]`` over blocks b, each ``x[b]`` a [16, 64] float32 tile, through ``ws`` and one
    flag per block."""

    def __init__(self, sync_after_wait=True, sync_before_signal=True):
        super().__init__()
        self.sync_after_wait = sync_after_wait
        self.sync_before_signal = sync_before_signal

    def __call__(self, blocks: int32, x_ptr: ~float32, ws_ptr: ~float32, flags_ptr: ~int32, out_ptr: ~float32):
        self.attrs.blocks = [blocks]
        self.attrs.warps = 4
        x = self.global_view(x_ptr, dtype=float32, shape=[blocks * ROWS, 64])
        ws = self.global_view(ws_ptr, dtype=float32, shape=[blocks * ROWS, 64], scratch=True)
        flags = self.global_view(flags_ptr, dtype=int32, shape=[blocks])
        out = self.global_view(out_ptr, dtype=float32, shape=[blocks * ROWS, 64])
        block = self.blockIdx.x
        row = block * ROWS
        total = self.load_global(x, offsets=[row, 0], shape=[ROWS, 64])
        if block > 0:
            with self.single_thread():
                self.flag.wait(flags, block - 1, 1)
                self.flag.signal(flags, block - 1, 0)  # given back for the next launch
            if self.sync_after_wait:
                self.sync()
            total = total + self.load_global(ws, offsets=[row - ROWS, 0], shape=[ROWS, 64])  # <<< read
        self.store_global(ws, total, offsets=[row, 0])  # <<< leave
        self.store_global(out, total, offsets=[row, 0])
        if self.sync_before_signal:
            self.sync()
        with self.single_thread():
            if block < blocks - 1:
                self.flag.signal(flags, block, 1)  # <<< signal
