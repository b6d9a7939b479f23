"""Hypothesis properties of scheduling cycles over random SYNTHETIC clusters, queues and pending and running
jobs: nothing over-allocated (``placement.violations``, the one judge), no queue above its guarantee plus
borrowing limit, gangs whole, every pending job either started or told why it waits."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from placement.model.cluster import Cluster, Machine, build_cluster
from placement.model.demand import Job, Role, Task
from placement.model.feasibility import violations
from placement.model.snapshot import ClusterSnapshot, apply, release
from placement.scheduling.cycle import schedule
from placement.scheduling.jobs import DurationEstimate, JobMode, PendingJob, RunningJob
from placement.scheduling.plan import Plan
from placement.scheduling.queue_config import queues_from_dict
from placement.scheduling.queues import QueueSet
from placement.scheduling.resources import EPSILON, capacity_of, demand_of
from placement.scheduling.settings import SchedulingSettings
from tests.placement.scheduling_cases import FIRST_FIT

QUEUES = ("a", "b", "c")


@st.composite
def clusters(draw: st.DrawFn) -> Cluster:
    machines = [Machine(f"m{i}", draw(st.sampled_from(["V100", "T4"])), draw(st.sampled_from([1, 2, 4, 8])),
                        draw(st.sampled_from([8.0, 32.0])), 256.0) for i in range(draw(st.integers(1, 4)))]
    return build_cluster("synthetic", machines)


@st.composite
def queue_sets(draw: st.DrawFn, cluster: Cluster) -> QueueSet:
    capacity = capacity_of(cluster)
    shares = [draw(st.integers(0, 4)) for _ in QUEUES]
    total = max(sum(shares), 1)
    listed: list[dict[str, Any]] = []
    for name, share in zip(QUEUES, shares, strict=True):
        quota: dict[str, Any] = {"gpus": math.floor(capacity["gpus"] * share / total)}
        if draw(st.booleans()):
            quota["cpu_cores"] = math.floor(capacity["cpu_cores"] * share / total)
        if draw(st.booleans()) and "gpus:V100" in capacity:
            quota["gpus_by_type"] = {"V100": math.floor(capacity["gpus:V100"] * share / total)}
        order = draw(st.sampled_from(["fifo", "sjf", "priority"]))
        queue: dict[str, Any] = {"name": name, "quota": quota, "order": order}
        if draw(st.integers(0, 3)):  # mostly in the cohort, mostly with a limit
            queue["cohort"] = "all"
            if draw(st.integers(0, 3)):
                queue["borrowing_limit"] = {"gpus": draw(st.integers(0, 2))}
        listed.append(queue)
    return queues_from_dict({"cohorts": [{"name": "all"}], "queues": listed}, cluster)


@st.composite
def pending_jobs(draw: st.DrawFn, prefix: str, now: float) -> list[PendingJob]:
    jobs = []
    for i in range(draw(st.integers(0, 10))):
        task = Task(Role.WORKER, draw(st.integers(1, 3)), gpu=draw(st.sampled_from([0.5, 1.0, 2.0, 4.0, 8.0])),
                    cpu_cores=draw(st.sampled_from([1.0, 4.0])), mem_gib=8.0,
                    gpu_types=draw(st.sampled_from([frozenset(), frozenset({"T4"}), frozenset({"V100"})])))
        job = Job(f"{prefix}{i}", (task,), priority=draw(st.integers(0, 2)))
        p50 = draw(st.sampled_from([math.nan, 10.0, 100.0, 1000.0]))
        estimate = DurationEstimate(p50, p50 * 2 if not math.isnan(p50) else math.nan)
        jobs.append(PendingJob(job, draw(st.sampled_from(QUEUES)), now - draw(st.integers(0, 100)),
                               draw(st.sampled_from(list(JobMode))), estimate))
    return jobs


def _settings(data: st.DataObject) -> SchedulingSettings:
    draw = data.draw
    return SchedulingSettings(preemption=draw(st.booleans()), reserve_heads=draw(st.booleans()),
                              prescheduling_horizon_s=draw(st.sampled_from([0.0, 50.0, 500.0])),
                              opportunistic_after_s=draw(st.sampled_from([math.inf, 30.0])))


def _check(snapshot: ClusterSnapshot, run: list[RunningJob], waiting: list[PendingJob], plan: Plan,
           queues: QueueSet) -> tuple[ClusterSnapshot, list[RunningJob]]:
    """Every invariant of one plan; returns the state once the plan is committed."""
    jobs: dict[str, RunningJob | PendingJob] = {r.job_id: r for r in run}
    jobs.update({p.job_id: p for p in waiting})
    running_ids = {r.job_id for r in run}
    assert {p.job_id for p in plan.preemptions} <= running_ids
    for preemption in plan.preemptions:
        snapshot = release(snapshot, preemption.job_id)
    for start in plan.starts:  # feasible in order, each on the state the earlier ones left
        assert violations(snapshot, jobs[start.job_id].job, start.allocation) == []
        snapshot = apply(snapshot, start.allocation)
    for job_id, allocation in snapshot.allocations.items():  # gangs whole, preempted jobs wholly gone
        assert len(allocation.instances) == jobs[job_id].job.instances
    started = [s.job_id for s in plan.starts]
    told = [w.job_id for w in plan.waiting]
    assert sorted(started + told) == sorted(j.job_id for j in waiting)  # each exactly once
    preempted = {p.job_id for p in plan.preemptions}
    modes = {r.job_id: (JobMode.GUARANTEED if r.job_id in plan.upgrades else r.mode) for r in run}
    now_running = [RunningJob(r.job, r.queue, r.started_s, modes[r.job_id], r.estimate) for r in run
                   if r.job_id not in preempted]
    by_id = {p.job_id: p for p in waiting}
    now_running += [RunningJob(by_id[s.job_id].job, s.queue, plan.now, s.mode, by_id[s.job_id].estimate)
                    for s in plan.starts]
    usage: dict[str, dict[str, float]] = {}
    for r in now_running:  # recounted from scratch
        if r.mode is JobMode.GUARANTEED:
            for key, amount in demand_of(r.job, snapshot.allocations[r.job_id], snapshot.layout).items():
                usage.setdefault(r.queue, {})[key] = usage.get(r.queue, {}).get(key, 0.0) + amount
    for name, used in usage.items():
        for key, amount in used.items():
            assert amount <= queues[name].limit(key) + EPSILON, (name, key, amount, queues[name].limit(key))
    for reservation in plan.reservations:
        assert len(reservation.allocation.instances) == jobs[reservation.job_id].job.instances
    return snapshot, now_running


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_cycles_never_over_allocate_nor_exceed_quota(data: st.DataObject) -> None:
    cluster = data.draw(clusters())
    queues = data.draw(queue_sets(cluster))
    snapshot, run = ClusterSnapshot.empty(cluster), list[RunningJob]()
    waiting: list[PendingJob] = []
    for cycle, now in enumerate((0.0, 60.0, 600.0)):
        waiting = [*waiting, *data.draw(pending_jobs(f"c{cycle}-", now))]
        plan = schedule(snapshot, waiting, run, queues, now, FIRST_FIT, _settings(data))
        event(f"preempted {bool(plan.preemptions)}, reserved {bool(plan.reservations)}, upgraded {bool(plan.upgrades)}")
        previous = {r.job_id: r for r in run}
        snapshot, run = _check(snapshot, run, waiting, plan, queues)
        started = {s.job_id for s in plan.starts}
        waiting = [p for p in waiting if p.job_id not in started]
        for preemption in plan.preemptions:  # back to pending, as the service does
            victim = previous[preemption.job_id]
            waiting.append(PendingJob(victim.job, victim.queue, victim.started_s, victim.mode, victim.estimate))
        for r in [r for r in run if r.started_s + 50.0 <= now and data.draw(st.booleans())]:  # some end
            snapshot = release(snapshot, r.job_id)
            run.remove(r)
