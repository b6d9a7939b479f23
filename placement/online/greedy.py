"""Online placement: one job at a time, instance by instance, every candidate machine scored at once.

A policy is a pure function of (snapshot, job) -> Decision. The shared engine places the job's
instances in the policy's order; for each it asks :class:`~placement.online.working.WorkingState` which
machines can host it (the filters of ``placement.filters``), lets the policy score those (lower is
better; ties go to the lowest machine index; ``placement.online.scorers``), and reserves the best. Gang: if
any instance finds no machine, nothing is placed and the decision says why, and whether waiting could
help (the job fits an empty cluster) or not.
Every placed decision passes :func:`placement.model.feasibility.violations` before it is returned.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from placement.filters.chain import chain_for
from placement.model.decision import Decision, Verdict
from placement.model.demand import Job, Role, Task
from placement.model.feasibility import Need, need_of, needs_of, violations
from placement.model.network import NetworkTally, placement_cost
from placement.model.snapshot import (
    MILLI,
    Allocation,
    ClusterSnapshot,
    InstancePlacement,
    IntArray,
    Layout,
    empty_snapshot,
)
from placement.model.speed import SpeedModel
from placement.model.topology import DEFAULT_DISTANCE_COST
from placement.online.explain import failure_reasons
from placement.online.working import Candidates, WorkingState

FloatArray = npt.NDArray[np.float64]
UNKNOWN_TIER = 2
"""The tier of a GPU type ``PlacementConfig.gpu_tier`` does not name."""


@dataclass(frozen=True)
class PlacementConfig:
    """Weights and tables of the policies (configuration, not constants)."""

    distance_cost: tuple[float, float, float, float] = DEFAULT_DISTANCE_COST
    w_network: float = 1.0
    w_load: float = 1.0
    w_scarce: float = 0.5
    big_job_gpus: float = 8.0
    speed: SpeedModel | None = None
    """With a job-performance model, Liquid's network and type terms are the measured time lost to spread
    (``placement.online.spread_cost``) and to the GPU type (``placement.online.type_cost``) for the jobs it knows."""
    gpu_tier: MappingProxyType[str, int] = field(default_factory=lambda: MappingProxyType({
        "CPU": 0, "MISC": 1, "T4": 2, "P100": 2, "G1": 2, "G2": 2, "V100M16": 3, "V100": 3, "G3": 3, "A10": 3,
        "V100M32": 4}))
    seed: int = 0
    cpu_pods_to_fullest: bool = True
    """``liquid`` and ``fgd``: a CPU-only instance whose fragmentation score ties on several machines goes to the
    fullest of them (``cpu-pods-to-fullest``); ``False``: to the first in cluster order, FGD's own rule."""
    _tiers_of: dict[tuple[str, ...], tuple[int, ...]] = field(default_factory=dict, init=False, repr=False,
                                                              compare=False)
    """:meth:`tiers_of` by its argument (a memo, not part of the configuration)."""

    def tiers_of(self, gpu_types: tuple[str, ...]) -> tuple[int, ...]:
        """The tier of each of ``gpu_types`` (``UNKNOWN_TIER`` for a type ``gpu_tier`` does not name)."""
        found = self._tiers_of.get(gpu_types)
        if found is None:
            found = self._tiers_of[gpu_types] = tuple(self.gpu_tier.get(t, UNKNOWN_TIER) for t in gpu_types)
        return found


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
    need: Need
    """The instance's demand in integer units (worked out once per task)."""
    changed: IntArray | None = None
    """The machines that can host the instance and whose usage, candidacy or network increment changed since the
    step before of the same task (repeats allowed); ``None`` on the task's first step, or where they may have
    changed everywhere. A machine that can no longer host the task's instances is not named: nothing reads its
    score again."""
    memo: dict[object, object] = field(default_factory=dict)
    """What the policy keeps from one step of the task to the next (the same dictionary for all of them)."""
    more: bool = False
    """Whether another step of the task may follow (worth keeping something for)."""


Chooser = Callable[[Step], FloatArray]
"""Scores every machine for the instance of ``step`` (lower is better); infeasible ones are ignored (their scores
are whatever the chooser leaves there)."""
Fills = Callable[[Job, int], bool]
"""Whether the machine chosen for an instance of a task keeps the best score for the task's next
instances until it is full (true for packing scorers), so it can take them without rescoring."""


