"""The one estimator protocol, scikit-learn style: ``fit`` learns, ``predict`` returns a Prediction."""

from __future__ import annotations

from typing import Protocol, Self, runtime_checkable

import pandas as pd

from models.prediction import FloatArray, Prediction


class NotFittedError(RuntimeError):
    """``predict`` was called before ``fit``."""


@runtime_checkable
class Estimator(Protocol):
    """Learns a target from a feature frame whose rows are in submission order."""

    def fit(self, features: pd.DataFrame, target: FloatArray) -> Self: ...

    def predict(self, features: pd.DataFrame) -> Prediction: ...


def check_fitted(estimator: object, attribute: str) -> None:
    """Raise :class:`NotFittedError` unless ``estimator`` has the learned ``attribute``."""
    if not hasattr(estimator, attribute):
        raise NotFittedError(f"{type(estimator).__name__} is not fitted yet: call fit() before predict()")
