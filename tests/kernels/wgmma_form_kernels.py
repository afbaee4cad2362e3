"""One-tile kernels that isolate the WGMMA forms of the attention kernel, for the emulator and the GPU alike.

Each block-free kernel (one block, a TMA producer warp and one consumer warpgroup) loads its whole operands once
and computes one [64, N] float32 result ``c``:

* ``"shared"``: ``c = a · b`` with ``a`` [64, K] from shared memory (K-major) and ``b`` [K, N] from shared memory
  as stored, N contiguous: the MN-major B of attention's P·V.
* ``"registers"``: ``c = fp16(x · yᵀ) · b``: the [64, K] accumulator of an m64nK product (``x`` [64, 64], ``y``
  [K, 64], QKᵀ's form) cast to 16 bits and used as the register A operand (P of P·V), K = 80 being the m64n80
  accumulator of attention's D = 256 schedule.
* ``"rowstat"``: ``c = a · b + rowmax(x · yᵀ)``: a [64, 1] row statistic of a [64, K] accumulator applied to the
  [64, N] one (N ≠ K: attention's row maximum of S scaling O).
"""

import numpy as np

import warpspec
from warpspec import float16, float32

MODES = ("shared", "registers", "rowstat")
#: (N, K) of the forms the tests run: the N of the library's tiles, K of 64, 80 and 128 elements.
SHAPES = [(n, k) for n in (64, 128, 256) for k in (64, 80, 128)]


class WgmmaForm(warpspec.Script):
    """``c`` [64, n] float32 from ``a`` [64, k], ``b`` [k, n], ``x`` [64, 64] and ``y`` [k, 64] (float16) as
    ``mode`` says (module docstring)."""

    def __init__(self, mode, n, k):
        super().__init__()
        assert mode in MODES, mode
        self.mode, self.n, self.k = mode, n, k

    def __call__(self, a_ptr: ~float16, b_ptr: ~float16, x_ptr: ~float16, y_ptr: ~float16, c_ptr: ~float32):
        n, k = self.n, self.k
        self.attrs.blocks = [1]
        self.attrs.warps = 5
        ga = self.global_view(a_ptr, dtype=float16, shape=[64, k])
        gb = self.global_view(b_ptr, dtype=float16, shape=[k, n])
        gx = self.global_view(x_ptr, dtype=float16, shape=[64, 64])
        gy = self.global_view(y_ptr, dtype=float16, shape=[k, 64])
        sa = self.shared_tensor(dtype=float16, shape=[64, k])
        sb = self.shared_tensor(dtype=float16, shape=[k, n])
        sx = self.shared_tensor(dtype=float16, shape=[64, 64])
        sy = self.shared_tensor(dtype=float16, shape=[k, 64])
        loaded = self.mbarrier.alloc(counts=[1])
        with self.thread_group(thread_begin=128, num_threads=32):
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(loaded[0], sa.nbytes + sb.nbytes + sx.nbytes + sy.nbytes)
                for view, tile in ((ga, sa), (gb, sb), (gx, sx), (gy, sy)):
                    self.tma.global_to_shared(src=view, dst=tile, offsets=[0, 0], mbarrier=loaded[0])
        with self.thread_group(thread_begin=0, num_threads=128):
            self.mbarrier.wait(loaded[0], phase=0)
            acc = self.register_tensor(dtype=float32, shape=[64, n], init=0.0)
            if self.mode == "shared" or self.mode == "rowstat":
                self.wgmma.fence()
                self.wgmma.mma(sa, sb, acc)
                self.wgmma.commit_group()
            if self.mode == "registers" or self.mode == "rowstat":
                scores = self.register_tensor(dtype=float32, shape=[64, k], init=0.0)
                self.wgmma.fence()
                self.wgmma.mma(sx, sy.transpose(), scores)
                self.wgmma.commit_group()
                self.wgmma.wait_group(0)
                if self.mode == "registers":
                    probs = self.cast(scores, float16)
                    self.wgmma.fence()
                    self.wgmma.mma(probs, sb, acc)
                    self.wgmma.commit_group()
                    self.wgmma.wait_group(0)
                else:
                    acc = acc + self.reduce_max(scores)
            else:
                self.wgmma.wait_group(0)
            self.store_global(self.global_view(c_ptr, dtype=float32, shape=[64, n]), acc, offsets=[0, 0])


def operands(n, k, seed=0):
    """float16 ``a`` [64, k], ``b`` [k, n], ``x`` [64, 64], ``y`` [k, 64] of unit-order entries, distinct per
    element so a misplaced row or column shows."""
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(np.float16) * scale
                 for shape, scale in (((64, k), 1), ((k, n), 1), ((64, 64), 0.25), ((k, 64), 0.25)))


def reference(mode, a, b, x, y):
    """What ``WgmmaForm(mode, ...)`` computes, in float32 numpy."""
    a, b, x, y = (t.astype(np.float32) for t in (a, b, x, y))
    scores = x @ y.T
    if mode == "shared":
        return a @ b
    if mode == "registers":
        return scores.astype(np.float16).astype(np.float32) @ b
    return a @ b + scores.max(axis=1, keepdims=True)


def max_error(mode, c, a, b, x, y):
    """The largest absolute difference of ``c`` from the reference, relative to the reference's largest entry."""
    expected = reference(mode, a, b, x, y)
    return float(np.abs(np.asarray(c, dtype=np.float32) - expected).max() / np.abs(expected).max())
