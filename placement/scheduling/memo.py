"""What a scheduling cycle remembers so that it works on each job, and on each kind of job, once.

* Per pending job, the facts a cycle reads over and over (its shape, its quota demand, its cautious
  estimate), kept across cycles for as long as the same :class:`PendingJob` object is pending: a service
  and a replay hand the cycle the same objects again while a job waits. Per running job, its quota
  demand on its allocation and its estimated end, kept while the same job object holds the same
  allocation.
* Per queue, its pending jobs in the queue's order (:func:`in_order`), kept across cycles and changed by the
  jobs that left and came where each job's key is its own; per waiting job, the :class:`WaitingJob` the
  last plan gave it, given again while it waits for the same reason (:func:`told`).
* Within a cycle, the wait each class of jobs was given (:class:`Outcomes`): jobs of one queue, shape and
  priority whose estimated end falls between the same reservations are decided alike on the same state,
  so while the state has not changed (``CycleState.version``) the second such job is told what the first
  was told without being decided again.

The cross-cycle tables are memos of pure functions of immutable inputs, checked by identity: they change
how fast a cycle decides, never what it decides. They are bounded and thread safe in the sense that
matters here: a lost or repeated entry is only worked out again.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from operator import attrgetter, is_

import numpy as np
import numpy.typing as npt

from placement.model.demand import Job, Task
from placement.model.snapshot import Allocation, Layout
from placement.scheduling.jobs import PendingJob, RunningJob
from placement.scheduling.orders import queue_order
from placement.scheduling.plan import WaitingJob, WaitReason
from placement.scheduling.resources import GPUS, demand_of

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_MOST_SHAPES = 100_000
"""Shapes numbered before the table is emptied (numbers keep counting up, so none is given twice)."""


@dataclass(frozen=True, slots=True)
class Facts:
    """What a cycle reads about one pending job, worked out once."""

    pending: PendingJob
    shape: int
    """The same number for jobs that any placement treats alike: the same tasks, priority, workload class
    and sync curve, placed by the same policy (the job id and the estimates aside)."""
    demand: dict[str, float]
    """``demand_of(job)``: its GPUs, CPU cores and memory (callers never change it)."""
    cautious_s: float
    """Its cautious estimate, infinity where unknown: it runs until ``now + cautious_s`` at the latest."""
    turn: tuple[int, float, str]
    """``(-priority, submit_s, job_id)``: how it goes among jobs alike in quota (``placement.scheduling.cycle``),
    and its key in the ``priority`` order."""
    arrival: tuple[float, str]
    """``(submit_s, job_id)``: its key in the ``fifo`` order."""
    expected_s: float
    """Its expected duration (NaN where unknown): with ``arrival``, its key in the ``sjf`` order."""


_facts: dict[str, Facts] = {}
_shapes: dict[tuple[object, ...], int] = {}
_shape_count = 0


def facts_of(pending: PendingJob) -> Facts:
    """The facts of ``pending`` (remembered while the same object is pending)."""
    found = _facts.get(pending.job.job_id)
    if found is not None and found.pending is pending:
        return found
    job = pending.job
    cautious = pending.estimate.cautious_s
    found = Facts(pending, _shape_of(job, pending.policy), demand_of(job),
                  math.inf if math.isnan(cautious) else cautious, (-job.priority, pending.submit_s, job.job_id),
                  (pending.submit_s, job.job_id), pending.estimate.expected_s)
    _facts[job.job_id] = found
    return found


def _shape_of(job: Job, policy: str | None) -> int:
    global _shape_count
    key = (job.tasks, job.priority, job.workload_class, job.sync_curve, policy)
    found = _shapes.get(key)
    if found is None:
        if len(_shapes) >= _MOST_SHAPES:
            _shapes.clear()
        _shape_count += 1
        found = _shapes[key] = _shape_count
    return found


_lines: dict[str, tuple[str, list[Facts], set[int]]] = {}


def in_order(queue: str, order: str, jobs: list[Facts]) -> list[Facts]:
    """``jobs`` (the pending jobs of ``queue``) in the queue's ``order`` (``placement.scheduling.orders``; the
    list is the caller's to read, not change). The last answer for the queue, with the jobs that left taken
    out and those that came put in, where each job's place is its own (every job's key is: fifo, priority,
    sjf when every estimate is known): sorting thousands of jobs again each cycle would cost more than
    deciding them."""
    ids = {id(f) for f in jobs}
    last = _lines.get(queue)
    if last is not None and last[0] == order and ids == last[2]:
        return last[1]
    key = _own_key(order, jobs)
    if key is None:
        by_pending = {id(f.pending): f for f in jobs}
        listed = [by_pending[id(p)] for p in queue_order(order)([f.pending for f in jobs])]
    elif last is None or last[0] != order:
        listed = sorted(jobs, key=key)
    else:
        listed = [f for f in last[1] if id(f) in ids]
        came = sorted((f for f in jobs if id(f) not in last[2]), key=key)
        if came:
            listed = list(heapq.merge(listed, came, key=key))  # both in order: one pass
    _lines[queue] = (order, listed, ids)
    return listed


def _own_key(order: str, jobs: list[Facts]) -> Callable[[Facts], tuple[object, ...]] | None:
    """The sort key of ``order`` where each job's is its own, else ``None`` (an unknown estimate takes the
    median of those that arrived before it, in ``sjf``)."""
    if order == "fifo":
        return attrgetter("arrival")
    if order == "priority":
        return attrgetter("turn")
    if order == "sjf" and not any(math.isnan(f.expected_s) for f in jobs):
        return lambda f: (f.expected_s, *f.arrival)
    return None


_shape_keys: dict[tuple[Task, ...], tuple[str, ...]] = {}


def shape_key(job: Job) -> tuple[str, ...]:
    """The job's tasks as text: equal for tasks equal but for the identity of a NaN (remembered per tasks)."""
    found = _shape_keys.get(job.tasks)
    if found is None:
        if len(_shape_keys) >= _MOST_SHAPES:
            _shape_keys.clear()
        found = _shape_keys[job.tasks] = tuple(repr(t) for t in job.tasks)
    return found