def never_fills(job: Job, task_index: int) -> bool:
    return False


def task_order(job: Job) -> list[int]:
    """Task indices in placement order: workers and other GPU-heavy tasks first, parameter servers last."""
    return sorted(range(len(job.tasks)), key=lambda i: (job.tasks[i].role is Role.PS, -job.tasks[i].gpu, i))


def instance_order(job: Job) -> list[int]:
    """Task index per instance, in :func:`task_order`."""
    return [i for i in task_order(job) for _ in range(job.tasks[i].instances)]


def place_greedy(snapshot: ClusterSnapshot, job: Job, policy: str, choose: Chooser,
                 config: PlacementConfig, explain: bool = True, fills: Fills = never_fills) -> Decision:
    """Place ``job`` on ``snapshot`` with the machine scores of ``choose``.

    With ``explain=False`` a job that does not fit gets the verdict ``unschedulable-now`` without
    reasons and without the empty-cluster check, and a placed one no score breakdown (for callers that
    only need the allocation, like the simulator).
    """
    started = time.perf_counter()
    working = WorkingState(snapshot)
    short = _short_of_room(working, job, explain)
    if short is not None:
        if not explain:
            return Decision(job.job_id, policy, Verdict.UNSCHEDULABLE_NOW, snapshot.generation)
        return _failure(snapshot, job, policy, config, fills, short, started)
    placed, failed, network_cost = _build(working, job, choose, config, fills)
    if failed is not None and not explain:
        return Decision(job.job_id, policy, Verdict.UNSCHEDULABLE_NOW, snapshot.generation)
    if failed is not None:
        task_index, candidates = failed
        return _failure(snapshot, job, policy, config, fills,
                        failure_reasons(snapshot, job, task_index, candidates, len(placed)), started)
    allocation = Allocation(job.job_id, tuple(placed))
    problems = violations(snapshot, job, allocation)
    if problems:  # a bug in a policy, never a property of the input
        raise RuntimeError(f"policy {policy} produced an infeasible allocation for {job.job_id}: {problems}")
    score = breakdown(snapshot, job, allocation, config, network_cost) if explain else {}
    score["latency_ms"] = (time.perf_counter() - started) * 1e3
    return Decision(job.job_id, policy, Verdict.PLACED, snapshot.generation, allocation, MappingProxyType(score))


def _build(working: WorkingState, job: Job, choose: Chooser, config: PlacementConfig,
           fills: Fills) -> tuple[list[InstancePlacement], tuple[int, Candidates] | None, float]:
    """Place instances in :func:`instance_order` on ``working`` (fresh from a snapshot); also returns the
    network cost of what was placed.

    Where ``fills`` says so, the chosen machine takes as many further instances of the same task as it
    can hold before the machines are scored again: for packing scorers the machine just chosen stays
    the best, so this is the same greedy, faster."""
    network = NetworkTally(job, working.layout, config.distance_cost)
    placed: list[InstancePlacement] = []
    order = task_order(job)
    for task_index in order:
        task = job.tasks[task_index]
        need, remaining = need_of(task), task.instances
        fill = remaining > 1 and fills(job, task_index)  # one instance: nothing to fill, the room is not asked
        memo: dict[object, object] = {}
        reached: IntArray | None = None
        while remaining:
            candidates = working.candidates(need)
            if not candidates.ok.any():
                return placed, (task_index, candidates), network.total
            # a machine that cannot host this instance cannot host the task's later ones: its score is not read again
            changed = None if reached is None else reached[candidates.ok[reached]]
            step = Step(job, task_index, candidates, working, network, config, placed, need, changed, memo,
                        more=remaining > 1)
            machine = int(np.argmin(np.where(candidates.ok, choose(step), np.inf)))
            count = min(remaining, max(1, working.room_on(machine, need))) if fill else 1
            last = count == remaining and task_index == order[-1]  # nothing reads the working state after it
            taken, mark = len(working.touched()), network.mark()
            taken_now = working.take_many(machine, task_index, need, count, keep=not last)
            network.record_many(task_index, machine, len(taken_now))
            placed.extend(taken_now)
            remaining -= count
            near = network.changed_since(mark) if remaining else None
            reached = None if near is None else np.concatenate([working.touched()[taken:], near])
    return placed, None, network.total


