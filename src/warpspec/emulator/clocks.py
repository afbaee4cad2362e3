"""Vector clocks: the happens-before order between thread partitions that the race checks consult.

Each task owns one entry; releases (arrive, sync) publish a task's clock, acquires (a passing wait, sync) join it.
An access by task u to memory last touched by task t at epoch e is ordered iff ``clock_u[t] >= e``.
"""

from __future__ import annotations


def join(into: list[int], other: list[int]) -> None:
    """``into`` becomes the elementwise maximum of both."""
    for i, value in enumerate(other):
        if value > into[i]:
            into[i] = value
