"""The online policies, registered by name. Each scores candidate machines; lower is better.

* ``liquid`` (default) - Liquid's network-aware best fit: w_network x network-cost increment
  (``placement.network``; with a speed model in the config, the measured seconds lost to spread of
  ``placement.spread_cost`` for the jobs it knows) + w_load x load term (workers pack onto busy
  machines: 1 - allocated share; parameter servers spread: allocated share) + a GPU-type term + a
  best-fit tie-break (fewest free whole GPUs left). The type term, for a job of a class the speed model
  knows, is w_network x the measured seconds lost per hour on the machine's type
  (``placement.type_cost``); for any other job that does not ask for a GPU type it is w_scarce x the
  tier of the machine's GPU (keeps scarce high-end GPUs for jobs that require them).
* ``first-fit`` - the first machine, in cluster order, that fits.
* ``pack`` - the PAI paper's reserving-and-packing: jobs of at least ``big_job_gpus`` GPUs go to the
  highest-tier machines, smaller ones to the lowest tier; within a tier, the busiest machine.
* ``balance`` - the PAI paper's load balancing: the least allocated machine.
* ``random`` - a uniformly random machine that fits (seeded by ``seed`` and the job id).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import numpy as np

from placement.decision import Decision
from placement.demand import Job, Role
from placement.online import (
    Chooser,
    Fills,
    FloatArray,
    PlacementConfig,
    Step,
    machine_scarcity,
    machine_tiers,
    never_fills,
    place_greedy,
)
from placement.snapshot import ClusterSnapshot
from placement.speed import NO_PROFILES
from placement.spread_cost import spread_cost
from placement.type_cost import type_cost

EPSILON = 1e-6


def _liquid(step: Step) -> FloatArray:
    c = step.config
    task = step.job.tasks[step.task_index]
    share = step.working.gpu_allocated_share()
    load = share if task.role is Role.PS and step.job.has_ps else 1.0 - share
    typed = type_cost(c.speed, step.working.layout, step.job.workload_class) \
        if c.speed is not None and task.gpu > 0 else None
    scarce = machine_scarcity(c, step.working.layout) if task.gpu > 0 and not task.gpu_types and typed is None \
        else 0.0
    fit = EPSILON * step.candidates.free_whole
    measured = spread_cost(c.speed or NO_PROFILES, step.network, step.working, step.need) \
        if c.speed is not None or step.job.sync_curve is not None else None
    network = step.network.increment(step.task_index) if measured is None else measured
    result: FloatArray = c.w_network * network + c.w_load * load + c.w_scarce * scarce + fit
    if typed is not None:
        result = result + c.w_network * typed
    return result


def _first_fit(step: Step) -> FloatArray:
    return np.zeros(step.working.n_machines)


def _pack(step: Step) -> FloatArray:
    layout = step.working.layout
    tier = machine_tiers(step.config, layout)
    big = step.job.gpus >= step.config.big_job_gpus
    busy = 1.0 - step.working.gpu_allocated_share()
    result: FloatArray = (-tier if big else tier) * 10.0 + busy
    return result


def _balance(step: Step) -> FloatArray:
    return step.working.gpu_allocated_share()


def _random(step: Step) -> FloatArray:
    seed = zlib.crc32(f"{step.config.seed}:{step.job.job_id}:{len(step.placed)}".encode())
    return np.random.default_rng(seed).random(step.working.n_machines)


CHOOSERS: dict[str, Chooser] = {"liquid": _liquid, "first-fit": _first_fit, "pack": _pack, "balance": _balance,
                                "random": _random}


def _always(job: Job, task_index: int) -> bool:
    return True


def _liquid_fills(job: Job, task_index: int) -> bool:
    """Liquid packs workers (fill) and spreads parameter servers (rescore after each)."""
    return not (job.has_ps and job.tasks[task_index].role is Role.PS)


FILLS: dict[str, Fills] = {"liquid": _liquid_fills, "first-fit": _always, "pack": _always}
"""Packing policies: a chosen machine takes further identical instances while it has room."""
OnlinePolicy = Callable[[ClusterSnapshot, Job], Decision]
"""Decides one job on a snapshot; an allocation it returns has passed the feasibility checker on that
snapshot (:func:`placement.online.place_greedy` raises ``RuntimeError`` otherwise)."""


def online_policy(name: str, config: PlacementConfig | None = None, explain: bool = True) -> OnlinePolicy:
    """The online policy called ``name``; ``KeyError`` naming the known ones otherwise.

    ``explain=False``: no reasons and no empty-cluster verdict for jobs that do not fit (faster).
    """
    if name not in CHOOSERS:
        raise KeyError(f"unknown placement policy {name!r}; known: {', '.join(CHOOSERS)}")
    chooser, settings = CHOOSERS[name], config or PlacementConfig()

    def place(snapshot: ClusterSnapshot, job: Job) -> Decision:
        return place_greedy(snapshot, job, name, chooser, settings, explain, FILLS.get(name, never_fills))

    return place
