"""Grouping genetic algorithm (GGA, Falkenauer 1996) for batch placement, with DEAP.

Chromosome: per job (input order) the machine of every instance (``instance_order``), or ``None``
(job left out). The groups are the machines: the operators move whole machines' contents, never
single genes. Fitness is the batch objective of ``placement.batch.policies``, lexicographic through DEAP's
weights ``(+1, -1, -1)`` on ``(jobs placed, network cost, machines touched)``.

* Initial population: the online ``liquid`` policy placing the jobs one by one on the snapshot, the
  FFD plan, best-fit decodings of the jobs in GPU-descending and shuffled orders, and mutants of these.
* Crossover: copy parent A, inject a run of machines (with all their instances) from parent B, drop
  the injected jobs' other copies and A's instances on those machines, then complete the touched jobs
  by best fit (their old machines first) or drop them whole (gang), and best-fit insert left-out jobs.
* Mutation: empty one or more used machines, re-insert their instances elsewhere by best fit, then
  best-fit insert the left-out jobs in a random order.
* Local search (Falkenauer's dominance spirit): move every instance of the least-filled used machine
  into the other used machines; kept only if all fit and the network cost does not grow.
* Stops at the time limit, after ``stall_generations`` without a better best, at ``max_generations``,
  or when the best meets the lower bound (``placement.batch.bounds.meets_bound``).

Speed: the chromosome covers only candidate machines (those the seeds use plus the ``extra_candidates``
fullest machines that fit each kind of task). Each individual keeps its decoded state (:class:`Packing`):
per machine the batch's usage (whole GPUs, milli-GPUs, milli-cores, MiB) and instances. A machine with
only whole-GPU or GPU-less instances is checked by sums; one with GPU shares by replaying ``take``'s
rules (whole GPUs lowest index first, a share on the fullest GPU that fits) in plan order, so the
decoded plan never needs repair. Same seed, same result whenever the run does not stop on time.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from deap import base, creator, tools

from placement.batch.bounds import machines_lower_bound, meets_bound
from placement.batch.ffd import ffd_order, ffd_plan, liquid_plan
from placement.batch.gga_packing import GgaSettings, Packing, Pool, candidate_machines
from placement.batch.policies import BatchResult, PlanEntry, check_batch, finish
from placement.model.demand import Job
from placement.model.snapshot import ClusterSnapshot
from placement.model.topology import DEFAULT_DISTANCE_COST

if not hasattr(creator, "GgaFitness"):
    creator.create("GgaFitness", base.Fitness, weights=(1.0, -1.0, -1.0))
    creator.create("GgaIndividual", list, fitness=creator.GgaFitness)


def _tournament(population: list[Any], k: int, rng: random.Random, size: int) -> list[Any]:
    picks = []
    for _ in range(k):
        entrants = [population[rng.randrange(len(population))] for _ in range(size)]
        picks.append(max(entrants, key=lambda ind: ind.fitness))
    return picks


def _evaluate(packing: Packing) -> Any:
    individual = creator.GgaIndividual(packing.genes())
    individual.packing = packing
    individual.fitness.values = packing.objective()
    return individual


def _crossover(a: Packing, b: Packing, rng: random.Random, share: float) -> Packing:
    child = a.copy()
    used_b = sorted(b.items)
    if not used_b:
        return child
    count = rng.randint(1, max(1, int(len(used_b) * share)))
    start = rng.randrange(len(used_b))
    section = set(used_b[start:start + count])
    injected = sorted({j for m in section for j, _ in b.items[m]})
    displaced = sorted({j for m in section if m in child.items for j, _ in child.items[m]})
    kept = {j: list(child.where[j]) for j in injected}
    for j in injected:
        child.remove_job(j)
    for j in displaced:
        for k, m in enumerate(child.where[j]):
            if m in section:
                child.drop(j, k)
    child.settle()
    for j in injected:
        for k, m in enumerate(b.where[j]):
            if m in section and child.fits(j, k, m):
                child.add(j, k, m)
    for j in sorted(set(injected) | set(displaced)):
        old = kept.get(j)
        wanted = [m if m is not None and m not in section else None for m in old] if old else None
        child.complete(j, wanted)
    child.fill()
    return child


def _mutate(packing: Packing, rng: random.Random, machines: int) -> Packing:
    used = sorted(packing.items)
    if not used:
        return packing
    emptied = rng.sample(used, min(machines, len(used)))
    forbid = np.zeros(packing.pool.size, dtype=bool)
    forbid[emptied] = True
    jobs = sorted({j for m in emptied for j, _ in packing.items[m]})
    for j in jobs:
        for k, m in enumerate(packing.where[j]):
            if m is not None and forbid[m]:
                packing.drop(j, k)
    packing.dirty.clear()  # the emptied machines hold nothing now; no other machine changed
    rng.shuffle(jobs)
    for j in jobs:
        packing.complete(j, None, forbid, noisy=True)
    order = list(packing.pool.fill_order)
    rng.shuffle(order)  # random re-insertion order: lets small jobs take the room big ones held
    packing.fill(order, noisy=True)
    return packing


def _local_search(packing: Packing, tries: int) -> Packing:
    """Empty the least-filled used machine into the other used machines if that keeps the network cost."""
    tried: set[int] = set()
    for _ in range(tries):
        left = [m for m in sorted(packing.items) if m not in tried]
        if len(packing.items) < 2 or not left:
            break
        target = min(left, key=lambda m: (int(packing.used[1, m]), int(packing.count[m]), m))
        tried.add(target)
        jobs = sorted({j for j, _ in packing.items[target]})
        trial = packing.copy()
        forbid = np.ones(packing.pool.size, dtype=bool)
        forbid[[m for m in trial.items if m != target]] = False
        for j in jobs:
            for k, m in enumerate(trial.where[j]):
                if m == target:
                    trial.drop(j, k)
        trial.dirty.clear()
        moved = all([trial.complete(j, None, forbid) for j in jobs])
        cost = sum(trial.network(j) for j in jobs) - sum(packing.network(j) for j in jobs)
        if moved and cost <= 1e-9:
            packing = trial
    return packing


def _toolbox(settings: GgaSettings, rng: random.Random) -> base.Toolbox:
    toolbox = base.Toolbox()
    toolbox.register("select", _tournament, rng=rng, size=settings.tournament)
    toolbox.register("mate", _crossover, rng=rng, share=settings.inject_share)
    toolbox.register("mutate", _mutate, rng=rng, machines=settings.mutation_machines)
    toolbox.register("improve", _local_search, tries=settings.local_search_tries)
    toolbox.register("evaluate", _evaluate)
    return toolbox


def _initial(pool: Pool, plans: Sequence[Sequence[PlanEntry]], settings: GgaSettings, rng: random.Random,
             toolbox: base.Toolbox) -> list[Any]:
    seeds = [pool.load(plan) for plan in plans]
    by_size = Packing(pool)
    by_size.fill()
    seeds.append(by_size)
    shuffled = Packing(pool)
    order = list(range(len(pool.jobs)))
    rng.shuffle(order)
    shuffled.fill(order, noisy=True)
    seeds.append(shuffled)
    population = [toolbox.evaluate(s) for s in seeds]
    while len(population) < settings.population:
        parent = population[len(population) % len(seeds)].packing.copy()
        population.append(toolbox.evaluate(toolbox.mutate(parent)))
    return population


def _stop(best: Any, stall: int, generation: int, jobs: int, bound: int | None, settings: GgaSettings) -> str:
    """Why to stop now ("" to go on; the time limit is checked by the caller)."""
    placed, network, machines = best.fitness.values
    if meets_bound(int(placed), jobs, network, int(machines), bound):
        return "bound"
    if stall >= settings.stall_generations:
        return "stall"
    if settings.max_generations is not None and generation >= settings.max_generations:
        return "generations"
    return ""


def _evolve(population: list[Any], toolbox: base.Toolbox, settings: GgaSettings, rng: random.Random,
            deadline: float, jobs: int, bound: int | None) -> tuple[Any, str, int]:
    """Generations of (mu + lambda) with elitism until a stop; returns the best, why it stopped, generations."""
    best, stall, generation = tools.selBest(population, 1)[0], 0, 0
    while not (stopped := _stop(best, stall, generation, jobs, bound, settings)):
        if time.perf_counter() >= deadline:
            return best, "time", generation
        offspring = []
        for _ in range(settings.offspring):
            a, b = toolbox.select(population, 2)
            child = toolbox.mate(a.packing, b.packing)
            if rng.random() < settings.mutation_rate:
                child = toolbox.mutate(child)
            offspring.append(toolbox.evaluate(toolbox.improve(child)))
            if time.perf_counter() >= deadline:
                break
        population = tools.selBest(population + offspring, settings.population)
        generation += 1
        better = population[0].fitness > best.fitness
        best, stall = (population[0], 0) if better else (best, stall + 1)
    return best, stopped, generation


def place_gga(snapshot: ClusterSnapshot, jobs: Sequence[Job], time_limit_s: float = 1.0, seed: int = 0,
              settings: GgaSettings | None = None,
              distance_cost: Sequence[float] = DEFAULT_DISTANCE_COST) -> BatchResult:
    """GGA batch placement (see module docstring)."""
    started = time.perf_counter()
    check_batch(snapshot, jobs)
    settings = settings or GgaSettings()
    rng, generator = random.Random(seed), np.random.default_rng(seed)
    plans = [liquid_plan(snapshot, jobs, started + time_limit_s * settings.seed_time_share),
             ffd_plan(snapshot, jobs)]
    pool = Pool(snapshot, jobs, candidate_machines(snapshot, jobs, plans, settings), distance_cost, generator,
                settings.noise, ffd_order(jobs))
    toolbox = _toolbox(settings, rng)
    population = _initial(pool, plans, settings, rng, toolbox)
    try:
        bound = machines_lower_bound(snapshot, jobs)
    except ValueError:  # some job cannot fit at all: the bound cannot be met
        bound = None
    deadline = started + time_limit_s - min(time_limit_s * settings.finish_time_share, settings.finish_max_s)
    best, stopped, generations = _evolve(population, toolbox, settings, rng, deadline, len(jobs), bound)
    notes = (f"gga: {generations} generations, {pool.size} candidate machines",)
    return finish("gga", snapshot, jobs, best.packing.plan(), started, stopped, repair=True, notes=notes,
                  distance_cost=distance_cost)
