"""The replay on the scheduler core: trace jobs through ``placement.scheduling.schedule``, the function the
service's scheduling passes call, with its queues, quotas, preemption, opportunistic jobs and reservations.

Events, in time order: a job's arrival (its submit time), its end (start + its real duration) and the time the
last plan says time alone may change a pass's decisions (``Plan.wake_s``: a reservation coming due, or a waiting
job reaching the wait after which it may start opportunistically), as the service's timer wakes a pass. At one
time, ends go first, then arrivals, then due times; then one scheduling pass on every pending and running job,
whose plan is committed as the service commits it (``apply_plan``):

* a preempted job goes back to pending with its submit time, and loses its work: it restarts from scratch,
  and the GPU-seconds it had run are counted lost. The end event of the run it lost is passed over (each
  job's runs are numbered; an end names the run it ends);
* a started job's end is due after its real duration (the scheduler only ever sees its estimate);
* an upgraded opportunistic job counts as guaranteed from then on.

A job that could not fit the empty cluster, or whose demand exceeds what its queue may ever hold
(guarantee + borrowing limit, or the guarantees of its cohort's tree where it borrows), is never pending:
it is reported, never started. A pass is skipped when nobody waits and no opportunistic job runs, and at the
time of a lost run's end alone (it could decide nothing new).

With ``opportunistic`` on, a job is submitted opportunistic when its queue's guaranteed GPUs (running and
pending) with it added would exceed the queue's guarantee (AntMan: what a team asks beyond its quota runs
on idle GPUs, first to be preempted); else guaranteed.

After every pass the driver checks each queue's guaranteed usage, counted from the jobs it runs, against
its guarantee + borrowing limit (a violation is a queue and resource above it), and integrates the free
GPUs over the time until the next event while at least one job waits. Pure: jobs in, results out, no I/O;
the clock (``clock``) is read only to time the passes.
"""

from __future__ import annotations

import heapq
import math
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from placement.model.cluster import Cluster
from placement.model.demand import Job
from placement.model.snapshot import MILLI, ClusterSnapshot, empty_snapshot, release
from placement.online.policies import OnlinePolicy, online_policy
from placement.scheduling.cycle import schedule
from placement.scheduling.jobs import DurationEstimate, JobMode, PendingJob, RunningJob
from placement.scheduling.orders import CausalMedian
from placement.scheduling.plan import Plan, WaitReason, apply_plan
from placement.scheduling.queues import QueueSet
from placement.scheduling.resources import EPSILON, GPUS, demand_of
from placement.scheduling.settings import SchedulingSettings

END, ARRIVE, DUE = 0, 1, 2
Event = tuple[float, int, int, int]
"""(time, kind, job index (-1 for a due time), the run of the job an end ends)."""

NEVER_FITS = "can-never-fit"
OVER_LIMIT = "over-queue-limit"
UNKNOWN_QUEUE = "unknown-queue"
STILL_WAITING = "still-waiting"
"""Why a job never started: it fits not even the empty cluster; its queue may never hold it; its queue is
not configured; it was still waiting when the events ran out."""


@dataclass(frozen=True)
class ReplayJob:
    """A trace job as the scheduler receives it: its demand, the queue it is submitted to, when, how long
    it really runs, and what the scheduler is told about its duration."""

    job: Job
    queue: str
    submit_s: float
    duration_s: float
    estimate: DurationEstimate = field(default_factory=DurationEstimate)
    mode: JobMode = JobMode.GUARANTEED
    """As submitted; with the replay's ``opportunistic`` rule, a guaranteed job may be submitted opportunistic."""

    def __post_init__(self) -> None:
        if not math.isfinite(self.submit_s) or not (math.isfinite(self.duration_s) and self.duration_s >= 0):
            raise ValueError(f"job {self.job.job_id!r}: submit and duration must be finite, duration >= 0")

    @property
    def job_id(self) -> str:
        return self.job.job_id


