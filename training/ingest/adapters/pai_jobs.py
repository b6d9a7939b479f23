"""Adapter for the PAI v2020 job table that the trace's own simulator consumes (the "100K" table).

Columns: job_id,user,num_gpu,num_cpu,num_pod,duration,job_name,submit_time,group,gpu_type,
wait_time,user_dur,group_dur,group_gpu_dur. ``num_gpu`` and ``num_cpu`` are job totals over
``num_pod`` pods, so the per-instance request is total / num_pod (a fractional GPU is a share).
``gpu_type`` is the type the job ran on. ``job_name`` recurs across submissions; it becomes ``app``.
The table records no outcome, so status is ``ended``. ``user_dur``, ``group_dur`` and
``group_gpu_dur`` are Alibaba's own duration estimates, kept as ``ref_*`` columns. The source has a
row with a negative ``wait_time`` (job 47912, -2236 s): its start time is taken as unknown.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from placement.model.gpu_types import KNOWN_TYPES
from training.ingest.errors import DataError
from training.ingest.readers import check_vocabulary, line_numbers, numeric, read_text_csv
from training.ingest.schema import conform

COLUMNS = ("job_id", "user", "num_gpu", "num_cpu", "num_pod", "duration", "job_name", "submit_time",
           "group", "gpu_type", "wait_time", "user_dur", "group_dur", "group_gpu_dur")


def load(path: Path) -> pd.DataFrame:
    """Read the job table at ``path`` into the canonical table."""
    raw = read_text_csv(path, COLUMNS)
    num = {c: numeric(raw, c, path, allow_missing=False, non_negative=True)
           for c in ("num_gpu", "num_cpu", "num_pod", "duration", "submit_time")}
    wait = numeric(raw, "wait_time", path, allow_missing=False)
    ref = {c: numeric(raw, c, path, non_negative=True) for c in ("user_dur", "group_dur", "group_gpu_dur")}
    check_vocabulary(raw, "gpu_type", path, KNOWN_TYPES)
    pods = num["num_pod"]
    zero = (pods == 0).to_numpy()
    if zero.any():
        i = int(zero.nonzero()[0][0])
        raise DataError(path, "num_pod must be at least 1", int(line_numbers(raw)[i]), "num_pod",
                        raw["num_pod"].iloc[i])
    start = num["submit_time"] + wait.where(wait >= 0)
    table = pd.DataFrame({
        "source": "pai2020-jobs",
        "job_id": raw["job_id"],
        "task_id": "0",
        "role": "job",
        "instances": pods.astype("int64"),
        "submit_time_s": num["submit_time"],
        "start_time_s": start,
        "end_time_s": start + num["duration"],
        "duration_s": num["duration"],
        "status": "ended",
        "censored": False,
        "user": raw["user"],
        "group": raw["group"],
        "app": raw["job_name"],
        "req_gpu": num["num_gpu"] / pods,
        "req_cpu_cores": num["num_cpu"] / pods,
        "assigned_gpu_type": raw["gpu_type"],
        "ref_user_dur_s": ref["user_dur"],
        "ref_group_dur_s": ref["group_dur"],
        "ref_group_gpu_dur_s": ref["group_gpu_dur"],
    })
    return conform(table, path, line_numbers(raw))
