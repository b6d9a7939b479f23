"""What the quick start compares the service with, and how both sides are judged.

* The cluster (:func:`cluster_share`): the replayed jobs are too few to fill the PAI cluster at any pace
  (the default 1,000 ask for 1,499 GPUs in all, PAI has 6,742), so they run on a share of it: every k-th
  machine of each GPU type, k chosen so that the share has about as many GPUs as the jobs' peak demand at
  their original pace (:func:`peak_demand`, :func:`share_for`; at that pace the share could start each on
  arrival, GPU types and CPUs aside).
* The pace (:func:`queueing_rate`): jobs arrive evenly in submission order at the slowest rate at which
  their GPU demand, had each started on arrival, would exceed the cluster's GPUs over at least half of the
  time they arrive (:func:`over_share`). It follows from the jobs' GPUs and real durations and the
  cluster's GPUs alone, not from a figure tuned on this trace: demand over capacity for a while, so a
  queue builds and drains.
* The baseline (:func:`baseline`): the same jobs (those the service accepted, their demand converted as
  the service converts it), at the same arrivals on the same cluster, through the replay simulator with a
  FIFO queue (a job that fits starts, even past an earlier one that does not) and first-fit placement,
  each job running for its real duration.
* The figures (:func:`figures`): from each job's submit, start and end on the trace's clock, by one
  function for both sides: JCT = end - submit = wait + run time, as ``gpuplace simulate`` has it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from placement import Cluster, SimJob, build_cluster, queue_policy, simulate
from service.codec import Json, cluster_to_json
from service.http.schemas import JobIn

SHARE_OVER = 0.5
"""The share of the arrivals' span over which demand exceeds the cluster's GPUs at the chosen pace."""
MAX_RATE_PER_MIN = 6000.0
"""The fastest pace tried: 100 arrivals a second (faster is a batch, not a stream)."""


@dataclass(frozen=True)
class Arrival:
    """A job of the replay: when it is submitted (s on the trace's clock), how long it really ran, and its
    request body."""

    submit_s: float
    duration_s: float
    body: dict[str, Any]


@dataclass(frozen=True)
class JobRun:
    """A job as one side ran it, on the trace's clock; ``start_s`` ``None``: it never started."""

    job_id: str
    submit_s: float
    gpus: float
    start_s: float | None = None
    end_s: float | None = None


@dataclass(frozen=True)
class Figures:
    jobs: int
    finished: int
    jct_mean_s: float
    jct_p95_s: float
    wait_mean_s: float
    waited: int
    """Jobs that did not start on arrival."""
    idle_gpu_h: float
    """GPU-hours free while at least one job (that started at some point) waited."""

    @property
    def never_started(self) -> int:
        return self.jobs - self.finished


def sim_job(arrival: Arrival) -> SimJob:
    """The arrival's job as the service places it (``JobIn.to_job``: the same conversion of the body)."""
    body = JobIn.model_validate(arrival.body)
    return SimJob(body.to_job(), body.user or "-", arrival.submit_s, arrival.duration_s)


def job_gpus(arrival: Arrival) -> float:
    return sim_job(arrival).job.gpus


def baseline(cluster: Cluster, arrivals: Sequence[Arrival]) -> list[JobRun]:
    """FIFO with first-fit on ``cluster``: every job of ``arrivals`` at its time, for its real duration."""
    jobs = [sim_job(a) for a in arrivals]
    result = simulate(cluster, jobs, "first-fit", queue_policy("fifo"))
    return [JobRun(r.job_id, r.submit_s, r.gpus, r.start_s, r.end_s) for r in result.records]


def figures(runs: Sequence[JobRun], gpus: float) -> Figures:
    """Mean and p95 JCT, mean wait, and the GPU-hours idle while jobs waited, over the jobs that started
    (a job that never started has no JCT, and its wait would count capacity it could never use)."""
    started = [r for r in runs if r.start_s is not None and r.end_s is not None]
    if not started:
        return Figures(len(runs), 0, math.nan, math.nan, math.nan, 0, 0.0)
    submit = np.array([r.submit_s for r in started])
    start = np.array([r.start_s for r in started], dtype=float)
    end = np.array([r.end_s for r in started], dtype=float)
    jct, wait = end - submit, start - submit
    return Figures(len(runs), len(started), float(jct.mean()), float(np.percentile(jct, 95)), float(wait.mean()),
                   int((wait > 0).sum()), _idle_gpu_h(submit, start, end, np.array([r.gpus for r in started]), gpus))


def _idle_gpu_h(submit: np.ndarray, start: np.ndarray, end: np.ndarray, job_gpus: np.ndarray, gpus: float) -> float:
    times = np.concatenate([submit, start, start, end])
    zeros, ones = np.zeros(len(submit)), np.ones(len(submit))
    waiting_step = np.concatenate([ones, -ones, zeros, zeros])
    allocated_step = np.concatenate([zeros, zeros, job_gpus, -job_gpus])
    order = np.argsort(times, kind="stable")
    times = times[order]
    waiting, allocated = np.cumsum(waiting_step[order]), np.cumsum(allocated_step[order])
    last = np.r_[np.flatnonzero(np.diff(times)), len(times) - 1]  # the state once every change at a time is in
    at, waiting, allocated = times[last], waiting[last], allocated[last]
    free = np.clip(gpus - allocated[:-1], 0.0, None)
    return float((free * np.diff(at))[waiting[:-1] > 0.5].sum() / 3600.0)


def peak_demand(submit_s: np.ndarray, duration_s: np.ndarray, gpus: np.ndarray) -> float:
    """The most GPUs the jobs would hold at once, each started on arrival."""
    _, demand = _demand(submit_s, duration_s, gpus)
    return float(demand.max()) if len(demand) else 0.0


def cluster_share(cluster: Cluster, every: int) -> Cluster:
    """Every ``every``-th machine of each GPU type, in the cluster's order (the first of each type kept),
    its racks and domains by the default rule."""
    if every <= 1:
        return cluster
    seen: dict[str, int] = {}
    kept = []
    for machine in cluster.machines:
        index = seen.get(machine.gpu_type, 0)
        seen[machine.gpu_type] = index + 1
        if index % every == 0:
            kept.append(machine)
    return build_cluster(f"{cluster.name}-1-in-{every}", kept)


def cluster_spec(cluster: Cluster) -> Json:
    """``cluster`` as ``PUT /v1/cluster`` takes it: machines, racks and domains; a machine's GPU memory left
    out where it has none (CPU-only: the spec takes a positive amount or none, and none means the type's)."""
    spec = cluster_to_json(cluster)
    spec["machines"] = [{**m, "gpu_mem_gib": m["gpu_mem_gib"] or None} for m in spec["machines"]]
    return spec


def share_for(cluster: Cluster, peak_gpus: float) -> int:
    """The ``every`` of :func:`cluster_share` whose share has about ``peak_gpus`` GPUs (at least as many
    where the machines allow)."""
    if peak_gpus <= 0:
        return 1
    return max(1, int(cluster.total_gpus // peak_gpus))


def over_share(duration_s: np.ndarray, gpus: np.ndarray, capacity: float, rate_per_min: float) -> float:
    """The share of the arrivals' span (first to last) during which the demand of jobs arriving evenly at
    ``rate_per_min`` and each started on arrival exceeds ``capacity`` GPUs."""
    submit = np.arange(len(duration_s)) * 60.0 / rate_per_min
    span = float(submit[-1]) if len(submit) else 0.0
    times, demand = _demand(submit, duration_s, gpus)
    if span <= 0:
        return float(demand.max() > capacity) if len(demand) else 0.0
    until = np.minimum(np.r_[times[1:], span], span)
    lasting = np.clip(until - np.minimum(times, span), 0.0, None)
    return float(lasting[demand > capacity].sum() / span)


def queueing_rate(duration_s: np.ndarray, gpus: np.ndarray, capacity: float, from_per_min: float) -> float:
    """The lowest even pace (arrivals a minute), from ``from_per_min`` up to :data:`MAX_RATE_PER_MIN`, at which
    :func:`over_share` reaches :data:`SHARE_OVER`; the fastest if none does (the jobs then never exceed
    the cluster, and no pace makes them queue)."""
    low, high = from_per_min, from_per_min
    while over_share(duration_s, gpus, capacity, high) < SHARE_OVER:
        if high >= MAX_RATE_PER_MIN:
            return MAX_RATE_PER_MIN
        low, high = high, min(high * 2, MAX_RATE_PER_MIN)
    if high == from_per_min:
        return high
    for _ in range(30):
        middle = math.sqrt(low * high)
        if over_share(duration_s, gpus, capacity, middle) >= SHARE_OVER:
            high = middle
        else:
            low = middle
    return high


def _demand(submit_s: np.ndarray, duration_s: np.ndarray, gpus: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The GPUs held from each time on (ends before starts at a tie), jobs started on arrival."""
    times = np.concatenate([submit_s + duration_s, submit_s])
    steps = np.concatenate([-gpus, gpus])
    order = np.lexsort((steps, times))
    times, demand = times[order], np.cumsum(steps[order])
    last = np.r_[np.flatnonzero(np.diff(times)), len(times) - 1] if len(times) else np.array([], dtype=int)
    return times[last], demand[last]