@dataclass(frozen=True)
class ReplaySettings:
    scheduling: SchedulingSettings = field(default_factory=SchedulingSettings)
    opportunistic: bool = False
    """Submit a job opportunistic when its queue's guaranteed GPUs would go beyond its guarantee."""


@dataclass
class JobOutcome:
    job_id: str
    queue: str
    submit_s: float
    duration_s: float
    gpus: float
    mode: JobMode
    """As submitted."""
    start_s: float | None = None
    """Of the run that finished (or the last one)."""
    end_s: float | None = None
    starts: int = 0
    ends: int = 0
    preemptions: int = 0
    lost_gpu_s: float = 0.0
    """GPU-seconds of the runs preempted (no checkpoint: the work is redone)."""
    never_started: str | None = None
    """Why it never started (``NEVER_FITS``, ``OVER_LIMIT``, ``UNKNOWN_QUEUE``, ``STILL_WAITING``)."""
    last_wait: str | None = None
    """The wait reason of the last plan that saw it waiting."""

    @property
    def wait_s(self) -> float | None:
        """Submit to the start of the run that finished: queueing, and any runs it lost."""
        return None if self.start_s is None or self.end_s is None else self.start_s - self.submit_s

    @property
    def jct_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.submit_s


@dataclass(frozen=True)
class Violation:
    at_s: float
    queue: str
    resource: str
    used: float
    limit: float


@dataclass
class ReplayResult:
    outcomes: list[JobOutcome]
    total_gpus: float
    passes: int = 0
    pass_wall_s: list[float] = field(default_factory=list)
    """Wall time of each pass's ``schedule`` call, seconds."""
    wall_s: float = 0.0
    violations: list[Violation] = field(default_factory=list)
    preempted_gpu_s: float = 0.0
    """As the plans report it (``Preemption.lost_gpu_s``), summed."""
    preemptions_by_reason: dict[str, int] = field(default_factory=dict)
    idle_gpu_s_waiting: float = 0.0
    """Free GPUs x seconds while at least one job was pending."""
    stale_ends: int = 0
    """End events of runs lost to preemption, passed over."""
    upgrades: int = 0
    timed_wakes: int = 0
    """Times woken by time alone (``Plan.wake_s``: a reservation coming due, a waiting job's patience run out), each
    a pass unless other events fell at the same time."""
    span_s: float = 0.0
    """First arrival to the last event."""


def replay_scheduled(cluster: Cluster, jobs: Sequence[ReplayJob], queues: QueueSet, policy: OnlinePolicy,
           settings: ReplaySettings | None = None, progress: Callable[[int], None] | None = None,
           clock: Callable[[], float] = time.perf_counter) -> ReplayResult:
    """Replay ``jobs`` on ``cluster`` through ``schedule`` with ``queues`` and placement ``policy`` (a fresh
    one per replay: ``liquid`` and ``fgd`` learn from the jobs they are asked about). ``progress`` hears
    the number of jobs arrived so far."""
    return _Replay(cluster, jobs, queues, policy, settings or ReplaySettings(), clock).run(progress)


