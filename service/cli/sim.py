"""``gpuplace simulate``: replay real traces through the placement policies and queue orders.

The ML stack is imported inside the commands, so the rest of the command line starts fast.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from service.cli.console import make_console, progress
from service.cli.models import DaskSchedulerOpt, dask_scheduler, unreachable_as_error
from service.workdir import home

console = make_console()
app = typer.Typer(help="Replay real traces: JCT, waiting, makespan, allocation, fragmentation.",
                  invoke_without_command=True)

TRACES = ("pai2020-jobs", "openb2023")
TraceOpt = Annotated[str, typer.Option(help="pai2020-jobs (later 30%, out of sample) or openb2023")]
ClusterOpt = Annotated[str, typer.Option(help="pai, big-node, big-node-fluid (the big node as one pool of GPU and CPU "
                                              "capacity, as the PAI trace's simulator counts it: no placement, "
                                              "trace durations), openb or openb-all")]
PlacingClusterOpt = Annotated[str, typer.Option(help="pai, big-node, openb or openb-all (these replays place jobs: "
                                                      "not big-node-fluid, the node as one pool)")]
GpusOpt = Annotated[int, typer.Option(min=1, help="GPUs of the big node")]
RateOpt = Annotated[float, typer.Option(min=0.0, help="arrivals per minute in trace order; 0 = original times")]
JobsOpt = Annotated[int, typer.Option(min=1, help="jobs to replay")]
WindowOpt = Annotated[float, typer.Option(min=1.0, help="batch placements (gga, cpsat, ffd): window length, s")]
LimitOpt = Annotated[float, typer.Option(min=0.05, help="batch placements: solver time limit per window, s")]
BatchJobsOpt = Annotated[int, typer.Option(min=1, help="batch placements: most jobs handed over per window")]
RuntimeOpt = Annotated[str, typer.Option(help="measured: a job runs at the speed of the placement it got (GPU type, "
                                              "spread, shared GPUs; fitted on real profiles); trace: for its "
                                              "trace duration wherever it runs")]
SharingOpt = Annotated[bool, typer.Option(help="jobs asking for a share of a GPU share GPUs; --no-sharing gives "
                                               "each a whole GPU")]
NetworkOpt = Annotated[str, typer.Option(help="Liquid's network term: measured (seconds lost to spread, from the "
                                              "fitted profiles) or bandwidth (bandwidth x distance cost)")]
PLACEMENTS = "liquid, first-fit, pack, balance, random (online), or gga, cpsat, ffd (batch windows)"


@app.callback()
def simulate(
    ctx: typer.Context,
    trace: TraceOpt = "pai2020-jobs",
    cluster: ClusterOpt = "pai",
    queue: Annotated[str, typer.Option(help="fifo, sjf-oracle, sjf-user, sjf-group, sjf-group-gpu, sjf-model, "
                                            "sjf-alibaba-group-gpu, drf")] = "fifo",
    placement: Annotated[str, typer.Option(help=PLACEMENTS)] = "liquid",
    gpus: GpusOpt = 6500, rate: RateOpt = 0.0, jobs: JobsOpt = 20000, out: Path | None = None,
    window: WindowOpt = 60.0, batch_limit: LimitOpt = 1.0, batch_jobs: BatchJobsOpt = 64,
    runtime: RuntimeOpt = "measured", sharing: SharingOpt = True, network_term: NetworkOpt = "measured",
) -> None:
    """Replay one queue and placement policy."""
    if ctx.invoked_subcommand is None:
        _run(trace, cluster, gpus, rate, jobs, [(queue, placement)], out, (window, batch_limit, batch_jobs),
             (runtime, sharing, network_term))


@app.command("compare")
def compare(
    trace: TraceOpt = "pai2020-jobs", cluster: ClusterOpt = "pai", gpus: GpusOpt = 6500, rate: RateOpt = 0.0,
    jobs: JobsOpt = 20000, out: Path | None = None,
    queues: Annotated[str, typer.Option(help="comma-separated queue policies")] =
    "fifo,sjf-oracle,sjf-user,sjf-group,sjf-group-gpu,sjf-model,sjf-alibaba-group-gpu",
    placements: Annotated[str, typer.Option(help=f"comma-separated: {PLACEMENTS}")] = "liquid",
    window: WindowOpt = 60.0, batch_limit: LimitOpt = 1.0, batch_jobs: BatchJobsOpt = 64,
    runtime: RuntimeOpt = "measured", sharing: SharingOpt = True, network_term: NetworkOpt = "measured",
    scheduler: DaskSchedulerOpt = None,
) -> None:
    """Several queue x placement policies on the same jobs, side by side. With --dask-scheduler, each replay is a
    task on the Dask cluster's workers (the same numbers)."""
    runs = [(q, p) for q in queues.split(",") for p in placements.split(",")]
    _run(trace, cluster, gpus, rate, jobs, runs, out, (window, batch_limit, batch_jobs),
         (runtime, sharing, network_term), dask_scheduler(scheduler))


