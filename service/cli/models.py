"""``gpuplace evaluate``, ``train``, ``predict`` and ``models``: estimators and the model registry.

The ML stack and MLflow are imported inside the commands, so that the rest of the command line starts fast.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from service.cli.console import make_console, progress
from service.cli.errors import CommandError
from service.workdir import home, mlflow_uri
from training.dask_cluster import ENV_VAR as DASK_ENV_VAR  # no dask until a command connects

DEFAULT_MODEL_NAME = "gpuplace-estimators"
LABELLED_SOURCES = ("pai2020-jobs", "pai2020", "philly", "openb2023", "dlrm2025")
"""The sources with training labels (``training.features.targets.TARGETS``, which imports pandas)."""

console = make_console()
DaskSchedulerOpt = Annotated[str | None, typer.Option(
    "--dask-scheduler", envvar=DASK_ENV_VAR, show_envvar=True,
    help="run on a Dask cluster: its scheduler's address (tcp://host:8786) or local:N (N worker processes on this "
         "machine); see docs/scale-out.md")]


def dask_scheduler(address: str | None) -> str | None:
    """``address`` checked (``None`` where it is empty: this process); a ``CommandError`` naming a malformed one."""
    if not address:
        return None
    import logging

    from training.dask_cluster import local_workers

    try:
        local_workers(address)
    except ValueError as exc:
        raise CommandError(f"--dask-scheduler: {exc}") from None
    # The command says what it did; distributed's notes on every worker and connection coming and going would bury
    # that line. Its import sets its own level, so it is imported first: this is the Dask path anyway.
    import distributed  # noqa: F401

    logging.getLogger("distributed").setLevel(logging.WARNING)
    # Its shuffles note each start and stop as a warning, a few per trace: what to act on is only an error there.
    logging.getLogger("distributed.shuffle").setLevel(logging.ERROR)
    return address


TraceOpt = Annotated[Path | None, typer.Option(
    "--trace", help="a canonical Parquet trace (a file as gpuplace ingest writes it, or a folder of them) read, "
                    "featured and fitted on the Dask workers, for traces larger than this machine's memory; needs "
                    "--dask-scheduler; targets with a history rule, families lgbm and history")]


def stored_trace(trace: Path | None, scheduler: str | None, algo: str) -> Path | None:
    """``--trace`` checked against what it needs: a scheduler, an existing path, a family that fits on partitions."""
    if trace is None:
        return None
    if scheduler is None:
        raise CommandError("--trace: the trace is read on a Dask cluster; give --dask-scheduler (local:N for N "
                           "worker processes on this machine)")
    if not trace.exists():
        raise CommandError(f"--trace {trace}: no such file or folder")
    if algo not in ("lgbm", "history"):
        raise CommandError(f"--trace: --algo {algo!r} has no fit on Dask partitions; lgbm or history")
    return trace


@contextmanager
def unreachable_as_error() -> Iterator[None]:
    """A scheduler that does not answer: one line naming it, not a traceback."""
    from training.dask_cluster import SchedulerUnreachable

    try:
        yield
    except SchedulerUnreachable as exc:
        raise CommandError(f"--dask-scheduler: {exc}") from None


def evaluate(
    source: Annotated[str, typer.Option(help=f"one of {', '.join(LABELLED_SOURCES)}")] = "pai2020-jobs",
    target: Annotated[str, typer.Option(help="duration, bandwidth, ... (what the source has labels for)")] = "duration",
    out: Annotated[Path | None, typer.Option(help="folder for report.json and plots")] = None,
    seed: Annotated[int, typer.Option(help="seed of every stochastic part")] = 0,
    test_share: Annotated[float, typer.Option(min=0.05, max=0.9, help="later share of jobs held out")] = 0.3,
    every: Annotated[bool, typer.Option("--all", help="every target of every shipped source")] = False,
    validation: Annotated[bool, typer.Option(
        "--validation", help="leave the later jobs out and score on the later share of the earlier ones "
        "(where model choices are made)")] = False,
    scheduler: DaskSchedulerOpt = None,
    trace: TraceOpt = None,
    algo: Annotated[str, typer.Option(help="with --trace: the model family, lgbm or history, scored beside the "
                                           "causal baselines (and the rule alone where the target has one)")] = "lgbm",
) -> None:
    """Fit baselines and models on earlier jobs, score them on later ones; write JSON and PNG plots. With
    --dask-scheduler, the LightGBM boosters are fitted on the Dask cluster (slightly different trees); with
    --trace too, everything runs on the cluster's partitions of a stored trace."""
    import json

    from training.features.targets import TARGETS
    from training.ingest.sources import SOURCES
    from training.pipeline.report import run_report  # imports the ML stack: only when a command needs it

    scheduler = dask_scheduler(scheduler)
    stored = stored_trace(trace, scheduler, algo)
    if not every and target not in TARGETS.get(source, {}):
        known = "; ".join(f"{s}: {', '.join(t)}" for s, t in TARGETS.items())
        raise CommandError(f"no labels for --source {source!r} --target {target!r}; sources and targets: {known}")
    if stored is not None:
        if every or validation:
            raise CommandError("--trace evaluates one --source and --target on the later jobs: not with --all or "
                               "--validation")
        _evaluate_stored(source, target, stored, out, scheduler, algo, seed, test_share)
        return
    pairs = [(s, t) for s, targets in TARGETS.items() if SOURCES[s].shipped for t in targets] if every \
        else [(source, target)]
    base = out or home() / "reports"
    summary: dict[str, Any] = {}
    with progress(console, "evaluating", total=len(pairs)) as steps, unreachable_as_error():
        for src, tgt in pairs:
            def step(name: str, prefix: str = f"{src} {tgt}") -> None:
                steps.update(f"{prefix}: fitting {name}")

            folder = base / f"{src}-{tgt}{'-validation' if validation else ''}"
            report = run_report(src, tgt, folder, seed=seed, test_share=test_share, progress=step,
                                validation=validation, scheduler=scheduler)
            summary[f"{src}/{tgt}"] = {n: {k: e[k] for k in ("male", "p90_coverage", "mae")}
                                       for n, e in report["estimators"].items()}
            steps.advance()
            console.print(estimator_table(report))
    base.mkdir(parents=True, exist_ok=True)
    (base / "summary.json").write_text(json.dumps(summary, indent=2))
    console.print(f"reports and plots under {base}")


