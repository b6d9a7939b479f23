"""Quota arithmetic for one cycle: what each queue uses, whether a job may start within its queue's quota,
and each queue's share of borrowed capacity (for dominant-resource fairness).

For a queue ``q`` and a resource ``r`` it governs, with usage ``u`` (its guaranteed jobs running), guarantee
``g``, borrowing limit ``b`` and the job's demand ``d``:

* within its guarantee when ``u + d <= g`` for every ``r``: always admitted (by preemption if need be);
* borrowing when ``u + d > g`` for some ``r``: admitted while ``u + d <= g + b`` (its limit) and the
  idle guarantee of its cohort's tree covers it, ``sum over the tree of (g - u) >= d`` (Kueue's cohort
  rule: the tree together never uses more than it is guaranteed);
* over quota otherwise; a queue without a cohort has no idle guarantee to borrow.

The borrowed share of a queue (DRF over borrowed capacity, Ghodsi et al., NSDI'11) is
``max over r of max(u - g, 0) / (sum over the tree of g)``: the queue that has borrowed least, in its most
borrowed resource, borrows next. Opportunistic jobs count against no quota.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from placement.scheduling.queues import QueueSet
from placement.scheduling.resources import EPSILON, Amounts


@dataclass(frozen=True)
class Admission:
    """What the quota says about one job: ``problems`` empty = it may start; ``borrows`` = beyond its
    guarantee on some resource."""

    borrows: bool
    problems: tuple[str, ...] = ()

    @property
    def admitted(self) -> bool:
        return not self.problems


@dataclass
class QuotaBook:
    """Usage per queue and resource, changed as a cycle starts and preempts jobs."""

    queues: QueueSet
    usage: dict[str, dict[str, float]] = field(default_factory=dict)
    version: int = 0
    """Counts the changes (:meth:`add`): what was worked out from the book holds while it stays."""

    def copy(self) -> QuotaBook:
        return QuotaBook(self.queues, {q: dict(u) for q, u in self.usage.items()})

    def used(self, queue: str, key: str) -> float:
        return self.usage.get(queue, {}).get(key, 0.0)

    def add(self, queue: str, demand: Amounts, sign: int = 1) -> None:
        usage = self.usage.setdefault(queue, {})
        for key, amount in demand.items():
            usage[key] = usage.get(key, 0.0) + sign * amount
        self.version += 1

    def idle(self, queue: str, key: str) -> float:
        """Idle guarantee of ``key`` in queue ``queue``'s cohort tree: sum of (g - u) over its members."""
        return sum(self.queues[m].guarantee[key] - self.used(m, key) for m in self.queues.members(queue)
                   if self.queues[m].governs(key))

    def within_guarantee(self, queue: str, demand: Amounts) -> bool:
        q = self.queues[queue]
        return all(self.used(queue, k) + d <= q.guarantee[k] + EPSILON for k, d in demand.items() if q.governs(k))

    def borrowing(self, queue: str) -> bool:
        """Whether the queue uses more than its guarantee of some resource now."""
        q = self.queues[queue]
        return any(self.used(queue, k) > g + EPSILON for k, g in q.guarantee.items())

    def admission(self, queue: str, demand: Amounts) -> Admission:
        q = self.queues[queue]
        problems = []
        borrows = False
        for key, d in sorted(demand.items()):
            if d <= 0 or not q.governs(key):
                continue
            after = self.used(queue, key) + d
            if after <= q.guarantee[key] + EPSILON:
                continue
            borrows = True
            if q.cohort is None:
                problems.append(f"{key}: {after:g} would exceed the guarantee of {q.guarantee[key]:g} "
                                f"(no cohort to borrow from)")
            elif after > q.limit(key) + EPSILON:
                problems.append(f"{key}: {after:g} would exceed the guarantee + borrowing limit of {q.limit(key):g}")
            elif (idle := self.idle(queue, key)) < d - EPSILON:
                problems.append(f"{key}: needs {d:g}, the cohort has {max(idle, 0.0):g} idle")
        return Admission(borrows, tuple(problems))

    def borrowed_share(self, queue: str, demand: Amounts | None = None) -> float:
        """The queue's dominant share of borrowed capacity (with ``demand`` added when given)."""
        q = self.queues[queue]
        share = 0.0
        for key, g in q.guarantee.items():
            pool = sum(self.queues[m].guarantee.get(key, 0.0) for m in self.queues.members(queue))
            over = self.used(queue, key) + (demand or {}).get(key, 0.0) - g
            if over > EPSILON:
                share = max(share, over / pool if pool > 0 else float("inf"))
        return share

    def allowed_types(self, queue: str, gpus: float, keys: Iterable[str]) -> list[str]:
        """Of the GPU-type ``keys``, those on which ``gpus`` more GPUs would be admitted."""
        return [k for k in keys if self.admission(queue, {k: gpus}).admitted]


def book_of(queues: QueueSet, usages: Iterable[tuple[str, Mapping[str, float]]]) -> QuotaBook:
    """A book with each ``(queue, demand)`` counted."""
    book = QuotaBook(queues)
    for queue, demand in usages:
        book.add(queue, demand)
    return book
