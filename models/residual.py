"""A learned correction of the history rule, with a P90 that follows the workload's drift.

The history rule (a recency-weighted median of a group's last runs, ``training.features.rule``) is hard
to beat on recurring jobs, and learners fitted on absolute history statistics drift away from it on
later jobs. So, in log space (z = ln(1 + y)) and with rows in submission order:

1. The residual learner predicts r = z - rule from features made *relative to the rule*
   (ln(1 + statistic) - ln(1 + rule) for each history statistic), plus the job's own request and
   history counts: what it can learn is "when the group's last run or a running sibling differs
   from the rule, how far to trust it", which carries from group to group and over time, and not
   what a particular group's jobs took. Training rows are weighted 0.5 ** (age / halflife), age the
   share of training rows submitted after the row: recent behaviour counts more.
2. A job of a group without history has no rule worth correcting: the cold-start learner predicts z
   itself from the absolute features (request, GPU type, the user's history), as the median-stacked
   learners of :mod:`models.calibrated` do.
3. On the calibration slice (the last ``calibration_share`` of rows, never fitted on), per history-depth
   bucket b: z50 = rule + w_b * r_hat + v_b * (cold_hat - rule), (w_b, v_b) on a 0.1 grid with
   w_b + v_b <= 1, minimising the mean absolute log error. Family ``history`` has no learner: z50 is
   the rule.
4. P90, split conformal on the slice with a time-varying scale s (the rule's recent 90th-percentile
   error, a feature computed from jobs finished before each submission): score (z - z50) / s, offset
   q = its ceil((n + 1) * 0.9) / n empirical quantile, z90 = z50 + q * s.
5. Expected value, where ``mean_columns`` name history means: per bucket, y_mean = a_b * y50 +
   (1 - a_b) * history mean, a_b minimising the squared error on the slice (:mod:`models.calibrated`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, Self

import lightgbm as lgb
import numpy as np
import pandas as pd
from sklearn.ensemble import RandomForestRegressor

from models.calibrated import DEFAULT_DEPTH_EDGES, WEIGHTS, depth_buckets, history_mean, mean_weights, per_bucket
from models.prediction import FloatArray, Prediction
from models.protocol import check_fitted

FAMILIES = ("history", "lgbm", "rf")
"""``history``: the rule with a calibrated P90 and no learner (the fallback family)."""
LGBM_PARAMS: dict[str, Any] = {
    "n_estimators": 100, "learning_rate": 0.05, "num_leaves": 15, "min_child_samples": 100,
    "subsample": 0.8, "subsample_freq": 1, "colsample_bytree": 0.8, "verbose": -1,
}
"""Chosen on the validation split of the earlier PAI jobs: smaller trees than the median-stacked
learner's, since a residual of a strong rule has little structure and much noise."""
RF_PARAMS: dict[str, Any] = {"n_estimators": 100, "min_samples_leaf": 20, "max_features": 0.5, "n_jobs": -1}
COLD_PARAMS: dict[str, dict[str, Any]] = {
    "lgbm": {"n_estimators": 300, "num_leaves": 31, "min_child_samples": 40},
    "rf": {"n_estimators": 120, "min_samples_leaf": 5},
}
"""The cold-start learner predicts a whole duration, not a small correction: the stacked learners' sizes."""
PARALLEL_ROWS = 2048
MIN_SCALE = 0.05


class ResidualLearner:
    """LightGBM (L1 objective: the conditional median) or a forest (median of its trees) on the residual."""

    def __init__(self, family: str, seed: int = 0, params: dict[str, Any] | None = None) -> None:
        self.family, self.seed, self.params = family, seed, params

    def fit(self, inputs: FloatArray, residual: FloatArray, weight: FloatArray) -> Self:
        if self.family == "lgbm":
            params = {**LGBM_PARAMS, **(self.params or {}), "random_state": self.seed}
            self.model_: Any = lgb.LGBMRegressor(objective="l1", **params).fit(inputs, residual, sample_weight=weight)
        else:
            params = {**RF_PARAMS, **(self.params or {}), "random_state": self.seed}
            self.model_ = RandomForestRegressor(**params).fit(np.nan_to_num(inputs, nan=-1.0), residual,
                                                              sample_weight=weight)
        return self

    def predict(self, inputs: FloatArray) -> FloatArray:
        if self.family == "lgbm":
            # one job (a service request) in the calling thread: waking OpenMP workers costs more than it saves
            threads = 1 if len(inputs) < PARALLEL_ROWS else (os.cpu_count() or 1)
            return np.asarray(self.model_.booster_.predict(inputs, num_threads=threads), dtype=float)
        dense = np.ascontiguousarray(np.nan_to_num(inputs, nan=-1.0), dtype=np.float32)
        per_tree = np.stack([tree.tree_.predict(dense).reshape(len(dense)) for tree in self.model_.estimators_])
        return np.asarray(np.median(per_tree, axis=0), dtype=float)


