"""Choosing whom to preempt so that a guaranteed job starts now.

A running job may give way to a pending guaranteed job P when it is

* opportunistic (any queue): preempted first, as in AntMan;
* of P's queue with a lower priority (Kueue's ``withinClusterQueue: LowerPriority``);
* of a queue using more than its guarantee while P's queue is within its own (reclaim: Kueue's
  ``reclaimWithinCohort``, YARN's capacity preemption). Every guarantee is of the one cluster, so any
  borrowing queue gives capacity back, and only while it still borrows.

Candidates are taken cheapest first, by (opportunistic first, work lost = GPUs x seconds run, then the
longest estimated remaining time, id), until P is within quota and fits; then each victim but the last
is given back if P still fits without it (Kueue's minimal set). A victim is a whole job: its allocation
is released whole, never part of a gang. Unmanaged allocations (jobs the scheduler did not start) are
never victims.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import overload

import numpy as np

from placement.model.decision import Decision
from placement.model.demand import Job
from placement.model.snapshot import ClusterSnapshot, apply, release
from placement.scheduling.forecast import fenced, place_around, totals_cover
from placement.scheduling.jobs import JobMode, PendingJob, RunningJob
from placement.scheduling.memo import facts_of, ranking_of
from placement.scheduling.plan import PreemptReason
from placement.scheduling.probe import TRIAL_STREAMS, could_start, fewest_victims
from placement.scheduling.quota import QuotaBook
from placement.scheduling.resources import demand_of
from placement.scheduling.state import CycleState


@dataclass(frozen=True)
class Victims:
    chosen: tuple[tuple[RunningJob, PreemptReason], ...]
    decision: Decision
    borrows: bool


def _reason(state: CycleState, pending: PendingJob, victim: RunningJob, reclaiming: bool) -> PreemptReason | None:
    if victim.mode is JobMode.OPPORTUNISTIC:
        return PreemptReason.OPPORTUNISTIC
    if victim.job_id not in state.counted:
        return None
    if victim.queue == pending.queue:
        return PreemptReason.HIGHER_PRIORITY if victim.priority < pending.priority else None
    return PreemptReason.RECLAIM if reclaiming and state.book.borrowing(victim.queue) else None


def _cost(state: CycleState, victim: RunningJob) -> tuple[int, float, float, float, str]:
    remaining = victim.estimated_end_s() - state.now
    return (victim.mode is not JobMode.OPPORTUNISTIC, victim.lost_gpu_s(state.now), state.now - victim.started_s,
            -remaining if not math.isnan(remaining) else 0.0, victim.job_id)


class _Futures(Sequence[ClusterSnapshot]):
    """Each reservation's forecast without the trial's victims (``gone``), released from it when first read: most
    trials fail before any forecast is read, and releasing every victim from every forecast at once was a fifth
    of a queued replay. A victim absent from a forecast (it ends before the reservation is due) leaves it as it is."""

    def __init__(self, base: list[ClusterSnapshot]) -> None:
        self.base = base
        self.gone: tuple[str, ...] = ()
        self._made: dict[int, tuple[tuple[str, ...], ClusterSnapshot]] = {}

    def __len__(self) -> int:
        return len(self.base)

    @overload
    def __getitem__(self, i: int) -> ClusterSnapshot: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[ClusterSnapshot]: ...

    def __getitem__(self, i: int | slice) -> ClusterSnapshot | Sequence[ClusterSnapshot]:
        if isinstance(i, slice):
            return [self[k] for k in range(len(self.base))[i]]
        kept = self._made.get(i)
        if kept is not None and kept[0] == self.gone:
            return kept[1]
        done, future = (kept if kept is not None and self.gone[:len(kept[0])] == kept[0]  # a victim more: one release
                        else ((), self.base[i]))
        for job_id in self.gone[len(done):]:
            future = release(future, job_id)
        self._made[i] = (self.gone, future)
        return future

    def __iter__(self) -> Iterator[ClusterSnapshot]:
        return (self[i] for i in range(len(self.base)))


@dataclass
class _Trial:
    """The cycle's state with some victims gone: the snapshot, the book and each reservation's forecast."""

    state: CycleState
    pending: PendingJob
    job: Job
    end_s: float
    snapshot: ClusterSnapshot
    book: QuotaBook
    futures: _Futures
    _beside: dict[int, tuple[ClusterSnapshot, ClusterSnapshot]] = field(default_factory=dict)

    def beside(self, state: CycleState, i: int) -> tuple[Hashable, ClusterSnapshot]:
        """Reservation ``i``'s forecast in this trial with its place taken (``forecast._certain_blocker``),
        made again only when the trial's victims change."""
        future = self.futures[i]
        kept = self._beside.get(i)
        if kept is None or kept[0] is not future:
            kept = self._beside[i] = (future, fenced(future, [state.held[i].reservation.allocation]))
        return ("trial-beside", i), kept[1]

    def remove(self, victim: RunningJob) -> None:
        self._count(victim, -1)
        self.snapshot = release(self.snapshot, victim.job_id)
        self.futures.gone += (victim.job_id,)

    def restore(self, victim: RunningJob) -> None:
        self._count(victim, +1)
        allocation = self.state.allocation_of(victim.job_id)
        self.snapshot = apply(self.snapshot, allocation)
        self.futures.gone = tuple(job_id for job_id in self.futures.gone if job_id != victim.job_id)

    def _count(self, victim: RunningJob, sign: int) -> None:
        _count(self.state, self.book, victim, sign)

    def fits(self) -> tuple[Decision, bool] | None:
        """The decision and whether it borrows, when the job is within quota and fits; else ``None``."""
        queue = self.pending.queue
        if not self.book.admission(queue, demand_of(self.job)).admitted or not totals_cover(self.snapshot, self.job):
            return None
        beside = self.beside if self.state.screen is not None else None
        decision, _ = place_around(self.state, self.snapshot, self.job, self.end_s, self.futures, TRIAL_STREAMS,
                                   beside)
        if decision.allocation is None:
            return None
        admission = self.book.admission(queue, demand_of(self.job, decision.allocation, self.snapshot.layout))
        return (decision, admission.borrows) if admission.admitted else None


