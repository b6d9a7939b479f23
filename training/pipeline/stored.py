"""Evaluate and train from a trace stored as canonical Parquet, on a Dask cluster: the trace, its features and its
training rows stay on the workers (``training.ingest.partitioned``, ``training.features.distributed``,
``training.pipeline.partitioned``), for traces larger than this process's memory.

What runs here: the targets with a history rule (PAI's duration), with the families that fit on partitions
(``lgbm``, and ``history``, the rule alone, which is also every report's baseline). A target without a rule has
its estimators fitted in one process only: training names those it leaves out, evaluation refuses them. The
report has the single-process report's figures (scores overall and by history depth, the split) without its
plots, which would bring every held-out job here.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from models.registry import ModelRegistry
from models.residual import ResidualEstimator
from training.dask_cluster import connect
from training.features.frames import TargetSpec
from training.features.targets import TARGETS, target_spec
from training.ingest.partitioned import read_trace
from training.pipeline.bundle import TargetModel
from training.pipeline.evaluate import model
from training.pipeline.partitioned import (
    FAMILIES,
    PartitionedSplit,
    fit_partitioned,
    score_partitioned,
    split_partitioned,
)
from training.pipeline.report import UNITS, finite
from training.pipeline.train import TrainResult, files_digest, headline, register_challenger

Progress = Callable[[str], None]
BASELINE = "history"
"""What every report sets the model beside: the history rule alone, with its calibrated P90."""


def partitioned_targets(source: str) -> tuple[list[str], list[str]]:
    """``source``'s targets that train on partitions (those with a history rule), and the others."""
    specs = TARGETS[source]
    return [t for t, s in specs.items() if s.recent_keys], [t for t, s in specs.items() if not s.recent_keys]


def evaluate_stored(source: str, target: str, trace: Path, out: Path, scheduler: str, algo: str = "lgbm",
                    seed: int = 0, test_share: float = 0.3, progress: Progress | None = None) -> dict[str, Any]:
    """Fit ``algo`` and the rule alone on the earlier jobs of the stored ``trace``, score both on the later
    ``test_share``; write ``report.json`` under ``out`` and return it."""
    spec = _spec(source, target, algo)
    say = progress or (lambda _: None)
    with connect(scheduler):
        say(f"{source} {target}: features on the workers")
        split = split_partitioned(read_trace(trace), spec, test_share)
        _, entries = _fit_and_score(spec, split, algo, seed, say)
    report = _report(source, target, spec, split, entries, seed, trace, scheduler)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2))
    return report


def train_stored_and_register(registry: ModelRegistry, source: str, trace: Path, scheduler: str, algo: str = "lgbm",
                              seed: int = 0, test_share: float = 0.3, progress: Progress | None = None,
                              needs: bool = True) -> TrainResult:
    """:func:`training.pipeline.train.train_and_register` for the targets of ``source`` with a history rule, from
    the stored ``trace`` on the Dask cluster at ``scheduler``; the bundle serves from the history state at the end
    of the trace, as one trained in one process does."""
    trained, left_out = partitioned_targets(source)
    if not trained:
        raise ValueError(f"source {source!r} has no target with a history rule: its estimators fit in one process "
                         f"only (train it without a stored trace)")
    say = progress or (lambda _: None)
    if left_out:
        say(f"{source}: {', '.join(left_out)} fit in one process only; not in this bundle")
    targets: dict[str, TargetModel] = {}
    metrics: dict[str, float] = {}
    reports: dict[str, dict[str, Any]] = {}
    logged = {"algo": algo, "seed": str(seed), "test_share": str(test_share), "sources": source,
              "trace": str(trace), f"data_sha256.{source}": files_digest(trace), "dask_scheduler": scheduler,
              "partitioned": "true"}
    with tempfile.TemporaryDirectory(prefix="gpuplace-train-") as tmp, connect(scheduler):
        table = read_trace(trace)
        examples = table.head(5)
        for name in trained:
            spec = _spec(source, name, algo)
            say(f"{source} {name}: features and history state on the workers")
            split = split_partitioned(table, spec, test_share, state=True)
            estimator, entries = _fit_and_score(spec, split, algo, seed, say)
            reports[name] = _report(source, name, spec, split, entries, seed, trace, scheduler)
            (Path(tmp) / name).mkdir()
            (Path(tmp) / name / "report.json").write_text(json.dumps(reports[name], indent=2))
            assert split.state is not None  # asked for above
            targets[name] = TargetModel(spec, source, estimator, split.state)
            logged[f"target.{name}"] = f"{source}:{spec.column}"
            metrics.update(headline(name, entries, algo))
        run_id, version = register_challenger(registry, targets, logged, metrics, pd.DataFrame(examples), Path(tmp),
                                              needs, say)
    return TrainResult(version, run_id, metrics, reports)


def _spec(source: str, target: str, algo: str) -> TargetSpec:
    if algo not in FAMILIES:
        raise ValueError(f"algo {algo!r} does not fit on Dask partitions; one of {', '.join(FAMILIES)}")
    spec = target_spec(source, target)
    if not spec.recent_keys:
        raise ValueError(f"{source} {target} has no history rule: its estimators fit in one process only "
                         f"(evaluate it without a stored trace)")
    return spec


def _fit_and_score(spec: TargetSpec, split: PartitionedSplit, algo: str, seed: int,
                   say: Progress) -> tuple[ResidualEstimator, dict[str, Any]]:
    """The model of ``algo`` and the rule alone, each fitted on ``split.train`` and scored on ``split.test``."""
    entries: dict[str, Any] = {}
    fitted: ResidualEstimator | None = None
    for family in _families(algo):
        say(f"fitting {family} on the workers")
        made = model(spec, family, seed)
        assert isinstance(made, ResidualEstimator)  # a target with a rule (_spec) gets the rule-corrected family
        estimator = fit_partitioned(made, split.train)
        entries[family] = score_partitioned(estimator, split.test)
        if family == algo:
            fitted = estimator
    assert fitted is not None
    return fitted, entries


def _families(algo: str) -> Sequence[str]:
    return tuple(dict.fromkeys((BASELINE, algo)))


def _report(source: str, target: str, spec: TargetSpec, split: PartitionedSplit, entries: dict[str, Any],
            seed: int, trace: Path, scheduler: str) -> dict[str, Any]:
    rows = split.train_rows + split.test_rows
    report = {
        "source": source, "target": target, "column": spec.column, "unit": UNITS.get(spec.column, ""),
        "seed": seed, "trace": str(trace), "dask_scheduler": scheduler, "partitioned": True,
        "split": {"train_rows": split.train_rows, "test_rows": split.test_rows,
                  "test_share": split.test_rows / max(rows, 1), "order": "submit_time_s"},
        "estimators": entries, "best_causal_baseline": BASELINE, "reference_in_sample": {},
        "notes": ["fitted and scored on the Dask workers' partitions (training.pipeline.partitioned); no plots: they "
                  "would bring every held-out job into one process"],
    }
    clean: dict[str, Any] = finite(report)
    return clean
