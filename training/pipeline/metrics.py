"""Accuracy metrics of estimates against actual values, in the target's unit.

* MAE = mean |p - y|; MedAE = median |p - y|;
* MALE (mean absolute log error) = mean |ln(1 + p) - ln(1 + y)|: 0.69 means "off by a factor of 2"
  on average, in either direction;
* P90 coverage = share of jobs with y <= P90; under-estimation rate = share with y > P90 (for memory:
  the out-of-memory risk). Both are NaN for estimators without a P90.
"""

from __future__ import annotations

import numpy as np

from models.prediction import FloatArray


def male(predicted: FloatArray, actual: FloatArray) -> float:
    return float(np.mean(np.abs(np.log1p(predicted) - np.log1p(actual)))) if len(actual) else float("nan")


def scores(point: FloatArray, p90: FloatArray, actual: FloatArray) -> dict[str, float]:
    """All metrics of one estimator on one set of jobs."""
    error = np.abs(point - actual)
    has_p90 = bool(len(p90)) and not np.isnan(p90).all()
    coverage = float(np.mean(actual <= p90)) if has_p90 else float("nan")
    return {
        "n": float(len(actual)),
        "mae": float(np.mean(error)) if len(actual) else float("nan"),
        "medae": float(np.median(error)) if len(actual) else float("nan"),
        "male": male(point, actual),
        "p90_coverage": coverage,
        "under_rate": 1.0 - coverage if has_p90 else float("nan"),
    }
