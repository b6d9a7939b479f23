"""Batch placement: a window of jobs placed at once - the result type, the policy registry, the decoder.

Objective, lexicographic (``BatchResult.key``, lower is better):

1. jobs placed, more is better (gang: a job counts only with every instance placed);
2. network cost, lower is better: sum over placed jobs of ``placement.model.network.network_cost``
   (Liquid: Gbit/s x distance cost per PS/worker pair; all-reduce jobs pay per machine/rack/domain added);
3. machines touched, fewer is better: machines hosting at least one instance of the batch.

``key = (-jobs_placed, network_cost, machines_touched)``. ``gpus_placed`` (shares as fractions) is reported.

A plan is an ordered list of ``(job, machines)``: ``machines[k]`` hosts the k-th instance of the job in
``placement.online.greedy.instance_order`` order, or ``None`` for a job left out. :func:`realise` reserves the
instances with ``WorkingState.take`` in plan order (so the GPU-level choice is the engine's) and checks
each job with ``placement.model.feasibility.violations`` on the snapshot with the earlier jobs applied; a
plan instance that does not fit is a solver bug (``RuntimeError``) unless ``repair`` is on, when it is
moved to the best other machine (or its job dropped) and counted in ``BatchResult.repairs``.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

import numpy as np

from placement.batch.bounds import machines_lower_bound
from placement.model.decision import Decision, Verdict
from placement.model.demand import Job
from placement.model.feasibility import Need, need_of, violations
from placement.model.layout import Layout, Places
from placement.model.network import network_cost, placement_cost
from placement.model.snapshot import Allocation, ClusterSnapshot, InstancePlacement, apply
from placement.model.topology import DEFAULT_DISTANCE_COST
from placement.online.explain import failure_reasons
from placement.online.greedy import instance_order
from placement.online.working import WorkingState

PlanEntry = tuple[Job, Sequence[int] | None]


@dataclass(frozen=True)
class BatchResult:
    """What a batch policy decided: one decision per input job (input order) and the objective terms.

    ``applied_order`` is the order the placed allocations were checked in: apply them in that order.
    ``stopped``: "optimal" (proven), "bound" (met the lower bound), "time", "stall", "generations",
    "complete" (a greedy finished), "fallback" (the solver found nothing; the greedy plan is used).
    """

    policy: str
    decisions: tuple[Decision, ...]
    jobs_placed: int
    gpus_placed: float
    network_cost: float
    machines_touched: int
    lower_bound_machines: int | None
    gap_to_bound: float | None
    solve_s: float
    stopped: str
    applied_order: tuple[str, ...] = ()
    repairs: int = 0
    notes: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[int, float, int]:
        """The lexicographic objective; lower is better."""
        return -self.jobs_placed, round(self.network_cost, 6), self.machines_touched


class BatchPolicy(Protocol):
    def __call__(self, snapshot: ClusterSnapshot, jobs: Sequence[Job], time_limit_s: float,
                 seed: int) -> BatchResult: ...


def _lazy(module: str, name: str) -> BatchPolicy:
    """A policy imported on first call (the solvers import this module, so it cannot import them)."""

    def run(snapshot: ClusterSnapshot, jobs: Sequence[Job], time_limit_s: float, seed: int) -> BatchResult:
        policy: BatchPolicy = getattr(importlib.import_module(module), name)
        return policy(snapshot, jobs, time_limit_s, seed)

    return run


BATCH_POLICIES: dict[str, BatchPolicy] = {"ffd": _lazy("placement.batch.ffd", "place_ffd"),
                                          "gga": _lazy("placement.batch.gga", "place_gga"),
                                          "cpsat": _lazy("placement.batch.cpsat", "place_cpsat")}


def batch_policy(name: str) -> BatchPolicy:
    """The batch policy called ``name``; ``KeyError`` naming the known ones otherwise."""
    if name not in BATCH_POLICIES:
        raise KeyError(f"unknown batch policy {name!r}; known: {', '.join(BATCH_POLICIES)}")
    return BATCH_POLICIES[name]


def check_batch(snapshot: ClusterSnapshot, jobs: Sequence[Job]) -> None:
    """``ValueError`` for a batch with duplicate job ids or a job the snapshot already holds."""
    ids = [j.job_id for j in jobs]
    if len(set(ids)) != len(ids):
        raise ValueError("a batch needs distinct job ids")
    held = sorted(i for i in set(ids) if i in snapshot.allocations)
    if held:
        raise ValueError(f"jobs already allocated on the snapshot: {held[:5]}")


def usage_only(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """``snapshot``'s usage and generation with an empty allocation map (cheap to ``apply`` to)."""
    return ClusterSnapshot(snapshot.cluster, snapshot.generation, snapshot.gpu_milli_used, snapshot.gpu_mem_used,
                           snapshot.cpu_used, snapshot.mem_used)