def _failure(snapshot: ClusterSnapshot, job: Job, policy: str, config: PlacementConfig, fills: Fills,
             reasons: tuple[str, ...], started: float) -> Decision:
    return Decision(job.job_id, policy, _wait_or_never(snapshot, job, config, fills), snapshot.generation,
                    reasons=reasons, score=MappingProxyType({"latency_ms": (time.perf_counter() - started) * 1e3}))


def _short_of_room(working: WorkingState, job: Job, explain: bool) -> tuple[str, ...] | None:
    """Why no placement of the job exists, where the filters alone say so: for some demand of its instances the
    machines' room (``Chain.room``, an upper bound) is short of how many instances ask for it; else ``None``.
    With ``explain=False`` the reasons are left empty.

    Then every greedy policy fails, whatever it scores, so it fails here before any machine is scored (the
    scorers never meet the job: a learning scorer does not learn from it). Kept with the snapshot per demand and
    count (and the role the reason names; ``ClusterSnapshot.remember``): a scheduling cycle asks this of hundreds
    of waiting jobs on one snapshot, and a gang placed instance by instance until the room ran out cost a
    policy's whole placement each time."""
    snapshot = working.snapshot
    for task_index, need, count in _demands_in_order(job):
        if not working.candidates(need).ok.any():
            room = 0
        elif count == 1:
            continue
        else:
            room = snapshot.remember(("room", need), partial(_room_total, working, need))
            if room >= count:
                continue
        if not explain:
            return ()
        return snapshot.remember(("short of room", need, count, job.tasks[task_index].role),
                                 partial(_short_reasons, working, job, task_index, need, count, room))
    return None


_in_order: dict[tuple[Task, ...], tuple[tuple[int, Need, int], ...]] = {}
_MOST_IN_ORDER = 1024


def _demands_in_order(job: Job) -> tuple[tuple[int, Need, int], ...]:
    """Each demand of the job once, in :func:`task_order` of the first task asking for it: that task's index,
    the demand and how many of the job's instances ask for it (remembered per tuple of tasks)."""
    found = _in_order.get(job.tasks)
    if found is None:
        if len(_in_order) >= _MOST_IN_ORDER:
            _in_order.clear()
        counts = dict(needs_of(job))
        listed = []
        for task_index in task_order(job):
            need = need_of(job.tasks[task_index])
            count = counts.pop(need, 0)
            if count:  # else asked with an earlier task of the same demand
                listed.append((task_index, need, count))
        found = _in_order[job.tasks] = tuple(listed)
    return found


EXACT_ROOM_MACHINES = 64
"""Machines up to which :func:`fits_by_room` counts their exact room one by one (above, the policy is asked)."""


def fits_by_room(snapshot: ClusterSnapshot, job: Job) -> bool | None:
    """Whether every greedy policy places ``job`` on ``snapshot``, where the filters tell without placing it; ``None``
    where they do not tell cheaply (instances of several demands, which compete for the same machines; more than
    ``EXACT_ROOM_MACHINES`` machines with room to count).

    A job whose instances all ask the same fits exactly where the machines' room for them adds up to as many: a
    machine's room for one demand is its own (``room_at``, exact), and each greedy step puts an instance on a machine
    with room and takes one from it. The filters' bound over every machine (``Chain.room``, which leaves a share's
    GPU memory out) says first where even that falls short."""
    needs = needs_of(job)
    if len(needs) != 1:
        return None
    need, count = needs[0]
    working = WorkingState(snapshot)
    ok = working.candidates(need).ok
    anywhere = bool(ok.any())
    if count == 1 or not anywhere:
        return anywhere
    if _room_total(working, need) < count:
        return False
    machines = np.flatnonzero(ok)
    if len(machines) > EXACT_ROOM_MACHINES:
        return None
    chain = chain_for(need)
    return sum(chain.room_at(working, m) for m in machines.tolist()) >= count


def _room_total(working: WorkingState, need: Need) -> int:
    """How many instances of ``need`` the machines take together at most."""
    return int(chain_for(need).room(working, working.candidates(need).ok).sum())


