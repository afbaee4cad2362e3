"""GEMM kernels for output comparison against a numpy reference (``warpspec check --reference``,
``warpspec.emulator.reference``): V3's pattern (examples/matmul_v3.py) with one fixed schedule and square tiles, so
that the B tile with and without ``.transpose()`` has the same shape and both compile, and one computes the wrong
product."""

import numpy as np

import warpspec
from warpspec import cdiv, float16, float32, int32, uint32


class Gemm(warpspec.Script):
    """C = A @ B^T with A [M, K], B [N, K] and C [M, N] in float16, one 64x64 tile per block, K in steps of 64."""

    transpose_b = True  # GemmWrongTranspose: False, multiplying by B's tile as stored

    def __call__(self, m_size: int32, n_size: int32, k_size: int32, a_ptr: ~float16, b_ptr: ~float16,
                 c_ptr: ~float16):
        self.attrs.blocks = [cdiv(m_size, 64), cdiv(n_size, 64)]
        self.attrs.warps = 5
        offset_m: int32 = 64 * self.blockIdx.x
        offset_n: int32 = 64 * self.blockIdx.y
        ga = self.global_view(a_ptr, dtype=float16, shape=[m_size, k_size])
        gb = self.global_view(b_ptr, dtype=float16, shape=[n_size, k_size])
        sa = self.shared_tensor(dtype=float16, shape=[2, 64, 64])
        sb = self.shared_tensor(dtype=float16, shape=[2, 64, 64])
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        full = self.mbarrier.alloc(counts=[1, 1])
        empty = self.mbarrier.alloc(counts=[128, 128])

        with self.thread_group(thread_begin=128, num_threads=32):
            stage: int32 = 0
            phases = self.register_tensor(dtype=uint32, shape=[2], init=1)
            for offset_k in self.range(0, k_size, 64, unroll=2):
                self.mbarrier.wait(empty[stage], phase=phases[stage])
                phases[stage] ^= 1
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(full[stage], transaction_bytes=sa[stage].nbytes + sb[stage].nbytes)
                    self.tma.global_to_shared(src=ga, dst=sa[stage], offsets=[offset_m, offset_k], mbarrier=full[stage])
                    self.tma.global_to_shared(src=gb, dst=sb[stage], offsets=[offset_n, offset_k], mbarrier=full[stage])
                stage = (stage + 1) % 2
            for _ in self.range(min(2, cdiv(k_size, 64))):
                self.mbarrier.wait(empty[stage], phase=phases[stage])
                phases[stage] ^= 1
                stage = (stage + 1) % 2

        with self.thread_group(thread_begin=0, num_threads=128):
            phases = self.register_tensor(dtype=uint32, shape=[2], init=0)
            stage: int32 = 0
            for offset_k in self.range(0, k_size, 64, unroll=2):
                self.mbarrier.wait(full[stage], phase=phases[stage])
                phases[stage] ^= 1
                self.wgmma.fence()
                if self.transpose_b:
                    self.wgmma.mma(sa[stage], sb[stage].transpose(), acc)
                else:
                    self.wgmma.mma(sa[stage], sb[stage], acc)
                self.wgmma.commit_group()
                self.wgmma.wait_group(0)
                self.mbarrier.arrive(empty[stage])
                stage = (stage + 1) % 2
            self.sync()
            gc = self.global_view(c_ptr, dtype=float16, shape=[m_size, n_size])
            self.store_global(gc, self.cast(acc, dtype=float16), offsets=[offset_m, offset_n])


class GemmWrongTranspose(Gemm):
    """Gemm with the B tile's ``.transpose()`` left out: it computes A @ B per tile, not A @ B^T."""

    transpose_b = False


def gemm_reference(a_ptr, b_ptr, c_ptr):
    """What Gemm computes, in float32 and rounded to float16 once (the kernel accumulates in float32)."""
    c_ptr[...] = (a_ptr.astype(np.float32) @ b_ptr.astype(np.float32).T).astype(np.float16)


def returns_instead(a_ptr, b_ptr, c_ptr):
    """A reference that returns the product instead of writing it into c_ptr."""
    return a_ptr @ b_ptr.T
