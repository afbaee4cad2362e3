"""The phase-parity blog's double-buffered TMA copy: global -> shared -> global through two staging buffers.

``dst = src`` for a 2-D float16 tensor, tile by tile. Each block owns a band of ``tile_m`` rows and walks its tiles
left to right. A producer warp loads tile ``i`` with TMA into buffer ``i % 2``; a consumer warp stores that buffer
back out with a TMA store. Each buffer has two mbarriers: "full" (completed by the load's bytes) and "empty"
(completed when the consumer's store has finished reading the buffer). Tile ``i`` is lap ``i // num_buffers`` of
its buffer, and every lap completes one phase of each barrier, so the parity to wait for is computed from the tile
index alone, as the blog does, rather than kept in a ``Pipeline``:

- the consumer waits on full[i % 2] with parity ``(i // num_buffers) & 1`` (0 on the first lap: block until the
  first load lands);
- the producer waits on empty[i % 2] with the opposite parity (1 on the first lap: a fresh barrier passes at once,
  the buffers start empty).

Run ``python examples/tma_copy.py`` to check it against numpy (on the emulator when there is no Hopper GPU).
"""

import numpy as np

import warpspec
from warpspec import cdiv, float16, int32, uint32

from example_support import run_on_backend


@warpspec.autotune("tile_m, tile_n", [[64, 64], [32, 128], [128, 32]])
class TmaCopy(warpspec.Script):
    def __init__(self, tile_m, tile_n, num_buffers=2):
        super().__init__()
        self.tile_m = tile_m
        self.tile_n = tile_n
        self.num_buffers = num_buffers

    def __call__(self, m_size: int32, n_size: int32, src_ptr: ~float16, dst_ptr: ~float16):
        self.attrs.blocks = [cdiv(m_size, self.tile_m)]
        self.attrs.warps = 2

        tile_m, tile_n, num_buffers = self.tile_m, self.tile_n, self.num_buffers
        offset_m: int32 = tile_m * self.blockIdx.x
        num_tiles: int32 = cdiv(n_size, tile_n)

        src = self.global_view(src_ptr, dtype=float16, shape=[m_size, n_size])
        dst = self.global_view(dst_ptr, dtype=float16, shape=[m_size, n_size])
        buffers = self.shared_tensor(dtype=float16, shape=[num_buffers, tile_m, tile_n])
        full = self.mbarrier.alloc(counts=[1 for _ in range(num_buffers)])
        empty = self.mbarrier.alloc(counts=[1 for _ in range(num_buffers)])

        with self.thread_group(thread_begin=0, num_threads=32):  # producer warp
            for tile in self.range(num_tiles):
                buffer: int32 = tile % num_buffers
                lap_parity: uint32 = (tile // num_buffers) & 1
                self.mbarrier.wait(empty[buffer], phase=lap_parity ^ 1)
                with self.single_thread():
                    self.mbarrier.arrive_and_expect_tx(full[buffer], transaction_bytes=buffers[buffer].nbytes)
                    self.tma.global_to_shared(
                        src=src, dst=buffers[buffer], offsets=[offset_m, tile * tile_n], mbarrier=full[buffer]
                    )

        with self.thread_group(thread_begin=32, num_threads=32):  # consumer warp
            for tile in self.range(num_tiles):
                buffer: int32 = tile % num_buffers
                lap_parity: uint32 = (tile // num_buffers) & 1
                self.mbarrier.wait(full[buffer], phase=lap_parity)
                with self.single_thread():
                    self.tma.shared_to_global(src=buffers[buffer], dst=dst, offsets=[offset_m, tile * tile_n])
                    self.tma.commit_group()
                    # The store reads the buffer asynchronously: the buffer is empty only once the group is done.
                    self.tma.wait_group(0)
                    self.mbarrier.arrive(empty[buffer])


if __name__ == "__main__":
    m, n = 300, 200  # not multiples of any tile: ragged bands and ragged last tiles
    rng = np.random.default_rng(0)
    source = rng.standard_normal((m, n)).astype(np.float16)
    destination = np.full((m, n), np.nan, dtype=np.float16)  # NaN shows any element left uncopied
    _, destination = run_on_backend(TmaCopy(), m, n, source, destination)
    error = np.abs(destination.astype(np.float32) - source.astype(np.float32)).max()
    print(f"{warpspec.get_backend()}: max abs error {error} vs numpy")
    assert error == 0, error
    print("OK")
