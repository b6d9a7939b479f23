"""The decoded state the grouping GA evolves: candidate machines (``Pool``) and per-individual
packings (``Packing``), which replay ``WorkingState.take``'s GPU choice so a plan never needs repair."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from placement.batch.policies import PlanEntry
from placement.filters import FILTERS
from placement.filters.base import Usage, usage_of
from placement.filters.capacity import CPU, GPU_MILLI, MEM, WHOLE_GPUS, spare_rows, use_of
from placement.filters.gpu_share import fitting_gpus
from placement.model.demand import Job, Task
from placement.model.feasibility import Need, need_of
from placement.model.network import network_cost
from placement.model.snapshot import MILLI, ClusterSnapshot
from placement.online.greedy import instance_order
from placement.online.working import BoolArray, IntArray, WorkingState

COUNTED = (WHOLE_GPUS, GPU_MILLI, CPU, MEM)
"""The capacity rows (``placement.filters.capacity``) a packing counts; a share's GPU memory is checked
where it matters, when the machine's GPU choice is replayed (``Packing.fits``)."""
GPU_TYPE = FILTERS["gpu-type"]
MAX_TRIES = 64
"""Machines tried, best ranked first, before an instance is declared not to fit."""


@dataclass(frozen=True)
class GgaSettings:
    """Knobs of the GGA (counts are per generation unless said otherwise)."""

    population: int = 12
    offspring: int = 12
    tournament: int = 2
    inject_share: float = 0.3
    mutation_rate: float = 0.5
    mutation_machines: int = 2
    local_search_tries: int = 2
    stall_generations: int = 20
    max_generations: int | None = None
    extra_candidates: int = 8
    all_machines_up_to: int = 64
    seed_time_share: float = 0.4
    finish_time_share: float = 0.2
    finish_max_s: float = 0.5
    """Time kept for decoding and checking the best: ``finish_time_share`` of the limit, at most this."""
    noise: float = 0.3


class Pool:
    """What all individuals share: the candidate machines (local index = position in ``ids``) and the demands."""

    def __init__(self, snapshot: ClusterSnapshot, jobs: Sequence[Job], machines: Sequence[int],
                 distance_cost: Sequence[float], generator: np.random.Generator, noise: float,
                 fill_order: Sequence[Job]) -> None:
        layout, ids = snapshot.layout, np.asarray(machines, dtype=np.int64)
        self.jobs, self.ids, self.size = list(jobs), [int(m) for m in ids], len(ids)
        self.cost, self.generator, self.noise = tuple(distance_cost), generator, noise
        position = {job.job_id: j for j, job in enumerate(self.jobs)}
        self.fill_order = [position[job.job_id] for job in fill_order]
        usage = usage_of(snapshot)
        self.free = spare_rows(usage)[list(COUNTED)][:, ids]
        self.rack, self.domain = layout.rack[ids], layout.domain[ids]
        self.places = layout.derived.places
        spans = [slice(int(layout.gpu_first[m]), int(layout.gpu_first[m] + layout.gpu_count[m])) for m in self.ids]
        self.gpus = [(snapshot.gpu_milli_used[s].tolist(), snapshot.gpu_mem_used[s].tolist(),
                      layout.gpu_mem_cap[s].tolist()) for s in spans]
        self.task_of = [instance_order(job) for job in self.jobs]
        per_task = [[self._task(usage, ids, t) for t in job.tasks] for job in self.jobs]
        self.needs = [[per_task[j][t][0] for t in order] for j, order in enumerate(self.task_of)]
        self.demand = [[per_task[j][t][1] for t in order] for j, order in enumerate(self.task_of)]
        self.allowed = [[per_task[j][t][2] for t in order] for j, order in enumerate(self.task_of)]
        self.share = [[n.whole_gpus == 0 and n.gpu_milli > 0 for n in needs] for needs in self.needs]
        self.hopeless = [not all(a.any() for a in allowed) for allowed in self.allowed]

    def _task(self, usage: Usage, ids: IntArray, task: Task) -> tuple[Need, IntArray, BoolArray]:
        need = need_of(task)
        use = use_of(need, 0)
        demand = np.array([use[row] for row in COUNTED], dtype=np.int64)
        allowed: BoolArray = GPU_TYPE.mask(usage, need)[ids] & (demand[:, None] <= self.free).all(axis=0)
        return need, demand, allowed

    def load(self, plan: Sequence[PlanEntry]) -> Packing:
        """A plan (global machine ids, any job order) as a packing; what no longer fits is re-inserted by best fit."""
        local = {m: i for i, m in enumerate(self.ids)}
        wanted = {job.job_id: [local.get(m) for m in machines] for job, machines in plan if machines is not None}
        packing = Packing(self)
        for j, job in enumerate(self.jobs):
            if job.job_id in wanted:
                packing.complete(j, wanted[job.job_id])
        packing.fill()
        return packing