class _Replay:
    def __init__(self, cluster: Cluster, jobs: Sequence[ReplayJob], queues: QueueSet, policy: OnlinePolicy,
                 settings: ReplaySettings, clock: Callable[[], float]) -> None:
        ids = [j.job_id for j in jobs]
        if len(set(ids)) != len(ids):
            raise ValueError("job ids must be unique")
        self.cluster, self.jobs, self.queues, self.policy = cluster, jobs, queues, policy
        self.settings, self.clock = settings, clock
        self.index = {job_id: i for i, job_id in enumerate(ids)}
        self.snapshot = ClusterSnapshot.empty(cluster)
        self.layout = self.snapshot.layout
        self.pending: dict[int, PendingJob] = {}
        self.running: dict[int, RunningJob] = {}
        self.opportunistic_running = 0
        self.run_of = [0] * len(jobs)
        """Each job's run number: bumped at every start, so an end of an earlier run is known stale."""
        self.usage: dict[str, dict[str, float]] = {}
        """Each queue's guaranteed usage by resource key, from the jobs the replay runs."""
        self.counted: dict[int, dict[str, float]] = {}
        """The demand each running guaranteed job adds to ``usage``."""
        self.waiting_gpus: dict[str, float] = {}
        """Each queue's GPUs pending as guaranteed (for the opportunistic rule)."""
        self.events: list[Event] = []
        self.dues: set[float] = set()
        self.fits_empty: dict[tuple[object, ...], bool] = {}
        # every registered policy places a job on the empty cluster if any can; asking the replay's own would
        # teach a learning one the shapes of jobs it was not asked to place
        self.feasible = online_policy("first-fit", explain=False)
        self.outcomes = [JobOutcome(j.job_id, j.queue, j.submit_s, j.duration_s, j.job.gpus, j.mode) for j in jobs]
        self.result = ReplayResult(self.outcomes, float(cluster.total_gpus))

    def run(self, progress: Callable[[int], None] | None) -> ReplayResult:
        began = self.clock()
        self.events = [(j.submit_s, ARRIVE, i, 0) for i, j in enumerate(self.jobs)]
        heapq.heapify(self.events)
        first = self.events[0][0] if self.events else 0.0
        arrived = 0
        now = first
        while self.events:
            now = self.events[0][0]
            woken = False  # by anything but the stale ends of lost runs, which change nothing
            while self.events and self.events[0][0] == now:
                _, kind, i, run = heapq.heappop(self.events)
                if kind == END:
                    woken = self._end(i, run, now) or woken
                elif kind == ARRIVE:
                    self._arrive(i)
                    arrived += 1
                    woken = True
                else:
                    self.dues.discard(now)
                    self.result.timed_wakes += 1
                    woken = True
            if progress is not None:
                progress(arrived)
            if woken and (self.pending or self.opportunistic_running):
                self._pass(now)
            if self.pending and self.events:
                free = self.result.total_gpus - float(self.snapshot.gpu_milli_used.sum()) / MILLI
                self.result.idle_gpu_s_waiting += free * (self.events[0][0] - now)
        for i in self.pending:
            self.outcomes[i].never_started = STILL_WAITING
        self.result.span_s = now - first
        self.result.wall_s = self.clock() - began
        return self.result

    def _arrive(self, i: int) -> None:
        job = self.jobs[i]
        outcome = self.outcomes[i]
        if job.queue not in self.queues:
            outcome.never_started = UNKNOWN_QUEUE
            return
        if not self._fits_empty(job.job):
            outcome.never_started = NEVER_FITS
            return
        mode = job.mode
        if mode is JobMode.GUARANTEED and self.settings.opportunistic and self._beyond_guarantee(job):
            mode = JobMode.OPPORTUNISTIC
        if mode is JobMode.GUARANTEED and not self._within_limit(job):
            outcome.never_started = OVER_LIMIT
            return
        outcome.mode = mode
        self._submit(i, mode)

    def _submit(self, i: int, mode: JobMode) -> None:
        job = self.jobs[i]
        self.pending[i] = PendingJob(job.job, job.queue, job.submit_s, mode, job.estimate)
        if mode is JobMode.GUARANTEED:
            self.waiting_gpus[job.queue] = self.waiting_gpus.get(job.queue, 0.0) + job.job.gpus

    def _fits_empty(self, job: Job) -> bool:
        key = tuple(repr(t) for t in job.tasks)  # repr: equal for tasks alike but for a NaN's identity
        found = self.fits_empty.get(key)
        if found is None:
            found = self.fits_empty[key] = self.feasible(empty_snapshot(self.cluster), job).placed
        return found

    def _within_limit(self, job: ReplayJob) -> bool:
        """Whether its queue could ever hold it as guaranteed: its demand within the queue's guarantee +
        borrowing limit and, beyond the guarantee, within the guarantees of the cohort's tree."""
        queue = self.queues[job.queue]
        for key, amount in demand_of(job.job).items():
            if not queue.governs(key) or amount <= queue.guarantee[key] + EPSILON:
                continue
            tree = sum(self.queues[m].guarantee.get(key, 0.0) for m in self.queues.members(job.queue)
                       if self.queues[m].governs(key)) if queue.cohort is not None else queue.guarantee[key]
            if amount > min(queue.limit(key), tree) + EPSILON:
                return False
        return True

    def _beyond_guarantee(self, job: ReplayJob) -> bool:
        queue = self.queues[job.queue]
        if not queue.governs(GPUS) or job.job.gpus <= 0:
            return False
        held = self.usage.get(job.queue, {}).get(GPUS, 0.0) + self.waiting_gpus.get(job.queue, 0.0)
        return held + job.job.gpus > queue.guarantee[GPUS] + EPSILON

    def _end(self, i: int, run: int, now: float) -> bool:
        """Whether it ended a run (else it is the end of a run lost to preemption)."""
        if run != self.run_of[i] or i not in self.running:
            self.result.stale_ends += 1
            return False
        job = self.running.pop(i)
        if job.mode is JobMode.OPPORTUNISTIC:
            self.opportunistic_running -= 1
        self._uncount(i, job.queue)
        self.snapshot = release(self.snapshot, job.job_id)
        outcome = self.outcomes[i]
        outcome.end_s = now
        outcome.ends += 1
        return True

    def _pass(self, now: float) -> None:
        began = self.clock()
        plan = schedule(self.snapshot, list(self.pending.values()), list(self.running.values()), self.queues, now,
                        self.policy, self.settings.scheduling)
        self.result.pass_wall_s.append(self.clock() - began)
        self.result.passes += 1
        self._commit(plan, now)
        self._check_quota(now)
        if plan.wake_s is not None and plan.wake_s not in self.dues:
            self.dues.add(plan.wake_s)
            heapq.heappush(self.events, (plan.wake_s, DUE, -1, 0))

    def _commit(self, plan: Plan, now: float) -> None:
        result = self.result
        self.snapshot = apply_plan(self.snapshot, plan)
        for preemption in plan.preemptions:
            i = self.index[preemption.job_id]
            victim = self.running.pop(i)
            if victim.mode is JobMode.OPPORTUNISTIC:
                self.opportunistic_running -= 1
            self._uncount(i, victim.queue)
            outcome = self.outcomes[i]
            outcome.preemptions += 1
            outcome.lost_gpu_s += preemption.lost_gpu_s
            result.preempted_gpu_s += preemption.lost_gpu_s
            reason = preemption.reason.value
            result.preemptions_by_reason[reason] = result.preemptions_by_reason.get(reason, 0) + 1
            self._submit(i, outcome.mode)  # from scratch, in its place by submit time
        for start in plan.starts:
            i = self.index[start.job_id]
            pending = self.pending.pop(i)
            if pending.mode is JobMode.GUARANTEED:
                self.waiting_gpus[pending.queue] -= pending.job.gpus
            self.running[i] = RunningJob(pending.job, pending.queue, now, start.mode, pending.estimate)
            if start.mode is JobMode.OPPORTUNISTIC:
                self.opportunistic_running += 1
            else:
                self._count(i, pending.queue)
            self.run_of[i] += 1
            outcome = self.outcomes[i]
            outcome.start_s, outcome.end_s = now, None
            outcome.starts += 1
            heapq.heappush(self.events, (now + self.jobs[i].duration_s, END, i, self.run_of[i]))
        for job_id in plan.upgrades:
            i = self.index[job_id]
            self.running[i] = replace(self.running[i], mode=JobMode.GUARANTEED)
            self.opportunistic_running -= 1
            self._count(i, self.running[i].queue)
            result.upgrades += 1
        for waiting in plan.waiting:
            if waiting.reason is WaitReason.CAN_NEVER_FIT or waiting.reason is WaitReason.UNKNOWN_QUEUE:
                i = self.index[waiting.job_id]
                gone = self.pending.pop(i)
                if gone.mode is JobMode.GUARANTEED:
                    self.waiting_gpus[gone.queue] -= gone.job.gpus
                self.outcomes[i].never_started = (NEVER_FITS if waiting.reason is WaitReason.CAN_NEVER_FIT
                                                  else UNKNOWN_QUEUE)
            self.outcomes[self.index[waiting.job_id]].last_wait = waiting.reason.value

    def _count(self, i: int, queue: str) -> None:
        demand = demand_of(self.jobs[i].job, self.snapshot.allocations[self.jobs[i].job_id], self.layout)
        self.counted[i] = demand
        used = self.usage.setdefault(queue, {})
        for key, amount in demand.items():
            used[key] = used.get(key, 0.0) + amount

    def _uncount(self, i: int, queue: str) -> None:
        demand = self.counted.pop(i, None)
        if demand is None:
            return
        used = self.usage[queue]
        for key, amount in demand.items():
            used[key] -= amount

    def _check_quota(self, now: float) -> None:
        for name, used in self.usage.items():
            queue = self.queues[name]
            for key in queue.guarantee:
                amount, limit = used.get(key, 0.0), queue.limit(key)
                if amount > limit + EPSILON:
                    self.result.violations.append(Violation(now, name, key, amount, limit))