@dataclass(frozen=True)
class Realised:
    """A plan made real: allocations in the order applied, the final snapshot, repairs and notes."""

    allocations: tuple[Allocation, ...]
    generations: MappingProxyType[str, int]
    snapshot: ClusterSnapshot
    repairs: int
    notes: tuple[str, ...]


def realise(snapshot: ClusterSnapshot, plan: Sequence[PlanEntry], repair: bool = False) -> Realised:
    """Reserve every planned job in plan order and check it (see module docstring).

    The checks run on a copy of ``snapshot`` with the same usage and generation whose allocation map
    holds only the batch's jobs (copying a map of thousands of running jobs per job would dominate);
    :func:`check_batch` has already ruled out a batch job the snapshot holds.
    """
    working, current = WorkingState(snapshot), usage_only(snapshot)
    allocations: list[Allocation] = []
    generations: dict[str, int] = {}
    repairs, notes = 0, []
    for job, machines in plan:
        if machines is None:
            continue
        saved = working.checkpoint()
        placed, moved = _reserve(working, job, machines, repair)
        repairs += moved
        if placed is None:
            working.restore(saved)
            notes.append(f"{job.job_id}: an instance fitted no machine when decoded; job dropped")
            continue
        if moved:
            notes.append(f"{job.job_id}: {moved} instance(s) moved off their planned machine when decoded")
        allocation = Allocation(job.job_id, tuple(placed))
        problems = violations(current, job, allocation)
        if problems:  # a bug in the decoder or a solver, never a property of the input
            raise RuntimeError(f"batch plan for {job.job_id} is infeasible: {problems}")
        generations[job.job_id] = current.generation
        current = apply(current, allocation)
        allocations.append(allocation)
    return Realised(tuple(allocations), MappingProxyType(generations), current, repairs, tuple(notes))


def _reserve(working: WorkingState, job: Job, machines: Sequence[int],
             repair: bool) -> tuple[list[InstancePlacement] | None, int]:
    order = instance_order(job)
    if len(machines) != len(order):
        raise RuntimeError(f"plan for {job.job_id} has {len(machines)} machines for {len(order)} instances")
    needs = [need_of(t) for t in job.tasks]
    placed: list[InstancePlacement] = []
    moved = 0
    for task_index, machine in zip(order, machines, strict=True):
        need = needs[task_index]
        if not working.fits(need, machine):
            if not repair:
                raise RuntimeError(f"batch plan puts an instance of {job.job_id} on machine {machine}, which is full")
            alternative = _best_other(working, need, {p.machine for p in placed})
            if alternative is None:
                return None, moved
            machine, moved = alternative, moved + 1
        placed.append(working.take(machine, task_index, need))
    return placed, moved


def _best_other(working: WorkingState, need: Need, used: set[int]) -> int | None:
    """Repair: a machine the job already uses, else one in their racks, else any; fullest first, then lowest index."""
    ok = working.candidates(need).ok
    if not ok.any():
        return None
    layout = working.layout
    near = np.isin(np.arange(working.n_machines), sorted(used))
    rack = np.isin(layout.rack, sorted({int(layout.rack[m]) for m in used}))
    load = working.gpu_allocated_share()
    key = np.where(near, 0, np.where(rack, 1, 2)) * 10.0 - load
    return int(np.argmin(np.where(ok, key, np.inf)))