class ResidualEstimator:
    """The history rule, corrected by a learner on rule-relative features; conformal P90 on a drift scale."""

    learner_kind: type[ResidualLearner] = ResidualLearner
    """What fits the correction and the cold-start learner (one fitted elsewhere, e.g. on a Dask cluster,
    takes its place in a subclass)."""

    def __init__(self, family: str = "lgbm", relative: Sequence[str] = (), log_relative: Sequence[str] = (),
                 excluded: Sequence[str] = (), rule_column: str = "rule", depth_column: str = "depth",
                 scale_column: str = "rule_err_q90", depth_edges: Sequence[int] = DEFAULT_DEPTH_EDGES,
                 calibration_share: float = 0.2, recency_halflife: float = 0.1, coverage: float = 0.9,
                 min_bucket_rows: int = 50, seed: int = 0, params: dict[str, Any] | None = None,
                 version: str = "unregistered", mean_columns: Sequence[str] = ()) -> None:
        self.family = family
        self.relative, self.log_relative, self.excluded = tuple(relative), tuple(log_relative), tuple(excluded)
        self.rule_column, self.depth_column, self.scale_column = rule_column, depth_column, scale_column
        self.depth_edges = tuple(depth_edges)
        self.calibration_share = calibration_share
        self.recency_halflife = recency_halflife
        self.coverage = coverage
        self.min_bucket_rows = min_bucket_rows
        self.seed = seed
        self.params = params
        self.version = version
        self.mean_columns = tuple(mean_columns)

    def fit(self, features: pd.DataFrame, target: FloatArray) -> Self:
        z = np.log1p(np.asarray(target, dtype=float))
        split = self.prepare(list(features.columns), len(z))
        self.fallback_ = float(np.median(z[:split]))
        matrix = features.to_numpy(dtype=float)
        rule = self._rule(matrix)
        self.learner_: ResidualLearner | None = None
        self.cold_: ResidualLearner | None = None
        if self.family != "history":
            self.learner_ = self.learner_kind(self.family, self.seed, self.params).fit(
                self._inputs(matrix[:split], rule[:split]), z[:split] - rule[:split],
                self.recency(np.arange(split), split))
            self.cold_ = self.learner_kind(self.family, self.seed, self.cold_params())
            self.cold_.fit(matrix[:split][:, self.absolute_index_], z[:split], np.ones(split))
        return self.calibrate(z[split:], self.calibration_columns(matrix[split:]))

    # The parts of ``fit``, in its order, for a caller that holds the rows elsewhere
    # (``training.pipeline.partitioned`` fits on a Dask cluster's partitions with them).

    def prepare(self, feature_names: Sequence[str], rows: int) -> int:
        """Check the family, take the feature names; the number of rows the learners fit on (the rest calibrate)."""
        if self.family not in FAMILIES:
            raise ValueError(f"unknown model family {self.family!r}; known: {', '.join(FAMILIES)}")
        split = int(rows * (1.0 - self.calibration_share))
        if split < 10 or rows - split < 10:
            raise ValueError(f"need at least 10 rows on each side of the calibration split, got {rows} rows")
        self.feature_names_ = list(feature_names)
        self._index_columns()
        return split

    def recency(self, positions: np.ndarray, split: int) -> FloatArray:
        """The training weight of the rows at ``positions`` (0 is the earliest of ``split`` training rows)."""
        age = (split - 1 - positions) / split
        return np.asarray(0.5 ** (age / self.recency_halflife), dtype=float)

    def cold_params(self) -> dict[str, Any]:
        return {**COLD_PARAMS[self.family], **(self.params or {})}

    def calibration_columns(self, matrix: FloatArray) -> FloatArray:
        """What calibrating reads of each row of ``matrix`` (after the learners are fitted), one row each:
        rule, depth bucket, raw error scale, the first known history mean (NaN if none), the two corrections."""
        rule = self._rule(matrix)
        corrections = self._corrections(matrix, rule) if self.learner_ is not None else np.zeros((2, len(matrix)))
        first_mean = history_mean(matrix, self.mean_index_, np.full(len(matrix), np.nan))
        return np.column_stack([rule, self._buckets(matrix), matrix[:, self.scale_index_], first_mean,
                                corrections[0], corrections[1]])

    def calibrate(self, z_cal: FloatArray, columns: FloatArray) -> Self:
        """Blend weights, P90 offset and mean weights from the calibration rows' ln(1 + target) and
        :meth:`calibration_columns`."""
        rule, buckets, raw_scale, first_mean = columns[:, 0], columns[:, 1].astype(int), columns[:, 2], columns[:, 3]
        corrections = columns[:, 4:6].T
        self.weights_, self.cold_weights_ = self._blend_weights(z_cal, rule, corrections, buckets)
        z50 = rule + self.weights_[buckets] * corrections[0] + self.cold_weights_[buckets] * corrections[1]
        self.default_scale_ = float(np.nanmedian(raw_scale)) if not np.isnan(raw_scale).all() else 1.0
        scale = np.maximum(np.where(np.isnan(raw_scale), self.default_scale_, raw_scale), MIN_SCALE)
        scores = np.sort((z_cal - z50) / scale)
        rank = min(len(scores), math.ceil((len(scores) + 1) * self.coverage)) - 1
        self.offset_ = float(scores[rank])
        if self.mean_index_:
            y50 = np.maximum(np.expm1(z50), 0.0)
            history = np.where(np.isnan(first_mean), y50, first_mean)
            self.mean_weights_ = self._mean_weights(np.expm1(z_cal), y50, history, buckets)
        return self

    def predict(self, features: pd.DataFrame) -> Prediction:
        check_fitted(self, "offset_")
        return self.predict_matrix(features[self.feature_names_].to_numpy(dtype=float))

    def predict_matrix(self, matrix: FloatArray) -> Prediction:
        """Predict from a float matrix whose columns are ``feature_names_`` (the serving fast path)."""
        check_fitted(self, "offset_")
        rule = self._rule(matrix)
        buckets = self._buckets(matrix)
        z50 = rule.copy()
        if self.learner_ is not None:
            corrections = self._corrections(matrix, rule)
            z50 += self.weights_[buckets] * corrections[0] + self.cold_weights_[buckets] * corrections[1]
        z90 = z50 + self.offset_ * self._scale(matrix)
        y50 = np.maximum(np.expm1(z50), 0.0)
        mean = None
        if self.mean_index_:
            a = self.mean_weights_[buckets]
            mean = a * y50 + (1.0 - a) * self._history_mean(matrix, y50)
        return Prediction(y50, y50, np.maximum(np.expm1(z90), y50), self.version, mean)

    def _index_columns(self) -> None:
        position = {name: i for i, name in enumerate(self.feature_names_)}
        self.rule_index_ = position[self.rule_column]
        self.depth_index_ = position[self.depth_column]
        self.scale_index_ = position[self.scale_column]
        self.relative_index_ = [position[c] for c in self.relative if c in position]
        self.log_index_ = [position[c] for c in self.log_relative if c in position]
        # the error scale calibrates the band; as an input it would only tell the learner which period it is in
        skip = {*self.relative, *self.log_relative, *self.excluded, self.scale_column}
        self.plain_index_ = [i for i, name in enumerate(self.feature_names_) if name not in skip]
        absolute = {*self.excluded, self.scale_column}
        self.absolute_index_ = [i for i, name in enumerate(self.feature_names_) if name not in absolute]
        self.mean_index_ = [position[c] for c in self.mean_columns if c in position]

    def _rule(self, matrix: FloatArray) -> FloatArray:
        raw = matrix[:, self.rule_index_]
        return np.where(np.isnan(raw), self.fallback_, np.log1p(np.maximum(raw, 0.0)))

    def _inputs(self, matrix: FloatArray, rule: FloatArray) -> FloatArray:
        relative = np.log1p(np.maximum(matrix[:, self.relative_index_], 0.0)) - rule[:, None]
        log_relative = matrix[:, self.log_index_] - rule[:, None]
        return np.hstack([matrix[:, self.plain_index_], relative, log_relative])

    def _corrections(self, matrix: FloatArray, rule: FloatArray) -> FloatArray:
        """Rows: the residual learner's r_hat, and the cold-start learner's cold_hat - rule."""
        assert self.learner_ is not None and self.cold_ is not None
        return np.vstack([self.learner_.predict(self._inputs(matrix, rule)),
                          self.cold_.predict(matrix[:, self.absolute_index_]) - rule])

    def _scale(self, matrix: FloatArray) -> FloatArray:
        raw = matrix[:, self.scale_index_]
        return np.maximum(np.where(np.isnan(raw), self.default_scale_, raw), MIN_SCALE)

    def _buckets(self, matrix: FloatArray) -> np.ndarray:
        return depth_buckets(matrix, self.depth_index_, self.depth_edges)

    def _by_bucket(self, choose: Any, buckets: np.ndarray) -> FloatArray:
        """``choose(mask)`` per depth bucket, or over all rows where a bucket has too few."""
        return per_bucket(choose, buckets, len(self.depth_edges) + 1, self.min_bucket_rows)

    def _blend_weights(self, z: FloatArray, rule: FloatArray, corrections: FloatArray,
                       buckets: np.ndarray) -> tuple[FloatArray, FloatArray]:
        pairs = np.array([(w, v) for w in WEIGHTS for v in WEIGHTS if w + v <= 1.0 + 1e-9])

        def best(mask: np.ndarray) -> tuple[float, float]:
            # rows: pairs; columns: jobs of the bucket
            z50 = rule[mask] + pairs[:, :1] * corrections[0, mask] + pairs[:, 1:] * corrections[1, mask]
            w, v = pairs[int(np.argmin(np.mean(np.abs(z50 - z[mask]), axis=1)))]
            return float(w), float(v)

        chosen = self._by_bucket(best, buckets)
        return chosen[:, 0].copy(), chosen[:, 1].copy()

    def _history_mean(self, matrix: FloatArray, fallback: FloatArray) -> FloatArray:
        return history_mean(matrix, self.mean_index_, fallback)

    def _mean_weights(self, y: FloatArray, y50: FloatArray, history: FloatArray, buckets: np.ndarray) -> FloatArray:
        return mean_weights(y, y50, history, buckets, len(self.depth_edges) + 1, self.min_bucket_rows)
