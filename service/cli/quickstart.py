"""``gpuplace quickstart``: the main job on embedded defaults, end to end.

1. Ingest every shipped real trace into canonical Parquet tables and describe them and the clusters.
2. If the registry has no ``champion``, train on the shipped PAI jobs and promote (a rerun reuses it).
3. Start the REST service on 127.0.0.1 (SQLite state and MLflow store in ``GPUPLACE_HOME``).
4. Replay real PAI jobs (the later, out-of-sample share of the shipped rows, in submission order)
   through the REST API on the real PAI cluster: each job is placed at its submission time on the
   trace's clock; a job that does not fit waits and is tried again when another completes; each
   placed job completes after its real duration, reported with ``/complete`` (feedback for retraining).
5. Summarise: jobs placed, waiting and never fitting, GPUs and CPUs requested against the model's
   estimates, and where to open the API docs and the MLflow UI.
"""

from __future__ import annotations

import heapq
import os
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from service.cli.console import make_console, progress
from service.cli.errors import CommandError
from service.workdir import home, mlflow_uri, tables_dir

if TYPE_CHECKING:
    import pandas as pd

    from service.http.responses import EstimateOut

console = make_console()
API_KEY_ENV = "GPUPLACE_API_KEYS"


def run(
    jobs: Annotated[int, typer.Option(min=1, help="real PAI jobs to replay through the REST API")] = 1000,
    algo: Annotated[str, typer.Option(help="model family trained when there is no champion: lgbm or rf")] = "lgbm",
    rate: Annotated[float | None, typer.Option(
        min=0.001, help="arrivals per minute instead of the original submission times")] = None,
    port: Annotated[int, typer.Option(min=0, max=65535, help="service port (0 = any free port)")] = 0,
    serve: Annotated[bool, typer.Option("--serve", help="keep the service running afterwards (Ctrl-C stops)")] = False,
) -> None:
    """Ingest the shipped data, train if there is no champion, start the service and replay real PAI
    jobs through its REST API; ends with a summary."""
    from service.cli.models import ALGOS

    if algo not in ALGOS:
        raise CommandError(f"--algo {algo!r}: one of {', '.join(ALGOS)}")
    _ingest()
    version = _champion(algo)
    with _service(port) as url:
        summary = replay(url, _pai_bodies(jobs, rate))
        console.print(summary_table(summary, version))
        console.print(f"API docs (OpenAPI): {url}/docs while the service runs; start it again with "
                      "`.venv/bin/gpuplace serve`")
        console.print(f"MLflow UI: `.venv/bin/mlflow ui --backend-store-uri {mlflow_uri()}`, then http://127.0.0.1:5000")
        console.print("completed jobs are stored as feedback: `.venv/bin/gpuplace retrain` learns from them, "
                      "`.venv/bin/gpuplace models drift` judges the model on them")
        if serve:
            console.print(f"serving at {url} (Ctrl-C stops)")
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                pass


def _ingest() -> None:
    from service.cli.cluster import cluster_table
    from training.ingest.describe import human_duration, summarise
    from training.ingest.sources import SOURCES
    from training.ingest.tables import write_tables

    shipped = [s for s in SOURCES.values() if s.shipped]
    frames: dict[str, pd.DataFrame] = {}
    with progress(console, "ingesting shipped traces", total=len(shipped)) as steps:
        for source in shipped:
            steps.update(f"ingesting {source.name}")
            frames[source.name] = source.load()
            steps.advance()
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


def _champion(algo: str) -> str:
    """The champion's version, training and promoting one first if there is none."""
    from models.registry import CHAMPION
    from service.cli.models import registry
    from training.pipeline.promote import promote
    from training.pipeline.train import train_and_register

    store = registry()
    version = store.alias_version(CHAMPION)
    if version is not None:
        console.print(f"model: champion version {version} (already trained; `gpuplace retrain` updates it)")
        return str(version)
    started = time.monotonic()
    with progress(console, "training") as steps:
        result = train_and_register(store, ["pai2020-jobs"], algo,
                                    progress=lambda text: steps.update(f"training: {text}"))
    decision = promote(store)
    metric = result.metrics.get
    console.print(f"model: trained {algo} version {result.version} on the shipped PAI jobs in "
                  f"{time.monotonic() - started:.0f} s; duration MALE {metric('duration.model.male', float('nan')):.3f}"
                  f", P90 coverage {metric('duration.model.p90_coverage', float('nan')):.3f} on the later 30% of jobs; "
                  f"{'promoted to champion' if decision.promoted else decision.reason}")
    return str(result.version)


