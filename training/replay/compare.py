"""Replay comparisons on real traces: which jobs, on which cluster, with which estimates and policies.

Clusters: ``pai`` (the real 1,897-machine PAI cluster, derived topology, jobs keep their GPU type),
``big-node`` (one machine of N GPUs with 23.22 CPU cores per GPU: the setting of the PAI trace's own
simulator; no GPU types), ``big-node-fluid`` (the same node as one pool of GPU and CPU capacity, as that
simulator counts it: shares of GPUs never fragment; ``placement.sim.engine``) and ``openb`` (the openb GPU
nodes). Jobs: by default the later 30% of the
PAI job table - the part no registered model was trained on - so ``sjf-model`` is judged out of
sample. Every run of a comparison replays exactly the same jobs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from placement.batch.policies import BATCH_POLICIES
from placement.model.cluster import Cluster, Machine, build_cluster
from placement.model.cluster_io import load_cluster
from placement.model.snapshot import Layout
from placement.model.speed import SpeedModel
from placement.online.greedy import PlacementConfig
from placement.sim.engine import BatchWindow, SimResult, simulate
from placement.sim.jobs import SimJob
from placement.sim.metrics import summarise
from placement.sim.queues import queue_policy
from placement.sim.runtime import MeasuredRuntime, Runtime
from training.ingest.sources import get_source
from training.performance.cache import shipped_speed_model
from training.replay.runners import Runner
from training.replay.trace_jobs import causal_estimates, sim_jobs

if TYPE_CHECKING:  # the model family imports LightGBM and scikit-learn: only when a model is replayed
    from models.calibrated import CalibratedEstimator

RuntimeFactory = Callable[[Sequence[SimJob], Layout], Runtime]
CPU_PER_GPU = 23.22
"""CPU cores per GPU of the big node (the PAI trace simulator's ratio)."""


FLUID = "big-node-fluid"
"""The big node replayed as one pool of capacity (``compare(..., fluid=True)``; no placement, so the
scheduling core's replays and sweeps, which place, do not take it)."""


def cluster_for(kind: str, gpus: int = 6500) -> tuple[Cluster, bool]:
    """The cluster called ``kind`` and whether jobs keep their GPU-type constraints on it."""
    if kind == "big-node":
        node = Machine("big-node", "ANY", gpus, gpus * CPU_PER_GPU, gpus * 64.0, gpu_mem_gib=16.0)
        return build_cluster(f"big-node-{gpus}", [node]), False
    if kind in ("pai", "openb", "openb-all"):
        return load_cluster(kind), kind == "pai"
    if kind == FLUID:  # a caller that replays the pool handles it before asking for a cluster
        raise KeyError(f"{FLUID!r} counts the big node as one pool of capacity, where nothing is placed; this replay "
                       f"places jobs: give big-node (the same node, GPU by GPU)")
    raise KeyError(f"unknown cluster {kind!r}; known: pai, big-node, openb, openb-all")


def pai_jobs(model: CalibratedEstimator | None, constrain: bool, limit: int | None, arrivals_per_min: float | None,
             holdout_share: float = 0.3, class_seed: int = 0, estimates: bool = True,
             cache: Path | None = None) -> list[SimJob]:
    """Later ``holdout_share`` of the shipped PAI job table (first ``limit`` of them), with estimates;
    ``class_seed`` seeds the workload-class rule. Without ``estimates`` the jobs carry none, and the causal
    features they come from are not built (for queues that order by no estimate); ``cache``: where the table and
    they are kept from one run to the next (``Source.load``, ``training.features.cache``)."""
    table = get_source("pai2020-jobs").load(cache=cache)
    order = np.argsort(table["submit_time_s"].to_numpy(), kind="stable")
    chosen = order[int(len(order) * (1 - holdout_share)):]
    chosen = chosen[:limit] if limit else chosen
    found = causal_estimates(table, "pai2020-jobs", model, cache) if estimates else pd.DataFrame(index=table.index)
    return sim_jobs(table.iloc[chosen], found.iloc[chosen], constrain, arrivals_per_min, class_seed)


def openb_jobs(limit: int | None, arrivals_per_min: float | None = None) -> list[SimJob]:
    """openb pods that ran (a duration; not censored), GPU-type constraints kept, at their creation times
    or at a fixed rate (a high rate fills the cluster, as the FGD paper's experiments do)."""
    table = get_source("openb2023").load()
    ran = table[table["duration_s"].notna() & ~table["censored"]].copy()
    ran["user"] = ran["qos"]
    ran["assigned_gpu_type"] = pd.NA
    ran = ran.iloc[:limit] if limit else ran
    jobs = sim_jobs(ran, pd.DataFrame(index=ran.index), constrain_types=False, arrivals_per_min=arrivals_per_min)
    types = {str(j): frozenset(str(t).split("|")) for j, t in zip(ran["job_id"], ran["req_gpu_type"], strict=True)
             if isinstance(t, str)}
    return [_with_types(j, types.get(j.job_id, frozenset())) for j in jobs]


def _with_types(job: SimJob, types: frozenset[str]) -> SimJob:
    if not types or job.job.gpus == 0:
        return job
    task = replace(job.job.tasks[0], gpu_types=types)
    return replace(job, job=replace(job.job, tasks=(task,)))


RUNTIMES = ("measured", "trace")


def runtime_factory(name: str, speed: SpeedModel | None = None) -> RuntimeFactory | None:
    """What makes the replay's runtime called ``name`` (``None``: the trace runtime); ``measured`` fits the
    job-performance model on the shipped profiles unless ``speed`` is given."""
    if name == "trace":
        return None
    if name != "measured":
        raise KeyError(f"unknown runtime {name!r}; known: {', '.join(RUNTIMES)}")
    model = speed if speed is not None else shipped_speed_model(None)

    def make(jobs: Sequence[SimJob], layout: Layout) -> Runtime:
        return MeasuredRuntime(jobs, layout, model)

    return make


NETWORK_TERMS = ("measured", "bandwidth")


def placement_config(network_term: str, speed: SpeedModel | None = None) -> PlacementConfig | None:
    """Liquid's network term: ``measured`` seconds lost to spread (fits the speed model unless given),
    or ``bandwidth`` x distance cost (the configuration's default)."""
    if network_term == "bandwidth":
        return None
    if network_term != "measured":
        raise KeyError(f"unknown network term {network_term!r}; known: {', '.join(NETWORK_TERMS)}")
    return PlacementConfig(speed=speed if speed is not None else shipped_speed_model(None))


def compare(cluster: Cluster, jobs: Sequence[SimJob], runs: Sequence[tuple[str, str]], out: Path,
            progress: Callable[[str, int], None] | None = None, window: BatchWindow | None = None,
            runtime: str = "trace", speed: SpeedModel | None = None,
            network_term: str = "bandwidth", runner: Runner | None = None, fluid: bool = False,
            cache: Path | None = None) -> dict[str, Any]:
    """Replay ``jobs`` once per (queue policy, placement policy); write summary JSON, per-job CSV, plots.

    A placement named after a batch policy (``gga``, ``cpsat``, ``ffd``) replays with batch windows
    (``window``'s settings, that policy) instead of online placement. ``runtime``: how long a started job
    runs (``trace`` or ``measured``, see ``placement.sim.runtime``); ``network_term``: Liquid's (see
    :func:`placement_config`). ``runner``: where the replays run (``training.replay.runners``; on Dask,
    ``progress`` hears of each run once, when it ends). ``fluid``: the cluster as one pool (the placement
    names nothing then, and every job runs for its trace duration). ``cache``: where the speed model fitted on the
    shipped profiles is kept for the next run (``training.performance.cache``), where ``speed`` is not given.
    """
    if fluid and (runtime != "trace" or any(p in BATCH_POLICIES for _, p in runs)):
        raise ValueError("a fluid cluster is replayed with the trace runtime and no batch placement")
    out.mkdir(parents=True, exist_ok=True)
    if speed is None and "measured" in (runtime, network_term):
        speed = shipped_speed_model(cache)
    make_runtime = runtime_factory(runtime, speed)
    config = placement_config(network_term, speed)
    results: dict[str, SimResult] = {}
    summary: dict[str, Any] = {"cluster": cluster.name + ("-fluid" if fluid else ""), "gpus": cluster.total_gpus,
                               "jobs": len(jobs),
                               "runtime": runtime, "network_term": network_term, "runs": {}}
    names = [f"{queue}/{placement}" for queue, placement in runs]
    batches = {name: replace(window or BatchWindow(), policy=placement) if placement in BATCH_POLICIES else None
               for name, (_, placement) in zip(names, runs, strict=True)}
    if runner is None:
        for name, (queue, placement) in zip(names, runs, strict=True):
            tick = (lambda n, label=name: progress(label, n)) if progress else None
            results[name] = simulate(cluster, jobs, "liquid" if batches[name] or fluid else placement,
                                     queue_policy(queue), config, progress=tick, batch=batches[name],
                                     runtime=make_runtime, fluid=fluid)
    else:
        shared = runner.share(cluster, "cluster"), runner.share(list(jobs), "jobs")
        handles = [runner.submit(replay, *shared, queue, placement, config, batches[name], runtime, speed, fluid,
                                 name=f"replay-{queue}-{placement}")
                   for name, (queue, placement) in zip(names, runs, strict=True)]
        results = dict(zip(names, runner.results(handles, lambda i: progress(names[i], len(jobs)) if progress
                                                 else None), strict=True))
    for name, (queue, placement) in zip(names, runs, strict=True):
        summary["runs"][name] = run_summary(results[name], batches[name])
        _records_csv(results[name], out / f"jobs-{queue}-{placement}.csv")
    summary["never_fit"] = [{"job_id": r.job_id, "reasons": list(r.reasons)}
                            for r in next(iter(results.values())).records if r.never_fits][:50]
    subject = f"{len(jobs):,} jobs on {cluster.name} ({runtime} runtime)"
    from training.replay.plots import allocation_over_time, jct_cdf  # matplotlib: once there is something to draw

    summary["plots"] = [str(jct_cdf(results, out / "jct_cdf.png", subject)),
                        str(allocation_over_time(results, out / "allocation.png", subject))]
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def replay(cluster: Cluster, jobs: Sequence[SimJob], queue: str, placement: str, config: PlacementConfig | None,
           window: BatchWindow | None, runtime: str, speed: SpeedModel | None, fluid: bool = False) -> SimResult:
    """One replay of :func:`compare` by names and settings alone (what a task on another machine is sent):
    ``window`` set for a batch placement, ``speed`` for the measured runtime, ``fluid`` for one pool."""
    return simulate(cluster, jobs, "liquid" if window or fluid else placement, queue_policy(queue), config,
                    batch=window, runtime=runtime_factory(runtime, speed), fluid=fluid)


def run_summary(result: SimResult, window: BatchWindow | None) -> dict[str, Any]:
    """A run's entry in ``summary.json``: the replay's metrics, and a batch placement's windows."""
    return _finite(summarise(result)) | (
        {"batch_window": asdict(window), "batch_stops": dict(result.batch_stops)} if window else {})


def _records_csv(result: SimResult, path: Path) -> None:
    pd.DataFrame([r.__dict__ for r in result.records]).drop(columns=["reasons"]).to_csv(path, index=False)


def _finite(values: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in values.items()}
