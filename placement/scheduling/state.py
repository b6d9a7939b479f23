"""The state one scheduling cycle changes as it decides: the snapshot with the plan so far applied, the
quota book, the jobs still running and when each is estimated to end, the reservations held, and the
plan's parts. Private to the cycle; nothing here outlives one call of ``schedule`` (what the memos of
``placement.scheduling.memo``, the indexes of ``placement.scheduling.screen`` and the running jobs' views of
``placement.scheduling.running_index`` keep is worked out from its inputs alone).

``version`` counts the changes a later decision could see (a start, a preemption, a reservation held):
decisions remembered at one version hold while it stays.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from heapq import heappush
from types import MappingProxyType

from placement.model.decision import Decision
from placement.model.demand import Job
from placement.model.feasibility import crowded_by
from placement.model.snapshot import Allocation, ClusterSnapshot, apply, release
from placement.online.policies import OnlinePolicy
from placement.scheduling.jobs import JobMode, PendingJob, RunningJob
from placement.scheduling.memo import Outcomes, told
from placement.scheduling.plan import (
    Plan,
    PlannedStart,
    Preemption,
    PreemptReason,
    Reservation,
    WaitingJob,
    WaitReason,
)
from placement.scheduling.queues import QueueSet
from placement.scheduling.quota import Admission, QuotaBook
from placement.scheduling.resources import demand_of
from placement.scheduling.running_index import running_views
from placement.scheduling.screen import Screen
from placement.scheduling.settings import SchedulingSettings


@dataclass
class Held:
    """A reservation and the snapshot forecast for its time, as the cycle has changed it since."""

    reservation: Reservation
    job: Job
    future: ClusterSnapshot

    def delayed_by(self, allocation: Allocation, end_s: float) -> bool:
        """Whether a job holding ``allocation`` until ``end_s`` would take what the reserved job needs. The
        reserved place was checked whole when it was reserved, and the forecast has since gained only jobs
        that leave it room: what is left to check is capacity, on what the place holds."""
        if end_s <= self.reservation.at_s:
            return False
        return allocation.job_id == self.reservation.job_id or crowded_by(self.future, self.reservation.allocation,
                                                                         allocation)


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
    screen: Screen | None = None
    """Where set, placements known to fail are not asked for, and jobs alike are decided once per version."""
    version: int = 0
    outcomes: Outcomes = field(default_factory=Outcomes)
    """The waits given per class of jobs at ``version`` (with ``screen`` only)."""
    victim_groups: dict[str | None, list[RunningJob]] | None = None
    """The running jobs preemption may take, by queue (``placement.scheduling.preemption``)."""
    lowest: dict[str, int] = field(default_factory=dict)
    """The lowest priority among each queue's ``victim_groups``."""
    ranked: dict[str | None, list[RunningJob]] = field(default_factory=dict)
    """Those of ``victim_groups`` in the order preemption takes them, per group once worked out."""
    ending: list[tuple[float, str]] = field(default_factory=list)
    """(end, id) of the running jobs of ``ends`` with a finite estimate, sorted (``placement.scheduling.forecast``);
    preempted ones stay, passed over where read."""
    started_ending: list[tuple[float, str]] = field(default_factory=list)
    """The same of the jobs started in this cycle, a heap."""
    opportunistic: list[str] = field(default_factory=list)
    """The running opportunistic jobs, as given."""
    patience_ends: float = math.inf
    """The earliest time a waiting guaranteed job, late for a reason patience helps with, reaches the wait after
    which it may start opportunistically (``SchedulingSettings.opportunistic_after_s``); infinity: none."""
    admissions: dict[tuple[int, str, int], Admission] = field(default_factory=dict)
    """What the book said of a queue and job shape, by the book's version."""
    policies: Mapping[str, OnlinePolicy] = field(default_factory=dict)
    """The placement policies pending jobs name, by name (``PendingJob.policy``)."""
    policy_of: dict[str, str] = field(default_factory=dict)
    """The policy each pending job that names one is placed by (the others: ``place``)."""
    allocated: dict[str, Allocation] = field(default_factory=dict)
    """The snapshot's allocations by job id, as the cycle began, in a plain dict (the persistent map's
    iteration and lookups run in Python: a cycle checks thousands of jobs against it)."""
    typed: dict[str, bool] = field(default_factory=dict)
    """Whether a queue's quota names GPU types (worked out when first asked)."""
    probes: dict[Hashable, object] = field(default_factory=dict)
    """What is worked out once per generation of ``working``, keyed with it (victim candidates and their
    probes, ``placement.scheduling.preemption``), or once per cycle (a reservation's machines)."""
    cache: dict[Hashable, object] = field(default_factory=dict)
    """What is worked out once per version (the working state fenced by the reservations, each reservation's
    forecast with its place taken); emptied by :meth:`changed`."""

    def changed(self) -> None:
        """Something a later decision could see changed: what was remembered at the last version is stale."""
        self.version += 1
        self.cache.clear()

    def decide(self, snapshot: ClusterSnapshot, job: Job, stream: Hashable) -> Decision:
        """The job's policy (``place``, or the one it names) on ``snapshot``; with ``screen``, not asked where the
        machines lack room for the job (``stream`` names the succession of snapshots ``snapshot`` belongs to,
        see ``placement.scheduling.screen``)."""
        place = self.policy_for(job)
        if self.screen is not None and self.screen.fits_nowhere(stream, snapshot, job):
            return self.screen.unplaced(snapshot, job, place)
        return place(snapshot, job)

    def allocation_of(self, job_id: str) -> Allocation:
        """The allocation a running job holds in ``working``: looked up in the plain ``allocated`` for a job that
        ran when the cycle began (its allocation is the same until it is preempted, and a preempted job is not
        asked about), in the persistent map for one started since."""
        found = self.allocated.get(job_id)
        return found if found is not None else self.working.allocations[job_id]

    def policy_for(self, job: Job) -> OnlinePolicy:
        """The policy that places ``job``: the one its pending job names, else the cycle's."""
        name = self.policy_of.get(job.job_id) if self.policy_of else None
        return self.place if name is None else self.policies[name]

    @staticmethod
    def begin(snapshot: ClusterSnapshot, running: Sequence[RunningJob], queues: QueueSet, now: float,
              place: OnlinePolicy, settings: SchedulingSettings, shortcuts: bool = True) -> CycleState:
        allocations = dict(snapshot.allocations.items())  # one pass over the persistent map, then plain lookups
        views = running_views(running, allocations, snapshot.layout, queues.queues)
        screen = Screen(snapshot.layout, settings.explain_waits) if shortcuts else None
        return CycleState(snapshot.generation, now, queues, place, settings, snapshot, QuotaBook(queues, views.usage),
                          views.by_id, views.counted, views.ends, screen=screen, opportunistic=views.opportunistic,
                          victim_groups=views.groups, lowest=views.lowest, allocated=allocations, ending=views.ending)

    def hold(self, held: Held) -> None:
        self.held.append(held)
        self.changed()

    def wait(self, job: PendingJob, reason: WaitReason, details: Sequence[str] = (),
             at_s: float | None = None) -> None:
        self.waiting[job.job_id] = told(job.job_id, job.queue, reason, tuple(details), at_s)

    def start(self, job: PendingJob, decision: Decision, mode: JobMode, borrows: bool = False) -> None:
        allocation = decision.allocation
        assert allocation is not None
        self.working = apply(self.working, allocation)
        self.waiting.pop(job.job_id, None)
        if mode is JobMode.GUARANTEED:
            self.book.add(job.queue, demand_of(job.job, allocation, self.working.layout))
            expected = job.estimate.expected_s
            end = self.ends[job.job_id] = self.now + expected if not math.isnan(expected) else math.inf
            if math.isfinite(end):
                heappush(self.started_ending, (end, job.job_id))
            cautious = job.estimate.cautious_s
            end = self.now + cautious if not math.isnan(cautious) else math.inf
            for held in self.held:
                if end > held.reservation.at_s:
                    held.future = apply(held.future, allocation)
        self.starts.append(PlannedStart(job.job_id, job.queue, decision, mode, borrows))
        self.changed()

    def preempt(self, victim: RunningJob, reason: PreemptReason, for_job: str) -> None:
        allocation = self.allocation_of(victim.job_id)
        self.working = release(self.working, victim.job_id)
        if victim.job_id in self.counted:
            self.book.add(victim.queue, demand_of(victim.job, allocation, self.working.layout), -1)
            self.counted.discard(victim.job_id)
        del self.running[victim.job_id]
        self.ends.pop(victim.job_id, None)
        for held in self.held:
            held.future = release(held.future, victim.job_id)
        self.preemptions.append(Preemption(victim.job_id, victim.queue, reason, for_job, victim.lost_gpu_s(self.now)))
        self.changed()

    def plan(self) -> Plan:
        usage = MappingProxyType({q: MappingProxyType(dict(u)) for q, u in sorted(self.book.usage.items())})
        wake = min((h.reservation.at_s for h in self.held if h.reservation.at_s > self.now),
                   default=math.inf)
        wake = min(wake, self.patience_ends)
        assert wake > self.now, "a plan's wake-up lies ahead: waking at its own time would decide the same again"
        return Plan(self.generation, self.now, tuple(self.starts), tuple(self.preemptions),
                    tuple(h.reservation for h in self.held), tuple(self.upgrades), tuple(self.waiting.values()),
                    usage, None if wake == math.inf else wake)
