"""``gpuplace quickstart``: the main job on embedded defaults, end to end.

1. Ingest every shipped real trace into canonical Parquet tables and describe them and the clusters.
2. If the registry has no ``champion``, train on the shipped PAI jobs and promote (a rerun reuses it).
3. Start the REST service on 127.0.0.1 (SQLite state and MLflow store in ``GPUPLACE_HOME``).
4. Replay real PAI jobs (the later, out-of-sample share of the shipped rows, in submission order)
   through the service's queue (``POST /v1/jobs``, queue ``quickstart``: shortest estimated duration
   first) on a share of the real PAI cluster sized to them, arriving at a pace at which their GPU demand
   exceeds the cluster's for a while (``service.cli.quickstart_compare`` says how both are chosen). The
   trace's clock is driven from here: the service's scheduler starts pending jobs as others end, each
   started job completes after its real duration (``/complete``: feedback for retraining).
5. Replay the same jobs, arrivals and cluster with a plain baseline (FIFO, first fit) in the replay
   simulator, and summarise both side by side: mean and p95 JCT, mean wait, GPU-hours idle while jobs
   waited, right-sizing; then where to open the API docs and the MLflow UI.
"""

from __future__ import annotations

import heapq
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from service.cli.console import Steps, make_console, progress
from service.cli.errors import CommandError
from service.workdir import home, mlflow_uri, tables_dir

if TYPE_CHECKING:
    import pandas as pd

    from gpuplace.client import Client
    from placement import Cluster
    from service.cli.quickstart_compare import Arrival, Figures, JobRun
    from service.http.responses import EstimateOut

__all__ = ["API_KEY_ENV", "QUEUE", "Summary", "Workload", "comparison_table", "pai_workload", "replay",
           "run"]

console = make_console()
API_KEY_ENV = "GPUPLACE_API_KEYS"
QUEUE = "quickstart"


def run(
    jobs: Annotated[int, typer.Option(min=1, help="real PAI jobs to replay through the REST API")] = 1000,
    algo: Annotated[str, typer.Option(help="model family trained when there is no champion: lgbm or rf")] = "lgbm",
    rate: Annotated[float | None, typer.Option(
        min=0.001, help="arrivals per minute (default: the slowest pace at which the jobs' GPU demand exceeds "
                        "the cluster's GPUs over half the time they arrive)")] = None,
    port: Annotated[int, typer.Option(min=0, max=65535, help="service port (0 = any free port)")] = 0,
    serve: Annotated[bool, typer.Option("--serve", help="keep the service running afterwards (Ctrl-C stops)")] = False,
) -> None:
    """Ingest the shipped data, train if there is no champion, start the service, replay real PAI jobs
    through its queue and the same jobs through a FIFO first-fit baseline; ends with both side by side."""
    from service.cli.models import ALGOS
    from service.cli.quickstart_compare import baseline, figures

    if algo not in ALGOS:
        raise CommandError(f"--algo {algo!r}: one of {', '.join(ALGOS)}")
    _ingest()
    version = _champion(algo)
    workload = pai_workload(jobs, rate)
    shown = describe_workload(workload)
    console.print(f"replay: {shown}")
    with _service(port) as url:
        summary = replay(url, workload.arrivals, workload.cluster)
        with progress(console, "replaying the same jobs with FIFO and first fit (replay simulator)"):
            base = figures(baseline(workload.cluster, summary.accepted), float(workload.cluster.total_gpus))
        console.print(comparison_table(summary, base, shown, version))
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
class Workload:
    """The jobs to replay, when they arrive, and the cluster they run on (``service.cli.quickstart_compare``)."""

    arrivals: list[Arrival]
    cluster: Cluster
    every: int
    """The cluster is every ``every``-th machine of each GPU type of PAI's."""
    peak_gpus: float
    """The jobs' peak GPU demand at their original pace, each started on arrival."""
    rate_per_min: float
    original_per_min: float
    over_share: float
    """The share of the arrivals' span over which their demand exceeds the cluster's GPUs at ``rate_per_min``."""


