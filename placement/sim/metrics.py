"""Metrics of a replay: job completion time, waiting, makespan, allocation and fragmentation.

* JCT = end - submit (s); wait = start - submit (s); over finished jobs: mean, median, p95.
* makespan = last end - first submit (s).
* GPU allocation = time-weighted mean of allocated GPUs / cluster GPUs between the first and last
  event.
* fragmentation = time-weighted mean of free GPUs / cluster GPUs over the periods when at least one
  job waits: capacity that is free but that no waiting job can use.
* slowdown of a job = JCT / max(duration, 1 s); per user the mean, then over users the mean and p95.
* GPU-hours = sum over finished jobs of GPUs x (end - start) / 3600; lost to type, spread and sharing
  = sum of GPUs x the job's seconds lost to each cause (``placement.sim.runtime``) / 3600.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import numpy as np

from placement.sim.engine import JobRecord, SimResult


def summarise(result: SimResult) -> dict[str, Any]:
    finished = [r for r in result.records if r.end_s is not None and r.start_s is not None]
    jct = np.array([r.end_s - r.submit_s for r in finished if r.end_s is not None])
    wait = np.array([r.start_s - r.submit_s for r in finished if r.start_s is not None])
    out: dict[str, Any] = {
        "jobs": len(result.records), "finished": len(finished),
        "never_fit": sum(r.never_fits for r in result.records),
        "unfinished": len(result.records) - len(finished) - sum(r.never_fits for r in result.records),
        "decisions": result.decisions,
    }
    if len(jct):
        out |= {"jct_mean_s": float(jct.mean()), "jct_median_s": float(np.median(jct)),
                "jct_p95_s": float(np.percentile(jct, 95)), "wait_mean_s": float(wait.mean()),
                "makespan_s": float(max(r.end_s for r in finished if r.end_s is not None)
                                    - min(r.submit_s for r in result.records))}
    out |= _gpu_hours(finished)
    out |= _time_weighted(result)
    out |= _slowdown(result)
    return out


def _time_weighted(result: SimResult) -> dict[str, float]:
    if len(result.samples) < 2 or result.total_gpus == 0:
        return {"gpu_allocation": 0.0, "fragmentation": 0.0}
    t = np.array([s[0] for s in result.samples])
    allocated = np.array([s[1] for s in result.samples])
    free = np.array([s[2] for s in result.samples])
    waiting = np.array([s[3] for s in result.samples]) > 0
    dt = np.diff(t)
    span = float(dt.sum()) or 1.0
    waiting_time = float(dt[waiting[:-1]].sum())
    return {
        "gpu_allocation": float((allocated[:-1] * dt).sum() / span / result.total_gpus),
        "fragmentation": float((free[:-1] * dt)[waiting[:-1]].sum() / max(waiting_time, 1e-9) / result.total_gpus)
        if waiting_time > 0 else 0.0,
        "waiting_time_share": waiting_time / span,
    }


def _slowdown(result: SimResult) -> dict[str, float]:
    per_user: dict[str, list[float]] = defaultdict(list)
    for r in result.records:
        if r.end_s is not None:
            per_user[r.user].append((r.end_s - r.submit_s) / max(r.duration_s, 1.0))
    means = np.array([np.mean(v) for v in per_user.values()])
    if not len(means):
        return {}
    return {"user_slowdown_mean": float(means.mean()), "user_slowdown_p95": float(np.percentile(means, 95))}


def _gpu_hours(finished: list[JobRecord]) -> dict[str, float]:
    def total(seconds: Callable[[JobRecord], float]) -> float:
        return sum(r.gpus * seconds(r) for r in finished) / 3600.0

    return {"gpu_hours": total(lambda r: (r.end_s or 0.0) - (r.start_s or 0.0)),
            "lost_type_gpu_h": total(lambda r: r.lost_type_s), "lost_spread_gpu_h": total(lambda r: r.lost_spread_s),
            "lost_share_gpu_h": total(lambda r: r.lost_share_s)}
