"""``gpuplace quickstart``: the main job on embedded defaults.

Today it ingests every shipped real trace into canonical Parquet tables (with a progress bar),
describes them, and describes the shipped clusters.
"""

from __future__ import annotations

import pandas as pd
from rich.progress import Progress
from rich.table import Table

from service.cli_cluster import cluster_table
from service.console import make_console
from service.workdir import tables_dir
from training.describe import human_duration, summarise
from training.sources import SOURCES
from training.tables import write_tables

console = make_console()


def run() -> None:
    """Ingest and describe the shipped real data and clusters."""
    shipped = [s for s in SOURCES.values() if s.shipped]
    frames: dict[str, pd.DataFrame] = {}
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("ingesting shipped traces", total=len(shipped))
        for source in shipped:
            progress.update(task, description=f"ingesting {source.name}")
            frames[source.name] = source.load()
            progress.advance(task)
    written = write_tables(frames, tables_dir())
    table = Table("source", "rows", "jobs", "submissions span", "status", "tasks with observed usage",
                  title="canonical job tables (real data)")
    for name, frame in frames.items():
        summary = summarise(frame)
        observed = int(frame[["obs_cpu_cores", "obs_gpu_util_share"]].notna().any(axis=1).sum())
        status = ", ".join(f"{k} {v:,}" for k, v in summary.status_counts.items())
        table.add_row(name, f"{summary.rows:,}", f"{summary.jobs:,}", human_duration(summary.span_s), status,
                      f"{observed:,}")
    console.print(table)
    console.print(f"tables written to {written[0].parent}")
    console.print(cluster_table(["pai", "openb"]))