def pai_workload(limit: int, rate: float | None = None) -> Workload:
    """The first ``limit`` out-of-sample PAI jobs (the later 30% of the shipped rows) as ``/v1/jobs`` bodies
    with their real durations, the share of the PAI cluster they run on and their pace: ``rate`` arrivals a
    minute, else :func:`~service.cli.quickstart_compare.queueing_rate`. Ids carry a run stamp (ids are never
    reused)."""
    import numpy as np

    from placement import load_cluster
    from service.cli.quickstart_compare import (
        Arrival,
        cluster_share,
        cluster_spec,
        job_gpus,
        over_share,
        peak_demand,
        queueing_rate,
        share_for,
    )
    from service.codec import cluster_from_json
    from training.ingest.sources import get_source
    from training.replay.trace_jobs import rest_bodies

    table = get_source("pai2020-jobs").load()
    ordered = table.sort_values(["submit_time_s", "job_id"], kind="stable")
    later = ordered.iloc[int(len(ordered) * 0.7):].iloc[:limit]
    stamp = time.strftime("%Y%m%d%H%M%S")
    found = rest_bodies(later)
    first = found[0][0] if found else 0.0
    original = [Arrival(submit - first, duration, {**body, "job_id": f"qs{stamp}-{body['job_id']}"[:128]})
                for submit, duration, body in found]
    submit = np.array([a.submit_s for a in original])
    duration = np.array([a.duration_s for a in original])
    gpus = np.array([job_gpus(a) for a in original])
    pai = load_cluster("pai")
    peak = peak_demand(submit, duration, gpus)
    every = share_for(pai, peak)
    cluster = cluster_from_json(cluster_spec(cluster_share(pai, every)))  # as the service will hold it
    span_s = float(submit[-1] - submit[0]) if len(submit) > 1 else 0.0
    original_per_min = (len(submit) - 1) * 60.0 / span_s if span_s > 0 else 1.0
    chosen = rate or queueing_rate(duration, gpus, float(cluster.total_gpus), original_per_min)
    arrivals = [replace(a, submit_s=i * 60.0 / chosen) for i, a in enumerate(original)]
    return Workload(arrivals, cluster, every, peak, chosen, original_per_min,
                    over_share(duration, gpus, float(cluster.total_gpus), chosen) if len(duration) else 0.0)


@dataclass
class Summary:
    jobs: int = 0
    cluster_gpus: float = 0.0
    started_at_once: int = 0
    started_after_wait: int = 0
    never_started: list[str] = field(default_factory=list)
    """Still pending when nothing was left to end (they can never fit the cluster): cancelled."""
    refused: list[str] = field(default_factory=list)
    accepted: list[Arrival] = field(default_factory=list)
    runs: list[JobRun] = field(default_factory=list)
    completed: int = 0
    requested: dict[str, float] = field(default_factory=lambda: {"gpu": 0.0, "cpu": 0.0})
    predicted_p50: dict[str, float] = field(default_factory=lambda: {"gpu": 0.0, "cpu": 0.0})
    predicted_p90: dict[str, float] = field(default_factory=lambda: {"gpu": 0.0, "cpu": 0.0})
    gpu_h_over_p90: float = 0.0
    """GPU-hours asked beyond each job's P90 estimate over its real run time."""
    model_versions: set[str] = field(default_factory=set)
    policy: str = ""
    """The service's placement policy (``GPUPLACE_POLICY``, which the service started here shares)."""
    wall_s: float = 0.0


END, ARRIVE = 0, 1
"""Event kinds; at one time, ends go first (as in the replay simulator)."""


def replay(url: str, arrivals: list[Arrival], cluster: Cluster | None = None) -> Summary:
    """Submit ``arrivals`` to the service's queue :data:`QUEUE` (shortest estimated duration first) on the
    trace's clock and let its scheduler start them: each started job completes after its real duration
    (``/complete``), which starts waiting ones. ``cluster``: loaded first, and the shipped cluster the
    service had is loaded back at the end.

    The service knows the trace's clock only through these calls: the jobs it starts in answer to one are
    taken to start at that call's time on the trace's clock (a job started by a pass that the service's own
    timer woke would be counted late). Its scheduler reads its own wall clock, on which the replay's hours
    pass in seconds: forecasting when running jobs end (for the place reserved for the queue's first
    waiting job), it sees each as just started."""
    from gpuplace.client import Client
    from placement import CLUSTERS
    from service.cli.quickstart_compare import JobRun, cluster_spec, job_gpus
    from service.settings import Settings

    settings = Settings()
    key = next(iter(settings.accepted_keys()), None)
    summary = Summary(jobs=len(arrivals), policy=settings.policy)
    started = time.monotonic()
    with Client(url, api_key=key, timeout=60) as api:
        _clear_earlier_runs(api)
        previous = api.get_cluster().name
        if cluster is not None:
            api.load_cluster(cluster_spec(cluster))
        _sjf_queue(api)
        summary.cluster_gpus = float(api.get_cluster().gpus)
        with progress(console, "replaying PAI jobs through the service's queue", total=len(arrivals)) as steps:
            starts = _drive(api, arrivals, summary, steps)
        summary.runs = [JobRun(a.body["job_id"], a.submit_s, job_gpus(a), starts.get(a.body["job_id"]),
                               starts[a.body["job_id"]] + a.duration_s if a.body["job_id"] in starts else None)
                        for a in summary.accepted]
        if cluster is not None and previous in CLUSTERS and previous != cluster.name:
            api.load_cluster(previous)
    summary.wall_s = time.monotonic() - started
    return summary


