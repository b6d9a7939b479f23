"""How every estimator of ``training.needs`` is scored and calibrated: one table shape, one error, one
conformal rule, so that their figures compare."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pandas as pd

ERROR_COLUMNS = ("target", "check", "predictor", "n", "male", "p90_coverage")
POINT_COLUMNS = ("target", "check", "predictor", "measured", "p50", "p90")


def error_table(points: pd.DataFrame) -> pd.DataFrame:
    """One row per (target, check, predictor) of held-out ``points``: n, male (mean |ln(p50 / measured)|)
    and p90_coverage (share of measured <= p90)."""
    log_error = np.abs(np.log(points["p50"].to_numpy(float) / points["measured"].to_numpy(float)))
    covered = points["measured"].to_numpy(float) <= points["p90"].to_numpy(float) * (1 + 1e-12)
    grouped = points.assign(_e=log_error, _c=covered).groupby(["target", "check", "predictor"], sort=False)
    table = grouped.agg(n=("_e", "size"), male=("_e", "mean"), p90_coverage=("_c", "mean")).reset_index()
    return table[list(ERROR_COLUMNS)]


def conformal_quantile(residuals: npt.NDArray[np.float64], level: float) -> float:
    """The split-conformal quantile: the ceil((n + 1) level)-th smallest finite residual (the largest when
    n is too small for that rank); NaN when there is none."""
    r = np.sort(residuals[np.isfinite(residuals)])
    if r.size == 0:
        return float("nan")
    return float(r[min(r.size, math.ceil((r.size + 1) * level)) - 1])
