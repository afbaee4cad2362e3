"""V5: V4 with one WGMMA group kept in flight.

C = A @ B^T with A [M, K], B [N, K] and C [M, N] in float16, as in V3 and V4. One change from V4: V4 waits for each
K-tile's WGMMA to finish (``wait_group(0)``) before it issues the next, so the tensor cores idle while the consumers
release the stage, wait on the next "full" barrier and issue again. V5 issues K-tile i, then waits only until at most
one group is pending (``wait_group(1)``): K-tile i-1's group is then done, so its stage, not K-tile i's, is released.
The tensor cores always have the next group queued. After the loop, ``wait_group(0)`` finishes the last group and
its stage is released too, so the producer's drain sees every stage come back.

Everything else is V4's (it is a subclass that replaces V4's consumer loop, ``consume``).

Run ``python examples/matmul_v5.py`` to check it against numpy (on the emulator when there is no Hopper GPU).
"""

import warpspec

from example_support import check_matmul
from matmul_v4 import MatmulWGMMAV4


@warpspec.autotune("num_stages", [2, 3, 4, 5])
@warpspec.autotune("block_m, block_n", [[128, 64], [128, 128], [256, 128]])
@warpspec.autotune("block_k", [16, 32, 64])
class MatmulWGMMAV5(MatmulWGMMAV4):
    """V4 whose consumers keep one WGMMA group in flight."""

    def consume(self, pipe, sa, sb, acc, k_size):
        """The consumers' main loop: issue K-tile i, then release K-tile i-1's stage once its group is done."""
        for offset_k in self.range(0, k_size, self.block_k, unroll=self.num_stages):
            pipe.consumer_acquire()
            self.wgmma.fence()
            self.wgmma.mma(sa[pipe.consumer_stage], sb[pipe.consumer_stage].transpose(), acc)
            self.wgmma.commit_group()
            self.wgmma.wait_group(1)  # the previous K-tile's group is done reading its stage: release that one
            if offset_k > 0:
                self.mbarrier.arrive(pipe.empty_barriers[self.previous(pipe.consumer_stage)])
            pipe.consumer_advance()
        self.wgmma.wait_group(0)  # the last group; consumer_advance moved past its stage
        self.mbarrier.arrive(pipe.empty_barriers[self.previous(pipe.consumer_stage)])

    def previous(self, stage):
        """The stage before ``stage`` in the ring."""
        return (stage + self.num_stages - 1) % self.num_stages


if __name__ == "__main__":
    check_matmul(MatmulWGMMAV5())