@contextmanager
def _service(port: int) -> Iterator[str]:
    """``gpuplace serve`` on 127.0.0.1 as a child process; stopped on exit."""
    import socket

    if port == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
    env = {**os.environ, "GPUPLACE_HOME": str(home().resolve())}
    env.setdefault(API_KEY_ENV, "")
    log = home() / "quickstart-service.log"
    with log.open("wb") as err:
        process = subprocess.Popen([sys.executable, "-m", "service.cli.app", "serve", "--host", "127.0.0.1", "--port",
                                    str(port)], env=env, stdout=subprocess.DEVNULL, stderr=err)
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_ready(url, process, log)
            console.print(f"service: {url} (pid {process.pid}, log {log})")
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path, timeout_s: float = 900.0) -> None:
    """Poll until the service is ready; generous, because a loaded machine may take minutes to import and
    load a model, and a process that exits is noticed at once anyway."""
    from gpuplace.client import ApiError, Client, ServiceUnreachable

    deadline = time.monotonic() + timeout_s
    with Client(url, timeout=2.0) as api:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"the service exited with code {process.returncode}: {log.read_text()[-2000:]}")
            try:
                api.ready()
                return
            except (ApiError, ServiceUnreachable):
                pass
            time.sleep(0.3)
    raise RuntimeError(f"the service did not become ready within {timeout_s:.0f} s; the end of its log ({log}):\n"
                       f"{log.read_text()[-2000:]}")


@dataclass(frozen=True)
class Arrival:
    submit_s: float
    duration_s: float
    body: dict[str, Any]


def _pai_bodies(limit: int, rate: float | None = None) -> list[Arrival]:
    """The first ``limit`` out-of-sample PAI jobs (the later 30% of the shipped rows) as ``/v1/place``
    bodies, with their real submission times and durations; ids carry a run stamp (ids are never reused)."""
    from training.ingest.sources import get_source
    from training.replay.trace_jobs import rest_bodies

    table = get_source("pai2020-jobs").load()
    ordered = table.sort_values(["submit_time_s", "job_id"], kind="stable")
    later = ordered.iloc[int(len(ordered) * 0.7):].iloc[:limit]
    stamp = time.strftime("%Y%m%d%H%M%S")
    return [Arrival(i * 60.0 / rate if rate else submit, duration,
                    {**body, "job_id": f"qs{stamp}-{body['job_id']}"[:128]})
            for i, (submit, duration, body) in enumerate(rest_bodies(later))]


@dataclass
class Summary:
    jobs: int = 0
    placed_at_once: int = 0
    placed_after_wait: int = 0
    waiting_at_end: int = 0
    never_fit: int = 0
    refused: list[str] = field(default_factory=list)
    waits_s: list[float] = field(default_factory=list)
    requested: dict[str, float] = field(default_factory=lambda: {"gpu": 0.0, "cpu": 0.0})
    predicted_p50: dict[str, float] = field(default_factory=lambda: {"gpu": 0.0, "cpu": 0.0})
    predicted_p90: dict[str, float] = field(default_factory=lambda: {"gpu": 0.0, "cpu": 0.0})
    completed: int = 0
    model_versions: set[str] = field(default_factory=set)
    wall_s: float = 0.0


