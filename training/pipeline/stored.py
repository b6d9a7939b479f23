"""Evaluate and train from a trace stored as canonical Parquet, on a Dask cluster: the trace, its features and its
training rows stay on the workers (``training.ingest.partitioned``, ``training.features.distributed``,
``training.pipeline.partitioned``), for traces larger than this process's memory.

Every target of a source trains and evaluates this way, with the families that fit on partitions: ``lgbm`` (the
rule-corrected estimator where the target has a history rule, the stacked one elsewhere) and ``history`` (the rule
alone; the stacked LightGBM for a target without a rule, as in one process). Beside the model, a report scores the
causal baselines of ``evaluate.baselines`` (they learn at most the training targets' median) and, where the target has
a rule, the rule alone. The report has the single-process report's figures (scores overall and by history depth,
the split, the best causal baseline) and its plots, the predicted-against-actual one drawn from a random sample of
the held-out jobs (:data:`PLOTTED`), since all of them would bring every held-out job here.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from models.calibrated import CalibratedEstimator
from models.registry import ModelRegistry
from models.residual import ResidualEstimator
from training.dask_cluster import connect
from training.features.frames import TargetSpec
from training.features.targets import TARGETS, target_spec
from training.ingest.partitioned import read_trace
from training.pipeline import plots
from training.pipeline.bundle import TargetModel
from training.pipeline.evaluate import baselines, model
from training.pipeline.partitioned import (
    FAMILIES,
    PartitionedSplit,
    Scored,
    fit_on_targets,
    fit_partitioned,
    score_partitioned,
    split_partitioned,
)
from training.pipeline.report import UNITS, finite
from training.pipeline.train import TrainResult, files_digest, headline, register_challenger

Progress = Callable[[str], None]
PLOTTED = 20_000
"""Held-out jobs drawn at random for the predicted-against-actual plot: a picture, not every job in this process."""
RULE_ALONE = "history"
"""The family that is the history rule alone, with its calibrated P90, scored beside the model where there is a
rule."""


def evaluate_stored(source: str, target: str, trace: Path, out: Path, scheduler: str, algo: str = "lgbm",
                    seed: int = 0, test_share: float = 0.3, progress: Progress | None = None) -> dict[str, Any]:
    """Fit the causal baselines, the rule alone (where ``target`` has one) and ``algo`` on the earlier jobs of the
    stored ``trace``, score them on the later ``test_share``; write ``report.json`` under ``out`` and return it."""
    spec = _spec(source, target, algo)
    say = progress or (lambda _: None)
    with connect(scheduler):
        say(f"{source} {target}: features on the workers")
        split = split_partitioned(read_trace(trace), spec, test_share)
        _, scored = _fit_and_score(spec, split, algo, seed, say)
    return _report(source, target, spec, split, scored, algo, seed, trace, scheduler, out)


def train_stored_and_register(registry: ModelRegistry, source: str, trace: Path, scheduler: str, algo: str = "lgbm",
                              seed: int = 0, test_share: float = 0.3, progress: Progress | None = None,
                              needs: bool = True) -> TrainResult:
    """:func:`training.pipeline.train.train_and_register` for every target of ``source``, from the stored ``trace``
    on the Dask cluster at ``scheduler``; the bundle serves from the history state at the end of the trace, as one
    trained in one process does."""
    if source not in TARGETS:
        raise ValueError(f"source {source!r} has no training labels; sources with labels: {', '.join(TARGETS)}")
    say = progress or (lambda _: None)
    targets: dict[str, TargetModel] = {}
    metrics: dict[str, float] = {}
    reports: dict[str, dict[str, Any]] = {}
    logged = {"algo": algo, "seed": str(seed), "test_share": str(test_share), "sources": source,
              "trace": str(trace), f"data_sha256.{source}": files_digest(trace), "dask_scheduler": scheduler,
              "partitioned": "true"}
    with tempfile.TemporaryDirectory(prefix="gpuplace-train-") as tmp, connect(scheduler):
        table = read_trace(trace)
        examples = table.head(5)
        for name in TARGETS[source]:
            spec = _spec(source, name, algo)
            say(f"{source} {name}: features and history state on the workers")
            split = split_partitioned(table, spec, test_share, state=True)
            estimator, scored = _fit_and_score(spec, split, algo, seed, say)
            reports[name] = _report(source, name, spec, split, scored, algo, seed, trace, scheduler, Path(tmp) / name)
            assert split.state is not None  # asked for above
            targets[name] = TargetModel(spec, source, estimator, split.state)
            logged[f"target.{name}"] = f"{source}:{spec.column}"
            metrics.update(headline(name, reports[name]["estimators"], algo))
        run_id, version = register_challenger(registry, targets, logged, metrics, pd.DataFrame(examples), Path(tmp),
                                              needs, say)
    return TrainResult(version, run_id, metrics, reports)


def _spec(source: str, target: str, algo: str) -> TargetSpec:
    if algo not in FAMILIES:
        raise ValueError(f"algo {algo!r} does not fit on Dask partitions; one of {', '.join(FAMILIES)}")
    return target_spec(source, target)


def _fit_and_score(spec: TargetSpec, split: PartitionedSplit, algo: str, seed: int,
                   say: Progress) -> tuple[ResidualEstimator | CalibratedEstimator, dict[str, Scored]]:
    """The causal baselines, the rule alone (where ``spec`` has one) and the model of ``algo``, each fitted on
    ``split.train`` and scored on ``split.test`` (with their answers on a sample of it, for the plots)."""
    sample = np.sort(np.random.default_rng(seed).permutation(split.test_rows)[:PLOTTED])
    say("fitting the causal baselines")
    scored = {name: score_partitioned(fitted, split.test, sample)
              for name, fitted in fit_on_targets(baselines(spec), split.train).items()}
    fitted: ResidualEstimator | CalibratedEstimator | None = None
    for family in dict.fromkeys((RULE_ALONE, algo) if spec.recent_keys else (algo,)):
        say(f"fitting {family} on the workers")
        estimator = fit_partitioned(model(spec, family, seed), split.train)
        scored[family] = score_partitioned(estimator, split.test, sample)
        if family == algo:
            fitted = estimator
    assert fitted is not None
    return fitted, scored


def _report(source: str, target: str, spec: TargetSpec, split: PartitionedSplit, scored: dict[str, Scored],
            algo: str, seed: int, trace: Path, scheduler: str, out: Path) -> dict[str, Any]:
    """The single-process report's figures (``training.pipeline.report.write_report``), written under ``out`` with
    its plots: predicted against actual on a sample of the held-out jobs, calibration and error by depth."""
    entries = {name: s.scores for name, s in scored.items()}
    best = min((n for n in entries if n in baselines(spec)), key=lambda n: entries[n]["male"])
    rows = split.train_rows + split.test_rows
    unit = UNITS.get(spec.column, "")
    subject = f"{source} {target}"
    actual = scored[algo].actual
    files = [plots.predicted_vs_actual({n: scored[n].sample for n in (best, algo)}, actual,
                                       out / "predicted_vs_actual.png", unit,
                                       f"{subject} ({len(actual):,} held-out jobs drawn at random)"),
             plots.calibration(entries, out / "calibration.png", subject),
             plots.error_by_depth(entries, out / "error_by_depth.png", subject)]
    report = {
        "source": source, "target": target, "column": spec.column, "unit": unit,
        "seed": seed, "trace": str(trace), "dask_scheduler": scheduler, "partitioned": True,
        "split": {"train_rows": split.train_rows, "test_rows": split.test_rows,
                  "test_share": split.test_rows / max(rows, 1), "order": "submit_time_s"},
        "estimators": entries, "best_causal_baseline": best, "reference_in_sample": {},
        "notes": ["fitted and scored on the Dask workers' partitions (training.pipeline.partitioned); the "
                  f"predicted-against-actual plot shows {len(actual):,} held-out jobs drawn at random"],
        "plots": [str(f) for f in files],
    }
    clean: dict[str, Any] = finite(report)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(clean, indent=2))
    return clean
