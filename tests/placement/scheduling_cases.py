"""SYNTHETIC clusters, jobs and queues for the scheduling tests: small enough to work out by hand."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from placement.model.cluster import Cluster, Machine, build_cluster
from placement.model.demand import Job, Role, Task
from placement.model.snapshot import ClusterSnapshot, apply
from placement.online.policies import online_policy
from placement.scheduling.cycle import schedule
from placement.scheduling.jobs import DurationEstimate, JobMode, PendingJob, RunningJob
from placement.scheduling.plan import Plan
from placement.scheduling.queue_config import queues_from_dict
from placement.scheduling.queues import QueueSet
from placement.scheduling.settings import SchedulingSettings

FIRST_FIT = online_policy("first-fit")


def synthetic_cluster(*gpus_per_machine: int, gpu_type: str = "V100", cpu_cores: float = 64.0,
                      mem_gib: float = 512.0) -> Cluster:
    """A synthetic cluster: one machine per entry, with that many GPUs of ``gpu_type``."""
    machines = [Machine(f"m{i}", gpu_type, n, cpu_cores, mem_gib) for i, n in enumerate(gpus_per_machine)]
    return build_cluster("synthetic", machines)


def mixed_cluster(**gpus_by_type: int) -> Cluster:
    """A synthetic cluster with one 8-GPU machine... per 8 GPUs of each type (``V100=16`` = two machines)."""
    machines = []
    for gpu_type, n in gpus_by_type.items():
        for i in range(n // 8):
            machines.append(Machine(f"{gpu_type.lower()}-{i}", gpu_type, 8, 64.0, 512.0))
    return build_cluster("synthetic-mixed", machines)


def gpu_job(job_id: str, gpus: float, instances: int = 1, priority: int = 0,
            types: frozenset[str] = frozenset()) -> Job:
    """``instances`` workers of ``gpus`` GPUs each, 1 CPU core and 1 GiB each."""
    return Job(job_id, (Task(Role.WORKER, instances, gpu=gpus, cpu_cores=1.0, mem_gib=1.0, gpu_types=types),),
               priority=priority)


def pending(job: Job, queue: str, submit_s: float = 0.0, p50_s: float = math.nan, p90_s: float = math.nan,
            mode: JobMode = JobMode.GUARANTEED) -> PendingJob:
    return PendingJob(job, queue, submit_s, mode, DurationEstimate(p50_s, p90_s))


def queues(cluster: Cluster, *specs: dict[str, Any], cohorts: Sequence[str] = ()) -> QueueSet:
    return queues_from_dict({"cohorts": [{"name": c} for c in cohorts], "queues": list(specs)}, cluster)


def running(cluster: Cluster,
            *jobs: tuple[Job, str, float, float, JobMode]) -> tuple[ClusterSnapshot, list[RunningJob]]:
    """A snapshot with each ``(job, queue, started_s, p50_s, mode)`` placed first-fit, in order."""
    snapshot = ClusterSnapshot.empty(cluster)
    listed = []
    for job, queue, started_s, p50_s, mode in jobs:
        decision = FIRST_FIT(snapshot, job)
        assert decision.allocation is not None, f"test set-up: {job.job_id} does not fit"
        snapshot = apply(snapshot, decision.allocation)
        listed.append(RunningJob(job, queue, started_s, mode, DurationEstimate(p50_s, p50_s)))
    return snapshot, listed


def plan_of(snapshot: ClusterSnapshot, waiting: Sequence[PendingJob], run: Sequence[RunningJob], queue_set: QueueSet,
            now: float = 0.0, **settings: Any) -> Plan:
    return schedule(snapshot, waiting, run, queue_set, now, FIRST_FIT, SchedulingSettings(**settings))


def started(plan: Plan) -> list[str]:
    return [s.job_id for s in plan.starts]
