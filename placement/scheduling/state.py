"""The state one scheduling cycle changes as it decides: the snapshot with the plan so far applied, the
quota book, the jobs still running and when each is estimated to end, the reservations held, and the
plan's parts. Private to the cycle; nothing here outlives one call of ``schedule``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from placement.model.decision import Decision
from placement.model.demand import Job
from placement.model.feasibility import violations
from placement.model.snapshot import Allocation, ClusterSnapshot, apply, release
from placement.online.policies import OnlinePolicy
from placement.scheduling.jobs import JobMode, PendingJob, RunningJob
from placement.scheduling.plan import Plan, PlannedStart, Preemption, PreemptReason, Reservation, WaitingJob, WaitReason
from placement.scheduling.queues import QueueSet
from placement.scheduling.quota import QuotaBook
from placement.scheduling.resources import demand_of
from placement.scheduling.settings import SchedulingSettings


@dataclass
class Held:
    """A reservation and the snapshot forecast for its time, as the cycle has changed it since."""

    reservation: Reservation
    job: Job
    future: ClusterSnapshot

    def delayed_by(self, allocation: Allocation, end_s: float) -> bool:
        """Whether a job holding ``allocation`` until ``end_s`` would take what the reserved job needs."""
        if end_s <= self.reservation.at_s:
            return False
        return bool(violations(apply(self.future, allocation), self.job, self.reservation.allocation))


@dataclass
class CycleState:
    generation: int
    """The generation of the snapshot the cycle was asked about (``working`` moves on as it decides)."""
    now: float
    queues: QueueSet
    place: OnlinePolicy
    settings: SchedulingSettings
    working: ClusterSnapshot
    book: QuotaBook
    running: dict[str, RunningJob]
    """Jobs started by the scheduler and not preempted in this cycle."""
    counted: set[str]
    """Running jobs whose usage is in the book (guaranteed, in a known queue)."""
    ends: dict[str, float]
    """Estimated end of every guaranteed job that holds its place (running or started in this plan)."""
    held: list[Held] = field(default_factory=list)
    starts: list[PlannedStart] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    upgrades: list[str] = field(default_factory=list)
    waiting: dict[str, WaitingJob] = field(default_factory=dict)
    failed: dict[tuple[object, ...], Decision] = field(default_factory=dict)
    """Placements that failed, by job shape and state: an identical job fails the same way."""

    @staticmethod
    def begin(snapshot: ClusterSnapshot, running: Sequence[RunningJob], queues: QueueSet, now: float,
              place: OnlinePolicy, settings: SchedulingSettings) -> CycleState:
        book = QuotaBook(queues)
        by_id, counted, ends = {}, set(), {}
        for job in running:
            allocation = snapshot.allocations.get(job.job_id)
            if allocation is None:
                raise ValueError(f"running job {job.job_id!r} holds no allocation in the snapshot")
            by_id[job.job_id] = job
            if job.mode is JobMode.GUARANTEED:
                ends[job.job_id] = job.estimated_end_s()
                if job.queue in queues:
                    book.add(job.queue, demand_of(job.job, allocation, snapshot.layout))
                    counted.add(job.job_id)
        return CycleState(snapshot.generation, now, queues, place, settings, snapshot, book, by_id, counted, ends)

    def wait(self, job: PendingJob, reason: WaitReason, details: Sequence[str] = (),
             at_s: float | None = None) -> None:
        self.waiting[job.job_id] = WaitingJob(job.job_id, job.queue, reason, tuple(details), at_s)

    def start(self, job: PendingJob, decision: Decision, mode: JobMode, borrows: bool = False) -> None:
        allocation = decision.allocation
        assert allocation is not None
        self.working = apply(self.working, allocation)
        self.waiting.pop(job.job_id, None)
        if mode is JobMode.GUARANTEED:
            self.book.add(job.queue, demand_of(job.job, allocation, self.working.layout))
            expected = job.estimate.expected_s
            self.ends[job.job_id] = self.now + expected if not math.isnan(expected) else math.inf
            cautious = job.estimate.cautious_s
            end = self.now + cautious if not math.isnan(cautious) else math.inf
            for held in self.held:
                if end > held.reservation.at_s:
                    held.future = apply(held.future, allocation)
        self.starts.append(PlannedStart(job.job_id, job.queue, decision, mode, borrows))

    def preempt(self, victim: RunningJob, reason: PreemptReason, for_job: str) -> None:
        allocation = self.working.allocations[victim.job_id]
        self.working = release(self.working, victim.job_id)
        if victim.job_id in self.counted:
            self.book.add(victim.queue, demand_of(victim.job, allocation, self.working.layout), -1)
            self.counted.discard(victim.job_id)
        del self.running[victim.job_id]
        self.ends.pop(victim.job_id, None)
        for held in self.held:
            held.future = release(held.future, victim.job_id)
        self.preemptions.append(Preemption(victim.job_id, victim.queue, reason, for_job, victim.lost_gpu_s(self.now)))

    def plan(self) -> Plan:
        usage = MappingProxyType({q: MappingProxyType(dict(u)) for q, u in sorted(self.book.usage.items())})
        return Plan(self.generation, self.now, tuple(self.starts), tuple(self.preemptions),
                    tuple(h.reservation for h in self.held), tuple(self.upgrades), tuple(self.waiting.values()),
                    usage)
