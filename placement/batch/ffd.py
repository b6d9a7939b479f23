"""Greedy batch plans: first-fit decreasing (FFD, the baseline) and the online liquid policy job by job.

FFD: jobs are sorted by GPU demand (``Job.gpus``: whole GPUs + shares, GPUs) descending, ties by job id.
Each job's instances (``instance_order``) go one by one to the lowest-index machine that can host
them on the evolving state (``placement.batch.policies.first_fit_job``); a job with an instance that fits
nowhere is rolled back whole (gang). Deterministic; ``time_limit_s`` and ``seed`` are accepted for the
common interface only.

``liquid_plan`` runs the online ``liquid`` policy over the jobs in input order, committing each (first
fit once its deadline has passed); the GGA seeds its population and CP-SAT its hint with these plans.
``plan_objective`` scores a plan by the batch objective (``placement.batch.policies``) without decoding it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from placement.batch.policies import BatchResult, PlanEntry, check_batch, finish, first_fit_job, plan_cost, usage_only
from placement.model.demand import Job
from placement.model.snapshot import ClusterSnapshot, apply
from placement.model.topology import DEFAULT_DISTANCE_COST
from placement.online.policies import online_policy
from placement.online.working import WorkingState


def ffd_order(jobs: Sequence[Job]) -> list[Job]:
    """Jobs by GPU demand descending, ties by job id."""
    return sorted(jobs, key=lambda j: (-j.gpus, j.job_id))


def ffd_plan(snapshot: ClusterSnapshot, jobs: Sequence[Job]) -> list[PlanEntry]:
    """The FFD plan, in FFD order: per job the machine of each instance, or ``None`` if it did not fit."""
    working = WorkingState(snapshot)
    plan: list[PlanEntry] = []
    for job in ffd_order(jobs):
        saved = working.checkpoint()
        machines, _ = first_fit_job(working, job)
        if machines is None:
            working.restore(saved)
        plan.append((job, machines))
    return plan


def place_ffd(snapshot: ClusterSnapshot, jobs: Sequence[Job], time_limit_s: float = 0.0,
              seed: int = 0) -> BatchResult:
    """FFD batch placement (see module docstring)."""
    started = time.perf_counter()
    check_batch(snapshot, jobs)
    return finish("ffd", snapshot, jobs, ffd_plan(snapshot, jobs), started, "complete")


def liquid_plan(snapshot: ClusterSnapshot, jobs: Sequence[Job], deadline: float) -> list[PlanEntry]:
    """Online ``liquid`` placing ``jobs`` one by one, each committed; after ``deadline``, first fit instead.

    A job first fit cannot place on the current state is left out without asking liquid (a failed
    online decision also re-tries the empty cluster, which would dominate the time).
    """
    place, current = online_policy("liquid"), usage_only(snapshot)
    plan: list[PlanEntry] = []
    for job in jobs:
        working = WorkingState(current)
        machines, _ = first_fit_job(working, job)
        if machines is None:
            plan.append((job, None))
            continue
        if time.perf_counter() < deadline:
            allocation = place(current, job).allocation
            if allocation is not None:
                machines = [p.machine for p in allocation.instances]
                current = apply(current, allocation)
                plan.append((job, machines))
                continue
        current = ClusterSnapshot(current.cluster, current.generation + 1, working.gpu_milli, working.gpu_mem,
                                  working.cpu, working.mem)
        plan.append((job, machines))
    return plan


def plan_objective(snapshot: ClusterSnapshot, plan: Sequence[PlanEntry],
                   distance_cost: Sequence[float] = DEFAULT_DISTANCE_COST) -> tuple[int, float, int]:
    """The batch objective key (-jobs placed, network cost, machines touched) of a plan; lower is better."""
    layout = snapshot.layout
    placed = [(job, machines) for job, machines in plan if machines is not None]
    network = sum(plan_cost(job, machines, layout, distance_cost) for job, machines in placed)
    return -len(placed), round(network, 6), len({m for _, machines in placed for m in machines})