def _short_reasons(working: WorkingState, job: Job, task_index: int, need: Need, count: int,
                   room: int) -> tuple[str, ...]:
    if not room:
        return failure_reasons(working.snapshot, job, task_index, working.candidates(need), 0)
    machines = int(np.count_nonzero(working.candidates(need).ok))
    return (f"gang: room for at most {room} of its {count} {job.tasks[task_index].role} instances, on the {machines} "
            f"machine{'s' if machines != 1 else ''} that can host one; none placed",)


def _first_machine(step: Step) -> FloatArray:
    return np.zeros(step.working.n_machines)


def _fill(job: Job, task_index: int) -> bool:
    return True


def _wait_or_never(snapshot: ClusterSnapshot, job: Job, config: PlacementConfig, fills: Fills) -> Verdict:
    """``unschedulable-now`` if the job fits the same cluster with nothing allocated (placed there by
    first fit, packing each machine, or else packing as the policy does; where the filters' room tells,
    :func:`fits_by_room` answers for every greedy policy alike), else ``can-never-fit``. Remembered
    per cluster and job shape (``Derived.fits_empty``): the answer does not depend on what is allocated.
    The policy's own scorers are not asked: a learning scorer would learn from the job once per cluster
    and shape, the first time only, and the policy's later decisions would depend on what was asked before."""
    empty = empty_snapshot(snapshot.cluster)

    def fits_empty() -> bool:
        known = fits_by_room(empty, job)
        return known if known is not None else (
            _build(WorkingState(empty), job, _first_machine, config, _fill)[1] is None
            or _build(WorkingState(empty), job, _first_machine, config, fills)[1] is None)

    fits = empty.layout.derived.fits_empty.get(job.tasks, fits_empty)
    return Verdict.UNSCHEDULABLE_NOW if fits else Verdict.CAN_NEVER_FIT


def breakdown(snapshot: ClusterSnapshot, job: Job, allocation: Allocation, config: PlacementConfig,
              network_cost: float | None = None) -> dict[str, float]:
    """Score terms of a placed job: network cost (``network_cost`` when the caller tallied it while
    placing, in the allocation's order), load of the chosen machines, span, fragmentation."""
    layout = snapshot.layout
    machines = sorted(allocation.machines())
    added: dict[int, int] = {}
    for p in allocation.instances:
        for g in p.gpus:
            added[g] = added.get(g, 0) + p.gpu_milli
    partial = 0
    for m in machines:
        first = int(layout.gpu_first[m])
        for g, used in enumerate(snapshot.gpu_milli_used[first:first + int(layout.gpu_count[m])].tolist(), first):
            partial += 0 < used + added.get(g, 0) < MILLI
    share = snapshot.machine_share[machines].tolist()
    return {
        "network": (placement_cost(job, layout, allocation.instances, config.distance_cost)
                    if network_cost is None else network_cost),
        "load_before": sum(share) / len(share) if share else 0.0,
        "machines": float(len(machines)),
        "racks": float(len({int(layout.rack[m]) for m in machines})),
        "domains": float(len({int(layout.domain[m]) for m in machines})),
        "partial_gpus": float(partial),
    }


def machine_tiers(config: PlacementConfig, layout: Layout) -> FloatArray:
    """Tier of each machine's GPU type (higher = scarcer, more capable; unknown types 2). Worked out once
    per layout and tier table (``Derived.tiers``); read-only."""
    return _tiers(config, layout)[0]


def machine_scarcity(config: PlacementConfig, layout: Layout) -> FloatArray:
    """:func:`machine_tiers` scaled to 0..1 by the highest tier (read-only)."""
    return _tiers(config, layout)[1]


def _tiers(config: PlacementConfig, layout: Layout) -> tuple[FloatArray, FloatArray]:
    by_type = config.tiers_of(layout.gpu_types)

    def make() -> tuple[FloatArray, FloatArray]:
        per_type = np.array(by_type, dtype=float)
        tier = per_type[layout.gpu_type] if len(per_type) else np.zeros(len(layout.gpu_type))
        scarce = tier / max(float(tier.max()) if len(tier) else 0.0, 1.0)
        tier.flags.writeable = scarce.flags.writeable = False
        return tier, scarce

    return layout.derived.tiers.get(by_type, make)
