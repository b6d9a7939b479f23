"""CP-SAT model of batch placement (OR-Tools), with a time limit, decoded through the shared checker.

Variables, per job j, task t, candidate machine m:
  ``x[j]`` in {0,1} placed; ``n[j,t,m]`` in 0..instances(t) instances of t on m (instances of a task are
  identical, so counts replace per-instance booleans without losing solutions); ``used[m]`` in {0,1};
  for jobs with bandwidth and more than one instance: ``u[j,m]``, ``r[j,rack]``, ``d[j,domain]`` in {0,1}.
Constraints:
  gang: sum_m n[j,t,m] = instances(t) x[j];
  per machine, against what is free on the snapshot (the filters' rules summed per machine,
  ``placement.filters.capacity``): sum whole GPUs <= free whole GPUs;
  sum milli-GPUs (whole = 1000 each, shares their milli) <= spare milli of its GPUs;
  sum share GPU memory (MiB) <= spare GPU memory; sum milli-cores <= free; sum MiB <= free;
  n <= ub x used[m], n <= ub x u[j,m], u[j,m] <= r[j,rack(m)], r <= d[j,domain(rack)].
Objective (minimised, integer weights, so lexicographic): ``-W_job sum x + W_net network + sum used`` with
``W_net`` = candidate machines + 1 and ``W_job`` > the whole range of the other two terms.
Network, in 0.1 Gbit/s x cost units: ``b_j [(c1-c0) sum u + (c2-c1) sum r + (c3-c2) sum d + (c0 N_j - c3) x_j]``
with costs (c0..c3) per level and b_j the job's largest bandwidth: exactly ``placement.model.network.network_cost``
for an all-reduce job whose instances share one bandwidth (each added machine pays c1, rack c2, domain
c3); a proxy for parameter-server jobs and mixed bandwidths.

Restrictions, stated: a task's candidate machines are those that can host one instance now, limited
to the ``top_k`` with the most room for it plus the ``top_k`` fullest that fit (best fit), more for
tasks with many instances, plus the machines of the hint: the better (by the objective) of the FFD
plan and the online liquid policy run job by job, given as a complete hint.
Per-GPU fit of GPU shares is relaxed to per-machine sums: the decoder (``placement.batch.policies.realise`` with
repair) moves a share that does not fit its GPU to the best other machine and reports it in
``repairs``/``notes``. "optimal" means optimal for this model (candidates, proxy); on a small cluster
with whole-GPU all-reduce jobs the model is exact. A solution meeting the lower bound stops the search.

Solver: ``num_workers`` = 2, ``random_seed`` = seed, ``max_time_in_seconds`` = the limit less the time
already spent and a decoding reserve. FEASIBLE is accepted ("time"), OPTIMAL reported as "optimal".
Small models (``one_worker_up_to`` variables) are searched by one worker, which makes a run not stopped
by time reproducible; big ones search freely in parallel (faster, not reproducible). (OR-tools' own
reproducible parallel mode, ``interleave_search``, aborts the whole process in its postsolve on some
small gang models, e.g. three 1-GPU instances on three machines, in OR-tools 9.15.) Without any solution
the hint plan is used ("fallback").
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from ortools.sat.python import cp_model

from placement.batch.bounds import machines_lower_bound
from placement.batch.ffd import ffd_plan, liquid_plan, plan_objective
from placement.batch.policies import BatchResult, PlanEntry, check_batch, finish
from placement.filters.base import usage_of
from placement.filters.capacity import GPU_MEM, ROWS, spare_rows, use_of
from placement.model.demand import Job
from placement.model.feasibility import Need, need_of
from placement.model.snapshot import ClusterSnapshot
from placement.model.topology import DEFAULT_DISTANCE_COST
from placement.online.greedy import instance_order
from placement.online.working import IntArray, WorkingState

NETWORK_SCALE = 10
"""Network proxy units per Gbit/s x cost unit (0.1 Gbit/s resolution)."""


@dataclass(frozen=True)
class CpSatSettings:
    top_k: int = 16
    workers: int = 2
    hint_time_share: float = 0.3
    """The liquid hint plan may use this share of the time limit (jobs after it are left out of it)."""
    finish_time_share: float = 0.15
    finish_max_s: float = 0.5
    """Time kept for decoding and checking: ``finish_time_share`` of the limit, at most this."""
    one_worker_up_to: int = 1000
    """Models with at most this many variables are searched by one worker: reproducible for a given seed
    when not stopped by time. Bigger models search freely in parallel, which finds more in time."""


class _Model:
    """The CP-SAT model of one batch (see module docstring)."""

    def __init__(self, snapshot: ClusterSnapshot, jobs: Sequence[Job], hint: Sequence[PlanEntry],
                 settings: CpSatSettings, cost: Sequence[float]) -> None:
        self.jobs, self.layout, self.model = list(jobs), snapshot.layout, cp_model.CpModel()
        self.free = spare_rows(usage_of(snapshot))
        self.x = [self.model.new_bool_var(f"x{j}") for j in range(len(jobs))]
        self.n: dict[tuple[int, int], dict[int, cp_model.IntVar]] = {}
        hinted = {job.job_id: machines for job, machines in hint if machines is not None}
        working = WorkingState(snapshot)
        for j, job in enumerate(jobs):
            for t, task in enumerate(job.tasks):
                machines = _candidates(working, self.free, job, t, settings.top_k, hinted.get(job.job_id))
                self.n[j, t] = {m: self.model.new_int_var(0, task.instances, f"n{j}_{t}_{m}") for m in machines}
        self.machines = sorted({m for per in self.n.values() for m in per})
        self.used = {m: self.model.new_bool_var(f"used{m}") for m in self.machines}
        self.spans: dict[int, tuple[dict[int, cp_model.IntVar], ...]] = {}
        self._gang_and_capacity()
        network, network_range = self._network(cost)
        self.network = cp_model.LinearExpr.weighted_sum([v for v, _ in network], [c for _, c in network])
        w_net = len(self.machines) + 1
        w_job = w_net * (network_range + 1) + len(self.machines) + 1
        weighted = [(x, -w_job) for x in self.x] + [(v, w_net * c) for v, c in network] + \
            [(u, 1) for u in self.used.values()]
        self.model.minimize(cp_model.LinearExpr.weighted_sum([v for v, _ in weighted], [c for _, c in weighted]))
        self._hint(hinted)

    def _gang_and_capacity(self) -> None:
        per_machine: dict[int, list[tuple[Need, cp_model.IntVar]]] = {m: [] for m in self.machines}
        for (j, t), per in self.n.items():
            task = self.jobs[j].tasks[t]
            self.model.add(sum(per.values()) == task.instances * self.x[j])
            for m, var in per.items():
                self.model.add(var <= task.instances * self.used[m])
                per_machine[m].append((need_of(task), var))
        for m, needs in per_machine.items():
            cap = int(self.layout.gpu_mem_cap[self.layout.gpu_first[m]]) if self.layout.gpu_count[m] else 0
            uses = [(use_of(need, cap), var) for need, var in needs]
            for row in range(ROWS):
                terms = [use[row] * var for use, var in uses if use[row]]
                if terms:
                    self.model.add(sum(terms) <= int(self.free[row, m]))

    def _network(self, cost: Sequence[float]) -> tuple[list[tuple[cp_model.IntVar, int]], int]:
        """The network proxy (module docstring) as (variable, coefficient) pairs, and a bound on its range."""
        c0, c1, c2, c3 = cost
        terms: list[tuple[cp_model.IntVar, int]] = []
        span = 0
        for j, job in enumerate(self.jobs):
            b = max(t.bandwidth_gbps for t in job.tasks)
            if job.instances < 2 or b <= 0:
                continue
            unit = [round(b * c * NETWORK_SCALE) for c in (c1 - c0, c2 - c1, c3 - c2, c0 * job.instances - c3)]
            on = [(m, var) for t in range(len(job.tasks)) for m, var in self.n[j, t].items()]
            u = {m: self.model.new_bool_var(f"u{j}_{m}") for m in sorted({m for m, _ in on})}
            r = {k: self.model.new_bool_var(f"r{j}_{k}") for k in sorted({int(self.layout.rack[m]) for m in u})}
            d = {k: self.model.new_bool_var(f"d{j}_{k}") for k in sorted({int(self.layout.domain[m]) for m in u})}
            for m, var in on:
                self.model.add(var <= job.instances * u[m])
            for m, flag in u.items():
                self.model.add_implication(flag, r[int(self.layout.rack[m])])
                self.model.add_implication(r[int(self.layout.rack[m])], d[int(self.layout.domain[m])])
            for coefficient, flags in zip(unit, (u, r, d, {0: self.x[j]}), strict=True):
                terms += [(flag, coefficient) for flag in flags.values()]
                span += abs(coefficient) * len(flags)
            self.spans[j] = (u, r, d)
        return terms, span

    def _hint(self, hinted: dict[str, Sequence[int]]) -> None:
        """The FFD plan as a complete hint (every variable)."""
        where: dict[int, list[tuple[int, int]]] = {}
        for j, job in enumerate(self.jobs):
            machines = hinted.get(job.job_id)
            self.model.add_hint(self.x[j], machines is not None)
            where[j] = list(zip(instance_order(job), machines or [], strict=False))
        for (j, t), per in self.n.items():
            for m, var in per.items():
                self.model.add_hint(var, sum(1 for tt, mm in where[j] if tt == t and mm == m))
        used = {m for pairs in where.values() for _, m in pairs}
        for m, flag in self.used.items():
            self.model.add_hint(flag, m in used)
        for j, (u, r, d) in self.spans.items():
            mine = {m for _, m in where[j]}
            for m, flag in u.items():
                self.model.add_hint(flag, m in mine)
            for k, flag in r.items():
                self.model.add_hint(flag, k in {int(self.layout.rack[m]) for m in mine})
            for k, flag in d.items():
                self.model.add_hint(flag, k in {int(self.layout.domain[m]) for m in mine})

    def plan(self, solver: cp_model.CpSolver) -> list[PlanEntry]:
        """The solution as a plan in input order: instances of each task on machines in ascending order."""
        plan: list[PlanEntry] = []
        for j, job in enumerate(self.jobs):
            if not solver.value(self.x[j]):
                plan.append((job, None))
                continue
            queues = {t: [m for m, var in sorted(self.n[j, t].items()) for _ in range(solver.value(var))]
                      for t in range(len(job.tasks))}
            plan.append((job, [queues[t].pop(0) for t in instance_order(job)]))
        return plan


def _candidates(working: WorkingState, free: IntArray, job: Job, t: int, top_k: int,
                hinted: Sequence[int] | None) -> list[int]:
    """Machines for task t: top_k most room, top_k fullest that fit, more for many instances, the hint's."""
    task = job.tasks[t]
    need = need_of(task)
    ok = np.flatnonzero(working.candidates(need).ok)
    demand = np.array(use_of(need, 0))
    demand[GPU_MEM] = 0  # a machine's GPU memory is per GPU: not counted in its room
    rows = demand > 0
    room = (free[rows][:, ok] // demand[rows, None]).min(axis=0) if rows.any() else np.full(len(ok), task.instances)
    room = np.minimum(room, task.instances)
    most = ok[np.lexsort((ok, -room))]
    enough = int(np.searchsorted(np.cumsum(room[np.lexsort((ok, -room))]), 2 * task.instances)) + 1
    fullest = ok[np.lexsort((ok, room))]
    chosen = {int(m) for m in most[: max(top_k, enough)]} | {int(m) for m in fullest[:top_k]}
    chosen |= {m for m, i in zip(hinted or [], instance_order(job), strict=False) if i == t}
    return sorted(chosen)


class _StopAtBound(cp_model.CpSolverSolutionCallback):
    def __init__(self, model: _Model, bound: int | None) -> None:
        super().__init__()
        self.model, self.bound, self.met = model, bound, False

    def on_solution_callback(self) -> None:
        m = self.model
        placed = sum(self.value(x) for x in m.x)
        machines = sum(self.value(u) for u in m.used.values())
        network = self.value(m.network)
        if self.bound is not None and placed == len(m.jobs) and network <= 0 and machines <= self.bound:
            self.met = True
            self.stop_search()


def place_cpsat(snapshot: ClusterSnapshot, jobs: Sequence[Job], time_limit_s: float = 1.0, seed: int = 0,
                settings: CpSatSettings | None = None,
                distance_cost: Sequence[float] = DEFAULT_DISTANCE_COST) -> BatchResult:
    """CP-SAT batch placement (see module docstring)."""
    started = time.perf_counter()
    check_batch(snapshot, jobs)
    settings = settings or CpSatSettings()
    plans = [ffd_plan(snapshot, jobs), liquid_plan(snapshot, jobs, started + time_limit_s * settings.hint_time_share)]
    hint = min(plans, key=lambda plan: plan_objective(snapshot, plan, distance_cost))
    model = _Model(snapshot, jobs, hint, settings, distance_cost)
    solver = cp_model.CpSolver()
    reserve_s = min(time_limit_s * settings.finish_time_share, settings.finish_max_s)
    left = time_limit_s - reserve_s - (time.perf_counter() - started)
    solver.parameters.max_time_in_seconds = max(0.05, left)
    small = len(model.model.proto.variables) <= settings.one_worker_up_to
    solver.parameters.num_workers = 1 if small else settings.workers
    solver.parameters.random_seed = seed
    try:
        bound = machines_lower_bound(snapshot, jobs)
    except ValueError:
        bound = None
    callback = _StopAtBound(model, bound)
    status = solver.solve(model.model, callback)
    notes = [f"cpsat: {len(model.model.proto.variables)} variables on {len(model.machines)} candidate machines, "
             f"status {solver.status_name(status)}"]
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return finish("cpsat", snapshot, jobs, hint, started, "fallback", notes=notes, distance_cost=distance_cost)
    stopped = "optimal" if status == cp_model.OPTIMAL else "bound" if callback.met else "time"
    return finish("cpsat", snapshot, jobs, model.plan(solver), started, stopped, repair=True, notes=notes,
                  distance_cost=distance_cost)

