"""Replay sweeps: every (trace, seed, queue policy, placement policy) of a grid, one independent replay each.

A seed seeds everything random in a replay: the workload-class rule of the trace's jobs (which measured
workload a PAI job behaves like, and so its speed under the measured runtime), the ``random`` placement's draws
and the batch solvers. The jobs of each (trace, seed) are built once; every replay is then a function of the
cluster, those jobs and names (:func:`training.replay.compare.replay`), which is what lets a runner
(:mod:`training.replay.runners`) hand each one to a Dask worker. The summaries are those of ``gpuplace simulate
compare`` (``training.replay.compare.run_summary``), per run.

Jobs carry the duration estimates only where a queue orders by one (``sjf-<estimate>``): the causal features
behind them take seconds per trace and a seed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from itertools import product
from pathlib import Path
from typing import TYPE_CHECKING, Any

from placement.batch.policies import BATCH_POLICIES
from placement.model.cluster import Cluster
from placement.model.speed import SpeedModel
from placement.online.greedy import PlacementConfig
from placement.sim.engine import BatchWindow
from placement.sim.jobs import SimJob, without_sharing
from training.performance.cache import shipped_speed_model
from training.replay.compare import cluster_for, openb_jobs, pai_jobs, placement_config, replay, run_summary
from training.replay.runners import InProcess, Runner

if TYPE_CHECKING:  # the model family imports LightGBM and scikit-learn: only when a model is replayed
    from models.calibrated import CalibratedEstimator

TRACES = ("pai2020-jobs", "openb2023")


@dataclass(frozen=True)
class SweepRun:
    trace: str
    seed: int
    queue: str
    placement: str

    @property
    def name(self) -> str:
        return f"{self.trace}/seed{self.seed}/{self.queue}/{self.placement}"


@dataclass(frozen=True)
class SweepSetup:
    """What every run of a sweep shares: the cluster, how many jobs, how they arrive and run."""

    cluster: str = "pai"
    gpus: int = 6500
    jobs: int | None = 20000
    rate: float | None = None
    """Arrivals per minute in trace order; ``None``: the trace's own times."""
    runtime: str = "trace"
    network_term: str = "bandwidth"
    sharing: bool = True
    window: BatchWindow = field(default_factory=lambda: BatchWindow("ffd"))
    """The batch windows' settings (its policy and seed are each run's)."""


def grid(traces: Sequence[str], seeds: Sequence[int], queues: Sequence[str],
         placements: Sequence[str]) -> list[SweepRun]:
    """Every combination, trace-major (runs that share jobs are next to each other)."""
    return [SweepRun(*combination) for combination in product(traces, seeds, queues, placements)]


def reads_estimates(queue: str) -> bool:
    """Whether the queue policy ``queue`` orders by a job's estimate (``placement.sim.queues``)."""
    return queue.startswith("sjf-") and queue != "sjf-oracle"


def sweep(runs: Sequence[SweepRun], setup: SweepSetup, runner: Runner | None = None,
          model: CalibratedEstimator | None = None, speed: SpeedModel | None = None,
          done: Callable[[SweepRun], None] | None = None, cache: Path | None = None) -> dict[str, dict[str, Any]]:
    """The summary of every run, by :attr:`SweepRun.name`, in the order of ``runs``. ``model``: what ``sjf-model``
    orders by; ``speed``: the job-performance model (fitted on the shipped profiles where the runtime or the
    network term is ``measured`` and none is given, kept in ``cache`` for the next run: ``training.performance.cache``);
    ``done`` hears of each run as it ends."""
    for run in runs:
        if run.trace not in TRACES:
            raise KeyError(f"sweep run {run.name}: unknown trace {run.trace!r}; known: {', '.join(TRACES)}")
    runner = runner or InProcess()
    if speed is None and "measured" in (setup.runtime, setup.network_term):
        speed = shipped_speed_model(cache)
    cluster, constrain = cluster_for(setup.cluster, setup.gpus)
    estimates = any(reads_estimates(run.queue) for run in runs)
    shared_cluster = runner.share(cluster, "cluster")
    shared_speed = runner.share(speed, "speed") if speed is not None else None
    shared_model = runner.share(model, "model") if model is not None else None
    jobs = {(trace, seed): runner.submit(trace_jobs, trace, seed, constrain, setup, estimates, shared_model,
                                         name=f"jobs-{trace}-seed{seed}")
            for trace, seed in dict.fromkeys((run.trace, run.seed) for run in runs)}
    handles = [runner.submit(replay_run, shared_cluster, jobs[run.trace, run.seed], run, setup, shared_speed,
                             name=f"replay-{run.trace}-seed{run.seed}-{run.queue}-{run.placement}") for run in runs]
    summaries = runner.results(handles, (lambda i: done(runs[i])) if done else None)
    return {run.name: summary for run, summary in zip(runs, summaries, strict=True)}


def trace_jobs(trace: str, seed: int, constrain: bool, setup: SweepSetup, estimates: bool,
               model: CalibratedEstimator | None) -> list[SimJob]:
    """The jobs of ``trace`` for the runs of ``seed``."""
    if trace == "openb2023":  # openb pods have no workload class: the seed acts on the placement alone
        jobs = openb_jobs(setup.jobs, setup.rate)
    else:
        jobs = pai_jobs(model, constrain, setup.jobs, setup.rate, class_seed=seed, estimates=estimates)
    return jobs if setup.sharing else without_sharing(jobs)


def replay_run(cluster: Cluster, jobs: Sequence[SimJob], run: SweepRun, setup: SweepSetup,
               speed: SpeedModel | None) -> dict[str, Any]:
    """The summary of one run."""
    config = replace(placement_config(setup.network_term, speed) or PlacementConfig(), seed=run.seed)
    window = replace(setup.window, policy=run.placement, seed=run.seed) if run.placement in BATCH_POLICIES else None
    return run_summary(replay(cluster, jobs, run.queue, run.placement, config, window, setup.runtime, speed), window)
