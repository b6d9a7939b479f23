"""Adapter for the openb v2023 GPU-sharing pod list (FGD, ATC'23).

One pod is one job of one instance. Units: ``cpu_milli`` / 1000 = cores, ``memory_mib`` / 1024 = GiB,
and a pod with ``num_gpu`` = 1 asks for ``gpu_milli`` / 1000 of one GPU (a share); a pod with more
GPUs asks for whole GPUs. ``gpu_spec`` is an any-of GPU type constraint (``V100M16|V100M32``).

Duration is deletion - creation, as the trace's own simulator takes it (the median scheduling delay
is 2 s). A pod never scheduled (``Pending``, no ``scheduled_time``) has no duration. A ``Running`` pod
deleted at the last deletion time of the file was still running when the trace ended: it is
``censored`` and its duration is a lower bound.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from placement.model.gpu_types import GPU_MEM_GIB
from training.ingest.errors import DataError
from training.ingest.readers import check_vocabulary, line_numbers, numeric, read_text_csv
from training.ingest.schema import conform

COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
           "creation_time", "deletion_time", "scheduled_time")
PHASES = {"Succeeded": "succeeded", "Failed": "failed", "Running": "running", "Pending": "pending"}


def load(path: Path) -> pd.DataFrame:
    """Read the pod list at ``path`` into the canonical table."""
    raw = read_text_csv(path, COLUMNS)
    lines = line_numbers(raw)
    num = {c: numeric(raw, c, path, allow_missing=False, non_negative=True)
           for c in ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "creation_time", "deletion_time")}
    scheduled = numeric(raw, "scheduled_time", path, non_negative=True)
    check_vocabulary(raw, "pod_phase", path, PHASES)
    check_vocabulary(raw, "gpu_spec", path, GPU_MEM_GIB, separator="|")
    _check_order(raw, num["creation_time"], num["deletion_time"], path, lines)
    over = (num["gpu_milli"] > 1000).to_numpy()
    if over.any():
        i = int(over.nonzero()[0][0])
        raise DataError(path, "gpu_milli must be at most 1000", int(lines[i]), "gpu_milli", raw["gpu_milli"].iloc[i])
    gpus = num["num_gpu"]
    share = np.where(gpus <= 1, gpus * num["gpu_milli"] / 1000.0, gpus)
    ran = scheduled.notna()
    duration = (num["deletion_time"] - num["creation_time"]).where(ran)
    trace_end = num["deletion_time"].max()
    censored = (raw["pod_phase"] == "Running") & (num["deletion_time"] >= trace_end)
    table = pd.DataFrame({
        "source": "openb2023",
        "job_id": raw["name"],
        "task_id": "0",
        "role": "job",
        "instances": 1,
        "submit_time_s": num["creation_time"],
        "start_time_s": scheduled,
        "end_time_s": num["deletion_time"].where(ran),
        "duration_s": duration,
        "status": raw["pod_phase"].map(PHASES),
        "censored": censored.fillna(False).astype(bool),
        "qos": raw["qos"],
        "req_gpu": share,
        "req_cpu_cores": num["cpu_milli"] / 1000.0,
        "req_mem_gib": num["memory_mib"] / 1024.0,
        "req_gpu_type": raw["gpu_spec"],
    })
    return conform(table, path, lines)


def _check_order(raw: pd.DataFrame, created: pd.Series, deleted: pd.Series, path: Path, lines: np.ndarray) -> None:
    bad = (deleted < created).to_numpy()
    if bad.any():
        i = int(bad.nonzero()[0][0])
        raise DataError(path, "deletion_time is before creation_time (negative duration)", int(lines[i]),
                        "deletion_time", raw["deletion_time"].iloc[i])
