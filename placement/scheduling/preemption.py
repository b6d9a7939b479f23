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

import math
from dataclasses import dataclass

from placement.model.decision import Decision
from placement.model.demand import Job
from placement.model.snapshot import ClusterSnapshot, apply, release
from placement.scheduling.forecast import place_around, totals_cover
from placement.scheduling.jobs import JobMode, PendingJob, RunningJob
from placement.scheduling.plan import PreemptReason
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


@dataclass
class _Trial:
    """The cycle's state with some victims gone."""

    state: CycleState
    pending: PendingJob
    job: Job
    end_s: float
    snapshot: ClusterSnapshot
    book: QuotaBook

    def remove(self, victim: RunningJob) -> None:
        self._count(victim, -1)
        self.snapshot = release(self.snapshot, victim.job_id)

    def restore(self, victim: RunningJob) -> None:
        self._count(victim, +1)
        self.snapshot = apply(self.snapshot, self.state.working.allocations[victim.job_id])

    def _count(self, victim: RunningJob, sign: int) -> None:
        if victim.job_id in self.state.counted:
            allocation = self.state.working.allocations[victim.job_id]
            self.book.add(victim.queue, demand_of(victim.job, allocation, self.snapshot.layout), sign)

    def fits(self, gone: list[RunningJob]) -> tuple[Decision, bool] | None:
        """The decision and whether it borrows, when the job is within quota and fits; else ``None``."""
        queue = self.pending.queue
        if not self.book.admission(queue, demand_of(self.job)).admitted or not totals_cover(self.snapshot, self.job):
            return None
        decision, _ = place_around(self.state, self.snapshot, self.job, self.end_s, (v.job_id for v in gone))
        if decision.allocation is None:
            return None
        admission = self.book.admission(queue, demand_of(self.job, decision.allocation, self.snapshot.layout))
        return (decision, admission.borrows) if admission.admitted else None


def find_victims(state: CycleState, pending: PendingJob, job: Job, end_s: float) -> Victims | None:
    """The cheapest set of running jobs whose preemption lets ``job`` (``pending``'s) start now, or ``None``."""
    reclaiming = state.book.within_guarantee(pending.queue, demand_of(job))
    candidates = sorted((v for v in state.running.values() if _reason(state, pending, v, reclaiming) is not None),
                        key=lambda v: _cost(state, v))[:state.settings.max_victims]
    trial = _Trial(state, pending, job, end_s, state.working, state.book.copy())
    chosen: list[RunningJob] = []
    found = None
    for victim in candidates:
        if victim.job_id in state.counted and victim.queue != pending.queue and not trial.book.borrowing(victim.queue):
            continue  # its queue no longer borrows: what it holds is its guarantee
        chosen.append(victim)
        trial.remove(victim)
        found = trial.fits(chosen)
        if found is not None:
            break
    if found is None:
        return None
    for victim in reversed(chosen[:-1]):
        trial.restore(victim)
        kept = [v for v in chosen if v is not victim]
        still = trial.fits(kept)
        if still is None:
            trial.remove(victim)
        else:
            chosen, found = kept, still
    reasons = tuple((v, _reason(state, pending, v, reclaiming) or PreemptReason.OPPORTUNISTIC) for v in chosen)
    return Victims(reasons, found[0], found[1])
