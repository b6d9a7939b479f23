"""Adapter for the full PAI v2020 trace: job, task, instance, sensor and group-tag tables.

The tables are CSV files without header lines (``pai_<table>.csv``); their column names come from
the ``pai_<table>.header`` files. One canonical row is one task (a role of a job, with ``inst_num``
instances). The instance and sensor tables (millions of rows, gigabytes) are streamed in blocks and
reduced per (job_name, task_name) as they are read, so memory grows with the number of tasks, not
instances.

Unit conversions, once, here:

* ``plan_gpu`` and ``gpu_wrk_util`` are percent of one GPU: / 100 (50.0 = half a GPU);
* ``plan_cpu`` and ``cpu_usage`` are percent of one core: / 100 (600 = 6 cores);
* ``plan_mem``, ``max_mem``, ``max_gpu_wrk_mem`` are GB as published; the values (29.296875 =
  30000 / 1024) are binary units, so they are taken as GiB;
* ``read`` and ``write`` are network bytes, averaged over the instance's lifetime samples; gpuplace
  reads them as bytes per second: bandwidth Gbit/s = (read + write) * 8 / 1e9.

Observed usage (``obs_*``) is kept only for tasks whose status is ``Terminated`` (the trace's only
successful state): a failed task's usage describes the failure, not what the job needs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from training.ingest.adapters.pai_stream import aggregate_stream, read_small_table
from training.ingest.schema import conform

Progress = Callable[[int], None]
"""Called with the number of bytes just read, for a progress bar."""

KEYS = ["job_name", "task_name"]
STATUS = {"Terminated": "succeeded", "Failed": "failed", "Running": "running", "Waiting": "pending"}
F64 = pa.float64()
STR = pa.string()


def load(directory: Path, header_dir: Path | None = None, progress: Progress | None = None) -> pd.DataFrame:
    """Read the five PAI v2020 tables in ``directory`` into the canonical table.

    Header files are looked up in ``directory``, then in ``header_dir`` (the shipped headers).
    """
    heads = [directory] + ([header_dir] if header_dir is not None else [])
    jobs = read_small_table(directory, "pai_job_table", heads,
                            {"job_name": STR, "inst_id": STR, "user": STR, "start_time": F64})
    tasks = read_small_table(directory, "pai_task_table", heads,
                             {"job_name": STR, "task_name": STR, "inst_num": F64, "status": STR,
                              "start_time": F64, "end_time": F64, "plan_cpu": F64, "plan_mem": F64,
                              "plan_gpu": F64, "gpu_type": STR})
    tags = read_small_table(directory, "pai_group_tag_table", heads,
                            {"inst_id": STR, "gpu_type_spec": STR, "group": STR, "workload": STR})
    inst = aggregate_stream(directory, "pai_instance_table", heads,
                            {"job_name": STR, "task_name": STR, "start_time": F64, "end_time": F64},
                            KEYS, [("start_time", "min"), ("end_time", "max"), ("job_name", "count")],
                            progress=progress)
    sensor = aggregate_stream(directory, "pai_sensor_table", heads,
                              {"job_name": STR, "task_name": STR, "cpu_usage": F64, "gpu_wrk_util": F64,
                               "max_mem": F64, "max_gpu_wrk_mem": F64, "read": F64, "write": F64},
                              KEYS, [("cpu_usage", "mean"), ("gpu_wrk_util", "mean"), ("max_mem", "max"),
                                     ("max_gpu_wrk_mem", "max"), ("net_gbps", "mean")],
                              derive=_bandwidth, progress=progress)
    return _assemble(jobs, tasks, tags, inst, sensor, directory)


def _bandwidth(batch: pa.Table) -> pa.Table:
    """Add ``net_gbps`` = (read + write) bytes/s * 8 / 1e9."""
    total = pc.add(pc.fill_null(batch["read"], 0.0), pc.fill_null(batch["write"], 0.0))
    both_null = pc.and_(pc.is_null(batch["read"]), pc.is_null(batch["write"]))
    gbps = pc.if_else(both_null, pa.scalar(None, F64), pc.divide(pc.multiply(total, 8.0), 1e9))
    return batch.append_column("net_gbps", gbps)


def _assemble(jobs: pa.Table, tasks: pa.Table, tags: pa.Table, inst: pa.Table, sensor: pa.Table,
              directory: Path) -> pd.DataFrame:
    tags = _first_per_key(tags.drop_columns(["_line"]), "inst_id")
    jobs = jobs.drop_columns(["_line"]).rename_columns(["job_name", "inst_id", "user", "submit_time"])
    joined = (tasks.rename_columns([*tasks.column_names[:-1], "task_line"])
              .join(jobs, "job_name")
              .join(tags, "inst_id")
              .join(inst, KEYS)
              .join(sensor, KEYS)
              .sort_by("task_line"))
    df = joined.to_pandas(types_mapper=_string_mapper)
    succeeded = (df["status"] == "Terminated").to_numpy()
    start = df["start_time"].fillna(df["start_time_min"])
    end = df["end_time"].fillna(df["end_time_max"])

    def observed(col: str, scale: float = 1.0) -> pd.Series:
        values: pd.Series = (df[col] / scale).where(succeeded)
        return values

    table = pd.DataFrame({
        "source": "pai2020",
        "job_id": df["job_name"],
        "task_id": df["task_name"],
        "role": df["task_name"].map(normalise_role),
        "instances": df["inst_num"].fillna(df["job_name_count"]).round().astype("Int64"),
        "submit_time_s": df["submit_time"],
        "start_time_s": start,
        "end_time_s": end,
        "duration_s": end - start,
        "status": df["status"].map(STATUS).fillna("unknown"),
        "censored": (df["status"] == "Running").fillna(False).astype(bool),
        "user": df["user"],
        "group": df["group"],
        "workload": df["workload"],
        "req_gpu": df["plan_gpu"] / 100.0,
        "req_cpu_cores": df["plan_cpu"] / 100.0,
        "req_mem_gib": df["plan_mem"],
        "req_gpu_type": df["gpu_type_spec"],
        "assigned_gpu_type": df["gpu_type"],
        "obs_gpu_util_share": observed("gpu_wrk_util_mean", 100.0),
        "obs_gpu_mem_max_gib": observed("max_gpu_wrk_mem_max"),
        "obs_cpu_cores": observed("cpu_usage_mean", 100.0),
        "obs_mem_max_gib": observed("max_mem_max"),
        "obs_net_gbps": observed("net_gbps_mean"),
    })
    return conform(table, directory / "pai_task_table.csv", df["task_line"].to_numpy())


def _first_per_key(table: pa.Table, key: str) -> pa.Table:
    """Keep the first row for each value of ``key`` (the group-tag table repeats jobs rarely)."""
    index = pa.array(range(table.num_rows), pa.int64())
    first = table.append_column("_i", index).group_by(key).aggregate([("_i", "min")])["_i_min"]
    return table.take(first)


def _string_mapper(dtype: pa.DataType) -> object:
    return pd.StringDtype("pyarrow") if dtype == pa.string() else None


def normalise_role(task_name: object) -> str:
    """Map a PAI task name to a canonical role (``ps``, ``worker``, ``evaluator``, ``chief``, ``other``)."""
    name = str(task_name).lower()
    if name in ("ps", "parameter_server") or name.startswith("ps_"):
        return "ps"
    for role, marks in (("evaluator", ("evaluator",)), ("chief", ("chief", "master")), ("worker", ("worker",))):
        if any(m in name for m in marks):
            return role
    return "other"
