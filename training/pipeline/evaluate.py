"""Honest evaluation on a time-ordered split: models against causal baselines, per history depth.

Rows with a label are sorted by submission time; the last ``test_share`` (default 30%) is the test
set, everything earlier trains. Every estimator sees the same features and the same split. With
``validation``, the test set is left out altogether and the same split is made again inside the rows
before it: that is where model choices are made, so that the test set only ever reports them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from models.baselines import GlobalMedian, HistoryBaseline, RequestBaseline
from models.calibrated import DEFAULT_DEPTH_EDGES, CalibratedEstimator, depth_labels
from models.prediction import FloatArray, Prediction
from models.protocol import Estimator
from models.residual import ResidualEstimator
from training.features.frames import TargetSpec, build_features, residual_inputs, rule_frame_columns, target_rows
from training.features.history import HistoryState
from training.pipeline.metrics import scores

REFERENCE_COLUMNS = {"duration_s": ("ref_user_dur_s", "ref_group_dur_s", "ref_group_gpu_dur_s")}


@dataclass(frozen=True)
class Split:
    features: pd.DataFrame
    target: FloatArray
    train: np.ndarray
    test: np.ndarray
    table: pd.DataFrame
    state: HistoryState
    test_share: float
    column: str


def time_split(table: pd.DataFrame, spec: TargetSpec, test_share: float = 0.3, validation: bool = False) -> Split:
    """Features for all rows; labelled rows in submission order, the last ``test_share`` held out. With
    ``validation``, the held-out rows are dropped and the last ``test_share`` of the rest is held out."""
    features, state = build_features(table, spec)
    rows = target_rows(table, spec)
    submit = table["submit_time_s"].to_numpy(dtype=float)[rows]
    rows = rows[np.argsort(np.nan_to_num(submit, nan=-np.inf), kind="stable")]
    if validation:
        rows = rows[:round(len(rows) * (1.0 - test_share))]
    cut = round(len(rows) * (1.0 - test_share))
    target = table[spec.column].to_numpy(dtype=float)
    return Split(features, target, rows[:cut], rows[cut:], table, state, test_share, spec.column)


def baselines(spec: TargetSpec) -> dict[str, Estimator]:
    """The causal baselines for ``spec``: global median, per-key means and the history median chain."""
    chain = spec.baseline_chain
    found: dict[str, Estimator] = {"global-median": GlobalMedian()}
    for i in range(len(chain)):
        keys = chain[len(chain) - 1 - i:]  # coarsest first: user, then group+user, ...
        found[f"mean:{keys[0]}"] = HistoryBaseline([f"hist_{k}_mean" for k in keys], name=f"mean:{keys[0]}")
    found[f"median:{chain[0]}"] = HistoryBaseline(["baseline"], name=f"median:{chain[0]}")
    if spec.request_baseline is not None:
        found["request"] = RequestBaseline(spec.request_baseline)
    return found


FittedModel = CalibratedEstimator | ResidualEstimator


def model(spec: TargetSpec, family: str, seed: int = 0, params: dict[str, Any] | None = None) -> FittedModel:
    """The estimator of ``family`` for ``spec``: where the target has a history rule, the rule corrected by
    a learner (``history``: the rule alone); elsewhere, or for ``lgbm-stacked`` / ``rf-stacked``, the
    learner stacked on the history median (:mod:`models.calibrated`)."""
    if family.endswith("-stacked") or not spec.recent_keys:
        # a target without a rule has nothing for ``history`` to fall back on but the stacked LightGBM
        learner = "lgbm" if family == "history" else family.removesuffix("-stacked")
        return CalibratedEstimator(family=learner, seed=seed, params=params, mean_columns=spec.mean_columns(),
                                   dropped=rule_frame_columns(spec))
    inputs = residual_inputs(spec)
    return ResidualEstimator(family=family, relative=inputs.relative, log_relative=inputs.log_relative,
                             excluded=inputs.excluded, seed=seed, params=params, mean_columns=spec.mean_columns())


def families(spec: TargetSpec, requested: Sequence[str] = ("lgbm", "rf")) -> tuple[str, ...]:
    """What an evaluation of ``spec`` fits: the requested families, and where the target has a history rule
    also the rule alone and the median-stacked learners it replaces, for comparison."""
    if not spec.recent_keys:
        return tuple(f for f in requested if not f.endswith("-stacked") and f != "history")
    stacked = tuple(f"{f}-stacked" for f in requested if f in ("lgbm", "rf"))
    return tuple(dict.fromkeys(("history", *requested, *stacked)))


def models(spec: TargetSpec, seed: int = 0, requested: Sequence[str] = ("lgbm", "rf")) -> dict[str, FittedModel]:
    return {f: model(spec, f, seed) for f in families(spec, requested)}


def evaluate(split: Split, estimators: dict[str, Estimator],
             progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Fit each estimator on the training rows, score it on the test rows (overall and per depth)."""
    x_train, x_test = split.features.iloc[split.train], split.features.iloc[split.test]
    y_train, y_test = split.target[split.train], split.target[split.test]
    depth = x_test["depth"].to_numpy(dtype=float)
    results: dict[str, Any] = {}
    predictions: dict[str, Prediction] = {}
    for name, estimator in estimators.items():
        if progress is not None:
            progress(name)
        predicted = estimator.fit(x_train, y_train).predict(x_test)
        predictions[name] = predicted
        entry: dict[str, Any] = dict(scores(predicted.point, predicted.p90, y_test))
        entry["by_depth"] = by_depth(predicted, y_test, depth)
        if isinstance(estimator, CalibratedEstimator):
            raw50, raw90 = estimator.raw_quantiles(x_test)
            entry["raw_p90_coverage"] = float(np.mean(y_test <= raw90))
            entry["raw_male"] = scores(raw50, raw90, y_test)["male"]
        if isinstance(estimator, CalibratedEstimator | ResidualEstimator):
            entry["blend_weights"] = dict(zip(depth_labels(), estimator.weights_.tolist(), strict=True))
        if isinstance(estimator, ResidualEstimator):
            entry["cold_start_weights"] = dict(zip(depth_labels(), estimator.cold_weights_.tolist(), strict=True))
        results[name] = entry
    return {"estimators": results, "reference": references(split, split.column), "predictions": predictions}


def by_depth(predicted: Prediction, actual: FloatArray, depth: FloatArray) -> dict[str, dict[str, float]]:
    """Metrics per history-depth bucket (0, 1, 2-3, 4-10, >10)."""
    edges = np.asarray(DEFAULT_DEPTH_EDGES)
    bucket = np.searchsorted(edges, np.nan_to_num(depth, nan=0.0), side="right")
    out = {}
    for b, label in enumerate(depth_labels()):
        mask = bucket == b
        out[label] = scores(predicted.point[mask], predicted.p90[mask], actual[mask])
    return out


def references(split: Split, column_of_target: str) -> dict[str, dict[str, float]]:
    """The source's own published estimates of the target on the test rows (in-sample: they include the job)."""
    test = split.table.iloc[split.test]
    actual = split.target[split.test]
    found = {}
    for column in REFERENCE_COLUMNS.get(column_of_target, ()):
        values = test[column].to_numpy(dtype=float)
        if not np.isnan(values).all():
            found[column] = scores(values, np.full(len(values), np.nan), actual)
    return found
