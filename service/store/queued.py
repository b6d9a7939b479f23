"""What a scheduling pass reads from the store (the pending jobs, the running jobs it started, the queue
configuration) and the decider that turns them into a plan with ``placement.schedule``.

Times are Unix seconds: a job's submit time and start time as stored, and the clock's ``now``.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from placement import (
    Cluster,
    ClusterSnapshot,
    DurationEstimate,
    Job,
    JobMode,
    OnlinePolicy,
    PendingJob,
    Plan,
    QueueConfigError,
    QueueSet,
    RunningJob,
    SchedulingSettings,
    online_policy,
    queues_from_dict,
    schedule,
)
from service.codec import Json, job_from_json
from service.store.schema import PENDING

log = logging.getLogger(__name__)

QueueRow = tuple[Any, ...]
"""``job_id, state, demand, queue, priority, mode, submitted_at, placed_at, p50_s, p90_s, requested_policy`` of
a pending job or of a running job that was submitted to a queue."""
DEFAULT_QUEUES: Json = {"queues": [{"name": "default", "quota": {}}]}
"""Until a configuration is set: one queue, ``default``, in first-come order, limited by nothing but the
cluster."""


@lru_cache(maxsize=65_536)
def _job(demand: str, priority: int) -> Job:
    """A stored demand as a job (ids are never reused, so a row's demand never changes: each pass of a
    long queue would otherwise parse every pending job's JSON again)."""
    return replace(job_from_json(json.loads(demand)), priority=priority)


def _estimate(p50_s: float | None, p90_s: float | None) -> DurationEstimate:
    return DurationEstimate(math.nan if p50_s is None else float(p50_s), math.nan if p90_s is None else float(p90_s))


class _RowJobs:
    """The pending and running job of each queue row, the same object for as long as the row is the same:
    the scheduling cycle remembers what it worked out about a job by the job object's identity
    (``placement.scheduling.memo``), and a pass reads every row of a long queue again."""

    def __init__(self) -> None:
        self._by_id: dict[str, tuple[QueueRow, PendingJob | RunningJob]] = {}
        self._lock = threading.Lock()

    def of(self, row: QueueRow) -> PendingJob | RunningJob:
        job_id = row[0]
        found = self._by_id.get(job_id)
        if found is not None and found[0] == row:
            return found[1]
        made = _from_row(row)
        with self._lock:
            self._by_id[job_id] = (row, made)
        return made

    def keep_only(self, live: int) -> None:
        """Forget rows no longer read, once there are twice as many remembered as there are rows now."""
        if len(self._by_id) > 2 * live + 1024:
            with self._lock:
                self._by_id.clear()


def _from_row(row: QueueRow) -> PendingJob | RunningJob:
    job_id, state, demand, queue, priority, mode, submitted_at, placed_at, p50_s, p90_s, policy = row
    job = _job(demand, int(priority or 0))
    assert job.job_id == job_id, f"job row {job_id!r} holds the demand of {job.job_id!r}"
    estimate = _estimate(p50_s, p90_s)
    if state == PENDING:
        return PendingJob(job, queue, float(submitted_at), JobMode(mode), estimate, policy or None)
    return RunningJob(job, queue, float(placed_at), JobMode(mode), estimate)


_jobs = _RowJobs()


@dataclass(frozen=True)
class QueueState:
    pending: tuple[PendingJob, ...] = ()
    running: tuple[RunningJob, ...] = ()
    spec: str | None = None
    """The queue configuration as stored (JSON text); ``None`` until one is set."""

    @staticmethod
    def of(rows: Iterable[QueueRow], spec: str | None) -> QueueState:
        pending: list[PendingJob] = []
        running: list[RunningJob] = []
        for row in rows:
            job = _jobs.of(row)
            if isinstance(job, PendingJob):
                pending.append(job)
            else:
                running.append(job)
        _jobs.keep_only(len(pending) + len(running))
        pending.sort(key=lambda j: (j.submit_s, j.job_id))
        return QueueState(tuple(pending), tuple(running), spec)

    def on(self, snapshot: ClusterSnapshot) -> QueueState:
        """Only what agrees with ``snapshot``: rows read after it (another process wrote in between) may
        have jobs started that it does not hold; a plan on such a mix is never written (the generation
        has moved), but the scheduler must not be asked about it."""
        held = snapshot.allocations
        pending = tuple(j for j in self.pending if j.job_id not in held)
        running = tuple(j for j in self.running if j.job_id in held)
        if len(pending) == len(self.pending) and len(running) == len(self.running):
            return self
        return QueueState(pending, running, self.spec)


def _unobserved(seconds: float) -> None:
    """Where nobody keeps the passes' durations."""


READ_PLAN_S = 5.0
"""How long a plan answers the read endpoints (each queue's next start, why each job waits) while the state
it was decided on stays: with thousands waiting a pass takes a tenth of a second, and a dashboard, several
users and a metrics scraper each ask every few seconds."""


class Planner:
    """The service's scheduling decider (a :data:`~service.store.ops.Decide`): ``placement.schedule`` on
    the state and the stored queues, with ``policy`` placing each job but those that name one of their own
    (``named(name)``: the policy of that name; default ``placement.online_policy``), at ``clock()``.

    Its passes word no wait of a job that fits nowhere (``SchedulingSettings.explain_waits`` off: nothing they
    write reads those words, and with thousands waiting they were a third of a pass). Readers share its plans
    (:meth:`latest`, :meth:`usage`): the last one decided on the same generation of the state, at most
    ``READ_PLAN_S`` old, whoever asked for it (a scheduling pass, or another reader); one who reads why jobs wait
    gets a plan with every wait worded (the same plan, with the words)."""

    def __init__(self, policy: OnlinePolicy, settings: SchedulingSettings | None = None,
                 clock: Callable[[], float] = time.time, named: Callable[[str], OnlinePolicy] | None = None) -> None:
        self.policy, self.settings, self.clock = policy, settings or SchedulingSettings(), clock
        self._named: Callable[[str], OnlinePolicy] = named or online_policy
        self._checked: tuple[str | None, Cluster, QueueSet] | None = None
        self._plan: tuple[int, str | None, Plan] | None = None
        """The last plan: its generation, queue configuration and itself."""
        self._worded: tuple[int, str | None, Plan] | None = None
        """The last plan with every wait worded, for readers of why jobs wait."""
        self._usage: tuple[int, str | None, float, Mapping[str, Mapping[str, float]]] | None = None
        self.observe: Callable[[float], None] = _unobserved
        """Told how many seconds each pass took to decide its plan (the service's metrics histogram)."""

    def queues(self, spec: str | None, cluster: Cluster) -> QueueSet:
        """The stored configuration checked against ``cluster`` (once per configuration and cluster). One a
        new cluster spec no longer admits (a GPU type it lacks) has no queues: every job waits, with the
        reason ``unknown-queue``, until a configuration that fits is set."""
        checked = self._checked
        if checked is not None and checked[0] == spec and checked[1] is cluster:
            return checked[2]
        try:
            queues = queues_from_dict(DEFAULT_QUEUES if spec is None else json.loads(spec), cluster, "stored queues")
        except QueueConfigError as exc:
            log.warning("the stored queue configuration does not fit the cluster", extra={"error": str(exc)})
            queues = QueueSet(MappingProxyType({}))
        self._checked = (spec, cluster, queues)
        return queues

    def usage(self, snapshot: ClusterSnapshot, state: QueueState) -> Mapping[str, Mapping[str, float]]:
        """Each queue's quota usage (its guaranteed running jobs) by resource key, as a pass counts it: from
        a plan with nobody waiting (nothing is written); shared as :meth:`latest` is."""
        now, kept = self.clock(), self._usage
        if kept is not None and kept[:2] == (snapshot.generation, state.spec) and now - kept[2] <= READ_PLAN_S:
            return kept[3]
        queues = self.queues(state.spec, snapshot.cluster)
        usage = schedule(snapshot, (), state.on(snapshot).running, queues, now, self.policy, self.settings).usage
        self._usage = (snapshot.generation, state.spec, now, usage)
        return usage

    def _policies(self, pending: Iterable[PendingJob]) -> dict[str, OnlinePolicy]:
        """The policies the pending jobs name. A name no longer known (a policy of an earlier version, read back
        from the database) is placed by the service's policy, and said in the log."""
        found: dict[str, OnlinePolicy] = {}
        for name in {j.policy for j in pending if j.policy is not None}:
            try:
                found[name] = self._named(name)
            except KeyError:
                log.warning("a queued job names an unknown placement policy: the service's places it",
                            extra={"policy": name})
                found[name] = self.policy
        return found

    def latest(self, snapshot: ClusterSnapshot, state: QueueState, worded: bool = False) -> Plan:
        """A plan for ``snapshot`` and ``state``, to read: the last one decided on the same generation and queue
        configuration if it is at most ``READ_PLAN_S`` old, else a new one. ``worded``: with every wait worded (why
        a job that fits nowhere waits, in the placement policy's words), as the passes' plans are not."""
        kept = self._worded if worded else self._plan
        if kept is not None and kept[:2] == (snapshot.generation, state.spec) \
                and self.clock() - kept[2].now <= READ_PLAN_S:
            return kept[2]
        if not worded:
            return self(snapshot, state)
        plan = self._decide(snapshot, state, replace(self.settings, explain_waits=True))
        self._worded = (snapshot.generation, state.spec, plan)
        return plan

    def __call__(self, snapshot: ClusterSnapshot, state: QueueState) -> Plan:
        started = time.perf_counter()
        plan = self._decide(snapshot, state, replace(self.settings, explain_waits=False))
        self.observe(time.perf_counter() - started)
        self._plan = (snapshot.generation, state.spec, plan)  # one assignment: a reader sees a whole entry
        return plan

    def _decide(self, snapshot: ClusterSnapshot, state: QueueState, settings: SchedulingSettings) -> Plan:
        state = state.on(snapshot)
        return schedule(snapshot, state.pending, state.running, self.queues(state.spec, snapshot.cluster),
                        self.clock(), self.policy, settings, self._policies(state.pending))
