"""What a cycle works out from the running jobs before it decides anything, kept for the next cycle.

Each cycle is handed every running job (thousands) and needs, from them, each queue's usage for the quota
book, the jobs preemption may take by queue, and every guaranteed job's estimated end in order (the
forecast reservations are found on). From one cycle to the next a few jobs end and a few start: the
:class:`RunningIndex` keeps those views and changes them by the jobs that came, left, or hold another
allocation (each told apart by the identity of its :class:`RunningJob` and its allocation, as
``placement.scheduling.memo`` tells pending jobs apart), instead of going over every running job again.

Every view is a function of the set of running jobs, never of the order they came in or were handed over:
a queue's usage of a resource is the correctly rounded sum of its jobs' amounts (``math.fsum``), which no
order of additions changes, and the ends are kept sorted by (end, job id). So a cycle sees the same views
whichever cycles came before it, or none.
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import attrgetter, is_, is_not, or_

from placement.model.snapshot import Allocation, Layout
from placement.scheduling.jobs import JobMode, RunningJob
from placement.scheduling.memo import running_facts
from placement.scheduling.resources import CPU_CORES, GPUS, MEM_GIB

_job_id = attrgetter("job.job_id")
_FIRST_KEYS = (GPUS, CPU_CORES, MEM_GIB)
"""The order of a queue's usage keys (then the GPU types' keys, sorted): the same whatever came first."""


@dataclass
class RunningViews:
    """One cycle's copies of the views (the cycle changes them as it starts and preempts jobs)."""

    by_id: dict[str, RunningJob]
    counted: set[str]
    """Running jobs whose usage is in the book (guaranteed, in a known queue)."""
    ends: dict[str, float]
    """Estimated end of every running guaranteed job."""
    ending: list[tuple[float, str]]
    """``(end, job id)`` of those of ``ends`` with a finite end, sorted."""
    opportunistic: list[str]
    """The running opportunistic jobs, in the order handed over."""
    groups: dict[str | None, list[RunningJob]]
    """The jobs preemption may take, by queue (``None``: the opportunistic ones)."""
    usage: dict[str, dict[str, float]]
    """Per known queue with counted jobs, its usage per resource key."""
    lowest: dict[str, int]
    """Per known queue with counted jobs, the lowest priority among them."""


