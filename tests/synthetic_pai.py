"""SYNTHETIC PAI v2020 tables, for tests and the ingestion benchmark only.

Written with the exact column layout of the real trace (no header lines, columns from the shipped
``.header`` files) so the adapter is exercised on the real format. Every value is random: nothing
measured from these files says anything about real jobs. Files go into a folder whose name says
``synthetic``.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

REPO = Path(__file__).resolve().parents[1]
HEADERS = REPO / "data" / "pai2020"
TABLES = ("pai_job_table", "pai_task_table", "pai_instance_table", "pai_sensor_table", "pai_group_tag_table")


@dataclass(frozen=True)
class SyntheticTrace:
    directory: Path
    jobs: int
    tasks: int
    instances: int


def _hex(rng: np.random.Generator, n: int, width: int) -> list[str]:
    words = rng.integers(0, 2**60, size=(n, (width + 14) // 15), dtype=np.int64)
    return ["".join(f"{w:015x}" for w in row)[:width] for row in words]


def write_trace(directory: Path, instances: int, seed: int = 0, *, with_headers: bool = True) -> SyntheticTrace:
    """Write a SYNTHETIC trace of about ``instances`` instances into ``directory``."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    inst_per_task = rng.integers(1, 9, size=max(1, instances // 4))
    inst_per_task = inst_per_task[np.cumsum(inst_per_task) <= instances]
    if inst_per_task.sum() < instances:
        inst_per_task = np.append(inst_per_task, instances - inst_per_task.sum())
    n_tasks = len(inst_per_task)
    task_job = np.sort(rng.integers(0, max(1, n_tasks // 2), n_tasks))
    first = np.searchsorted(task_job, task_job)  # index of the job's first task
    names = np.array(["worker", "ps", "evaluator", "tensorflow", "PyTorchWorker", "chief"])
    position = np.arange(n_tasks) - first  # tasks of one job get distinct names
    roles = np.where(position < len(names), names[np.minimum(position, len(names) - 1)],
                     np.char.add("task", position.astype(str)))
    job_ids = np.unique(task_job)
    job_names = np.array(_hex(rng, int(job_ids.max()) + 1, 24))
    inst_ids = np.array(_hex(rng, int(job_ids.max()) + 1, 60))
    users = np.array(_hex(rng, 50, 12))
    submit = np.sort(rng.uniform(0, 7e5, int(job_ids.max()) + 1)).round()
    status = rng.choice(np.array(["Terminated", "Failed", "Running"]), n_tasks, p=[0.8, 0.15, 0.05])
    t_start = submit[task_job] + rng.integers(0, 100, n_tasks)
    t_end = t_start + rng.lognormal(7, 1.5, n_tasks).round()
    _write(directory, "pai_job_table", {
        "job_name": job_names[job_ids], "inst_id": inst_ids[job_ids], "user": users[job_ids % 50],
        "status": np.full(len(job_ids), "Terminated"), "start_time": submit[job_ids],
        "end_time": submit[job_ids] + 1e4})
    _write(directory, "pai_task_table", {
        "job_name": job_names[task_job], "task_name": roles, "inst_num": inst_per_task.astype(float),
        "status": status, "start_time": t_start, "end_time": np.where(status == "Running", np.nan, t_end),
        "plan_cpu": rng.choice([100.0, 600.0, 800.0], n_tasks), "plan_mem": rng.choice([29.296875, 58.59375], n_tasks),
        "plan_gpu": rng.choice([0.0, 25.0, 50.0, 100.0], n_tasks),
        "gpu_type": rng.choice(["MISC", "T4", "V100"], n_tasks)})
    inst_task = np.repeat(np.arange(n_tasks), inst_per_task)
    n_inst = len(inst_task)
    workers = np.array(_hex(rng, n_inst, 60))
    machines = np.array(_hex(rng, 64, 24))[rng.integers(0, 64, n_inst)]
    _write(directory, "pai_instance_table", {
        "job_name": job_names[task_job[inst_task]], "task_name": roles[inst_task], "inst_name": workers,
        "worker_name": workers, "inst_id": inst_ids[task_job[inst_task]], "status": status[inst_task],
        "start_time": t_start[inst_task], "end_time": t_end[inst_task], "machine": machines})
    _write(directory, "pai_sensor_table", {
        "job_name": job_names[task_job[inst_task]], "task_name": roles[inst_task], "worker_name": workers,
        "inst_id": inst_ids[task_job[inst_task]], "machine": machines, "gpu_name": np.full(n_inst, "/dev/nvidia0"),
        "cpu_usage": rng.uniform(10, 800, n_inst), "gpu_wrk_util": rng.uniform(0, 100, n_inst),
        "avg_mem": rng.uniform(1, 20, n_inst), "max_mem": rng.uniform(1, 40, n_inst),
        "avg_gpu_wrk_mem": rng.uniform(0, 8, n_inst), "max_gpu_wrk_mem": rng.uniform(0, 16, n_inst),
        "read": rng.uniform(0, 1e8, n_inst), "write": rng.uniform(0, 1e8, n_inst),
        "read_count": rng.uniform(0, 1e4, n_inst), "write_count": rng.uniform(0, 1e4, n_inst)})
    _write(directory, "pai_group_tag_table", {
        "inst_id": inst_ids[job_ids], "user": users[job_ids % 50],
        "gpu_type_spec": rng.choice(np.array(["", "V100", "T4"]), len(job_ids), p=[0.7, 0.2, 0.1]),
        "group": np.array(_hex(rng, 200, 32))[job_ids % 200],
        "workload": rng.choice(np.array(["", "bert", "ctr", "graphlearn"]), len(job_ids))})
    if with_headers:
        for table in TABLES:
            shutil.copy(HEADERS / f"{table}.header", directory / f"{table}.header")
    return SyntheticTrace(directory, len(job_ids), n_tasks, n_inst)


def _write(directory: Path, table: str, columns: dict[str, object]) -> None:
    names = (HEADERS / f"{table}.header").read_text().strip().split(",")
    assert list(columns) == names, f"{table}: {list(columns)} != {names}"
    arrow = pa.table({k: pa.array(v) for k, v in columns.items()})
    pacsv.write_csv(arrow, directory / f"{table}.csv", pacsv.WriteOptions(include_header=False, quoting_style="none"))