def _evaluate_stored(source: str, target: str, trace: Path, out: Path | None, scheduler: str | None, algo: str,
                     seed: int, test_share: float) -> None:
    from training.pipeline.stored import evaluate_stored

    assert scheduler is not None  # stored_trace asked for it
    folder = (out or home() / "reports") / f"{source}-{target}-partitioned"
    with progress(console, "evaluating") as steps, unreachable_as_error():
        try:
            report = evaluate_stored(source, target, trace, folder, scheduler, algo, seed, test_share, steps.update)
        except ValueError as exc:
            raise CommandError(f"--trace {trace}: {exc}") from None
    console.print(estimator_table(report))
    console.print(f"report and plots under {folder}")


def estimator_table(report: dict[str, Any]) -> Table:
    unit = report["unit"]
    held = "validation jobs (the later share of the earlier jobs)" if report["split"].get("validation") \
        else "later jobs held out"
    table = Table("estimator", f"MAE ({unit})", f"MedAE ({unit})", "MALE", "P90 coverage", "MALE by depth",
                  title=f"{report['source']} {report['target']}: {report['split']['test_rows']:,} {held}")
    for name, e in report["estimators"].items():
        depth = "  ".join(f"{k}:{v['male']:.2f}" for k, v in e["by_depth"].items() if v["male"] is not None)
        coverage = "-" if e["p90_coverage"] is None else f"{e['p90_coverage']:.3f}"
        table.add_row(name, f"{e['mae']:,.1f}", f"{e['medae']:,.1f}", f"{e['male']:.4f}", coverage, depth)
    for name, e in report["reference_in_sample"].items():
        table.add_row(f"[dim]{name} (in-sample reference)[/]", f"{e['mae']:,.1f}", f"{e['medae']:,.1f}",
                      f"{e['male']:.4f}", "-", "")
    return table


NameOpt = Annotated[str, typer.Option("--name", help="registered model name")]
ALGOS = ("lgbm", "rf", "history")
"""``history``: the history rule with a calibrated P90 and no learner, for targets that have one."""
REQUEST_TIMEOUT_S = 120
"""Per request to a tracking server: uploads of a trained bundle take a while."""
REQUEST_RETRIES = 2
models_app = typer.Typer(help="The model registry: versions, aliases, promotion.", no_args_is_help=True)


def registry(name: str = DEFAULT_MODEL_NAME) -> Any:
    """The model registry of the working folder (MLflow store from ``mlflow_uri``)."""
    import logging

    from models.registry import ModelRegistry

    # The command says what it did; MLflow's own notes on creating its tables, and urllib3's on each retry
    # of a server that does not answer, would bury that line.
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    ModelRegistry.bound_requests(REQUEST_TIMEOUT_S, REQUEST_RETRIES)  # a server that is down: an error in seconds
    home().mkdir(parents=True, exist_ok=True)
    uri = mlflow_uri()
    remote = uri.startswith(("http://", "https://"))  # a tracking server keeps the artifacts itself
    return ModelRegistry(uri, name, artifact_root=None if remote else home() / "mlartifacts")


