"""Turn a real trace into simulator jobs with duration estimates attached (the ML side of replay).

Each canonical row becomes one job of ``instances`` identical worker instances: per instance the
requested GPUs (a share below 1; above 1 rounded up to whole GPUs), CPU cores and memory. On the real
PAI cluster a job that ran on T4, P100 or V100 GPUs is constrained to that type (V100 also to
V100M32); other jobs may use any GPU. On a single big node nothing is constrained.

Estimates attached to every job (seconds; NaN where the estimator has no opinion):

* ``user`` / ``group`` / ``group-gpu`` - the PAI paper's SJU / SJG / SJGG: the mean duration of the
  user's / group+user's / group+user+GPU's earlier jobs that **finished before this submission**,
  falling back to the coarser key;
* ``group-gpu-median`` - SJGG's chain with the history median instead of the mean (for comparison);
* ``model`` - a registered bundle's expected duration (its P50 for a bundle that has none) on the same
  causal features, and ``model-p50`` - its P50;
* ``alibaba-group-gpu`` - the trace's own ``group_gpu_dur`` (in-sample: includes the job itself).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from placement.model.demand import Job, Role, Task
from placement.model.gpu_types import CPU_ONLY
from placement.sim.jobs import SimJob
from training.features.cache import cached_features
from training.features.rule import rolling_errors, scale_at
from training.features.targets import target_spec
from training.performance.workload_class import workload_class

if TYPE_CHECKING:  # the model family imports LightGBM and scikit-learn: only when a model is replayed
    from models.calibrated import CalibratedEstimator

CONSTRAINED = {"T4": frozenset({"T4"}), "P100": frozenset({"P100"}), "V100": frozenset({"V100", "V100M32"})}
CHAINS = {"user": ("user",), "group": ("group_user", "user"), "group-gpu": ("group_user_gpu", "group_user", "user")}


def causal_estimates(table: pd.DataFrame, source: str, model: CalibratedEstimator | None,
                     cache: Path | None = None) -> pd.DataFrame:
    """Duration estimates per row of ``table`` (columns ``user``, ``group``, ``group-gpu``, ``model``...); the
    causal features they come from kept in ``cache`` (``training.features.cache``) where given."""
    features = cached_features(table, target_spec(source, "duration"), cache)
    out = pd.DataFrame(index=table.index)
    for name, chain in CHAINS.items():
        out[name] = _first_along(features, chain, "mean")
    out["group-gpu-median"] = _first_along(features, CHAINS["group-gpu"], "median")
    if model is not None:
        frame = features.reindex(columns=model.feature_names_)
        predicted = model.predict(frame)
        out["model"] = predicted.mean if predicted.mean is not None else predicted.p50
        out["model-p50"] = predicted.p50
    if "ref_group_gpu_dur_s" in table:
        out["alibaba-group-gpu"] = table["ref_group_gpu_dur_s"].to_numpy(dtype=float)
    return out


def causal_p90(submit_s: Sequence[float], duration_s: Sequence[float], p50_s: Sequence[float]) -> np.ndarray:
    """Per job, a P90 for the estimates ``p50_s`` from how wrong they were on the jobs that finished before its
    submission (submit + duration, on the same clock): ``(1 + p50) x exp(q) - 1`` with ``q`` the 90th
    percentile of ln(1 + real) - ln(1 + estimate) over the last ``ERROR_WINDOW`` of them (the history rule's
    conformal band, ``training.features.rule``), never below the P50; NaN before ``MIN_ERRORS`` have
    finished or where the P50 is unknown."""
    submit, duration, p50 = (np.asarray(v, dtype=float) for v in (submit_s, duration_s, p50_s))
    frame = pd.DataFrame({"end_time_s": submit + duration, "duration_s": duration, "censored": False,
                          "submit_time_s": submit})
    ends, rolling = rolling_errors(frame, "duration_s", p50)
    q = scale_at(submit, ends, rolling)
    p90: np.ndarray = np.maximum(np.expm1(np.log1p(np.maximum(p50, 0.0)) + q), p50)
    return p90


def _first_along(features: pd.DataFrame, chain: tuple[str, ...], stat: str) -> np.ndarray:
    """Per row, the first history ``stat`` available along ``chain`` (NaN where none is)."""
    value = np.full(len(features), np.nan)
    for key in chain:
        value = np.where(np.isnan(value), features[f"hist_{key}_{stat}"].to_numpy(dtype=float), value)
    return value


def sim_jobs(table: pd.DataFrame, estimates: pd.DataFrame, constrain_types: bool,
             arrivals_per_min: float | None = None, class_seed: int = 0) -> list[SimJob]:
    """Simulator jobs in submission order; with ``arrivals_per_min`` they arrive at that fixed rate.
    ``class_seed`` seeds the workload-class rule (``training.performance.workload_class``)."""
    rows = table.assign(_order=table["submit_time_s"]).sort_values(["_order", "job_id"], kind="stable")
    first = float(rows["submit_time_s"].min())
    aligned = estimates.reindex(rows.index)
    values = {n: aligned[n].to_numpy(dtype=float) for n in aligned.columns}
    jobs: list[SimJob] = []
    for position, row in enumerate(rows.to_dict("records")):  # plain dicts: a Series a row costs ten times as much
        submit = position * 60.0 / arrivals_per_min if arrivals_per_min else float(row["submit_time_s"]) - first
        job, reference = _with_speed_keys(row, _job(row, constrain_types), class_seed)
        jobs.append(SimJob(job, str(row["user"]) if pd.notna(row["user"]) else "-", submit,
                           float(row["duration_s"]),
                           MappingProxyType({n: float(v[position]) for n, v in values.items()}), reference))
    return jobs


def _with_speed_keys(row: Mapping[Hashable, Any], job: Job, seed: int) -> tuple[Job, str]:
    """The job with its workload class (``training.performance.workload_class``), and the GPU type it ran on."""
    task = job.tasks[0]
    group = next((str(row[k]) for k in ("group", "user") if k in row and pd.notna(row[k])), job.job_id)
    ran_on = row.get("assigned_gpu_type")
    reference = str(ran_on) if pd.notna(ran_on) and str(ran_on) != CPU_ONLY and task.gpu > 0 else ""
    return replace(job, workload_class=workload_class(task.gpu, task.instances, job.has_ps, group, seed)), reference


def _job(row: Mapping[Hashable, Any], constrain_types: bool) -> Job:
    gpu = float(row["req_gpu"]) if pd.notna(row["req_gpu"]) else 0.0
    gpu = float(math.ceil(gpu)) if gpu > 1 else gpu
    gpu_type = row["assigned_gpu_type"]
    types = CONSTRAINED.get(str(gpu_type), frozenset()) if constrain_types and gpu > 0 else frozenset()
    task = Task(Role.WORKER, int(row["instances"]), gpu=gpu, cpu_cores=_or_zero(float(row["req_cpu_cores"])),
                mem_gib=_or_zero(float(row["req_mem_gib"])), gpu_types=types)
    return Job(str(row["job_id"]), (task,), duration_s=float(row["duration_s"]))


def rest_bodies(table: pd.DataFrame, constrain_types: bool = True) -> list[tuple[float, float, dict[str, Any]]]:
    """Rows of ``table`` as ``(submit time, duration, body of POST /v1/place)``, in the table's order: the
    same one-task job as :func:`sim_jobs` builds, with who submitted it (user, group, workload)."""
    found = []
    for row in table.to_dict("records"):
        job = _job(row, constrain_types)
        tasks = [{"role": t.role.value, "instances": t.instances, "gpu": t.gpu, "cpu_cores": t.cpu_cores,
                  "mem_gib": t.mem_gib, "gpu_types": sorted(t.gpu_types)} for t in job.tasks]
        who = {k: str(row[k]) for k in ("user", "group", "workload") if pd.notna(row[k])}
        found.append((float(row["submit_time_s"]), float(row["duration_s"]), {"job_id": job.job_id, **who,
                                                                                "tasks": tasks}))
    return found


def _or_zero(value: float) -> float:
    return 0.0 if math.isnan(value) else value
