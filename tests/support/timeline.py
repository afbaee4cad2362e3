"""What the timeline tests share: a modeled timeline of an example matmul, and a kernel whose waits are known."""

import warpspec
from warpspec import float16, float32, int32
from warpspec.frontend.kernel import bind_arguments
from warpspec.runtime import kernel_for
from warpspec.timeline.model import model_launch


def matmul_kernel(script_cls, size: int, **schedule):
    """``(kernel IR, runtime arguments)`` of an example matmul at ``size``³ for one schedule."""
    script = script_cls().instantiate(schedule)
    runtime, compile_time = bind_arguments(type(script), (), dict(m_size=size, n_size=size, k_size=size,
                                                                  a_ptr=None, b_ptr=None, c_ptr=None))
    return kernel_for(script, compile_time), runtime


def modeled_matmul(script_cls, size: int, parameters=None, **schedule):
    """The modeled timeline of an example matmul at ``size``³."""
    kernel, runtime = matmul_kernel(script_cls, size, **schedule)
    return model_launch(kernel, runtime, parameters)


class LoadThenMultiply(warpspec.Script):
    """One TMA load of a 64×64 tile (8 KiB) that the consumer warpgroup waits for, then one 64×64×64 WGMMA on
    it: with zero instruction costs, the consumer's wait lasts exactly the load's time."""

    def __call__(self, a_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 5
        ga = self.global_view(a_ptr, dtype=float16, shape=[64, 64])
        sa = self.shared_tensor(dtype=float16, shape=[64, 64])
        acc = self.register_tensor(dtype=float32, shape=[64, 64], init=0.0)
        full = self.mbarrier.alloc(counts=[1])
        with self.thread_group(thread_begin=128, num_threads=32):
            with self.single_thread():
                self.mbarrier.arrive_and_expect_tx(full[0], transaction_bytes=sa.nbytes)
                self.tma.global_to_shared(src=ga, dst=sa, offsets=[0, 0], mbarrier=full[0])
        with self.thread_group(thread_begin=0, num_threads=128):
            self.mbarrier.wait(full[0], phase=0)
            self.wgmma.fence()
            self.wgmma.mma(sa, sa.transpose(), acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(0)


class DividesByItsArgument(warpspec.Script):
    """A loop whose trip count divides by the runtime argument ``parts``: ``parts=0`` divides by zero."""

    def __call__(self, parts: int32, a_ptr: ~float16):
        self.attrs.blocks = [1]
        self.attrs.warps = 4
        self.global_view(a_ptr, dtype=float16, shape=[64, 64])
        for _ in self.range(64 // parts):  # division-by-zero
            self.sync()
