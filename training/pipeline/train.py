"""Train one bundle on real traces, log the run to MLflow and register it as the ``challenger``."""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd
from mlflow.models import infer_signature

from models.registry import CHALLENGER, ModelRegistry
from models.requirements import pip_requirements, version_tags
from training.dask_cluster import connected
from training.features.targets import TARGETS
from training.ingest.sources import get_source
from training.needs.estimator import shipped_needs
from training.pipeline.bundle import JOB_COLUMNS, EstimatorBundle, TargetModel
from training.pipeline.distributed import on_workers
from training.pipeline.evaluate import baselines, evaluate, model, time_split
from training.pipeline.report import write_report

Progress = Callable[[str], None]
HEADLINE = ("male", "mae", "medae", "p90_coverage", "under_rate", "raw_p90_coverage")


@dataclass(frozen=True)
class TrainResult:
    version: str
    run_id: str
    metrics: dict[str, float]
    reports: dict[str, dict[str, Any]]


def source_digest(source: str) -> str:
    """sha256 of the shipped file(s) of ``source``: which data a model saw."""
    path = get_source(source).default_path()
    return "unshipped" if path is None else files_digest(path)


def files_digest(path: Path) -> str:
    """sha256 of the file at ``path``, or of the files under the folder in name order, read a block at a time."""
    files = sorted(path.rglob("*")) if path.is_dir() else [path]
    digest = hashlib.sha256()
    for file in files:
        if file.is_file():
            with file.open("rb") as handle:
                while block := handle.read(1 << 20):
                    digest.update(block)
    return digest.hexdigest()


def train_and_register(registry: ModelRegistry, sources: Sequence[str], algo: str = "rf", seed: int = 0,
                       test_share: float = 0.3, progress: Progress | None = None,
                       params: dict[str, Any] | None = None, tables: Mapping[str, pd.DataFrame] | None = None,
                       extra_params: Mapping[str, str] | None = None, needs: bool = True,
                       scheduler: str | None = None) -> TrainResult:
    """Fit ``algo`` for every target of ``sources``, evaluate on the later ``test_share`` of jobs against
    the causal baselines, log everything and register the bundle with alias ``challenger``.

    ``tables`` replaces a source's shipped table (e.g. the trace followed by feedback rows);
    ``extra_params`` are logged with the run (e.g. which feedback the model saw). ``needs``: carry the
    estimators from stated hyperparameters (``training.needs``), fitted on the shipped measurements. ``scheduler``:
    fit the LightGBM boosters on that Dask cluster (``training.dask_cluster``, ``training.pipeline.distributed``)."""
    say = progress or (lambda _: None)
    targets: dict[str, TargetModel] = {}
    metrics: dict[str, float] = {}
    reports: dict[str, dict[str, Any]] = {}
    logged: dict[str, str] = {"algo": algo, "learner_params": repr(params or {}), "seed": str(seed),
                              "test_share": str(test_share), "sources": ",".join(sources), **(extra_params or {}),
                              **({"dask_scheduler": scheduler} if scheduler else {})}
    examples: list[pd.DataFrame] = []
    with tempfile.TemporaryDirectory(prefix="gpuplace-train-") as tmp, connected(scheduler):
        for source in sources:
            say(f"loading {source}")
            table = tables[source] if tables and source in tables else get_source(source).load()
            logged[f"data_sha256.{source}"] = source_digest(source)
            for name, spec in TARGETS[source].items():
                if name in targets:
                    raise ValueError(f"two sources give target {name!r}; register them under different --name")
                say(f"{source} {name}: features")
                split = time_split(table, spec, test_share)
                estimator = model(spec, algo, seed, params)
                estimator = on_workers(estimator) if scheduler else estimator
                result = evaluate(split, {**baselines(spec), algo: estimator}, _prefixed(say, f"{source} {name}"))
                reports[name] = write_report(source, name, split, result, (algo,), Path(tmp) / name, seed)
                targets[name] = TargetModel(spec, source, estimator, split.state)
                logged[f"target.{name}"] = f"{source}:{spec.column}"
                metrics.update(headline(name, reports[name]["estimators"], algo))
                examples.append(split.table.iloc[split.test[:5]])
        run_id, version = register_challenger(registry, targets, logged, metrics, pd.concat(examples), Path(tmp),
                                              needs, say)
    return TrainResult(version, run_id, metrics, reports)


def register_challenger(registry: ModelRegistry, targets: dict[str, TargetModel], logged: dict[str, str],
                        metrics: dict[str, float], examples: pd.DataFrame, artifacts: Path, needs: bool,
                        say: Progress) -> tuple[str, str]:
    """Carry the estimators from stated hyperparameters (where ``needs``), log the run, register the bundle of
    ``targets`` and give it the alias ``challenger``; (run id, version)."""
    carried = shipped_needs(say) if needs else None
    for target, where in (carried.sources() if carried else {}).items():
        logged[f"needs.{target}"] = where
    say("registering")
    run_id, version = log_and_register(registry, EstimatorBundle(targets, needs=carried), logged, metrics, examples,
                                       artifacts)
    registry.set_alias(CHALLENGER, version)
    return run_id, version


def _prefixed(say: Progress, prefix: str) -> Progress:
    return lambda estimator: say(f"{prefix}: fitting {estimator}")


def headline(target: str, estimators: dict[str, Any], algo: str) -> dict[str, float]:
    """The metrics a run logs of one target: the model's headline figures and each baseline's MALE."""
    found: dict[str, float] = {}
    for name, entry in estimators.items():
        prefix = f"{target}.model" if name == algo else f"{target}.baseline.{name.replace(':', '.')}"
        for key in HEADLINE if name == algo else ("male",):
            if entry.get(key) is not None:
                found[f"{prefix}.{key}"] = float(entry[key])
    return found


def log_and_register(registry: ModelRegistry, bundle: EstimatorBundle, params: dict[str, str],
                     metrics: dict[str, float], examples: pd.DataFrame, artifacts: Path) -> tuple[str, str]:
    """Log a run (parameters, metrics, the files under ``artifacts``) and register ``bundle`` from it; (run id,
    version). ``examples``: a few jobs, the signature's and the input example's."""
    jobs = examples[[c for c in JOB_COLUMNS if c in examples]].reset_index(drop=True)
    jobs = jobs.astype({c: "object" if str(jobs[c].dtype).startswith(("string", "category")) else "float64"
                        for c in jobs.columns if c not in ("censored",)})
    signature = infer_signature(jobs, bundle.predict(None, jobs))
    # The bundle is a pickle of gpuplace's classes and of fitted library objects: it loads where the same
    # gpuplace and libraries are installed, so the version says which (MLflow's own inference would find
    # only mlflow and cloudpickle).
    requirements = pip_requirements()
    with mlflow.start_run(experiment_id=registry.experiment_id()) as run:
        mlflow.log_params(params)
        mlflow.log_metrics(metrics)
        mlflow.log_artifacts(str(artifacts), artifact_path="evaluation")
        info = mlflow.pyfunc.log_model(name="bundle", python_model=bundle, signature=signature, input_example=jobs,
                                       registered_model_name=registry.name, pip_requirements=requirements)
    version = str(info.registered_model_version)
    registry.tag_version(version, version_tags(requirements))
    return run.info.run_id, version
