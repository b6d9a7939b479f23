"""The two model families, each giving a raw median and 90th-percentile estimate per row.

* LightGBM: one booster with the L1 objective (its optimum is the conditional median) and one with
  the quantile objective at alpha = 0.9.
* Random forest: the median and the 90th percentile of the per-tree predictions (the forest's spread).

Both are raw: :mod:`models.calibrated` blends them with history and calibrates the P90 on held-out,
later jobs. Every learner takes a seed.
"""

from __future__ import annotations

import os
from typing import Any, Protocol, Self

import lightgbm as lgb
import numpy as np
import pandas as pd
from sklearn.ensemble import RandomForestRegressor

from models.prediction import FloatArray

LGBM_DEFAULTS: dict[str, Any] = {
    "n_estimators": 300, "learning_rate": 0.05, "num_leaves": 31, "min_child_samples": 40,
    "subsample": 0.8, "subsample_freq": 1, "colsample_bytree": 0.8, "verbose": -1,
}
_PARALLEL_ROWS = 2048
RF_DEFAULTS: dict[str, Any] = {"n_estimators": 120, "min_samples_leaf": 5, "max_features": 0.5, "n_jobs": -1}


class QuantileLearner(Protocol):
    """Fits on a feature frame; predicts from the same columns as a float matrix."""

    def fit(self, features: pd.DataFrame, target: FloatArray) -> Self: ...

    def predict_quantiles(self, matrix: FloatArray) -> tuple[FloatArray, FloatArray]: ...


class LightGBMLearner:
    """Median (L1) and P90 (quantile objective) boosters."""

    def __init__(self, seed: int = 0, params: dict[str, Any] | None = None) -> None:
        self.seed = seed
        self.params = params

    def fit(self, features: pd.DataFrame, target: FloatArray) -> Self:
        params = {**LGBM_DEFAULTS, **(self.params or {}), "random_state": self.seed}
        self.median_ = lgb.LGBMRegressor(objective="l1", **params).fit(features, target)
        self.upper_ = lgb.LGBMRegressor(objective="quantile", alpha=0.9, **params).fit(features, target)
        return self

    def predict_quantiles(self, matrix: FloatArray) -> tuple[FloatArray, FloatArray]:
        # A few rows (a service request) in the calling thread: OpenMP workers would cost more to wake
        # than they save, and spin afterwards on the cores the service needs. Each call names its thread
        # count, since LightGBM keeps the last one it was given.
        threads = 1 if len(matrix) < _PARALLEL_ROWS else (os.cpu_count() or 1)
        p50 = np.asarray(self.median_.booster_.predict(matrix, num_threads=threads), dtype=float)
        p90 = np.asarray(self.upper_.booster_.predict(matrix, num_threads=threads), dtype=float)
        return p50, p90


class ForestLearner:
    """Random forest; quantiles from the spread of its trees' predictions."""

    def __init__(self, seed: int = 0, params: dict[str, Any] | None = None) -> None:
        self.seed = seed
        self.params = params

    def fit(self, features: pd.DataFrame, target: FloatArray) -> Self:
        params = {**RF_DEFAULTS, **(self.params or {}), "random_state": self.seed}
        self.forest_ = RandomForestRegressor(**params).fit(features.fillna(-1.0).to_numpy(), target)
        return self

    def predict_quantiles(self, matrix: FloatArray) -> tuple[FloatArray, FloatArray]:
        dense = np.ascontiguousarray(np.nan_to_num(matrix, nan=-1.0), dtype=np.float32)
        # Each fitted tree's own ``tree_.predict`` (what ``DecisionTreeRegressor.predict`` calls after its
        # checks): per tree a third of the cost, which is most of a one-job call's cost.
        per_tree = np.stack([tree.tree_.predict(dense).reshape(len(dense)) for tree in self.forest_.estimators_])
        p50, p90 = np.quantile(per_tree, [0.5, 0.9], axis=0)
        return np.asarray(p50, dtype=float), np.asarray(p90, dtype=float)


LEARNERS: dict[str, type[LightGBMLearner] | type[ForestLearner]] = {"lgbm": LightGBMLearner, "rf": ForestLearner}
"""Model families by name."""
