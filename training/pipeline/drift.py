"""Drift: the errors of recent predictions against the errors measured when the model was trained.

Each completed job the service placed carries the estimate it was placed with (and the model version
that made it) and what it really did. Per target:

* ``duration``: the job's duration estimate against its observed duration;
* usage targets (``gpu``, ``cpu``, ``mem``, ``gpu_mem``, ``bandwidth``): the task's estimate against
  the reported usage, for one-task jobs (a completion reports one usage per job).

Recent error is the mean absolute log error (MALE) of the point estimate and the share of jobs at or
under their P90, the same metrics training logged for that version on its holdout. A target drifts
when its recent MALE exceeds the training MALE by more than ``ratio_limit`` times, or its P90
coverage falls more than ``coverage_drop`` below the training coverage.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from training.pipeline.metrics import scores

USAGE_OF_TARGET = {"gpu": "gpu", "cpu": "cpu_cores", "mem": "mem_gib", "gpu_mem": "gpu_mem_gib",
                   "bandwidth": "net_gbps"}
RATIO_LIMIT = 1.25
COVERAGE_DROP = 0.10


@dataclass(frozen=True)
class Pair:
    target: str
    version: str
    point: float
    p90: float
    observed: float
    p50: float = math.nan
    """The estimate's median (NaN where the stored estimate has none)."""


def pairs(completed: Sequence[Mapping[str, Any]]) -> list[Pair]:
    """(estimate, observation) pairs of ``completed`` jobs, each a mapping with ``details`` (as stored at
    placement: ``estimate``, ``model_version``) and ``completion`` (``duration_s``, ``usage``)."""
    found: list[Pair] = []
    for job in completed:
        estimate, completion = job["details"].get("estimate"), job["completion"]
        if not estimate:
            continue
        version = str(job["details"].get("model_version", estimate.get("model_version", "?")))
        duration = estimate.get("duration_s")
        if duration:
            found.append(Pair("duration", version, float(duration["point"]), float(duration["p90"]),
                              float(completion["duration_s"]), _p50(duration)))
        tasks = estimate.get("tasks", [])
        if len(tasks) != 1:
            continue
        for target, key in USAGE_OF_TARGET.items():
            if tasks[0].get(target) and key in completion["usage"]:
                quantiles = tasks[0][target]
                found.append(Pair(target, version, float(quantiles["point"]), float(quantiles["p90"]),
                                  float(completion["usage"][key]), _p50(quantiles)))
    return found


def _p50(quantiles: Mapping[str, Any]) -> float:
    value = quantiles.get("p50")
    return math.nan if value is None else float(value)


def drift_report(found: Sequence[Pair], trained: Callable[[str], Mapping[str, float]],
                 ratio_limit: float = RATIO_LIMIT, coverage_drop: float = COVERAGE_DROP) -> dict[str, Any]:
    """Per (target, model version): recent metrics, the version's training metrics (``trained(version)``
    gives its logged metrics, e.g. ``duration.model.male``), and whether it drifted."""
    report: dict[str, Any] = {}
    for target, version in sorted({(p.target, p.version) for p in found}):
        chosen = [p for p in found if p.target == target and p.version == version]
        recent = scores(np.array([p.point for p in chosen]), np.array([p.p90 for p in chosen]),
                        np.array([p.observed for p in chosen]))
        logged = trained(version)
        train_male = logged.get(f"{target}.model.male")
        train_coverage = logged.get(f"{target}.model.p90_coverage")
        ratio = recent["male"] / train_male if train_male else None
        drop = train_coverage - recent["p90_coverage"] if train_coverage is not None else None
        drifted = None if ratio is None else bool(ratio > ratio_limit or (drop is not None and drop > coverage_drop))
        report[f"{target}@{version}"] = {
            "target": target, "model_version": version, "jobs": len(chosen), "recent_male": recent["male"],
            "recent_p90_coverage": recent["p90_coverage"], "train_male": train_male,
            "train_p90_coverage": train_coverage, "male_ratio": ratio, "drifted": drifted,
            "rolling_male": _rolling([p.point for p in chosen], [p.observed for p in chosen])}
    return report


def _rolling(point: Sequence[float], observed: Sequence[float], window: int = 50) -> list[float]:
    error = np.abs(np.log1p(np.maximum(point, 0.0)) - np.log1p(np.maximum(observed, 0.0)))
    if len(error) < window:
        return [float(np.mean(error))] if len(error) else []
    kernel = np.ones(window) / window
    return [float(v) for v in np.convolve(error, kernel, mode="valid")]


def plot_drift(report: Mapping[str, Any], path: Path) -> Path:
    """Training against recent MALE per target, and the rolling MALE of recent jobs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(report)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    xs = np.arange(len(keys))
    train = [report[k]["train_male"] if report[k]["train_male"] is not None else np.nan for k in keys]
    axes[0].bar(xs - 0.2, train, 0.4, label="at training (holdout)")
    axes[0].bar(xs + 0.2, [report[k]["recent_male"] for k in keys], 0.4, label="recent jobs")
    axes[0].set_xticks(xs, keys, fontsize=8)
    axes[0].set_title("mean absolute log error per target", fontsize=9)
    axes[0].set_xlabel("target")
    axes[0].set_ylabel("mean absolute log error (ln, no unit)")
    axes[0].legend(fontsize=8)
    for key in keys:
        axes[1].plot(report[key]["rolling_male"], label=key)
        if report[key]["train_male"] is not None:
            axes[1].axhline(report[key]["train_male"], linestyle="--", linewidth=1, color="grey")
    axes[1].set_title("rolling MALE of recent jobs (50 jobs; dashed: at training)", fontsize=9)
    axes[1].set_xlabel("completed jobs, oldest first (count)")
    axes[1].set_ylabel("rolling mean absolute log error (ln, no unit)")
    axes[1].legend(fontsize=8)
    jobs = max((int(report[k]["jobs"]) for k in keys), default=0)
    fig.suptitle(f"prediction drift: recent completed jobs (up to {jobs:,} per target) against the training holdout")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
