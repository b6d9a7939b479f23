"""What ``gpuplace simulate scheduled`` replays and shows: PAI jobs as the scheduler core receives them (a
queue per job, arrivals compressed by the load factor, a duration estimate), the queue configuration (a
file, or one derived from the trace and written where the user can edit it), the configurations of an
ablation, and the tables of the results.

Derived queues (``by-user:K``, ``by-group:K``) are sized on the trace's history: the rows before the
replayed ones (the earlier 70% of the shipped table, which the replayed jobs follow), as an administrator
sizes quotas on the usage they have seen. A job goes to the queue named after its user (or group), else to
``shared``, else to one of the file's queues by a stable hash of the name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from rich.table import Column, Table

from placement import (
    Cluster,
    DurationEstimate,
    QueueSet,
    ReplayJob,
    ReplaySettings,
    SchedulingSettings,
    SimJob,
    causal_fill,
    compressed,
    load_queues,
    queue_of,
    queues_by_share,
)

ESTIMATES = ("oracle", "user", "group", "group-gpu")
"""What the scheduler is told of a job's duration: its real duration (``oracle``), or the PAI paper's causal
history means (``user``: SJU, ``group``: SJG, ``group-gpu``: SJGG; ``training.replay.trace_jobs``) as the P50,
with a P90 from how wrong the estimate was on the jobs that had ended (``causal_p90``)."""
KEYS = ("user", "group")
SHARED = "shared"


@dataclass(frozen=True)
class Trace:
    cluster: Cluster
    jobs: list[SimJob]
    """In submission order, at the trace's own times (from 0)."""
    keys: dict[str, dict[str, str]]
    """Per key kind (``user``, ``group``), each replayed job's key."""
    history: dict[str, dict[str, float]]
    """Per key kind, the GPU-seconds each key requested in the rows before the replayed ones."""


def pai_trace(cluster_kind: str, gpus: int, limit: int, estimates: bool) -> Trace:
    """The first ``limit`` out-of-sample PAI jobs (the later 30% of the shipped rows, as the other simulate
    commands replay), on the cluster called ``cluster_kind``."""
    import numpy as np

    from service.workdir import home
    from training.ingest.sources import get_source
    from training.replay.compare import cluster_for, pai_jobs

    cluster, constrain = cluster_for(cluster_kind, gpus)
    jobs = pai_jobs(None, constrain, limit, None, estimates=estimates, cache=home() / "cache")
    table = get_source("pai2020-jobs").load()
    order = np.argsort(table["submit_time_s"].to_numpy(), kind="stable")
    ids = table["job_id"].astype(str).to_numpy()
    first = jobs[0].job_id if jobs else None
    cut = next((k for k, row in enumerate(order) if ids[row] == first), len(order))
    earlier, replayed = table.iloc[order[:cut]], table.set_index(table["job_id"].astype(str))
    per_gpu = earlier["req_gpu"].astype(float).fillna(0.0).map(lambda g: math.ceil(g) if g > 1 else g)
    gpu_s = per_gpu * earlier["instances"].astype(float) * earlier["duration_s"].astype(float).fillna(0.0)
    history = {key: {str(k): float(v) for k, v in gpu_s.groupby(earlier[key].astype(str)).sum().items()}
               for key in KEYS}
    wanted = [j.job_id for j in jobs]
    keys = {key: dict(zip(wanted, replayed.loc[wanted, key].astype(str).tolist(), strict=True)) for key in KEYS}
    return Trace(cluster, jobs, keys, history)