class RunningIndex:
    """The views of one set of running jobs on one layout and set of known queues (:func:`views`)."""

    def __init__(self, layout: Layout, known: frozenset[str]) -> None:
        self.layout, self.known = layout, known
        self.jobs: dict[str, RunningJob] = {}
        self.allocations: dict[str, Allocation] = {}
        self.ends: dict[str, float] = {}
        self.ending: list[tuple[float, str]] = []
        self.opportunistic: set[str] = set()
        self.groups: dict[str | None, dict[str, RunningJob]] = {}
        self.amounts: dict[str, dict[str, dict[str, float]]] = {}
        """Per known queue and resource key, each counted job's amount."""
        self.counted: dict[str, str] = {}
        """The counted jobs and their queues."""
        self.priorities: dict[str, Counter[int]] = {}
        """Per known queue, how many counted jobs have each priority."""

    def update(self, running: Sequence[RunningJob], ids: list[str], unique: set[str],
               allocations: list[Allocation | None]) -> None:
        """Bring the views to ``running`` (``ids``: their ids, ``unique`` as a set, ``allocations``: theirs, all
        found)."""
        jobs, held = self.jobs, self.allocations
        stale = list(map(or_, map(is_not, map(jobs.get, ids), running), map(is_not, map(held.get, ids), allocations)))
        if len(jobs) == len(ids) and not any(stale):
            return
        for job_id in jobs.keys() - unique:
            self._drop(job_id)
        for job, job_id, allocation in zip(compress(running, stale), compress(ids, stale), compress(allocations,
                                                                                                   stale), strict=True):
            if job_id in jobs:
                self._drop(job_id)
            assert allocation is not None
            self._add(job, job_id, allocation)

    def _add(self, job: RunningJob, job_id: str, allocation: Allocation) -> None:
        self.jobs[job_id], self.allocations[job_id] = job, allocation
        if job.mode is JobMode.OPPORTUNISTIC:
            self.opportunistic.add(job_id)
            self.groups.setdefault(None, {})[job_id] = job
        elif job.mode is JobMode.GUARANTEED:
            demand, end = running_facts(job, allocation, self.layout)
            self.ends[job_id] = end
            if end != math.inf:
                insort(self.ending, (end, job_id))
            if job.queue in self.known:
                amounts = self.amounts.setdefault(job.queue, {})
                for key, amount in demand.items():
                    amounts.setdefault(key, {})[job_id] = amount
                self.counted[job_id] = job.queue
                self.priorities.setdefault(job.queue, Counter())[job.job.priority] += 1
                self.groups.setdefault(job.queue, {})[job_id] = job

    def _drop(self, job_id: str) -> None:
        job = self.jobs.pop(job_id)
        del self.allocations[job_id]
        self.opportunistic.discard(job_id)
        end = self.ends.pop(job_id, None)
        if end is not None and end != math.inf:
            del self.ending[bisect_left(self.ending, (end, job_id))]
        queue = self.counted.pop(job_id, None)
        if queue is not None:
            for per_job in self.amounts[queue].values():
                per_job.pop(job_id, None)
            priorities = self.priorities[queue]
            priorities[job.job.priority] -= 1
            if not priorities[job.job.priority]:
                del priorities[job.job.priority]
        group = self.groups.get(None if job.mode is JobMode.OPPORTUNISTIC else job.queue)
        if group is not None:
            group.pop(job_id, None)

    def views(self, ids: list[str]) -> RunningViews:
        opportunistic = list(compress(ids, map(self.opportunistic.__contains__, ids))) if self.opportunistic else []
        usage = {}
        for queue, amounts in self.amounts.items():
            if any(amounts.values()):
                keys = [k for k in _FIRST_KEYS if k in amounts] + sorted(k for k in amounts if k not in _FIRST_KEYS)
                usage[queue] = {k: math.fsum(amounts[k].values()) for k in keys if amounts[k]}
        return RunningViews(dict(self.jobs), set(self.counted), dict(self.ends), self.ending.copy(), opportunistic,
                            {q: list(g.values()) for q, g in self.groups.items() if g}, usage,
                            {q: min(p) for q, p in self.priorities.items() if p})


_kept: RunningIndex | None = None
_lock = threading.Lock()


def running_views(running: Sequence[RunningJob], allocations: dict[str, Allocation], layout: Layout,
                  known: Collection[str]) -> RunningViews:
    """The views of ``running`` (their allocations in ``allocations``) for a cycle on ``layout`` with the queues
    ``known``; ``ValueError`` naming a running job that holds no allocation or is listed twice. Worked out from
    the last cycle's where it was on the same layout and queues."""
    global _kept
    ids = list(map(_job_id, running))
    held = list(map(allocations.get, ids))
    if any(map(is_, held, repeat(None))):
        job_id = next(i for i, a in zip(ids, held, strict=True) if a is None)
        raise ValueError(f"running job {job_id!r} holds no allocation in the snapshot")
    unique = set(ids)
    if len(unique) != len(ids):
        twice = next(i for i, n in Counter(ids).items() if n > 1)
        raise ValueError(f"running job {twice!r} is listed twice")
    queues = frozenset(known)
    with _lock:  # the service decides from several threads; the index changes as it is brought up to date
        index = _kept if _kept is not None and _kept.layout is layout and _kept.known == queues else None
        if index is None:
            index = _kept = RunningIndex(layout, queues)
        index.update(running, ids, unique, held)
        return index.views(ids)
