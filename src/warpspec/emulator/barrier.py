"""The mbarrier model: arrival counts, a signed transaction count and phase parity as the PTX ISA defines them.

A phase completes when its pending arrivals and its transaction count are both zero; the barrier then starts the
next phase with the expected count again. ``wait(parity)`` passes iff the phase of that parity is the immediately
preceding one: ``(completed_phases & 1) != parity`` (a fresh barrier passes parity 1 at once, blocks on 0).
"""

from __future__ import annotations

from warpspec.emulator.clocks import join
from warpspec.errors import BarrierError

TX_LIMIT = 2**20 - 1


class BarrierState:
    """One mbarrier: ``name`` is how the kernel spells it (``producer_barriers[2]``)."""

    def __init__(self, name: str, expected: int, num_tasks: int):
        self.name = name
        self.expected = expected
        self.pending = expected
        self.tx = 0
        self.completed = 0  # phases completed so far; the current phase has parity completed & 1
        self.clock = [0] * num_tasks  # releases gathered for the current phase
        self.released = [0] * num_tasks  # the clock published by the last completed phase
        self.observed = True  # some wait has seen the last completed phase (vacuously true before the first)
        self.seen: dict[int, tuple[int, int]] = {}  # task -> (`completed`, its own epoch) at its last passing wait
        self.waiters: list = []  # (task, parity) blocked on this barrier
        self.announced = 0  # transaction bytes the current phase's arrivals announced (expect_tx)
        # Where the arrival that completed the last phase was made, when that phase announced no bytes (None
        # otherwise): a copy issued after such a phase counts toward the next one.
        self.completed_without_bytes: str | None = None

    def describe(self) -> str:
        return (f"{self.name}: {self.completed} phase(s) completed, current phase parity {self.completed & 1}, "
                f"{self.pending}/{self.expected} arrivals pending, tx-count {self.tx}")

    def arrive(self, count: int, clock: list[int], tx: int = 0, where: str = "") -> None:
        """``count`` arrivals (after adding ``tx`` expected bytes), releasing ``clock``; ``where`` is the
        arriving statement's location (for messages)."""
        if self.pending == self.expected and self.completed and not self.observed:
            raise BarrierError(f"arrive on {self.name} starts phase {self.completed} before any thread waited on "
                               f"the completion of phase {self.completed - 1}; the PTX ISA requires a successful "
                               f"wait on each phase before the next one is arrived on ({self.describe()})")
        if count > self.pending:
            raise BarrierError(f"{count} arrival(s) on {self.name} but only {self.pending} are pending in this "
                               f"phase: the extra arrivals would complete more than one phase (expected "
                               f"{self.expected} per phase; {self.describe()})")
        self._add_tx(tx)
        self.announced += tx
        self.pending -= count
        join(self.clock, clock)
        self._maybe_complete(where)

    def complete_tx(self, nbytes: int, clock: list[int]) -> None:
        """Bytes delivered by an async copy, which releases the issuer's clock at issue time."""
        self._add_tx(-nbytes)
        join(self.clock, clock)
        self._maybe_complete()

    def _add_tx(self, delta: int) -> None:
        self.tx += delta
        if not -TX_LIMIT <= self.tx <= TX_LIMIT:
            raise BarrierError(f"the transaction count of {self.name} reached {self.tx}, outside "
                               f"[-(2^20 - 1), 2^20 - 1] ({self.describe()})")

    def _maybe_complete(self, where: str = "") -> None:
        if self.pending == 0 and self.tx == 0:
            self.completed_without_bytes = (where or "an arrival") if self.announced == 0 else None
            self.announced = 0
            self.completed += 1
            self.pending = self.expected
            self.released = self.clock
            self.clock = [0] * len(self.clock)
            self.observed = False
            still_waiting = []
            for task, parity in self.waiters:
                if self.passes(parity):
                    self._observe(task)
                    task.wake()
                else:
                    still_waiting.append((task, parity))
            self.waiters = still_waiting

    def passes(self, parity: int) -> bool:
        return (self.completed & 1) != parity

    def try_wait(self, task, parity: int) -> bool:
        """True (and the task acquires the phase's releases) if the wait passes now; else the task is queued."""
        if self.passes(parity):
            last = self.seen.get(task.index, (None,))[0]
            if last is not None and self.completed - last >= 2 and self.completed - self.known_phases(task) != 1:
                raise BarrierError(f"wait on {self.name} with parity {parity} by a task that last saw "
                                   f"{last} completed phase(s): it is {self.completed - last} phases behind, so "
                                   f"parity alone cannot tell which phase it waits for ({self.describe()})")
            self._observe(task)
            return True
        self.waiters.append((task, parity))
        return False

    def known_phases(self, task) -> int:
        """How many completed phases ``task`` knows of: those its own last passing wait saw, or a wait of another
        task ordered before it saw. A waiter two or more phases behind its own last wait is still unambiguous when
        this puts it exactly one phase behind: it waits for the phase after those it knows of, as a ping-pong
        warpgroup does after the other warpgroup consumed the phases between (their ordering barrier orders its
        wait after the other's)."""
        return max(completed for other, (completed, epoch) in self.seen.items()
                   if other == task.index or task.clock[other] >= epoch)

    def _observe(self, task) -> None:
        self.seen[task.index] = (self.completed, task.clock[task.index])
        if self.completed:
            self.observed = True
        join(task.clock, self.released)