def queue_config(spec: str, trace: Trace, order: str | None, folder: Path) -> tuple[QueueSet, str, Path]:
    """The queues of ``spec`` (a YAML file, or ``by-user:K`` / ``by-group:K``), the key kind jobs are
    queued by, and the file they were read from (a derived configuration is written to ``folder`` first).
    ``order`` sets every queue's order where given."""
    kind, _, count = spec.partition(":")
    if kind.startswith("by-") and kind[3:] in KEYS:
        key = kind[3:]
        try:
            top = int(count)
        except ValueError:
            raise ValueError(f"--queues {spec}: expected by-{key}:K with K a whole number of queues") from None
        config = queues_by_share(trace.history[key], trace.cluster.total_gpus, top, order or "fifo", SHARED)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"queues-by-{key}-{top}.yaml"
        header = (f"# One queue per PAI {key} among the {top} with the most requested GPU-seconds in the trace's "
                  f"history,\n# the rest in '{SHARED}'; guarantees in proportion, all in one cohort (idle "
                  f"guarantee is borrowed).\n# Edit and pass back with --queues {path.name}.\n")
        path.write_text(header + yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    else:
        key, path = "user", Path(spec)
    queues = load_queues(path, trace.cluster)
    if order is not None:
        queues = QueueSet({n: replace(q, order=order) for n, q in queues.queues.items()}, queues.cohort_parents)
    return queues, key, path


def replay_jobs(trace: Trace, load: float, estimate: str, key: str, queues: QueueSet) -> list[ReplayJob]:
    """The trace's jobs as submitted: arrivals compressed by ``load``, each told ``estimate`` of its duration."""
    if estimate not in ESTIMATES:
        raise KeyError(f"unknown estimate {estimate!r}; known: {', '.join(ESTIMATES)}")
    jobs = trace.jobs
    submits = compressed([j.submit_s for j in jobs], load)
    names = sorted(queues.queues)
    keys = trace.keys[key]
    if estimate == "oracle":
        told = [DurationEstimate(j.duration_s, j.duration_s) for j in jobs]
    else:  # a P90 from the estimate's recent errors on the jobs that ended before (none: the P50)
        from training.replay.trace_jobs import causal_p90

        p50 = causal_fill([j.estimate(estimate) for j in jobs])
        p90 = causal_p90([j.submit_s for j in jobs], [j.duration_s for j in jobs], p50).tolist()
        told = [DurationEstimate(a, b) for a, b in zip(p50, p90, strict=True)]
    return [ReplayJob(j.job if estimate == "oracle" else replace(j.job, duration_s=math.nan),
                      queue_of(keys[j.job_id], names, SHARED), submit, j.duration_s, e)
            for j, submit, e in zip(jobs, submits, told, strict=True)]


def told_p90_coverage(jobs: Sequence[ReplayJob]) -> dict[str, float | int | None]:
    """How many jobs were told a P90, and the share of them that ran no longer than it (0.9 if calibrated)."""
    told = [j for j in jobs if not math.isnan(j.estimate.p90_s)]
    covered = sum(j.duration_s <= j.estimate.p90_s for j in told)
    return {"jobs_with_p90": len(told), "p90_coverage": covered / len(told) if told else None}


Variant = tuple[str, QueueSet, ReplaySettings]


def variants(queues: QueueSet, settings: ReplaySettings, ablation: bool) -> list[Variant]:
    """The configuration as given (``full``), and with ``ablation`` each of its features turned off in turn:
    preemption, opportunistic submission, pre-scheduling, the opportunistic start of jobs that waited long enough,
    borrowing (every queue out of its cohort)."""
    found: list[Variant] = [("full", queues, settings)]
    if not ablation:
        return found
    scheduling = settings.scheduling
    if scheduling.preemption:
        found.append(("no-preemption", queues, replace(settings, scheduling=replace(scheduling, preemption=False))))
    if settings.opportunistic:
        found.append(("no-opportunistic", queues, replace(settings, opportunistic=False)))
    if scheduling.prescheduling_horizon_s > 0:
        found.append(("no-prescheduling", queues,
                      replace(settings, scheduling=replace(scheduling, prescheduling_horizon_s=0.0))))
    if math.isfinite(scheduling.opportunistic_after_s):
        found.append(("no-opportunistic-after", queues,
                      replace(settings, scheduling=replace(scheduling, opportunistic_after_s=math.inf))))
    if any(q.cohort is not None for q in queues.queues.values()):
        alone = QueueSet({n: replace(q, cohort=None, borrowing_limit={}) for n, q in queues.queues.items()})
        found.append(("no-borrowing", alone, settings))
    return found


def settings_json(queues: QueueSet, settings: ReplaySettings) -> dict[str, Any]:
    scheduling: SchedulingSettings = settings.scheduling
    return {"preemption": scheduling.preemption, "opportunistic": settings.opportunistic,
            "prescheduling_horizon_s": scheduling.prescheduling_horizon_s,
            "opportunistic_after_s": (scheduling.opportunistic_after_s
                                      if math.isfinite(scheduling.opportunistic_after_s) else None),
            "borrowing": any(q.cohort is not None for q in queues.queues.values()),
            "orders": sorted({q.order for q in queues.queues.values()})}


def runs_table(report: dict[str, Any]) -> Table:
    table = Table(Column("run", no_wrap=True), "finished", "never started", "mean JCT s", "p95 JCT s", "mean wait s",
                  "quota violations", "preempted GPU-h", "idle GPU-h while waiting", "fairness (Jain)", "passes",
                  "pass p95 ms", "wall s", title=_title(report))
    for name, s in report["runs"].items():
        table.add_row(name, f"{s['finished']:,}", f"{s['never_started']:,}", _f(s["jct_mean_s"]),
                      _f(s["jct_p95_s"]), _f(s["wait_mean_s"]), f"{s['quota_violations']:,}",
                      _f(s["preempted_gpu_h"], 1), _f(s["idle_gpu_h_while_waiting"], 1),
                      _f(s["fairness_jain_slowdown"], 3), f"{s['passes']:,}", _f(s["pass_ms_p95"], 1),
                      _f(s["wall_s"], 1))
    return table


def waits_table(report: dict[str, Any]) -> Table:
    """Mean wait per queue (s), one column per run."""
    runs = report["runs"]
    table = Table(Column("queue", no_wrap=True), "guaranteed GPUs", *(f"{name}: mean wait s" for name in runs),
                  title="mean wait per queue (finished jobs)")
    guarantees: dict[str, float] = report["guaranteed_gpus"]
    for queue in sorted(guarantees, key=lambda q: (-guarantees[q], q)):
        table.add_row(queue, _f(guarantees[queue]), *(_f(s["wait_mean_s_by_queue"].get(queue)) for s in runs.values()))
    return table


def _title(report: dict[str, Any]) -> str:
    return (f"{report['jobs']:,} PAI jobs at load x{report['load']:g} on {report['cluster']} "
            f"({report['gpus']:,} GPUs), {report['estimate']} estimates, placement {report['placement']}")


def _f(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def run_all(trace_jobs: Sequence[ReplayJob], cluster: Cluster, runs: list[Variant], placement: str,
            tick: Callable[[str, int], None]) -> dict[str, dict[str, Any]]:
    """Each run of ``runs`` on the same jobs, with a fresh placement policy each (the learning policies
    learn from the jobs they are asked about); its summary with its settings."""
    from placement import online_policy, replay_scheduled, summarise_replay

    def heard(run: str) -> Callable[[int], None]:
        return lambda arrived: tick(run, arrived)

    found: dict[str, dict[str, Any]] = {}
    for name, queues, settings in runs:
        result = replay_scheduled(cluster, trace_jobs, queues, online_policy(placement, explain=False), settings,
                                  progress=heard(name))
        found[name] = {"settings": settings_json(queues, settings), **summarise_replay(result)}
    return found