def train(
    source: Annotated[list[str] | None, typer.Option(help="source(s) to learn from (default pai2020-jobs)")] = None,
    algo: Annotated[str, typer.Option(help="model family: lgbm, rf or history")] = "lgbm",
    seed: Annotated[int, typer.Option(help="seed of every stochastic part")] = 0,
    test_share: Annotated[float, typer.Option(min=0.05, max=0.9, help="later share of jobs held out")] = 0.3,
    name: NameOpt = DEFAULT_MODEL_NAME,
    scheduler: DaskSchedulerOpt = None,
    trace: TraceOpt = None,
) -> None:
    """Train a bundle on real traces, log it to MLflow and register it as the challenger. With --dask-scheduler,
    the LightGBM boosters are fitted on the Dask cluster; with --trace too, every target of the source is trained on
    the cluster's partitions of that stored trace."""
    from training.pipeline.train import train_and_register

    if algo not in ALGOS:
        raise CommandError(f"--algo {algo!r}: one of {', '.join(ALGOS)}")
    scheduler = dask_scheduler(scheduler)
    stored = stored_trace(trace, scheduler, algo)
    if stored is not None and len(source or []) > 1:
        raise CommandError("--trace holds one source's jobs: give one --source")
    store = registry(name)
    with progress(console, "training") as steps, unreachable_as_error():
        if stored is not None:
            from training.pipeline.stored import train_stored_and_register

            assert scheduler is not None  # stored_trace asked for it
            try:
                result = train_stored_and_register(store, (source or ["pai2020-jobs"])[0], stored, scheduler, algo,
                                                   seed, test_share, progress=steps.update)
            except ValueError as exc:
                raise CommandError(f"--trace {stored}: {exc}") from None
        else:
            result = train_and_register(store, source or ["pai2020-jobs"], algo, seed, test_share,
                                        progress=steps.update, scheduler=scheduler)
    for report in result.reports.values():
        console.print(estimator_table(report))
    console.print(f"registered {name} version {result.version} (alias challenger), run {result.run_id}")


@models_app.command("list")
def list_versions(name: NameOpt = DEFAULT_MODEL_NAME) -> None:
    """Versions, aliases, headline metrics, the gpuplace each needs and whether this installation loads it."""
    from models.requirements import VERSION_TAG, installed, loadability

    here = installed("gpuplace") or "?"
    table = Table("version", "aliases", "algo", "sources", "duration MALE", "P90 coverage",
                  "best duration baseline MALE", "gpuplace", f"loads here (gpuplace {here})",
                  title=f"registered model {name} ({mlflow_uri()})")
    versions = registry(name).versions()
    if not versions:
        console.print(f"no versions of {name} registered at {mlflow_uri()}: run `gpuplace train`")
        return
    for info in versions:
        baselines = [v for k, v in info.metrics.items() if k.startswith("duration.baseline.") and k.endswith(".male")]
        metric = info.metrics.get
        loads = loadability(info.tags)
        shown = {"yes": "[green]yes[/]", "no": "[red]no[/]", "unsure": "[yellow]unsure[/]"}.get(loads.verdict,
                                                                                               loads.verdict)
        table.add_row(info.version, ", ".join(info.aliases), info.params.get("algo", ""),
                      info.params.get("sources", ""), _fmt(metric("duration.model.male")),
                      _fmt(metric("duration.model.p90_coverage")), _fmt(min(baselines) if baselines else None),
                      info.tags.get(VERSION_TAG, "-"), shown + (f": {loads.reason}" if loads.reason else ""))
    console.print(table)


@models_app.command("promote")
def promote(name: NameOpt = DEFAULT_MODEL_NAME,
            margin: Annotated[float, typer.Option(min=0.0, help="required MALE improvement")] = 0.0) -> None:
    """Make the challenger the champion if it beats the champion on the same holdout."""
    from training.pipeline.promote import promote as gate

    decision = gate(registry(name), margin)
    verdict = "[green]promoted[/]" if decision.promoted else "[yellow]not promoted[/]"
    console.print(f"{verdict}: challenger {decision.challenger}, champion before {decision.champion_before}: "
                  f"{decision.reason}")


def predict(
    job: Annotated[str, typer.Option(help="job description as JSON text, or @file.json (an object or a list)")],
    version: Annotated[str, typer.Option(help="alias or version number")] = "champion",
    name: NameOpt = DEFAULT_MODEL_NAME,
) -> None:
    """Estimate what a job will need, with P50 and P90, from a registered bundle."""
    import json

    import pandas as pd

    from training.needs.vocabulary import validate
    from training.pipeline.bundle import job_table

    where = "--job"
    if job.startswith("@"):
        path = Path(job[1:])
        where = f"--job file {path}"
        try:
            text = path.read_bytes().decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise CommandError(f"{where}: not UTF-8 text (byte {exc.start})") from exc
    else:
        text = job
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"{where}: not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from exc
    rows = payload if isinstance(payload, list) else [payload]
    if not rows or not all(isinstance(row, dict) for row in rows):
        raise CommandError(f"{where}: must be a JSON object or a non-empty list of objects")
    try:  # hyperparameters may be given as an object; the bundle reads them as JSON text
        rows = [{**row, "hyperparams": json.dumps(validate(row["hyperparams"]))}
                if isinstance(row.get("hyperparams"), dict) else row for row in rows]
        job_table(pd.DataFrame(rows))  # refused before the model is loaded, which takes seconds
    except ValueError as exc:
        raise CommandError(f"{where}: {exc}") from exc
    _, bundle = registry(name).load(version)
    try:
        result = bundle.predict(None, pd.DataFrame(rows))
    except ValueError as exc:
        raise CommandError(f"{where}: {exc}") from exc
    typer.echo(result.to_json(orient="records", indent=2))


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"
