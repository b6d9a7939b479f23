"""History baselines: the estimators a cluster already has, computed causally.

* ``HistoryBaseline`` - the first available of a chain of history statistics (e.g. the mean duration
  of earlier jobs of the same group+user+GPU type, else of the group+user, else of the user), else
  the training median. With the chain (user) / (group, user) / (group, user, GPU) and ``mean``
  these are the PAI paper's SJU / SJG / SJGG estimators.
* ``RequestBaseline`` - what the job asked for (for resources: the user's own request).
* ``GlobalMedian`` - the median of the training targets, for everyone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self

import numpy as np
import pandas as pd

from models.prediction import FloatArray, Prediction
from models.protocol import check_fitted


class HistoryBaseline:
    """First non-missing of ``columns`` (in order), else the training median."""

    def __init__(self, columns: Sequence[str], name: str = "history") -> None:
        self.columns = columns
        self.name = name

    def fit(self, features: pd.DataFrame, target: FloatArray) -> Self:
        self.default_ = float(np.nanmedian(target))
        return self

    def predict(self, features: pd.DataFrame) -> Prediction:
        check_fitted(self, "default_")
        value = np.full(len(features), np.nan)
        for column in self.columns:
            value = np.where(np.isnan(value), features[column].to_numpy(dtype=float), value)
        value = np.where(np.isnan(value), self.default_, value)
        return Prediction(value, value, np.full(len(value), np.nan), f"baseline:{self.name}")


class RequestBaseline:
    """The job's own request ``column`` (e.g. ``req_gpu``) is the estimate of its need."""

    def __init__(self, column: str) -> None:
        self.column = column

    def fit(self, features: pd.DataFrame, target: FloatArray) -> Self:
        self.fitted_ = True
        return self

    def predict(self, features: pd.DataFrame) -> Prediction:
        check_fitted(self, "fitted_")
        value = features[self.column].to_numpy(dtype=float)
        return Prediction(value, value, np.full(len(value), np.nan), f"baseline:request:{self.column}")


class GlobalMedian:
    """The median training target for every job."""

    def fit(self, features: pd.DataFrame, target: FloatArray) -> Self:
        self.median_ = float(np.nanmedian(target))
        return self

    def predict(self, features: pd.DataFrame) -> Prediction:
        check_fitted(self, "median_")
        value = np.full(len(features), self.median_)
        return Prediction(value, value, np.full(len(value), np.nan), "baseline:global-median")
