"""Completed jobs reported to the service, as rows of the canonical job table (source ``feedback``).

The service stores, for every job it placed, the job's description as the estimator saw it (one record
per task: user, group, workload, requests...) and, when the job completes, its observed duration and
usage. Each completed job becomes one canonical row per task: submitted and started when it was
placed, ended ``duration_s`` later, status ``succeeded``, usage per instance in the ``obs_*`` columns.

Times are the service's wall clock (Unix seconds): feedback rows sort after every trace row, so the
most recent holdout window of a retrain is made of them once there are enough.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import pandas as pd

from training.ingest.schema import conform, empty_table

SOURCE = "feedback"
USAGE_COLUMNS = {"gpu": "obs_gpu_util_share", "gpu_mem_gib": "obs_gpu_mem_max_gib", "cpu_cores": "obs_cpu_cores",
                 "mem_gib": "obs_mem_max_gib", "net_gbps": "obs_net_gbps"}
"""Usage keys a completion may report (per instance) and the canonical column each fills."""
_RECORD_COLUMNS = ("user", "group", "workload", "app", "qos", "hyperparams", "role", "instances", "req_gpu",
                   "req_cpu_cores", "req_mem_gib", "req_gpu_mem_gib", "req_net_gbps", "req_gpu_type")


class CompletedRow(Protocol):
    """A completed job as the service's state store keeps it (``service.store.JobRow``)."""

    @property
    def job_id(self) -> str: ...

    @property
    def details(self) -> Mapping[str, Any]:
        """What the job was placed with; ``records``: the task records it was estimated with."""
        ...

    @property
    def allocation(self) -> Mapping[str, Any]:
        """``instances``, each with the ``machine`` it ran on and its ``gpus`` there."""
        ...

    @property
    def placed_at(self) -> float: ...

    @property
    def completion(self) -> Mapping[str, Any] | None:
        """``duration_s`` and ``usage``, as the job's completion reported them."""
        ...


def completed_jobs(rows: Iterable[CompletedRow], gpu_types: Mapping[str, str]) -> list[dict[str, Any]]:
    """Completed jobs as :func:`feedback_table` takes them: the task records each was estimated with,
    when it was placed, its observed duration and usage, and the GPU type it ran on (from ``gpu_types``,
    machine name to GPU type; none if its GPUs were of several types or on unknown machines). A row
    without a completion is skipped."""
    found = []
    for row in rows:
        if row.completion is None:
            continue
        on = {gpu_types.get(str(i["machine"])) for i in row.allocation.get("instances", []) if i.get("gpus")}
        found.append({"job_id": row.job_id, "records": row.details.get("records", []), "placed_at": row.placed_at,
                      "duration_s": row.completion["duration_s"], "usage": row.completion["usage"],
                      "gpu_type": on.pop() if len(on) == 1 else None})
    return found


def feedback_table(completed: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Canonical rows of ``completed`` jobs, each a mapping with ``job_id``, ``records`` (the task records
    the job was estimated with), ``placed_at``, ``duration_s``, ``usage`` and optionally ``gpu_type``
    (the GPU type it ran on). A job placed before feedback was recorded (no records) is skipped."""
    rows: list[dict[str, Any]] = []
    for job in completed:
        unknown = sorted(set(job["usage"]) - USAGE_COLUMNS.keys())
        if unknown:
            raise ValueError(f"job {job['job_id']}: unknown usage key(s) {unknown}; known: {sorted(USAGE_COLUMNS)}")
        start, duration = float(job["placed_at"]), float(job["duration_s"])
        for i, record in enumerate(job.get("records") or ()):
            row: dict[str, Any] = {column: record.get(column) for column in _RECORD_COLUMNS}
            row.update(source=SOURCE, job_id=str(job["job_id"]), task_id=str(record.get("task_id", i)),
                       submit_time_s=start, start_time_s=start, end_time_s=start + duration, duration_s=duration,
                       status="succeeded", censored=False, assigned_gpu_type=job.get("gpu_type"))
            row.update({USAGE_COLUMNS[key]: float(value) for key, value in job["usage"].items()})
            rows.append(row)
    if not rows:
        return empty_table()
    frame = pd.DataFrame(rows)
    frame["role"] = frame["role"].fillna("worker")
    frame["instances"] = frame["instances"].fillna(1).astype("int64")
    return conform(frame, f"<{SOURCE}>")


def with_feedback(trace: pd.DataFrame, feedback: pd.DataFrame) -> pd.DataFrame:
    """The trace's canonical rows followed by the feedback rows (one canonical table)."""
    if feedback.empty:
        return trace
    return conform(pd.concat([trace, feedback], ignore_index=True), f"<trace + {SOURCE}>")


def digest(feedback: pd.DataFrame) -> str:
    """sha256 of the feedback rows: which completions a model saw ("none" for no rows)."""
    if feedback.empty:
        return "none"
    text = feedback.to_json(orient="records", date_format="iso", double_precision=15)
    return hashlib.sha256(json.dumps(text).encode()).hexdigest()