class Packing:
    """One individual's decoded state: where each instance is, and per machine the batch's usage and instances."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.where: list[list[int | None]] = [[None] * len(order) for order in pool.task_of]
        self.used = np.zeros((4, pool.size), dtype=np.int64)  # whole GPUs, milli-GPUs, milli-cores, MiB
        self.count = np.zeros(pool.size, dtype=np.int64)
        self.shares = np.zeros(pool.size, dtype=np.int64)
        self.items: dict[int, list[tuple[int, int]]] = {}
        self.dirty: set[int] = set()
        self.costs: dict[int, float] = {}

    def copy(self) -> Packing:
        other = Packing.__new__(Packing)
        other.pool, other.where = self.pool, [list(w) for w in self.where]
        other.used, other.count, other.shares = self.used.copy(), self.count.copy(), self.shares.copy()
        other.items, other.dirty = {m: list(v) for m, v in self.items.items()}, set(self.dirty)
        other.costs = dict(self.costs)
        return other

    def placed(self, j: int) -> bool:
        return all(m is not None for m in self.where[j])

    def add(self, j: int, k: int, m: int) -> None:
        self.used[:, m] += self.pool.demand[j][k]
        self.count[m] += 1
        self.shares[m] += self.pool.share[j][k]
        self.items.setdefault(m, []).append((j, k))
        self.where[j][k] = m
        self.costs.pop(j, None)

    def drop(self, j: int, k: int) -> None:
        m = self.where[j][k]
        if m is None:
            return
        self.used[:, m] -= self.pool.demand[j][k]
        self.count[m] -= 1
        self.shares[m] -= self.pool.share[j][k]
        self.items[m].remove((j, k))
        if not self.items[m]:
            del self.items[m]
        self.dirty.add(m)
        self.where[j][k] = None
        self.costs.pop(j, None)

    def remove_job(self, j: int) -> None:
        for k in range(len(self.where[j])):
            self.drop(j, k)

    def fits(self, j: int, k: int, m: int) -> bool:
        """Exact: could instance k of job j join machine m (with everything on it, replayed in plan order)?"""
        if (self.used[:, m] + self.pool.demand[j][k] > self.pool.free[:, m]).any():
            return False
        if not self.shares[m] and not self.pool.share[j][k]:
            return True
        return self._replay(m, (j, k))

    def _replay(self, m: int, extra: tuple[int, int] | None) -> bool:
        """``WorkingState.take``'s GPU choice for the machine's instances in plan order; False if one fails."""
        base_milli, base_mem, cap = self.pool.gpus[m]
        milli, mem = list(base_milli), list(base_mem)
        for j, k in sorted(self.items.get(m, []) + ([extra] if extra else [])):
            need = self.pool.needs[j][k]
            if need.whole_gpus:
                free = [g for g in range(len(milli)) if milli[g] == 0 and mem[g] == 0][: need.whole_gpus]
                if len(free) < need.whole_gpus:
                    return False
                for g in free:
                    milli[g], mem[g] = MILLI, cap[0]
            elif need.gpu_milli:
                fit = fitting_gpus(milli, mem, cap, need)
                if not fit:
                    return False
                best = max(fit, key=lambda g: (milli[g], -g))
                milli[best] += need.gpu_milli
                mem[best] += need.gpu_mem_on(cap[best])
        return True

    def settle(self) -> None:
        """After removals: drop whole any job whose instance no longer replays on a GPU-sharing machine."""
        while self.dirty:
            m = self.dirty.pop()
            while self.shares[m] and not self._replay(m, None):
                self.remove_job(max(j for j, _ in self.items[m]))

    def _ranked(self, j: int, k: int, forbid: BoolArray | None, noisy: bool) -> IntArray:
        """Machines for instance k of job j: nearest the job's other instances, then used ones, then fullest."""
        pool, demand = self.pool, self.pool.demand[j][k]
        ok = pool.allowed[j][k] & (self.used + demand[:, None] <= pool.free).all(axis=0)
        cand = np.flatnonzero(ok if forbid is None else ok & ~forbid)
        placed = [m for m in self.where[j] if m is not None]
        level = np.zeros(len(cand), dtype=np.int64)
        if placed and cand.size:
            level = np.where(np.isin(cand, placed), 0,
                             np.where(np.isin(pool.rack[cand], pool.rack[placed]), 1,
                                      np.where(np.isin(pool.domain[cand], pool.domain[placed]), 2, 3)))
        row = 1 if demand[1] else 2
        left = (pool.free[row, cand] - self.used[row, cand] - demand[row]) / max(1, int(pool.free[row].max()))
        if noisy:
            left = left + pool.noise * pool.generator.random(len(cand))
        ranked: IntArray = cand[np.lexsort((cand, left, self.count[cand] == 0, level))]
        return ranked

    def complete(self, j: int, wanted: Sequence[int | None] | None, forbid: BoolArray | None = None,
                 noisy: bool = False) -> bool:
        """Place job j's missing instances (``wanted`` machines first, then best fit); all or none (gang)."""
        where, tasks = self.where[j], self.pool.task_of[j]
        for k, m in enumerate(wanted or []):
            if where[k] is None and m is not None and (forbid is None or not forbid[m]) and self.fits(j, k, m):
                self.add(j, k, m)
        last = -1
        for k in range(len(where)):
            if where[k] is not None:
                continue
            if last >= 0 and k and tasks[k] == tasks[k - 1] and self.fits(j, k, last):
                self.add(j, k, last)
                continue
            last = next((int(m) for m in self._ranked(j, k, forbid, noisy)[:MAX_TRIES] if self.fits(j, k, int(m))), -1)
            if last < 0:
                self.remove_job(j)
                self.dirty.clear()  # it only held this job's instances, just placed: nothing else changed
                return False
            self.add(j, k, last)
        return True

    def fill(self, order: Sequence[int] | None = None, noisy: bool = False) -> None:
        """Best-fit insert every left-out job that could fit somewhere (GPU-descending order by default)."""
        for j in self.pool.fill_order if order is None else order:
            if not self.pool.hopeless[j] and all(m is None for m in self.where[j]) and self.may_fit(j):
                self.complete(j, None, noisy=noisy)

    def may_fit(self, j: int) -> bool:
        """Necessary test: each task's instances fit the allowed machines' spare capacity, counted per machine."""
        pool, tasks = self.pool, self.pool.task_of[j]
        spare = pool.free - self.used
        for k in (k for k in range(len(tasks)) if k == 0 or tasks[k] != tasks[k - 1]):
            demand, rows = pool.demand[j][k], pool.demand[j][k] > 0
            if rows.any():
                per_machine = (spare[rows] // demand[rows, None]).min(axis=0)
                if int(per_machine[pool.allowed[j][k]].clip(0).sum()) < tasks.count(tasks[k]):
                    return False
        return True

    def network(self, j: int) -> float:
        if j not in self.costs:
            machines = [self.pool.ids[m] for m in self.where[j] if m is not None]
            pool = self.pool
            placed = len(machines) == len(self.where[j])
            self.costs[j] = network_cost(pool.jobs[j], zip(pool.task_of[j], machines, strict=True), pool.places,
                                         pool.cost) if placed else 0.0
        return self.costs[j]

    def objective(self) -> tuple[int, float, int]:
        """(jobs placed, network cost, machines touched)."""
        placed = [j for j in range(len(self.where)) if self.placed(j)]
        return len(placed), round(sum(self.network(j) for j in placed), 6), len(self.items)

    def genes(self) -> list[tuple[int, ...] | None]:
        return [tuple(self.pool.ids[m] for m in w if m is not None) if self.placed(j) else None
                for j, w in enumerate(self.where)]

    def plan(self) -> list[PlanEntry]:
        return list(zip(self.pool.jobs, self.genes(), strict=True))


def candidate_machines(snapshot: ClusterSnapshot, jobs: Sequence[Job], plans: Sequence[Sequence[PlanEntry]],
                       settings: GgaSettings) -> list[int]:
    """Machines of the chromosome: all on a small cluster, else those the plans use plus best-fit extras."""
    n = len(snapshot.cluster)
    if n <= settings.all_machines_up_to:
        return list(range(n))
    chosen = {m for plan in plans for _, machines in plan if machines is not None for m in machines}
    working = WorkingState(snapshot)
    load = working.gpu_allocated_share()
    seen: set[Need] = set()
    for task in (t for job in jobs for t in job.tasks):
        need = need_of(task)
        if need in seen:
            continue
        seen.add(need)
        fit = np.flatnonzero(working.candidates(need).ok)
        chosen |= set(fit[np.lexsort((fit, -load[fit]))][: settings.extra_candidates].tolist())
    return sorted(chosen)
