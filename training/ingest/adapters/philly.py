"""Adapter for Microsoft Philly jobs (Sept-Dec 2017) as packaged by the Pollux artifact.

Columns: timestamp,duration,num_gpus,gpu_time,cluster. ``timestamp`` is the submission time
(read as UTC; the packaging states no zone), ``duration`` is in seconds, ``num_gpus`` the job's
GPUs and ``cluster`` its virtual cluster, which is the grouping key for history. The file has no job
id: a job is named by its line. Rows record no outcome, so status is ``ended``. The start and end
times are unknown (queueing delay is not recorded), so no Philly job ever counts as finished history
for another: estimators see each job's own features and the activity of its virtual cluster only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from training.ingest.errors import DataError
from training.ingest.readers import line_numbers, numeric, read_text_csv
from training.ingest.schema import conform

COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")


def load(path: Path) -> pd.DataFrame:
    """Read the Philly job list at ``path`` into the canonical table."""
    raw = read_text_csv(path, COLUMNS)
    lines = line_numbers(raw)
    duration = numeric(raw, "duration", path, allow_missing=False, non_negative=True)
    gpus = numeric(raw, "num_gpus", path, allow_missing=False, non_negative=True)
    submit = pd.to_datetime(raw["timestamp"], format="%Y-%m-%d %H:%M:%S", errors="coerce", utc=True)
    bad = submit.isna().to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DataError(path, "timestamp is not a 'YYYY-MM-DD HH:MM:SS' time", int(lines[i]), "timestamp",
                        raw["timestamp"].iloc[i])
    submit_s = (submit - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
    table = pd.DataFrame({
        "source": "philly",
        "job_id": pd.Series(lines).map(lambda n: f"philly-{n}"),
        "task_id": "0",
        "role": "job",
        "instances": 1,
        "submit_time_s": submit_s,
        "duration_s": duration,
        "status": "ended",
        "censored": False,
        "cluster": raw["cluster"],
        "req_gpu": gpus,
    })
    return conform(table, path, lines)
