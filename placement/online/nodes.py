"""Per-machine answers for a scheduler that chooses machines itself (the Kubernetes extender): which
machines can host one instance of a job and why the others cannot (:func:`filter_nodes`), how good
each is by a policy (:func:`score_nodes`), and the job placed on the machine it chose (:func:`place_on`).

The answers come from the same filters and scorers every policy uses (``placement.filters``,
``placement.online.scorers``), for one instance of one of the job's tasks with nothing of the job placed yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from placement.filters.base import SnapshotUsage, usage_of
from placement.filters.chain import chain_for
from placement.model.decision import Decision, Verdict
from placement.model.demand import Job
from placement.model.feasibility import Need, need_of, violations
from placement.model.layout import BoolArray, FloatArray
from placement.model.network import NetworkTally
from placement.model.snapshot import Allocation, ClusterSnapshot, InstancePlacement, empty_snapshot
from placement.online.greedy import PlacementConfig, Step, instance_order
from placement.online.policies import CHOOSERS, fresh_chooser
from placement.online.scorers.base import bounded
from placement.online.working import WorkingState


@dataclass(frozen=True, eq=False)
class FilterResult:
    """Per machine: can it host one instance now (``ok``), could it with nothing allocated
    (``ok_when_empty``: where not, waiting cannot help), and the reasons in words."""

    ok: BoolArray
    ok_when_empty: BoolArray
    need: Need
    now: SnapshotUsage
    empty: SnapshotUsage

    def reason(self, machine: int) -> str:
        """Why ``machine`` cannot host the instance now: the first filter it fails ("fits" if none)."""
        return chain_for(self.need).reason_at(self.now, machine) or "fits"

    def reason_when_empty(self, machine: int) -> str:
        """Why ``machine`` could not host the instance even with nothing allocated ("fits" if it could)."""
        return chain_for(self.need).reason_at(self.empty, machine) or "fits"


def filter_nodes(snapshot: ClusterSnapshot, job: Job, task_index: int = 0) -> FilterResult:
    """Which machines can host one instance of ``job``'s task ``task_index``, now and when empty."""
    need = need_of(job.tasks[task_index])
    chain = chain_for(need)
    now, empty = usage_of(snapshot), usage_of(empty_snapshot(snapshot.cluster))
    return FilterResult(chain.passing(now), chain.passing(empty), need, now, empty)


def score_nodes(snapshot: ClusterSnapshot, job: Job, policy: str = "liquid", config: PlacementConfig | None = None,
                machines: Sequence[int] | None = None, task_index: int = 0) -> FloatArray:
    """How good each machine (or each of ``machines``) is for one instance of ``job``'s task ``task_index``
    by the online policy ``policy``, bounded to [0, 1] over those that can host it: 1 the policy's
    choice, 0 the worst and those that cannot (``placement.online.scorers.base.bounded``)."""
    if policy not in CHOOSERS:
        raise KeyError(f"unknown placement policy {policy!r}; known: {', '.join(CHOOSERS)}")
    settings = config or PlacementConfig()
    working = WorkingState(snapshot)
    need = need_of(job.tasks[task_index])
    candidates = working.candidates(need)
    step = Step(job, task_index, candidates, working, NetworkTally(job, snapshot.layout, settings.distance_cost),
                settings, [], need)
    return bounded(fresh_chooser(policy)(step), candidates.ok, machines)


def place_on(snapshot: ClusterSnapshot, job: Job, machine: int, policy: str = "pinned") -> Decision:
    """Every instance of ``job`` on ``machine`` (another scheduler chose it) if they all fit there now;
    else ``unschedulable-now``, with the first filter the machine fails for the instance that did not fit."""
    if not 0 <= machine < len(snapshot.cluster):
        raise ValueError(f"no machine {machine} in cluster {snapshot.cluster.name}")
    working = WorkingState(snapshot)
    placed: list[InstancePlacement] = []
    for task_index in instance_order(job):
        need = need_of(job.tasks[task_index])
        reason = chain_for(need).reason_at(working, machine)
        if reason is not None:
            gang = (f"gang: {len(placed)} of {job.instances} instances fitted, the next did not; none placed",)
            return Decision(job.job_id, policy, Verdict.UNSCHEDULABLE_NOW, snapshot.generation,
                            reasons=(reason, *(gang if placed else ())))
        placed.append(working.take(machine, task_index, need))
    allocation = Allocation(job.job_id, tuple(placed))
    problems = violations(snapshot, job, allocation)
    if problems:  # as every policy does: an infeasible allocation of its own is a bug
        raise RuntimeError(f"policy {policy} produced an infeasible allocation for {job.job_id}: {problems}")
    return Decision(job.job_id, policy, Verdict.PLACED, snapshot.generation, allocation)