def finish(policy: str, snapshot: ClusterSnapshot, jobs: Sequence[Job], plan: Sequence[PlanEntry], started: float,
           stopped: str, repair: bool = False, notes: Sequence[str] = (),
           distance_cost: Sequence[float] = DEFAULT_DISTANCE_COST) -> BatchResult:
    """Realise ``plan`` and build the :class:`BatchResult` (decisions in input order, objective, bound)."""
    done = realise(snapshot, plan, repair)
    by_job = {a.job_id: a for a in done.allocations}
    layout = snapshot.layout
    decisions: list[Decision] = []
    network, machines = 0.0, set()
    empty = ClusterSnapshot.empty(snapshot.cluster)
    for job in jobs:
        allocation = by_job.get(job.job_id)
        if allocation is None:
            decisions.append(_not_placed(policy, snapshot, empty, job))
            continue
        cost = placement_cost(job, layout, allocation.instances, distance_cost)
        network += cost
        machines |= allocation.machines()
        score = {"network": cost, "machines": float(len(allocation.machines())),
                 "racks": float(len({int(layout.rack[m]) for m in allocation.machines()}))}
        decisions.append(Decision(job.job_id, policy, Verdict.PLACED, done.generations[job.job_id], allocation,
                                  MappingProxyType(score)))
    placed = [j for j in jobs if j.job_id in by_job]
    bound = machines_lower_bound(snapshot, placed)
    gap = (len(machines) - bound) / bound if bound else None
    return BatchResult(policy, tuple(decisions), len(placed), sum(j.gpus for j in placed), network, len(machines),
                       bound, gap, time.perf_counter() - started, stopped,
                       tuple(a.job_id for a in done.allocations), done.repairs, (*notes, *done.notes))


def _not_placed(policy: str, snapshot: ClusterSnapshot, empty: ClusterSnapshot, job: Job) -> Decision:
    """A job the batch left out: fits alone but not with the others, does not fit now, or can never fit."""
    working = WorkingState(snapshot)
    machines, failed = first_fit_job(working, job)
    if machines is not None or failed is None:
        reasons: tuple[str, ...] = ("fits the snapshot alone, but not together with the jobs placed in this batch",)
        return Decision(job.job_id, policy, Verdict.UNSCHEDULABLE_NOW, snapshot.generation, reasons=reasons)
    task_index, placed = failed
    candidates = working.candidates(need_of(job.tasks[task_index]))
    reasons = failure_reasons(snapshot, job, task_index, candidates, placed)
    verdict = Verdict.CAN_NEVER_FIT if first_fit_job(WorkingState(empty), job)[0] is None else Verdict.UNSCHEDULABLE_NOW
    return Decision(job.job_id, policy, verdict, snapshot.generation, reasons=reasons)


def first_fit_job(working: WorkingState, job: Job) -> tuple[list[int] | None, tuple[int, int] | None]:
    """Each instance (``instance_order``) on the lowest-index machine that fits, reserved in ``working``.

    Returns the machines, or ``None`` and (task index, instances placed) of the first instance that fits
    nowhere (``working`` then holds the partial job: copy it first to roll back). Identical instances of
    a task resume the scan at the machine the previous one took: machines before it could not host the
    instance and have not changed since, so the scan is exact with one ``candidates`` call per task.
    """
    machines: list[int] = []
    needs = [need_of(t) for t in job.tasks]
    previous_task, start, ok = -1, 0, np.zeros(0, dtype=bool)
    for task_index in instance_order(job):
        need = needs[task_index]
        if task_index != previous_task:
            ok, start, previous_task = working.candidates(need).ok, 0, task_index
        elif not working.fits(need, start):
            start += 1  # the machine the previous instance took may be full now; later ones are unchanged
        hits = np.flatnonzero(ok[start:])
        if not hits.size:
            return None, (task_index, len(machines))
        start = start + int(hits[0])
        working.take(start, task_index, need)
        machines.append(start)
    return machines, None


def plan_cost(job: Job, machines: Sequence[int], layout: Layout | Places,
              cost: Sequence[float] = DEFAULT_DISTANCE_COST) -> float:
    """``placement.model.network.network_cost`` of ``job`` with instance k (``instance_order``) on ``machines[k]``."""
    return network_cost(job, zip(instance_order(job), machines, strict=True), layout, cost)


def network_cost_fast(job: Job, machines: Sequence[int], rack: Sequence[int], domain: Sequence[int],
                      cost: Sequence[float] = DEFAULT_DISTANCE_COST) -> float:
    """:func:`plan_cost` with the machines' racks and domains given as lists (``rack[m]``, ``domain[m]``)."""
    where = Places(np.asarray(rack, dtype=np.int64), np.asarray(domain, dtype=np.int64))
    return plan_cost(job, machines, where, cost)