def compressed(submits: Sequence[float], load: float) -> list[float]:
    """Submit times with the gaps between arrivals divided by ``load`` (from the first arrival): ``load``
    times as many jobs an hour, with the trace's bursts and lulls kept."""
    if not load > 0 or math.isinf(load):
        raise ValueError(f"load must be finite and > 0, got {load}")
    if not submits:
        return []
    first = min(submits)
    return [(s - first) / load for s in submits]


def causal_fill(values: Sequence[float]) -> list[float]:
    """``values`` (in arrival order) with each missing one (NaN) the median of those before it, 0 before any:
    the rule of the scheduler's ``sjf`` and the replay's ``sjf-<estimate>`` queues."""
    fill = CausalMedian()
    return [fill(v) for v in values]


def queue_of(key: str, names: Sequence[str], shared: str = "shared") -> str:
    """The queue a job of ``key`` (its user or group) is submitted to: the queue of that name, else ``shared``,
    else one of ``names`` chosen by a stable hash of the key (so any configuration takes every job)."""
    if key in names:
        return key
    if shared in names:
        return shared
    ordered = sorted(names)
    return ordered[zlib.crc32(key.encode()) % len(ordered)] if ordered else shared  # crc32: stable, unlike hash()


def queues_by_share(gpu_s: Mapping[str, float], total_gpus: float, top: int, order: str = "fifo",
                    shared: str = "shared", cohort: str = "all") -> dict[str, object]:
    """A queue configuration (the shape of ``queues_from_dict`` and ``PUT /v1/queues``): one queue for each
    of the ``top`` keys with the most GPU-seconds in ``gpu_s``, and one, ``shared``, for all the others; each
    guaranteed its share of the GPU-seconds times ``total_gpus`` (rounded down to whole GPUs), all in one
    cohort so that idle guarantee can be borrowed, in ``order``."""
    if top < 0:
        raise ValueError(f"top must be >= 0, got {top}")
    total = sum(v for v in gpu_s.values() if v > 0)
    ranked = sorted(((k, v) for k, v in gpu_s.items() if v > 0 and k != shared), key=lambda kv: (-kv[1], kv[0]))
    chosen = ranked[:top]
    rest = total - sum(v for _, v in chosen)
    queues: list[dict[str, object]] = []
    for name, value in [*chosen, (shared, rest)]:
        share = value / total if total > 0 else (1.0 if name == shared else 0.0)
        queues.append({"name": name, "cohort": cohort, "order": order,
                       "quota": {"gpus": float(math.floor(share * total_gpus))}})
    return {"cohorts": [{"name": cohort}], "queues": queues}