_running: dict[str, tuple[RunningJob, Allocation, dict[str, float], float]] = {}


def running_facts(job: RunningJob, allocation: Allocation, layout: Layout) -> tuple[dict[str, float], float]:
    """``demand_of(job.job, allocation, layout)`` and ``job.estimated_end_s()`` (remembered while the job
    holds the same allocation)."""
    found = _running.get(job.job.job_id)
    if found is not None and found[0] is job and found[1] is allocation:
        return found[2], found[3]
    demand, end = demand_of(job.job, allocation, layout), job.estimated_end_s()
    _running[job.job.job_id] = (job, allocation, demand, end)
    return demand, end


def gpus_and_end(job: RunningJob) -> tuple[float, float]:
    """``job.job.gpus`` and ``job.estimated_end_s()`` (what :func:`running_facts` remembered, where it did)."""
    found = _running.get(job.job.job_id)
    if found is not None and found[0] is job:
        return found[2][GPUS], found[3]
    return job.job.gpus, job.estimated_end_s()


_machines: dict[str, tuple[Allocation, frozenset[int]]] = {}


def machines_of(allocation: Allocation) -> frozenset[int]:
    """``allocation.machines()`` (remembered per allocation: the running jobs' stay the same)."""
    found = _machines.get(allocation.job_id)
    if found is None or found[0] is not allocation:
        if len(_machines) >= _MOST_SHAPES:
            _machines.clear()
        found = _machines[allocation.job_id] = (allocation, frozenset(p.machine for p in allocation.instances))
    return found[1]


Ranking = tuple[FloatArray, FloatArray, FloatArray, IntArray]
"""Per job of a group: its GPUs (at least 0), estimated end and start, and the rank of its id among the group's."""


@dataclass
class _Ranked:
    """A group's jobs as last ranked (kept alive here, so that no other object takes one's ``id``), and per job its
    row of ``values`` (GPUs, end, start) and its id."""

    jobs: list[RunningJob]
    row: dict[int, int]
    values: FloatArray
    ids: npt.NDArray[np.str_]
    ranking: Ranking


_rankings: dict[str | None, _Ranked] = {}


