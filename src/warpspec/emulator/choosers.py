"""Who decides the emulator's schedule: every scheduling decision of ``BlockMachine`` goes through a chooser.

The machine's scheduler runs rounds: it asks ``order`` which tasks run this round and in which order, asks
``preempt`` at each preemption point (after an arrive, a copy's issue, a shared store, an mma, a flag signal)
whether the running task stops there, and after a round that made progress with asynchronous operations in flight,
``complete_early`` whether one completes now rather than when every task is blocked; ``event`` picks which.

``Chooser`` is the deterministic order (tasks in index order, no preemption, each operation completing as late as
the program allows, the oldest first); ``SeededChooser`` is the random order of a seeded run
(``WARPSPEC_EMULATOR_SEED``). ``warpspec.emulator.explore`` drives the same decisions to enumerate schedules.
"""

from __future__ import annotations

import random


class Chooser:
    """The deterministic schedule: as late as possible, which exposes every missing wait."""

    #: Whether preemption points yield to the scheduler at all (without them a task runs until it blocks).
    preempts = False

    def order(self, tasks: list) -> list:
        """The tasks to run this round, in order (the scheduler skips the finished and the still blocked)."""
        return list(tasks)

    def preempt(self, task) -> bool:
        """Whether ``task`` stops at this preemption point so that another may run."""
        return False

    def complete_early(self) -> bool:
        """After a round that progressed, with operations in flight: whether one completes now."""
        return False

    def event(self, completable: list):
        """Which of the ``completable`` asynchronous operations completes now."""
        return completable[0]


class SeededChooser(Chooser):
    """A random schedule from ``rng``: tasks shuffled each round, preempted half the time, operations completed
    early 30% of the time and in a random order."""

    preempts = True

    def __init__(self, rng: random.Random):
        self.rng = rng

    def order(self, tasks: list) -> list:
        order = list(tasks)
        self.rng.shuffle(order)
        return order

    def preempt(self, task) -> bool:
        return self.rng.random() < 0.5

    def complete_early(self) -> bool:
        return self.rng.random() < 0.3

    def event(self, completable: list):
        return self.rng.choice(completable)