def _drive(api: Client, arrivals: list[Arrival], summary: Summary, steps: Steps) -> dict[str, float]:
    """The replay's events in trace time; the start time of every job that started."""
    from gpuplace.client import ApiError

    events: list[tuple[float, int, int, str]] = [(a.submit_s, ARRIVE, i, "") for i, a in enumerate(arrivals)]
    heapq.heapify(events)
    pending: dict[str, Arrival] = {}
    running: dict[str, Arrival] = {}
    starts: dict[str, float] = {}
    order = len(arrivals)

    def start(arrival: Arrival, now: float) -> None:
        nonlocal order
        job_id = arrival.body["job_id"]
        starts[job_id], running[job_id] = now, arrival
        if now > arrival.submit_s:
            summary.started_after_wait += 1
        else:
            summary.started_at_once += 1
        heapq.heappush(events, (now + arrival.duration_s, END, order, job_id))
        order += 1

    arrived = 0
    while events:
        now, kind, index, job_id = heapq.heappop(events)
        waits = False
        if kind == END:
            api.complete_job(job_id, running.pop(job_id).duration_s)
            summary.completed += 1
        else:
            arrival = arrivals[index]
            try:
                answer = api.submit_job({**arrival.body, "queue": QUEUE})
            except ApiError as exc:
                if exc.status != 422:
                    raise
                summary.refused.append(f"{arrival.body['job_id']}: {exc.text[:200]}")
            else:
                summary.accepted.append(arrival)
                _count_estimate(summary, arrival, answer.estimate)
                if answer.state == "running":
                    start(arrival, now)
                else:
                    pending[arrival.body["job_id"]] = arrival
                    waits = True
            arrived += 1
            steps.advance()
            if arrived == len(arrivals):
                steps.update("completing the running jobs, which starts the waiting ones")
        # an end frees room; a job that waits may come first in the queue, and the place reserved for the
        # first moves to it (one that starts at once takes room and moves nothing)
        if pending and (kind == END or waits):
            waiting = {j.job_id for j in api.iter_jobs(state="pending", queue=QUEUE, page_size=1000)}
            for gone in [j for j in pending if j not in waiting]:
                start(pending.pop(gone), now)
    for job_id in pending:
        api.cancel_job(job_id)
        summary.never_started.append(job_id)
    return starts


def _clear_earlier_runs(api: Client) -> None:
    """An interrupted earlier replay's jobs would hold the cluster and crowd the queue: cancelled, released."""
    for job in list(api.iter_jobs(state="pending", queue=QUEUE, page_size=1000)):
        api.cancel_job(job.job_id)
    for job in list(api.iter_jobs(state="running", queue=QUEUE, page_size=1000)):
        api.release_job(job.job_id)


def _sjf_queue(api: Client) -> None:
    """The queue :data:`QUEUE`, ordered by estimated duration, beside the queues configured (``default``
    alone if none is)."""
    config = dict(api.get_queues().config)
    queues = [q for q in _queue_list(config) if q.get("name") != QUEUE]
    wanted = {"name": QUEUE, "order": "sjf", "quota": {}}
    if [q for q in _queue_list(config) if q.get("name") == QUEUE] != [wanted]:
        api.set_queues({**config, "queues": [*queues, wanted]})


def _queue_list(config: dict[str, Any]) -> list[dict[str, Any]]:
    queues = config.get("queues")
    return [q for q in queues if isinstance(q, dict)] if isinstance(queues, list) else []


def _count_estimate(summary: Summary, arrival: Arrival, estimate: EstimateOut) -> None:
    summary.model_versions.add(estimate.model_version)
    for task, estimated in zip(arrival.body["tasks"], estimate.tasks, strict=True):
        targets = estimated.model_extra or {}
        for resource, target, requested in (("gpu", "gpu_request", task["gpu"]), ("cpu", "cpu_request",
                                                                                   task["cpu_cores"])):
            instances = task["instances"]
            summary.requested[resource] += requested * instances
            quantiles = targets.get(target)
            p50, p90 = (quantiles.p50, quantiles.p90) if quantiles is not None else (requested, requested)
            summary.predicted_p50[resource] += min(float(p50), requested) * instances
            summary.predicted_p90[resource] += min(float(p90), requested) * instances
            if resource == "gpu":
                summary.gpu_h_over_p90 += (requested - min(float(p90), requested)) * instances \
                    * arrival.duration_s / 3600.0


