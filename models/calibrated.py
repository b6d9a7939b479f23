"""A learner stacked on a history baseline and calibrated on later, held-out jobs.

Rows arrive in submission order. ``fit`` keeps the last ``calibration_share`` of them aside (the
calibration slice), trains the learner on the earlier rows, then on the calibration slice, for each
history-depth bucket b (e.g. 0, 1, 2-3, 4-10, >10 earlier jobs of the group):

1. Blend, in log space (z = ln(1 + y)):   z50 = w_b * learner_p50 + (1 - w_b) * baseline,
   with w_b in {0, 0.1, ..., 1} minimising the mean absolute log error on the slice. Where history
   is deep the baseline tends to win; where there is none the learner's features must.
2. Conformalise the P90 (CQR, Romano et al. 2019): with spread = max(learner_p90 - learner_p50, 0),
   scores s = z - (z50 + spread), offset_b = the ceil((n + 1) * 0.9) / n empirical quantile of s.
   Then z90 = z50 + spread + offset_b covers 90% of exchangeable new jobs of bucket b.

3. Expected value, when ``mean_columns`` name history means (in the target's unit, first available
   wins): y_mean = a_b * y50 + (1 - a_b) * history_mean, with a_b in {0, 0.1, ..., 1} minimising the
   squared error on the slice (whose optimum is the conditional mean); where there is no history, y50.
   Mean JCT under shortest-job-first is set by expected durations (Smith's rule), not medians.

A bucket with fewer than ``min_bucket_rows`` calibration rows uses the weight and offset fitted on
all buckets together. Predictions are returned in the target's unit: y = exp(z) - 1, at least 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Self

import numpy as np
import pandas as pd

from models.learners import LEARNERS, QuantileLearner
from models.prediction import FloatArray, Prediction
from models.protocol import check_fitted

WEIGHTS = np.linspace(0.0, 1.0, 11)
DEFAULT_DEPTH_EDGES = (1, 2, 4, 11)
"""Bucket edges on history depth n: [0,1) [1,2) [2,4) [4,11) [11,inf) -> 0, 1, 2-3, 4-10, >10."""


def depth_labels(edges: Sequence[int] = DEFAULT_DEPTH_EDGES) -> list[str]:
    """Human names of the depth buckets, e.g. ['0', '1', '2-3', '4-10', '>10']."""
    lows = [0, *edges]
    labels = [str(lo) if hi - lo == 1 else f"{lo}-{hi - 1}" for lo, hi in zip(lows, edges, strict=False)]
    return [*labels, f">{edges[-1] - 1}"]


def depth_buckets(matrix: FloatArray, depth_index: int, edges: Sequence[int]) -> np.ndarray:
    """Each row's history-depth bucket (the number of ``edges`` at or below its depth)."""
    depth = np.nan_to_num(matrix[:, depth_index], nan=0.0)
    buckets: np.ndarray = np.searchsorted(np.asarray(edges), depth, side="right")
    return buckets


def per_bucket(choose: Any, buckets: np.ndarray, count: int, min_rows: int) -> FloatArray:
    """``choose(mask)`` per bucket, or over all rows where a bucket has fewer than ``min_rows``."""
    overall = choose(np.ones(len(buckets), dtype=bool))
    return np.array([choose(buckets == b) if (buckets == b).sum() >= min_rows else overall for b in range(count)])


def history_mean(matrix: FloatArray, indexes: Sequence[int], fallback: FloatArray) -> FloatArray:
    """The first known of the history-mean columns ``indexes`` per row (at least 0), else ``fallback``."""
    found = np.full(len(matrix), np.nan)
    for index in indexes:
        found = np.where(np.isnan(found), matrix[:, index], found)
    return np.where(np.isnan(found), fallback, np.maximum(found, 0.0))


def mean_weights(y: FloatArray, y50: FloatArray, history: FloatArray, buckets: np.ndarray, count: int,
                 min_rows: int) -> FloatArray:
    """Per bucket, the weight of ``y50`` against the history mean whose blend has the least squared error."""
    def best(mask: np.ndarray) -> float:
        errors = [np.mean((w * y50[mask] + (1 - w) * history[mask] - y[mask]) ** 2) for w in WEIGHTS]
        return float(WEIGHTS[int(np.argmin(errors))])

    return per_bucket(best, buckets, count, min_rows)