def ranking_of(group: str | None, jobs: list[RunningJob]) -> Ranking:
    """What preemption ranks the running jobs of ``group`` by, with the cycle's ``now`` (``_ranked`` of
    ``placement.scheduling.preemption``), per job of ``jobs``. From one cycle to the next a group gains or loses a
    job or two: the rows of the jobs it still holds (the same objects) are taken from the last answer, and only the
    others are read off their jobs."""
    kept = _rankings.get(group)
    if kept is not None and len(kept.jobs) == len(jobs) and all(map(is_, kept.jobs, jobs)):
        return kept.ranking
    rows = [-1] * len(jobs) if kept is None else [kept.row.get(id(j), -1) for j in jobs]
    values = np.empty((len(jobs), 3), dtype=np.float64)
    ids = np.empty(len(jobs), dtype=kept.ids.dtype if kept is not None else "U1")
    known = [k for k, r in enumerate(rows) if r >= 0]
    if kept is not None and known:
        at = np.array([rows[k] for k in known], dtype=np.int64)
        values[known], ids[known] = kept.values[at], kept.ids[at]
    new = [k for k, r in enumerate(rows) if r < 0]
    if new:
        values[new] = np.array([(*gpus_and_end(jobs[k]), jobs[k].started_s) for k in new],
                               dtype=np.float64).reshape(-1, 3)
        fresh = np.array([jobs[k].job.job_id for k in new], dtype=str)
        if fresh.dtype.itemsize > ids.dtype.itemsize:  # a longer id than the kept ones: widen them all
            ids = ids.astype(fresh.dtype)
        ids[new] = fresh
    rank = np.empty(len(jobs), dtype=np.int64)
    rank[np.argsort(ids, kind="stable")] = np.arange(len(jobs))
    ranking = (np.maximum(values[:, 0], 0.0), values[:, 1], values[:, 2], rank)
    if len(_rankings) > 256:  # groups come and go with the queues
        _rankings.clear()
    _rankings[group] = _Ranked(list(jobs), {id(j): k for k, j in enumerate(jobs)}, values, ids, ranking)
    return ranking


_told: dict[str, WaitingJob] = {}


def told(job_id: str, queue: str, reason: WaitReason, details: tuple[str, ...], at_s: float | None) -> WaitingJob:
    """``WaitingJob(job_id, queue, reason, details, at_s)``: the one of the last plan that said so, where one
    did. Most jobs wait for the same reason cycle after cycle, and a cycle that made thousands of new ones
    would also make the collector sweep the whole heap more often."""
    found = _told.get(job_id)
    if (found is None or found.reason is not reason or found.details != details or found.queue != queue
            or found.reservation_at_s != at_s):
        found = _told[job_id] = WaitingJob(job_id, queue, reason, details, at_s)
    return found


def forget_others(pending: Sequence[PendingJob], running: Sequence[RunningJob]) -> None:
    """Drop what is remembered about jobs that are neither pending nor running any more, once the tables
    hold twice as many as are (so that the work stays a fraction of the cycle's)."""
    global _facts, _running, _told, _machines
    if len(_lines) > 256:  # queues come and go with configurations
        _lines.clear()
    if len(_facts) > 2 * len(pending) + 1024:
        _facts = {p.job.job_id: f for p in pending if (f := _facts.get(p.job.job_id)) is not None}
    if len(_told) > 2 * len(pending) + 1024:
        _told = {p.job.job_id: w for p in pending if (w := _told.get(p.job.job_id)) is not None}
    if len(_machines) > 2 * len(running) + 1024:
        _machines = {r.job.job_id: m for r in running if (m := _machines.get(r.job.job_id)) is not None}
    if len(_running) > 2 * len(running) + 1024:
        _running = {r.job.job_id: d for r in running if (d := _running.get(r.job.job_id)) is not None}


@dataclass(frozen=True, slots=True)
class Outcome:
    """Why a job waits, as the plan says it."""

    reason: WaitReason
    details: tuple[str, ...] = ()
    at_s: float | None = None


@dataclass
class Outcomes:
    """The wait each class of jobs was given on the cycle's state at ``version``, and the reservations'
    times then (sorted): forgotten when the version changes (:meth:`start`)."""

    version: int = -1
    due: list[float] = field(default_factory=list)
    known: dict[Hashable, Outcome] = field(default_factory=dict)

    def start(self, version: int, due: list[float]) -> None:
        self.version, self.due = version, due
        self.known.clear()
