"""``gpuplace retrain`` and ``gpuplace models drift``: learning from the jobs the service completed.

Both read the service's state database (``--database-url``, else ``GPUPLACE_DATABASE_URL``, else the
SQLite file in ``GPUPLACE_HOME``) and the model registry (``GPUPLACE_MLFLOW_URI``).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from service.cli.console import make_console, progress
from service.cli.errors import CommandError
from service.cli.models import ALGOS, DEFAULT_MODEL_NAME, NameOpt, registry
from service.workdir import home

console = make_console()
DatabaseOpt = Annotated[str, typer.Option(help="state database URL (default: the service's)")]


def _store(database_url: str) -> Any:
    from service.settings import Settings
    from service.store import open_store

    return open_store(Settings(database_url=database_url) if database_url else Settings())


def retrain(
    source: Annotated[str, typer.Option(help="trace the feedback extends")] = "pai2020-jobs",
    algo: Annotated[str, typer.Option(help="model family: lgbm or rf")] = "lgbm",
    seed: Annotated[int, typer.Option(help="seed of every stochastic part")] = 0,
    margin: Annotated[float, typer.Option(min=0.0, help="required improvement of the primary metric (MALE)")] = 0.0,
    every: Annotated[float, typer.Option(min=0.0, help="repeat every this many seconds (0 = once)")] = 0.0,
    database_url: DatabaseOpt = "",
    name: NameOpt = DEFAULT_MODEL_NAME,
) -> None:
    """Train a challenger on the trace plus completed jobs' feedback; promote it only if it is better on
    the most recent holdout (and not worse on P90 coverage). Idempotent: unchanged data trains nothing."""
    if algo not in ALGOS:
        raise CommandError(f"--algo {algo!r}: one of {', '.join(ALGOS)}")
    while True:
        if not every:
            _retrain_once(source, algo, seed, margin, database_url, name)
            return
        try:
            _retrain_once(source, algo, seed, margin, database_url, name)
        except Exception as exc:  # a scheduled loop outlives one failed round (a registry briefly down)
            console.print(f"[red]retrain failed[/]: {type(exc).__name__}: {exc}")
        console.print(f"next retrain in {every:.0f} s")
        time.sleep(every)


def _retrain_once(source: str, algo: str, seed: int, margin: float, database_url: str, name: str) -> None:
    from training.ingest.tables import write_tables
    from training.pipeline.feedback import completed_jobs, feedback_table
    from training.pipeline.retrain import retrain as run

    store = _store(database_url)
    gpu_types = {m.name: m.gpu_type for m in store.cached().cluster.machines}
    feedback = feedback_table(completed_jobs(store.completions(), gpu_types))
    write_tables({"feedback": feedback}, home() / "tables")
    with progress(console, "retraining") as steps:
        outcome = run(registry(name), source, feedback, algo, seed, margin, progress=steps.update)
    decision = outcome.decision
    trained = f"trained version {outcome.challenger}" if outcome.trained else \
        f"no new data since version {outcome.challenger}: nothing trained"
    verdict = "[green]promoted[/]" if decision.promoted else "[yellow]champion kept[/]"
    console.print(f"{outcome.feedback_rows:,} feedback rows; {trained}; {verdict} "
                  f"(champion before: {decision.champion_before or 'none'}): {decision.reason}")
    console.print(f"decision logged to MLflow run {outcome.decision_run_id}")


def drift(
    last: Annotated[int, typer.Option(min=1, help="the most recent completed jobs to judge")] = 1000,
    out: Annotated[Path | None, typer.Option(help="folder for drift.json and drift.png")] = None,
    database_url: DatabaseOpt = "",
    name: NameOpt = DEFAULT_MODEL_NAME,
) -> None:
    """Recent prediction errors against the errors measured at training time, per target."""
    from training.pipeline.drift import drift_report, pairs, plot_drift

    rows = _store(database_url).completions()[-last:]
    completed = [{"details": r.details, "completion": r.completion} for r in rows]
    found = pairs(completed)
    if not found:
        console.print(f"no completed jobs with estimates in the last {last:,}: nothing to judge yet "
                      "(POST /v1/jobs/{id}/complete reports them)")
        return
    store = registry(name)
    logged: dict[str, dict[str, float]] = {}

    def trained(version: str) -> dict[str, float]:
        if version not in logged:
            try:
                logged[version] = dict(store.run_info(version).metrics)
            except KeyError:  # the heuristic, or a version of another registry
                logged[version] = {}
        return logged[version]

    report = drift_report(found, trained)
    folder = out or home() / "reports" / "drift"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "drift.json").write_text(json.dumps({"jobs": len(completed), "targets": report}, indent=2))
    plot_drift(report, folder / "drift.png")
    table = Table("target", "model", "jobs", "MALE at training", "recent MALE", "ratio", "P90 cov. at training",
                  "recent P90 cov.", "drifted", title=f"drift over the last {len(completed):,} completed jobs")
    for entry in report.values():
        flag = {True: "[red]yes[/]", False: "no", None: "-"}[entry["drifted"]]
        table.add_row(entry["target"], entry["model_version"], f"{entry['jobs']:,}", _f(entry["train_male"]),
                      _f(entry["recent_male"]), _f(entry["male_ratio"]), _f(entry["train_p90_coverage"]),
                      _f(entry["recent_p90_coverage"]), flag)
    console.print(table)
    console.print(f"written {folder / 'drift.json'} and {folder / 'drift.png'}")


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