def _check(traces: list[str], runs: list[tuple[str, str]], runtime: str, network_term: str) -> None:
    """KeyErrors naming the known values of whatever is not one."""
    from placement import BATCH_POLICIES, ONLINE_POLICY_NAMES, queue_policy
    from training.replay.compare import NETWORK_TERMS, RUNTIMES

    for trace in traces:
        if trace not in TRACES:
            raise KeyError(f"unknown trace {trace!r}; known: {', '.join(TRACES)}")
    if runtime not in RUNTIMES:
        raise KeyError(f"unknown runtime {runtime!r}; known: {', '.join(RUNTIMES)}")
    if network_term not in NETWORK_TERMS:
        raise KeyError(f"unknown network term {network_term!r}; known: {', '.join(NETWORK_TERMS)}")
    for queue, placement in runs:
        queue_policy(queue)  # KeyError naming the known ones
        if placement not in ONLINE_POLICY_NAMES and placement not in BATCH_POLICIES:
            known = ", ".join([*ONLINE_POLICY_NAMES, *BATCH_POLICIES])
            raise KeyError(f"unknown placement {placement!r}; known: {known}")


def _run(trace: str, cluster_kind: str, gpus: int, rate: float, limit: int, runs: list[tuple[str, str]],
         out: Path | None, batch: tuple[float, float, int], how: tuple[str, bool, str],
         scheduler: str | None = None) -> None:
    from placement import BatchWindow, without_sharing
    from training.dask_cluster import connected
    from training.replay.compare import FLUID, cluster_for, compare, openb_jobs, pai_jobs
    from training.replay.runners import OnDask

    runtime, sharing, network_term = how
    fluid = cluster_kind == FLUID
    if fluid:  # one pool: no placement to choose, none to slow a job down
        runs, runtime = list(dict.fromkeys((q, "fluid") for q, _ in runs)), "trace"
        _check([trace], [(q, "liquid") for q, _ in runs], runtime, network_term)
    else:
        _check([trace], runs, runtime, network_term)
    window = BatchWindow("ffd", every_s=batch[0], time_limit_s=batch[1], max_jobs=batch[2])

    cluster, constrain = cluster_for("big-node" if fluid else cluster_kind, gpus)
    needs_model = any(q == "sjf-model" for q, _ in runs)
    if trace == "openb2023":
        replay = openb_jobs(limit, rate or None)
    else:
        replay = pai_jobs(_champion_duration_model() if needs_model else None, constrain, limit, rate or None,
                          cache=home() / "cache")
    replay = replay if sharing else without_sharing(replay)
    arrivals = f"rate{rate}" if rate else "original"
    folder = out or home() / "simulations" / f"{trace}-{cluster.name}{'-fluid' if fluid else ''}-{arrivals}"
    with progress(console, "replaying", total=len(replay) * len(runs)) as steps, unreachable_as_error(), \
            connected(scheduler) as client:
        done: dict[str, int] = {}

        def tick(run: str, arrived: int) -> None:
            steps.update(f"replaying {run}")  # a line per run where progress is lines, not per arrival
            steps.advance(arrived - done.get(run, 0))
            done[run] = arrived

        summary = compare(cluster, replay, runs, folder, tick, window, runtime, network_term=network_term,
                          runner=OnDask(client) if client is not None else None, fluid=fluid, cache=home() / "cache")
    console.print(summary_table(summary))
    console.print(f"summary.json, per-job CSV and plots: {folder}")


