"""What a scheduling cycle decides: a plan. Jobs to start (with their placement), jobs to preempt and why,
reservations held for jobs that start later, opportunistic jobs to count as guaranteed from now on, and
for every pending job that does not start, why it waits.

A plan is decided on one snapshot: commit it by releasing the preempted jobs, then applying the starts
in order (:func:`apply_plan`); releasing only frees capacity, so each start stays feasible.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from placement.model.decision import Decision
from placement.model.snapshot import Allocation, ClusterSnapshot, apply, release
from placement.scheduling.jobs import JobMode


class WaitReason(StrEnum):
    UNKNOWN_QUEUE = "unknown-queue"
    OVER_QUOTA = "over-quota"
    """Starting it would take its queue beyond its guarantee and what it may borrow."""
    DOES_NOT_FIT_NOW = "does-not-fit-now"
    """Within quota, but the cluster has no place for it now, even by preemption."""
    RESERVED = "waiting-for-reservation"
    """A place is reserved for it when the running jobs there end (``reservation_at_s``)."""
    WOULD_DELAY_RESERVATION = "would-delay-a-reservation"
    """It fits now, but only where it would still run when a job reserved there is due."""
    CAN_NEVER_FIT = "can-never-fit"
    """Not even the empty cluster has a place for it."""


class PreemptReason(StrEnum):
    OPPORTUNISTIC = "opportunistic"
    """An opportunistic job gives way to a guaranteed one (AntMan)."""
    HIGHER_PRIORITY = "higher-priority"
    """A job of the same queue with a higher priority needs its place or its quota."""
    RECLAIM = "reclaim"
    """Its queue borrowed the capacity that another queue's guarantee now needs (Kueue, YARN)."""


class ReservationKind(StrEnum):
    HEAD = "head"
    """Its queue's first job that waits for capacity: backfilling may not delay it."""
    PRESCHEDULED = "prescheduled"
    """Its place frees within the pre-scheduling horizon (Liquid)."""


@dataclass(frozen=True)
class PlannedStart:
    job_id: str
    queue: str
    decision: Decision
    mode: JobMode
    borrows: bool = False
    """Beyond its queue's guarantee, on idle quota of the cohort."""

    @property
    def allocation(self) -> Allocation:
        assert self.decision.allocation is not None  # a start always has its allocation
        return self.decision.allocation


@dataclass(frozen=True)
class Preemption:
    job_id: str
    queue: str
    reason: PreemptReason
    for_job: str
    lost_gpu_s: float
    """GPU-seconds of work it had done (lost without a checkpoint)."""


@dataclass(frozen=True)
class Reservation:
    job_id: str
    queue: str
    kind: ReservationKind
    at_s: float
    """When it is estimated to start: the latest estimated end among ``waits_for``."""
    allocation: Allocation
    waits_for: tuple[str, ...]
    """The running jobs on its machines that must end first."""


@dataclass(frozen=True)
class WaitingJob:
    job_id: str
    queue: str
    reason: WaitReason
    details: tuple[str, ...] = ()
    reservation_at_s: float | None = None


@dataclass(frozen=True)
class Plan:
    generation: int
    """The generation of the snapshot it was decided on: commit only on that state."""
    now: float
    starts: tuple[PlannedStart, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    reservations: tuple[Reservation, ...] = ()
    upgrades: tuple[str, ...] = ()
    """Running opportunistic jobs that count as guaranteed from now on (their quota allows it)."""
    waiting: tuple[WaitingJob, ...] = ()
    usage: Mapping[str, Mapping[str, float]] = field(default_factory=lambda: MappingProxyType({}))
    """Each queue's quota usage once the plan is committed, by resource key."""
    wake_s: float | None = None
    """When time alone may change what a pass decides, with nothing else happening: the earliest of a reservation
    coming due and a waiting guaranteed job reaching the wait after which it may start opportunistically
    (``SchedulingSettings.opportunistic_after_s``), after ``now``; ``None``: nothing comes due. The time to wake
    the next pass at if no job arrives or ends before."""

    def waiting_for(self, job_id: str) -> WaitingJob | None:
        return next((w for w in self.waiting if w.job_id == job_id), None)


def apply_plan(snapshot: ClusterSnapshot, plan: Plan) -> ClusterSnapshot:
    """``snapshot`` with the plan committed: the preempted jobs released, then the starts applied in order."""
    for preemption in plan.preemptions:
        snapshot = release(snapshot, preemption.job_id)
    for start in plan.starts:
        snapshot = apply(snapshot, start.allocation)
    return snapshot