def find_victims(state: CycleState, pending: PendingJob, job: Job, end_s: float) -> Victims | None:
    """The cheapest set of running jobs whose preemption lets ``job`` (``pending``'s) start now, or ``None``."""
    reclaiming = state.book.within_guarantee(pending.queue, facts_of(pending).demand if job is pending.job
                                             else demand_of(job))
    candidates = _candidates(state, pending, reclaiming)
    if not candidates:
        return None
    streams = ("victims", pending.queue, pending.priority, reclaiming)
    if state.screen is not None and not could_start(state, streams, job, end_s, candidates):
        return None
    trial = _Trial(state, pending, job, end_s, state.working, state.book.copy(),
                   _Futures([h.future for h in state.held]))
    taken = _taken(state, pending, candidates)
    first = 1
    if state.screen is not None:
        fewest = fewest_victims(state, (*streams, "fewest"), job, end_s, taken,
                                all_have_room=len(taken) == len(candidates))
        if fewest is None:
            return None
        first = fewest
    chosen: list[RunningJob] = []
    found = None
    for victim in taken:
        chosen.append(victim)
        trial.remove(victim)
        if len(chosen) < first:
            continue  # no room yet, now and beside the reservations (placement.scheduling.probe)
        found = trial.fits()
        if found is not None:
            break
    if found is None:
        return None
    for victim in reversed(chosen[:-1]):
        trial.restore(victim)
        still = trial.fits()
        if still is None:
            trial.remove(victim)
        else:
            chosen, found = [v for v in chosen if v is not victim], still
    reasons = tuple((v, _reason(state, pending, v, reclaiming) or PreemptReason.OPPORTUNISTIC) for v in chosen)
    return Victims(reasons, found[0], found[1])


def _taken(state: CycleState, pending: PendingJob, candidates: Sequence[RunningJob]) -> list[RunningJob]:
    """The candidates a search takes, in order, while none fits: each but those of another queue that no longer
    borrows once the ones before are gone (what such a queue holds is its guarantee)."""
    book, taken = state.book.copy(), []
    for victim in candidates:
        if victim.job_id in state.counted and victim.queue != pending.queue and not book.borrowing(victim.queue):
            continue
        taken.append(victim)
        _count(state, book, victim, -1)
    return taken


def _count(state: CycleState, book: QuotaBook, victim: RunningJob, sign: int) -> None:
    """Add (``sign`` 1) or take off (-1) ``victim``'s usage in ``book``, where the cycle's book counts it."""
    if victim.job_id in state.counted:
        allocation = state.allocation_of(victim.job_id)
        book.add(victim.queue, demand_of(victim.job, allocation, state.working.layout), sign)


def _candidates(state: CycleState, pending: PendingJob, reclaiming: bool) -> tuple[RunningJob, ...]:
    """The running jobs ``pending`` may preempt, cheapest first, at most ``max_victims`` (once per queue,
    priority and version). The same as sorting every running job with a reason by cost: merged from the
    lists, each in cost order, of those that can have one here (the opportunistic jobs; its queue's, where
    some have a lower priority; each borrowing queue's, when reclaiming)."""
    key = ("victims", pending.queue, pending.priority, reclaiming, state.working.generation)
    found = state.probes.get(key)  # the book and the running jobs change only as the generation does
    if isinstance(found, tuple):
        return found
    groups = _groups(state)
    lists: list[Iterable[RunningJob]] = [_ranked(state, None)] if None in groups else []
    own = groups.get(pending.queue, [])
    if own and state.lowest[pending.queue] < pending.priority:
        lists.append(v for v in _ranked(state, pending.queue) if v.priority < pending.priority)
    if reclaiming:
        lists += [_ranked(state, queue) for queue in groups
                  if queue is not None and queue != pending.queue and state.book.borrowing(queue)]
    listed: list[RunningJob] = []
    for victim in heapq.merge(*lists, key=lambda v: _cost(state, v)):
        if len(listed) >= state.settings.max_victims:
            break
        if victim.job_id in state.running and _reason(state, pending, victim, reclaiming) is not None:
            listed.append(victim)
    state.probes[key] = result = tuple(listed)
    return result


def _groups(state: CycleState) -> dict[str | None, list[RunningJob]]:
    """The running jobs that can be victims, by queue (``None``: the opportunistic ones), as the cycle
    began (preempted ones are skipped where used)."""
    assert state.victim_groups is not None  # made by CycleState.begin
    return state.victim_groups


def _ranked(state: CycleState, group: str | None) -> list[RunningJob]:
    """The jobs of one of :func:`_groups` in the order of :func:`_cost` (whose first term, the mode, is the
    same for all of them), sorted in numpy with the same arithmetic (once per cycle: costs do not change
    within one; what they are worked out from is kept across cycles, ``placement.scheduling.memo``)."""
    found = state.ranked.get(group)
    if found is None:
        jobs = _groups(state).get(group, [])
        now = state.now
        gpus, end, started, id_rank = ranking_of(group, jobs)
        remaining = end - now
        keys = (id_rank, np.where(np.isnan(remaining), 0.0, -remaining), now - started,
                gpus * np.maximum(now - started, 0.0))
        found = state.ranked[group] = [jobs[i] for i in np.lexsort(keys).tolist()]
    return found