@app.command("sweep")
def sweep_command(
    traces: Annotated[str, typer.Option(help="comma-separated: pai2020-jobs, openb2023")] = "pai2020-jobs",
    seeds: Annotated[str, typer.Option(help="seeds of the workload classes, random placement and batch solvers: "
                                            "0-4, 3 or 1,5,9")] = "0-2",
    queues: Annotated[str, typer.Option(help="comma-separated queue policies")] = "fifo,sjf-oracle,sjf-group-gpu",
    placements: Annotated[str, typer.Option(help=f"comma-separated: {PLACEMENTS}")] = "liquid",
    cluster: PlacingClusterOpt = "pai", gpus: GpusOpt = 6500, rate: RateOpt = 0.0, jobs: JobsOpt = 20000,
    out: Annotated[Path | None, typer.Option(help="folder for sweep.json")] = None,
    window: WindowOpt = 60.0, batch_limit: LimitOpt = 1.0, batch_jobs: BatchJobsOpt = 64,
    runtime: RuntimeOpt = "measured", sharing: SharingOpt = True, network_term: NetworkOpt = "measured",
    scheduler: DaskSchedulerOpt = None,
) -> None:
    """Every trace x seed x queue x placement, each an independent replay; with --dask-scheduler, each replay is a
    task on the Dask cluster's workers (the same numbers as run here). Writes sweep.json."""
    import json

    from placement import BatchWindow, parse_seeds
    from training.dask_cluster import connected
    from training.replay.compare import cluster_for
    from training.replay.runners import OnDask
    from training.replay.sweep import SweepRun, SweepSetup, grid, sweep

    trace_list = [t.strip() for t in traces.split(",") if t.strip()]
    pairs = [(q, p) for q in queues.split(",") for p in placements.split(",")]
    _check(trace_list, pairs, runtime, network_term)
    replayed_on = cluster_for(cluster, gpus)[0]  # an unknown cluster is named before any replay starts
    try:
        seed_list = parse_seeds(seeds)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--seeds") from None
    scheduler = dask_scheduler(scheduler)
    runs = grid(trace_list, seed_list, queues.split(","), placements.split(","))
    setup = SweepSetup(cluster, gpus, jobs, rate or None, runtime, network_term, sharing,
                       BatchWindow("ffd", every_s=window, time_limit_s=batch_limit, max_jobs=batch_jobs))
    model = _champion_duration_model() if any(q == "sjf-model" for q, _ in pairs) else None
    with progress(console, "replaying", total=len(runs)) as steps, unreachable_as_error(), \
            connected(scheduler) as client:
        def done(run: SweepRun) -> None:
            steps.update(f"done {run.name}")
            steps.advance()

        summaries = sweep(runs, setup, OnDask(client) if client is not None else None, model, done=done,
                          cache=home() / "cache")
    folder = out or home() / "simulations" / f"sweep-{cluster}"
    folder.mkdir(parents=True, exist_ok=True)
    report = {"cluster": cluster, "jobs": jobs, "runtime": runtime, "network_term": network_term,
              "dask_scheduler": scheduler, "runs": summaries}
    (folder / "sweep.json").write_text(json.dumps(report, indent=2) + "\n")
    console.print(summary_table({"jobs": jobs, "cluster": replayed_on.name, "gpus": replayed_on.total_gpus,
                                 "runtime": runtime, "runs": summaries}))
    console.print(f"sweep.json: {folder}")


