"""Orders within a queue, registered by name: in which order a queue offers its pending jobs.

* ``fifo`` - by submit time.
* ``sjf`` - shortest estimated expected duration first (:attr:`DurationEstimate.expected_s`). A job without an
  estimate sorts as the median of the estimates of the jobs submitted before it (causal: :class:`CausalMedian`,
  the same rule as the replay's ``sjf-<estimate>`` queues; 0 for the first).
* ``priority`` - highest priority first, then by submit time.

Ties break by submit time, then job id, so an order is a total order and a cycle is deterministic.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence

from placement.scheduling.jobs import PendingJob

OrderKey = tuple[float, float, str]
Order = Callable[[Sequence[PendingJob]], list[PendingJob]]


class CausalMedian:
    """Fills missing values, seen one by one in arrival order, with the median of those seen before."""

    def __init__(self) -> None:
        self.seen: list[float] = []

    def __call__(self, value: float) -> float:
        """``value`` itself when known (and remembered); else the median so far (0 before any)."""
        if not math.isnan(value):
            bisect.insort(self.seen, value)
            return value
        n = len(self.seen)
        if n == 0:
            return 0.0
        return self.seen[n // 2] if n % 2 else (self.seen[n // 2 - 1] + self.seen[n // 2]) / 2


def arrival_key(submit_s: float, job_id: str) -> OrderKey:
    """FIFO: by arrival, then id."""
    return (submit_s, 0.0, job_id)


def _by_arrival(jobs: Sequence[PendingJob]) -> list[PendingJob]:
    return sorted(jobs, key=lambda j: (j.submit_s, j.job.job_id))  # arrival_key's order, its constant left out


def fifo(jobs: Sequence[PendingJob]) -> list[PendingJob]:
    return _by_arrival(jobs)


def sjf(jobs: Sequence[PendingJob]) -> list[PendingJob]:
    expected = [j.estimate.expected_s for j in jobs]
    if not any(math.isnan(e) for e in expected):  # nothing to fill: each job's key is its own
        keys = [(e, j.submit_s, j.job.job_id) for j, e in zip(jobs, expected, strict=True)]
        return [jobs[i] for i in sorted(range(len(keys)), key=keys.__getitem__)]
    fill = CausalMedian()
    keyed = [((fill(j.estimate.expected_s), j.submit_s, j.job_id), j) for j in _by_arrival(jobs)]
    return [j for _, j in sorted(keyed, key=lambda pair: pair[0])]


def by_priority(jobs: Sequence[PendingJob]) -> list[PendingJob]:
    return sorted(jobs, key=lambda j: (-j.job.priority, j.submit_s, j.job.job_id))


ORDERS: dict[str, Order] = {"fifo": fifo, "sjf": sjf, "priority": by_priority}
"""Each order by name; a queue's ``order`` names one."""


def queue_order(name: str) -> Order:
    """The order called ``name``; ``KeyError`` naming the known ones otherwise."""
    if name not in ORDERS:
        raise KeyError(f"unknown queue order {name!r}; known: {', '.join(ORDERS)}")
    return ORDERS[name]
