"""``Pipeline``: a ring of stages with "full" and "empty" mbarriers that owns each role's stage and phase.

Written in the kernel language itself, so its methods are inlined into kernels like any helper. The producer waits
for a stage to be empty (``producer_acquire``), fills it with copies that complete on ``producer_barrier()`` and
moves on (``producer_advance``); the consumer waits for it to be full (``consumer_acquire``), reads it, hands it
back (``consumer_release``) and moves on (``consumer_advance``). Phases flip each time a role wraps around the
ring, so authors never compute parity by hand.
"""

from warpspec.dtypes import int32, uint32
from warpspec.script import Class


class Pipeline(Class):
    """A ring of ``num_stages`` stages.

    ``producer_arrivals``: arrivals that fill a stage besides the TMA bytes (1: one ``arrive_and_expect_tx``).
    ``consumer_arrivals``: arrivals that empty a stage (128 when every thread of one warpgroup releases it).
    ``producer_stage`` / ``consumer_stage`` index the shared buffers of the current stage.
    """

    def __init__(self, num_stages: int, producer_arrivals: int = 1, consumer_arrivals: int = 1):
        assert num_stages >= 1, f"a Pipeline needs at least one stage, got num_stages={num_stages}"
        self.num_stages = num_stages
        self.full_barriers = self.mbarrier.alloc(counts=[producer_arrivals for _ in range(num_stages)])
        self.empty_barriers = self.mbarrier.alloc(counts=[consumer_arrivals for _ in range(num_stages)])
        self.producer_stage: int32 = 0
        self.producer_phase: uint32 = self.mbarrier.producer_initial_phase
        self.consumer_stage: int32 = 0
        self.consumer_phase: uint32 = self.mbarrier.consumer_initial_phase

    def producer_acquire(self):
        """Wait until the producer's current stage is empty (passes at once on the first lap)."""
        self.mbarrier.wait(self.empty_barriers[self.producer_stage], phase=self.producer_phase)

    def producer_barrier(self):
        """The "full" barrier of the producer's current stage: copies into the stage complete on it."""
        return self.full_barriers[self.producer_stage]

    def producer_advance(self):
        """Move the producer to the next stage, flipping its phase when it wraps around the ring."""
        self.producer_stage = self.producer_stage + 1
        if self.producer_stage == self.num_stages:
            self.producer_stage = 0
            self.producer_phase = self.producer_phase ^ 1

    def consumer_acquire(self):
        """Wait until the consumer's current stage is full."""
        self.mbarrier.wait(self.full_barriers[self.consumer_stage], phase=self.consumer_phase)

    def consumer_release(self):
        """Every executing thread arrives on the "empty" barrier of the consumer's current stage."""
        self.mbarrier.arrive(self.empty_barriers[self.consumer_stage])

    def consumer_advance(self):
        """Move the consumer to the next stage, flipping its phase when it wraps around the ring."""
        self.consumer_stage = self.consumer_stage + 1
        if self.consumer_stage == self.num_stages:
            self.consumer_stage = 0
            self.consumer_phase = self.consumer_phase ^ 1