def replay(url: str, arrivals: list[Arrival]) -> Summary:
    """Place ``arrivals`` through ``url`` in trace time: completions (each job's real duration after it
    starts) free capacity for waiting jobs, which are tried again in arrival order."""
    from gpuplace.client import ApiError, Client
    from placement import Verdict
    from service.settings import Settings

    key = next(iter(Settings().accepted_keys()), None)
    summary = Summary(jobs=len(arrivals))
    running: list[tuple[float, str, float]] = []  # (end time, job id, duration)
    waiting: deque[Arrival] = deque()
    counted: set[str] = set()
    started = time.monotonic()
    with Client(url, api_key=key, timeout=60) as api, \
            progress(console, "replaying PAI jobs through the REST API", total=len(arrivals)) as steps:

        def place(arrival: Arrival, now: float) -> bool:
            """Try to place; ``True`` if it needs no further try (placed, never fits, or refused)."""
            try:
                found = api.place(arrival.body)
            except ApiError as exc:
                if exc.status != 422:
                    raise
                summary.refused.append(f"{arrival.body['job_id']}: {exc.text[:200]}")
                return True
            if arrival.body["job_id"] not in counted:
                counted.add(arrival.body["job_id"])
                _count_estimate(summary, arrival.body, found.estimate)
            if found.committed:
                heapq.heappush(running, (now + arrival.duration_s, arrival.body["job_id"], arrival.duration_s))
                summary.waits_s.append(now - arrival.submit_s)
                if now > arrival.submit_s:
                    summary.placed_after_wait += 1
                else:
                    summary.placed_at_once += 1
                return True
            if found.verdict == Verdict.CAN_NEVER_FIT:
                summary.never_fit += 1
                return True
            return False

        def complete_until(now: float) -> None:
            while running and running[0][0] <= now:
                end, job_id, duration = heapq.heappop(running)
                api.complete_job(job_id, duration)
                summary.completed += 1
                for _ in range(len(waiting)):  # capacity freed: waiting jobs in arrival order (backfilling)
                    arrival = waiting.popleft()
                    if not place(arrival, end):
                        waiting.append(arrival)

        for arrival in arrivals:
            complete_until(arrival.submit_s)
            if not place(arrival, arrival.submit_s):
                waiting.append(arrival)
            steps.advance()
        steps.update("completing the jobs still running")
        complete_until(float("inf"))
    summary.waiting_at_end = len(waiting)
    summary.wall_s = time.monotonic() - started
    return summary


def _count_estimate(summary: Summary, body: dict[str, Any], estimate: EstimateOut) -> None:
    summary.model_versions.add(estimate.model_version)
    for task, estimated in zip(body["tasks"], estimate.tasks, strict=True):
        targets = estimated.model_extra or {}
        for resource, target, requested in (("gpu", "gpu_request", task["gpu"]), ("cpu", "cpu_request",
                                                                                   task["cpu_cores"])):
            instances = task["instances"]
            summary.requested[resource] += requested * instances
            quantiles = targets.get(target)
            p50, p90 = (quantiles.p50, quantiles.p90) if quantiles is not None else (requested, requested)
            summary.predicted_p50[resource] += min(float(p50), requested) * instances
            summary.predicted_p90[resource] += min(float(p90), requested) * instances


def summary_table(s: Summary, version: str) -> Table:
    import pandas as pd

    from training.ingest.describe import human_duration

    table = Table("", "value", title=f"{s.jobs:,} real PAI jobs replayed through the REST API in {s.wall_s:.0f} s "
                                      f"(model {', '.join(sorted(s.model_versions)) or version})")
    waits = pd.Series(s.waits_s, dtype=float)
    table.add_row("placed on arrival", f"{s.placed_at_once:,}")
    table.add_row("placed after waiting", f"{s.placed_after_wait:,} (mean wait of all placed "
                                          f"{human_duration(float(waits.mean())) if len(waits) else '-'})")
    table.add_row("still waiting at the end", f"{s.waiting_at_end:,}")
    table.add_row("can never fit this cluster", f"{s.never_fit:,}")
    table.add_row("refused as bad input", f"{len(s.refused):,}")
    table.add_row("completed (stored as feedback)", f"{s.completed:,}")
    for resource, unit in (("gpu", "GPUs"), ("cpu", "CPU cores")):
        asked = s.requested[resource]
        p50, p90 = s.predicted_p50[resource], s.predicted_p90[resource]
        saving = f"{1 - p90 / asked:.1%}" if asked else "-"
        table.add_row(f"{unit} requested / estimated P50 / P90",
                      f"{asked:,.1f} / {p50:,.1f} / {p90:,.1f}  (right-sizing to P90 saves {saving})")
    table.caption = ("estimates capped at the request. The shipped PAI rows carry no observed usage, so the "
                     "model estimates what a job needs from what similar earlier jobs of the same user and "
                     "group asked for; with usage labels (the full PAI trace) it learns observed usage.")
    return table
