"""Online placement: one job at a time, instance by instance, every candidate machine scored at once.

A policy is a pure function of (snapshot, job) -> Decision. The shared engine places the job's
instances in the policy's order; for each it asks :class:`~placement.working.WorkingState` which
machines can host it, lets the policy score those (lower is better; ties go to the lowest machine
index), and reserves the best. Gang: if any instance finds no machine, nothing is placed and the
decision says why, and whether waiting could help (the job fits an empty cluster) or not.
Every placed decision passes :func:`placement.feasibility.violations` before it is returned.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from placement.decision import Decision, Verdict
from placement.demand import Job, Role
from placement.explain import failure_reasons
from placement.feasibility import need_of, violations
from placement.network import DEFAULT_DISTANCE_COST, NetworkTally, placement_cost
from placement.snapshot import MILLI, Allocation, ClusterSnapshot, InstancePlacement
from placement.working import Candidates, WorkingState, allocated_share

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class PlacementConfig:
    """Weights and tables of the policies (configuration, not constants)."""

    distance_cost: tuple[float, float, float, float] = DEFAULT_DISTANCE_COST
    w_network: float = 1.0
    w_load: float = 1.0
    w_scarce: float = 0.5
    big_job_gpus: float = 8.0
    gpu_tier: MappingProxyType[str, int] = field(default_factory=lambda: MappingProxyType({
        "CPU": 0, "MISC": 1, "T4": 2, "P100": 2, "G1": 2, "G2": 2, "V100M16": 3, "V100": 3, "G3": 3, "A10": 3,
        "V100M32": 4}))
    seed: int = 0


@dataclass
class Step:
    """What a policy sees when it scores the machines for one instance."""

    job: Job
    task_index: int
    candidates: Candidates
    working: WorkingState
    network: NetworkTally
    config: PlacementConfig
    placed: list[InstancePlacement]


Chooser = Callable[[Step], FloatArray]
"""Scores every machine for the instance of ``step`` (lower is better); infeasible ones are ignored."""
Fills = Callable[[Job, int], bool]
"""Whether the machine chosen for an instance of a task keeps the best score for the task's next
instances until it is full (true for packing scorers), so it can take them without rescoring."""


def never_fills(job: Job, task_index: int) -> bool:
    return False


def instance_order(job: Job) -> list[int]:
    """Task index per instance: workers and other GPU-heavy instances first, parameter servers last."""
    order = sorted(range(len(job.tasks)), key=lambda i: (job.tasks[i].role is Role.PS, -job.tasks[i].gpu, i))
    return [i for i in order for _ in range(job.tasks[i].instances)]


def place_greedy(snapshot: ClusterSnapshot, job: Job, policy: str, choose: Chooser,
                 config: PlacementConfig, explain: bool = True, fills: Fills = never_fills) -> Decision:
    """Place ``job`` on ``snapshot`` with the machine scores of ``choose``.

    With ``explain=False`` a job that does not fit gets the verdict ``unschedulable-now`` without
    reasons and without the empty-cluster check, and a placed one no score breakdown (for callers that
    only need the allocation, like the simulator).
    """
    started = time.perf_counter()
    placed, failed = _build(snapshot, job, choose, config, fills)
    if failed is not None and not explain:
        return Decision(job.job_id, policy, Verdict.UNSCHEDULABLE_NOW, snapshot.generation)
    if failed is not None:
        task_index, candidates = failed
        verdict = _wait_or_never(snapshot, job, choose, config, fills)
        reasons = failure_reasons(snapshot, job, task_index, candidates, len(placed))
        return Decision(job.job_id, policy, verdict, snapshot.generation, reasons=reasons,
                        score=MappingProxyType({"latency_ms": (time.perf_counter() - started) * 1e3}))
    allocation = Allocation(job.job_id, tuple(placed))
    problems = violations(snapshot, job, allocation)
    if problems:  # a bug in a policy, never a property of the input
        raise RuntimeError(f"policy {policy} produced an infeasible allocation for {job.job_id}: {problems}")
    score = breakdown(snapshot, job, allocation, config) if explain else {}
    score["latency_ms"] = (time.perf_counter() - started) * 1e3
    return Decision(job.job_id, policy, Verdict.PLACED, snapshot.generation, allocation, MappingProxyType(score))


def _build(snapshot: ClusterSnapshot, job: Job, choose: Chooser, config: PlacementConfig,
           fills: Fills) -> tuple[list[InstancePlacement], tuple[int, Candidates] | None]:
    """Place instances in :func:`instance_order`. Where ``fills`` says so, the chosen machine takes as
    many further instances of the same task as it can hold before the machines are scored again:
    for packing scorers the machine just chosen stays the best, so this is the same greedy, faster."""
    working = WorkingState(snapshot)
    network = NetworkTally(job, snapshot.layout, config.distance_cost)
    needs = [need_of(t) for t in job.tasks]
    placed: list[InstancePlacement] = []
    order = instance_order(job)
    position = 0
    while position < len(order):
        task_index = order[position]
        candidates = working.candidates(job.tasks[task_index], needs[task_index])
        if not candidates.ok.any():
            return placed, (task_index, candidates)
        step = Step(job, task_index, candidates, working, network, config, placed)
        machine = int(np.argmin(np.where(candidates.ok, choose(step), np.inf)))
        run = 1
        while position + run < len(order) and order[position + run] == task_index:
            run += 1
        count = min(run, max(1, working.room_on(machine, needs[task_index]))) if fills(job, task_index) else 1
        for _ in range(count):
            increment = network.increment_at(task_index, machine)
            placement = working.take(machine, task_index, needs[task_index])
            network.record(placement, increment)
            placed.append(placement)
        position += count
    return placed, None


_EMPTY: dict[int, ClusterSnapshot] = {}


def _wait_or_never(snapshot: ClusterSnapshot, job: Job, choose: Chooser, config: PlacementConfig,
                   fills: Fills) -> Verdict:
    """``unschedulable-now`` if the job fits the same cluster with nothing allocated, else ``can-never-fit``."""
    empty = _EMPTY.get(id(snapshot.cluster))
    if empty is None or empty.cluster is not snapshot.cluster:
        empty = _EMPTY[id(snapshot.cluster)] = ClusterSnapshot.empty(snapshot.cluster)
    _, failed = _build(empty, job, choose, config, fills)
    return Verdict.CAN_NEVER_FIT if failed is not None else Verdict.UNSCHEDULABLE_NOW


def breakdown(snapshot: ClusterSnapshot, job: Job, allocation: Allocation,
              config: PlacementConfig) -> dict[str, float]:
    """Score terms of a placed job: network cost, load of the chosen machines, span, fragmentation."""
    layout = snapshot.layout
    machines = sorted(allocation.machines())
    gpu_used = snapshot.gpu_milli_used.copy()
    for p in allocation.instances:
        for g in p.gpus:
            gpu_used[g] += p.gpu_milli
    touched = np.isin(layout.gpu_machine, machines)
    partial = int(np.count_nonzero(touched & (gpu_used > 0) & (gpu_used < MILLI)))
    share = allocated_share(layout, snapshot.machine_gpu_milli, snapshot.cpu_used)[machines]
    return {
        "network": placement_cost(job, layout, allocation.instances, config.distance_cost),
        "load_before": float(share.mean()) if len(share) else 0.0,
        "machines": float(len(machines)),
        "racks": float(len({int(layout.rack[m]) for m in machines})),
        "domains": float(len({int(layout.domain[m]) for m in machines})),
        "partial_gpus": float(partial),
    }


def tiers(config: PlacementConfig, gpu_types: Sequence[str]) -> FloatArray:
    """Tier of each GPU type name (higher = scarcer, more capable)."""
    return np.array([config.gpu_tier.get(t, 2) for t in gpu_types], dtype=float)