@app.command("fill")
def fill_command(
    pods: Annotated[Path, typer.Option(help="pod list in the openb format (name,cpu_milli,memory_mib,num_gpu,"
                                            "gpu_milli,gpu_spec,...), e.g. data/openb2023/openb_pod_list_default.csv")],
    nodes: Annotated[Path, typer.Option(help="node list (openb format, or a PAI machine spec), e.g. "
                                             "data/openb2023/openb_node_list_all_node.csv")],
    policies: Annotated[str, typer.Option(help="comma-separated online placement policies")] =
    "fgd,first-fit,liquid,pack,balance,random",
    to: Annotated[float, typer.Option(min=0.01, max=10.0, help="fill until the arrived GPU requests reach this "
                                                                "share of the cluster's GPUs")] = 1.3,
    seeds: Annotated[str, typer.Option(help="seeds of the arrival order, drawn as FGD's simulator draws them: "
                                            "42-51, 42 or 1,5,9")] = "42-51",
    out: Annotated[Path | None, typer.Option(help="folder for fill.png and fill.json")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the summary as one JSON object on stdout")] = False,
    derive_variant: Annotated[str | None, typer.Option(
        "--derive", help="fill with a workload derived from the pod list: share:P (P of the GPU pods ask for a "
                         "share of a GPU), multi:P (P take several GPUs), types:P (P are restricted to one GPU "
                         "type) or cpu:P (P of all pods ask for no GPU), P in [0, 1]; see "
                         "placement/sim/derived_pods.py")] = None,
    derive_seed: Annotated[int, typer.Option(help="seed of the pods --derive changes")] = 0,
    known_mix: Annotated[bool, typer.Option(
        "--known-mix", help="give fgd and liquid the typical shapes of the whole pod list before the first arrival, "
                            "as FGD's simulator has them, instead of learning them online: an experiment, not a "
                            "policy (it knows the arrivals in advance)")] = False,
    fgd_ties: Annotated[bool, typer.Option(
        "--fgd-ties", help="break fgd's and liquid's ties as FGD does, to the first machine in cluster order, CPU-only "
                           "pods included (default: a CPU-only pod to the fullest); with --known-mix, fgd then "
                           "makes FGD's own decisions")] = False,
    scheduler: DaskSchedulerOpt = None,
) -> None:
    """The FGD paper's fill-to-capacity experiment: every pod in a shuffled order, then pods drawn with
    replacement, none leaving, until the requests reach --to x the cluster's GPUs; the GPU capacity left
    unallocated along the way, per policy. With --dask-scheduler, each (policy, seed) fill is a task on the Dask
    cluster's workers (the same curves; the decision times are the workers')."""
    import json

    from placement import (
        ONLINE_POLICY_NAMES,
        PlacementConfig,
        derive,
        fill,
        load_cluster,
        load_openb_pods,
        parse_seeds,
        parse_variant,
        summarise_fill,
    )
    from service.cli.fill_report import fill_json, fill_table, plot_fill
    from training.dask_cluster import connected
    from training.replay.runners import OnDask

    names = [p.strip() for p in policies.split(",") if p.strip()]
    for name in names:
        if name not in ONLINE_POLICY_NAMES:
            raise KeyError(f"unknown placement policy {name!r}; known: {', '.join(ONLINE_POLICY_NAMES)}")
    try:
        seed_list = parse_seeds(seeds)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--seeds") from None
    if derive_variant is not None:
        try:
            parse_variant(derive_variant)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--derive") from None
    jobs = load_openb_pods(pods)
    cluster = load_cluster(nodes)
    if derive_variant is not None:
        jobs = derive(jobs, derive_variant, cluster, derive_seed)
    scheduler = dask_scheduler(scheduler)
    config = PlacementConfig(cpu_pods_to_fullest=False) if fgd_ties else None
    shown = make_console(stderr=True) if as_json else console
    curves: dict[str, list[Any]] = {name: [] for name in names}
    order = [(n, s) for n in names for s in seed_list]
    with progress(shown, "filling", total=len(order)) as steps, unreachable_as_error(), \
            connected(scheduler) as client:
        if client is None:
            for name, seed in order:
                steps.update(f"filling: {name}, seed {seed}")
                curves[name].append(fill(cluster, jobs, name, seed, to, config, known_mix=known_mix))
                steps.advance()
        else:
            runner = OnDask(client)
            shared = runner.share(cluster, "cluster"), runner.share(jobs, "pods")

            def done(position: int) -> None:
                steps.update(f"filled: {order[position][0]}, seed {order[position][1]}")
                steps.advance()

            handles = [runner.submit(fill, *shared, name, seed, to, config, None, known_mix,
                                     name=f"fill-{name}-seed{seed}")
                       for name, seed in order]
            for (name, _), curve in zip(order, runner.results(handles, done), strict=True):
                curves[name].append(curve)
    summaries = [summarise_fill(curves[name], to) for name in names]
    variant = (f"-{derive_variant.replace(':', '')}" if derive_variant else "") + ("-known-mix" if known_mix else "") \
        + ("-fgd-ties" if fgd_ties else "")
    folder = out or home() / "simulations" / f"fill-{pods.stem}{variant}-{nodes.stem}"
    folder.mkdir(parents=True, exist_ok=True)
    report = fill_json(summaries)
    (folder / "fill.json").write_text(json.dumps(report, indent=2) + "\n")
    derived = f" derived {derive_variant} (seed {derive_seed})" if derive_variant else ""
    derived += ", typical shapes known in advance" if known_mix else ""
    derived += ", FGD's ties" if fgd_ties else ""
    title = f"{pods.name}{derived} on {nodes.name} ({cluster.total_gpus:,} GPUs), seeds {seeds}"
    plot_fill(curves, to, folder / "fill.png", title)
    if as_json:
        typer.echo(json.dumps(report))
    else:
        console.print(fill_table(summaries, title))
    shown.print(f"fill.json and fill.png: {folder}")


def _champion_duration_model() -> Any:
    from models.registry import CHAMPION
    from service.cli.models import registry as working_registry

    registry = working_registry()
    if registry.alias_version(CHAMPION) is None:
        raise typer.BadParameter("sjf-model needs a champion model: run `gpuplace train` then `gpuplace models "
                                 "promote` (or leave sjf-model out of --queues)")
    _, bundle = registry.load(CHAMPION)
    if "duration" not in bundle.targets or bundle.targets["duration"].source != "pai2020-jobs":
        raise typer.BadParameter("the champion has no duration model trained on pai2020-jobs")
    return bundle.targets["duration"].estimator


def summary_table(summary: dict[str, Any]) -> Table:
    table = Table("queue/placement", "finished", "never fit", "mean JCT s", "median JCT s", "p95 JCT s", "mean wait s",
                  "makespan h", "GPU alloc", "fragmentation", "user slowdown", "GPU-h lost: spread", "sharing",
                  title=f"{summary['jobs']:,} jobs on {summary['cluster']} ({summary['gpus']:,} GPUs), "
                        f"{summary.get('runtime', 'trace')} runtime")
    for name, s in summary["runs"].items():
        table.add_row(name, f"{s['finished']:,}", f"{s['never_fit']:,}", _f(s.get("jct_mean_s")),
                      _f(s.get("jct_median_s")), _f(s.get("jct_p95_s")), _f(s.get("wait_mean_s")),
                      _f((s.get("makespan_s") or 0) / 3600, 1), f"{s['gpu_allocation']:.3f}",
                      f"{s['fragmentation']:.3f}", _f(s.get("user_slowdown_mean"), 2), _f(s.get("lost_spread_gpu_h")),
                      _f(s.get("lost_share_gpu_h")))
    return table


def _f(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


@app.command("scheduled")
def scheduled_command(
    jobs: JobsOpt = 20000,
    load: Annotated[float, typer.Option(min=0.01, help="arrivals this many times as dense as in the trace (the "
                                                        "gaps between submissions divided by it): jobs queue")] = 1.0,
    queues: Annotated[str, typer.Option(help="a queue file (YAML, the shape PUT /v1/queues takes), or by-user:K / "
                                             "by-group:K: one queue per PAI user (group) among the K with the most "
                                             "GPU-seconds, the rest in 'shared', written to --out to edit")] =
    "by-user:8",
    order: Annotated[str | None, typer.Option(help="fifo, sjf or priority for every queue (default: the file's; "
                                                   "fifo for derived queues)")] = None,
    estimate: Annotated[str, typer.Option(help="the scheduler's duration estimate: oracle (the real duration) or "
                                               "the causal history mean of the user, group or group-gpu (SJGG)")] =
    "group-gpu",
    preemption: Annotated[bool, typer.Option(help="let guaranteed jobs preempt")] = True,
    opportunistic: Annotated[bool, typer.Option(help="submit a job opportunistic when its queue's guaranteed GPUs "
                                                     "(running and pending) would go beyond its guarantee")] = False,
    prescheduling_s: Annotated[float, typer.Option(min=0.0, help="pre-scheduling horizon, s (0: off)")] = 0.0,
    opportunistic_after_s: Annotated[float | None, typer.Option(
        min=0.0, help="a guaranteed job that has waited this many seconds over its queue's quota (or behind a "
                      "reservation it would delay) may start opportunistically (default: never)")] = None,
    placement: Annotated[str, typer.Option(help="online placement policy")] = "liquid",
    cluster: PlacingClusterOpt = "pai", gpus: GpusOpt = 6500,
    ablation: Annotated[bool, typer.Option(help="also run with each feature that is on turned off, on the same "
                                                "jobs, side by side")] = False,
    out: Annotated[Path | None, typer.Option(help="folder for scheduled.json and derived queue files")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as one JSON object on stdout")] = False,
) -> None:
    """Replay PAI jobs through the scheduler core the service runs (queues, quotas, borrowing, preemption,
    opportunistic jobs, reservations): JCT, waits per queue, quota violations, preempted and idle GPU-hours,
    fairness. Writes scheduled.json."""
    import json

    from placement import ONLINE_POLICY_NAMES, ORDERS, ReplaySettings, SchedulingSettings
    from service.cli import scheduled_report as report_of

    if placement not in ONLINE_POLICY_NAMES:
        raise KeyError(f"unknown placement {placement!r}; known: {', '.join(ONLINE_POLICY_NAMES)}")
    if order is not None and order not in ORDERS:
        raise KeyError(f"unknown order {order!r}; known: {', '.join(ORDERS)}")
    if estimate not in report_of.ESTIMATES:
        raise KeyError(f"unknown estimate {estimate!r}; known: {', '.join(report_of.ESTIMATES)}")
    shown = make_console(stderr=True) if as_json else console
    trace = report_of.pai_trace(cluster, gpus, jobs, estimate != "oracle")
    folder = out or home() / "simulations" / f"scheduled-{trace.cluster.name}-load{load:g}"
    try:
        queue_set, key, queue_file = report_of.queue_config(queues, trace, order, folder)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--queues") from None
    submitted = report_of.replay_jobs(trace, load, estimate, key, queue_set)
    settings = ReplaySettings(SchedulingSettings(
        preemption=preemption, prescheduling_horizon_s=prescheduling_s,
        opportunistic_after_s=math.inf if opportunistic_after_s is None else opportunistic_after_s), opportunistic)
    runs = report_of.variants(queue_set, settings, ablation)
    with progress(shown, "replaying", total=len(submitted) * len(runs)) as steps:
        done: dict[str, int] = {}

        def tick(run: str, arrived: int) -> None:
            if arrived != done.get(run, 0):
                steps.update(f"replaying {run}")
                steps.advance(arrived - done.get(run, 0))
                done[run] = arrived

        results = report_of.run_all(submitted, trace.cluster, runs, placement, tick)
    report = {"jobs": len(submitted), "cluster": trace.cluster.name, "gpus": trace.cluster.total_gpus, "load": load,
              "estimate": estimate, "told": report_of.told_p90_coverage(submitted), "placement": placement,
              "queues": str(queue_file), "queued_by": key,
              "guaranteed_gpus": {n: q.guarantee.get("gpus", 0.0) for n, q in queue_set.queues.items()},
              "runs": results}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scheduled.json").write_text(json.dumps(report, indent=2) + "\n")
    from training.replay.plots import scheduled_runs

    scheduled_runs(report, folder / "scheduled.png")
    if as_json:
        typer.echo(json.dumps(report))
    else:
        console.print(report_of.runs_table(report))
        console.print(report_of.waits_table(report))
    shown.print(f"scheduled.json, scheduled.png: {folder}; queues: {queue_file}")
