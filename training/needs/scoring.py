"""How every estimator of ``training.needs`` is scored and calibrated: one table shape, one error, one
conformal rule (each group weighing the same where rows are exchangeable by group), so that their figures
compare."""

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


def grouped_conformal_quantile(residuals: npt.NDArray[np.float64], groups: npt.ArrayLike, level: float) -> float:
    """The weighted split-conformal quantile of residuals that are exchangeable by group (by workload, say),
    not by row: every group weighs the same, whatever its number of rows.

    Of n finite residuals r_i in K groups, group g holding n_g of them, row i weighs w_i = 1 / n_g(i) (so
    sum w = K), and the held-out row weighs w_new = K / n, a row of a group of average size::

        q = min { r_j : sum of w_i over r_i <= r_j  >=  level x (K + w_new) = level x K x (n + 1) / n }

    the weighted conformal quantile (Tibshirani et al. 2019) with its point mass at infinity on the held-out
    row; the largest residual when no r_j reaches it, NaN when there is no finite residual. With groups of
    one size it is :func:`conformal_quantile`. Weighing the held-out row as a whole group (w_new = 1) would
    make the guarantee hold by group, but needs K >= level / (1 - level) groups (9 at 0.9) for any finite
    band."""
    r = np.asarray(residuals, dtype=float)
    g = np.asarray(groups, dtype=object)
    keep = np.isfinite(r)
    r, g = r[keep], g[keep]
    if r.size == 0:
        return float("nan")
    _, index, count = np.unique(g.astype(str), return_inverse=True, return_counts=True)
    order = np.argsort(r, kind="stable")
    weight = (1.0 / count[index])[order]
    wanted = level * count.size * (r.size + 1) / r.size
    # A relative tolerance: sums of 1 / n_g are inexact, and a rank reached exactly must count as reached.
    reached = np.flatnonzero(np.cumsum(weight) >= wanted * (1 - 1e-12))
    return float(r[order][reached[0] if reached.size else -1])