def comparison_table(s: Summary, base: Figures, workload: str, version: str) -> Table:
    """gpuplace's queue and the baseline side by side, with the change from the baseline."""
    from service.cli.quickstart_compare import figures
    from training.ingest.describe import human_duration

    ours = figures(s.runs, s.cluster_gpus)
    table = Table("", "gpuplace (the service's queue)", "baseline (FIFO, first fit)", "change",
                  title=f"{s.jobs:,} real PAI jobs replayed through the REST API in {s.wall_s:.0f} s, and by a "
                        f"FIFO first-fit baseline on the same jobs, arrivals and cluster "
                        f"(model {', '.join(sorted(s.model_versions)) or version})")

    def change(mine: float, theirs: float) -> str:
        if not (math.isfinite(mine) and math.isfinite(theirs)) or theirs == 0:
            return "-"
        return f"{mine / theirs - 1:+.0%}"

    def when(value: float) -> str:
        return human_duration(value) if math.isfinite(value) else "-"

    table.add_row("jobs finished / never started", f"{ours.finished:,} / {ours.never_started:,}",
                  f"{base.finished:,} / {base.never_started:,}", "")
    table.add_row("started on arrival / after waiting", f"{ours.finished - ours.waited:,} / {ours.waited:,}",
                  f"{base.finished - base.waited:,} / {base.waited:,}", "")
    for label, mine, theirs in (("mean JCT (wait + run time)", ours.jct_mean_s, base.jct_mean_s),
                                ("p95 JCT", ours.jct_p95_s, base.jct_p95_s),
                                ("mean wait", ours.wait_mean_s, base.wait_mean_s)):
        table.add_row(label, when(mine), when(theirs), change(mine, theirs))
    table.add_row("GPU-hours idle while jobs waited", f"{ours.idle_gpu_h:,.0f}", f"{base.idle_gpu_h:,.0f}",
                  change(ours.idle_gpu_h, base.idle_gpu_h))
    asked, p90 = s.requested["gpu"], s.predicted_p90["gpu"]
    if p90 >= asked:
        rightsizing = (f"n/a: P90 estimates = requests ({asked:,.1f} GPUs); the shipped PAI rows observe no "
                       "usage, so the model learns requests, and jobs run as asked")
    else:
        rightsizing = (f"n/a: jobs run as asked; P90 estimates ({p90:,.1f} of {asked:,.1f} GPUs) would free "
                       f"{s.gpu_h_over_p90:,.0f} GPU-h at the real run times, unchecked: no observed usage")
    table.add_row("GPU-hours saved by right-sizing", rightsizing, "n/a: runs what each job asks", "")
    table.add_row("refused as bad input", f"{len(s.refused):,}", "(the same jobs left out)", "")
    table.add_row("completed (stored as feedback)", f"{s.completed:,}", "-", "")
    cpu = s.requested["cpu"]
    table.caption = (f"{workload}. Both sides: the trace's clock, each job running for its real duration; JCT = "
                     "wait + run time over the jobs that started. gpuplace: the service's scheduler, queue "
                     f"'{QUEUE}' ordered by the model's estimated duration, a place reserved for its first waiting "
                     f"job, {s.policy or 'the default'} placement. Baseline: the replay simulator, FIFO (a job that "
                     "fits starts, even past an earlier one that does not) and first fit. CPU cores requested / "
                     f"estimated P50 / P90: {cpu:,.1f} / {s.predicted_p50['cpu']:,.1f} / "
                     f"{s.predicted_p90['cpu']:,.1f} (estimates capped at the request).")
    return table


def describe_workload(w: Workload) -> str:
    share = "the PAI cluster" if w.every == 1 else f"1 machine in {w.every} of each GPU type of the PAI cluster"
    over = (f"exceeds these GPUs over {w.over_share:.0%} of the time they arrive" if w.over_share > 0
            else "never exceeds these GPUs")
    return (f"{len(w.arrivals):,} jobs on {w.cluster.name} ({share}: {len(w.cluster):,} machines, "
            f"{w.cluster.total_gpus:,} GPUs; the jobs' peak GPU demand at their own pace is {w.peak_gpus:,.0f}), "
            f"arriving {w.rate_per_min:,.1f} a minute (the trace: {w.original_per_min:,.1f}), at which their "
            f"demand {over}")