class CalibratedEstimator:
    """LightGBM or random forest, blended with a history baseline per depth bucket, P90 calibrated."""

    def __init__(self, family: str = "lgbm", baseline_column: str = "baseline", depth_column: str = "depth",
                 depth_edges: Sequence[int] = DEFAULT_DEPTH_EDGES, calibration_share: float = 0.2,
                 coverage: float = 0.9, min_bucket_rows: int = 50, seed: int = 0,
                 params: dict[str, Any] | None = None, version: str = "unregistered",
                 mean_columns: Sequence[str] = (), dropped: Sequence[str] = ()) -> None:
        self.family = family
        self.baseline_column = baseline_column
        self.depth_column = depth_column
        self.depth_edges = depth_edges
        self.calibration_share = calibration_share
        self.coverage = coverage
        self.min_bucket_rows = min_bucket_rows
        self.seed = seed
        self.params = params
        self.version = version
        self.mean_columns = tuple(mean_columns)
        self.dropped = tuple(dropped)
        """Frame columns the estimator does not read (to fit it on an earlier feature set)."""

    def fit(self, features: pd.DataFrame, target: FloatArray) -> Self:
        z = np.log1p(np.asarray(target, dtype=float))
        split = self.prepare(list(features.columns), len(z))
        self.fallback_ = float(np.median(z[:split]))
        features = features[self.feature_names_]
        self.learner_ = self._learner().fit(features.iloc[:split], z[:split])
        return self.calibrate(z[split:], self.calibration_columns(features.iloc[split:].to_numpy(dtype=float)))

    # The parts of ``fit``, in its order, for a caller that holds the rows elsewhere
    # (``training.pipeline.partitioned`` fits on a Dask cluster's partitions with them).

    def prepare(self, feature_names: Sequence[str], rows: int) -> int:
        """Check the family, take the feature names it reads (``dropped`` left out); the number of rows the learner
        fits on (the rest calibrate)."""
        if self.family not in LEARNERS:
            raise ValueError(f"unknown model family {self.family!r}; known: {', '.join(LEARNERS)}")
        split = int(rows * (1.0 - self.calibration_share))
        if split < 10 or rows - split < 10:
            raise ValueError(f"need at least 10 rows on each side of the calibration split, got {rows} rows")
        self.feature_names_ = [c for c in feature_names if c not in self.dropped]
        self.baseline_index_ = self.feature_names_.index(self.baseline_column)
        self.depth_index_ = self.feature_names_.index(self.depth_column)
        self.mean_index_ = [self.feature_names_.index(c) for c in self.mean_columns if c in self.feature_names_]
        return split

    def calibration_columns(self, matrix: FloatArray) -> FloatArray:
        """What calibrating reads of each row of ``matrix`` (columns ``feature_names_``, after the learner is
        fitted), one row each: the learner's P50 and P90, the baseline, the depth bucket, the first known history
        mean (NaN if none)."""
        p50, p90 = self.learner_.predict_quantiles(matrix)
        first_mean = history_mean(matrix, self.mean_index_, np.full(len(matrix), np.nan))
        return np.column_stack([p50, p90, self._baseline(matrix), self._buckets(matrix), first_mean])

    def calibrate(self, z_cal: FloatArray, columns: FloatArray) -> Self:
        """Blend weights, P90 offsets and mean weights from the calibration rows' ln(1 + target) and
        :meth:`calibration_columns`."""
        p50, p90, base, buckets, first_mean = (columns[:, 0], columns[:, 1], columns[:, 2],
                                               columns[:, 3].astype(int), columns[:, 4])
        self.weights_, self.offsets_ = self._calibrate(z_cal, p50, np.maximum(p90 - p50, 0.0), base, buckets)
        if self.mean_index_:
            y50 = np.maximum(np.expm1(self.weights_[buckets] * p50 + (1.0 - self.weights_[buckets]) * base), 0.0)
            history = np.where(np.isnan(first_mean), y50, first_mean)
            self.mean_weights_ = self._mean_weights(np.expm1(z_cal), y50, history, buckets)
        return self

    def _learner(self) -> QuantileLearner:
        """The learner ``fit`` trains (a subclass may fit it elsewhere, e.g. on a Dask cluster)."""
        learner: QuantileLearner = LEARNERS[self.family](seed=self.seed, params=self.params)
        return learner

    def predict(self, features: pd.DataFrame) -> Prediction:
        check_fitted(self, "learner_")
        return self.predict_matrix(features[self.feature_names_].to_numpy(dtype=float))

    def predict_matrix(self, matrix: FloatArray) -> Prediction:
        """Predict from a float matrix whose columns are ``feature_names_`` (the serving fast path)."""
        check_fitted(self, "learner_")
        p50, p90 = self.learner_.predict_quantiles(matrix)
        buckets = self._buckets(matrix)
        weight = self.weights_[buckets]
        z50 = weight * p50 + (1.0 - weight) * self._baseline(matrix)
        z90 = z50 + np.maximum(p90 - p50, 0.0) + self.offsets_[buckets]
        y50 = np.maximum(np.expm1(z50), 0.0)
        mean = None
        if getattr(self, "mean_index_", None):  # models saved before the expected value have none
            a = self.mean_weights_[buckets]
            mean = a * y50 + (1.0 - a) * self._history_mean(matrix, y50)
        return Prediction(y50, y50, np.maximum(np.expm1(z90), y50), self.version, mean)

    def raw_quantiles(self, features: pd.DataFrame) -> tuple[FloatArray, FloatArray]:
        """The learner's uncalibrated P50 and P90, in the target's unit (to report calibration)."""
        check_fitted(self, "learner_")
        p50, p90 = self.learner_.predict_quantiles(features[self.feature_names_].to_numpy(dtype=float))
        return np.maximum(np.expm1(p50), 0.0), np.maximum(np.expm1(p90), 0.0)

    def _baseline(self, matrix: FloatArray) -> FloatArray:
        raw = matrix[:, self.baseline_index_]
        return np.where(np.isnan(raw), self.fallback_, np.log1p(np.maximum(raw, 0.0)))

    def _history_mean(self, matrix: FloatArray, fallback: FloatArray) -> FloatArray:
        return history_mean(matrix, self.mean_index_, fallback)

    def _mean_weights(self, y: FloatArray, y50: FloatArray, history: FloatArray, buckets: np.ndarray) -> FloatArray:
        return mean_weights(y, y50, history, buckets, len(self.depth_edges) + 1, self.min_bucket_rows)

    def _buckets(self, matrix: FloatArray) -> np.ndarray:
        return depth_buckets(matrix, self.depth_index_, self.depth_edges)

    def _calibrate(self, z: FloatArray, p50: FloatArray, spread: FloatArray, base: FloatArray,
                   buckets: np.ndarray) -> tuple[FloatArray, FloatArray]:
        n_buckets = len(self.depth_edges) + 1
        overall = np.ones(len(z), dtype=bool)
        w_all, o_all = self._fit_slice(z, p50, spread, base, overall)
        weights, offsets = np.full(n_buckets, w_all), np.full(n_buckets, o_all)
        for b in range(n_buckets):
            mask = buckets == b
            if mask.sum() >= self.min_bucket_rows:
                weights[b], offsets[b] = self._fit_slice(z, p50, spread, base, mask)
        return weights, offsets

    def _fit_slice(self, z: FloatArray, p50: FloatArray, spread: FloatArray, base: FloatArray,
                   mask: np.ndarray) -> tuple[float, float]:
        errors = [np.mean(np.abs(w * p50[mask] + (1 - w) * base[mask] - z[mask])) for w in WEIGHTS]
        weight = float(WEIGHTS[int(np.argmin(errors))])
        z50 = weight * p50[mask] + (1 - weight) * base[mask]
        scores = np.sort(z[mask] - (z50 + spread[mask]))
        n = len(scores)
        rank = min(n, math.ceil((n + 1) * self.coverage)) - 1
        return weight, float(scores[rank])
