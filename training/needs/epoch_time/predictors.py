"""The predictors of ln(epoch_s) and of the ratio between two types: the analytical baseline, the scaling law,
the law with boosting on its residuals, the ratio law (:mod:`training.needs.epoch_time`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import lightgbm as lgb
import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy import sparse  # type: ignore[import-untyped]
from scipy.optimize import least_squares, linprog, lsq_linear  # type: ignore[import-untyped]

from training.needs.epoch_time.facts import BASELINE, GPU_FEATURES, LN_SPECS, MODEL, ZEUS
from training.needs.epoch_time.rows import FAMILY_COLUMNS, feature_frame, unordered_pairs

FloatArray = npt.NDArray[np.float64]


# Predictors of ln(epoch_s)

class _Predictor(Protocol):
    def fit(self, rows: pd.DataFrame) -> _Predictor: ...

    def ln_epoch(self, x: pd.DataFrame) -> FloatArray: ...


@dataclass
class Baseline:
    """epoch_s = S c_family P / (TFLOPS 1e12) + S / B t_step0 (module docstring)."""

    ln_c: dict[str, float] = field(default_factory=dict)
    ln_t0: float = float("nan")

    def fit(self, rows: pd.DataFrame) -> Baseline:
        x = feature_frame(rows, rows["gpu_type"])
        families = sorted(set(rows["model_family"]))
        index = np.array([families.index(f) for f in rows["model_family"]])
        y = np.log(rows["epoch_s"].to_numpy(float))
        compute = np.exp((x["ln_samples"] + x["ln_parameters"] - x["ln_tflops"]).to_numpy(float)) / 1e12
        steps = np.exp((x["ln_samples"] - x["ln_batch"]).to_numpy(float))

        def residual(theta: FloatArray) -> FloatArray:
            return np.asarray(np.log(compute * np.exp(theta[index]) + steps * np.exp(theta[-1])) - y)

        start = np.r_[np.full(len(families), math.log(300.0)), math.log(0.01)]
        theta = least_squares(residual, start).x
        self.ln_c = {f: float(theta[i]) for i, f in enumerate(families)}
        self.ln_t0 = float(theta[-1])
        return self

    def ln_epoch(self, x: pd.DataFrame) -> FloatArray:
        fallback = float(np.mean(list(self.ln_c.values())))
        ln_c = np.full(len(x), fallback)
        for family, value in self.ln_c.items():
            ln_c[x[f"family_{family}"].to_numpy() == 1.0] = value
        compute = np.exp((x["ln_samples"] + x["ln_parameters"] - x["ln_tflops"]).to_numpy(float) + ln_c) / 1e12
        steps = np.exp((x["ln_samples"] - x["ln_batch"]).to_numpy(float) + self.ln_t0)
        return np.asarray(np.log(compute + steps), dtype=float)


_LAW_COLUMNS = ("ln_parameters", "ln_samples", "ln_batch", *FAMILY_COLUMNS, *GPU_FEATURES)
FAMILY_PENALTIES = (1.0, 10.0, 100.0)


@dataclass
class ScalingLaw:
    """The log-linear part of the learned model (module docstring): weights over ``_LAW_COLUMNS``."""

    penalty: float = 10.0
    intercept: float = 0.0
    weights: FloatArray = field(default_factory=lambda: np.zeros(len(_LAW_COLUMNS)))

    def fit(self, x: FloatArray, y: FloatArray) -> ScalingLaw:
        """``x``: the rows' ``_LAW_COLUMNS`` (:func:`_law_matrix`); ``y``: ln(epoch_s)."""
        a = np.c_[np.ones(len(x)), x]
        k = a.shape[1]
        ridge = np.zeros((k, k))
        ridge[_FAMILY_AT, _FAMILY_AT] = math.sqrt(self.penalty)
        t, bw = _GPU_AT
        lower, upper = np.full(k, -np.inf), np.full(k, np.inf)
        lower[[t, bw]], upper[[t, bw]] = -1.0, 0.0
        design, target = np.r_[a, ridge], np.r_[y, np.zeros(k)]
        w = lsq_linear(design, target, bounds=(lower, upper), method="bvls").x
        if w[t] + w[bw] < -1.0:
            # The optimum lies on th_t + th_bw = -1: substitute th_bw = -1 - th_t and solve for th_t alone.
            reduced = design.copy()
            reduced[:, t] = design[:, t] - design[:, bw]
            reduced = np.delete(reduced, bw, axis=1)
            keep = [j for j in range(k) if j != bw]
            v = lsq_linear(reduced, target + np.r_[a[:, bw], np.zeros(k)], bounds=(lower[keep], upper[keep]),
                           method="bvls").x
            w = np.insert(v, bw, -1.0 - v[t])
        self.intercept, self.weights = float(w[0]), np.asarray(w[1:], dtype=float)
        return self

    def ln_epoch(self, x: FloatArray) -> FloatArray:
        return np.asarray(self.intercept + x @ self.weights, dtype=float)


_FAMILY_AT = [1 + _LAW_COLUMNS.index(c) for c in FAMILY_COLUMNS]
_GPU_AT = tuple(1 + _LAW_COLUMNS.index(c) for c in GPU_FEATURES)
"""Positions in the law's design matrix (column 0 is the intercept)."""


def _law_matrix(x: pd.DataFrame) -> FloatArray:
    return np.asarray(x[list(_LAW_COLUMNS)].to_numpy(float))


def _choose_penalty(x: FloatArray, y: FloatArray, workload: npt.NDArray[Any]) -> float:
    """The family penalty with the lowest mean |ln error| leaving one training workload out."""
    names = np.unique(workload)
    if len(names) < 3:
        return FAMILY_PENALTIES[1]
    scores = []
    for penalty in FAMILY_PENALTIES:
        errors = []
        for name in names:
            out = workload == name
            law = ScalingLaw(penalty).fit(x[~out], y[~out])
            errors.append(np.abs(law.ln_epoch(x[out]) - y[out]))
        scores.append(float(np.mean(np.concatenate(errors))))
    return FAMILY_PENALTIES[int(np.argmin(scores))]


_BOOSTED = ("ln_parameters", "ln_samples", "ln_batch", *FAMILY_COLUMNS, *GPU_FEATURES)


@dataclass
class Learned:
    """Scaling law + LightGBM on its residuals (module docstring)."""

    seed: int = 0
    law: ScalingLaw = field(default_factory=ScalingLaw)
    booster: Any = None

    def fit(self, rows: pd.DataFrame) -> Learned:
        x = feature_frame(rows, rows["gpu_type"])
        y = np.log(rows["epoch_s"].to_numpy(float))
        law_x = _law_matrix(x)
        self.law = ScalingLaw(_choose_penalty(law_x, y, rows["workload"].to_numpy())).fit(law_x, y)
        monotone = [-1 if c in GPU_FEATURES else 0 for c in _BOOSTED]
        self.booster = lgb.LGBMRegressor(
            n_estimators=200, learning_rate=0.05, num_leaves=8, min_child_samples=5, monotone_constraints=monotone,
            random_state=self.seed, n_jobs=1, verbose=-1,
        ).fit(x[list(_BOOSTED)], y - self.law.ln_epoch(law_x))
        return self

    def ln_epoch(self, x: pd.DataFrame) -> FloatArray:
        return np.asarray(self.law.ln_epoch(_law_matrix(x)) + self.booster.predict(x[list(_BOOSTED)]), dtype=float)


PREDICTORS: dict[str, Callable[[int], _Predictor]] = {MODEL: lambda seed: Learned(seed),
                                                       BASELINE: lambda _: Baseline()}


@dataclass
class RatioLaw:
    """ln(epoch_s(B) / epoch_s(A)) = e_t ln(TFLOPS_B / TFLOPS_A) + e_bw ln(bandwidth_B / bandwidth_A), a
    median regression over the pairs of types measured at one (workload, batch size), each workload
    weighing the same (module docstring)."""

    elasticity_tflops: float = float("nan")
    elasticity_bandwidth: float = float("nan")

    def fit(self, rows: pd.DataFrame) -> RatioLaw:
        """``rows``: :data:`TYPE_ROW_COLUMNS`, Zeus's and Gavel's alike (only ln_time differences are used)."""
        first, second = unordered_pairs(rows)
        if first.size == 0:
            raise ValueError("no two types measured at one (workload, batch size): nothing to learn a ratio from")
        spec = np.array([LN_SPECS[t] for t in rows["gpu_type"]], dtype=float).reshape(-1, 2)
        ln_time = rows["ln_time"].to_numpy(float)
        workload = rows["workload"].to_numpy(object)[first]
        _, index, count = np.unique(workload, return_inverse=True, return_counts=True)
        weight = 1.0 / count[index]
        n = first.size
        # Least absolute deviations as a linear programme: x = (e_t, e_bw, over, under), over, under >= 0.
        difference = sparse.csr_matrix(spec[second] - spec[first])
        identity = sparse.identity(n, format="csr")
        found = linprog(np.r_[0.0, 0.0, weight, weight],
                        A_ub=np.r_[-1.0, -1.0, np.zeros(2 * n)][None, :], b_ub=[1.0],
                        A_eq=sparse.hstack([difference, identity, -identity], format="csr"),
                        b_eq=ln_time[second] - ln_time[first],
                        bounds=[(-1.0, 0.0), (-1.0, 0.0)] + [(0.0, None)] * (2 * n), method="highs")
        if not found.success:
            raise RuntimeError(f"ratio law: {found.message}")
        self.elasticity_tflops, self.elasticity_bandwidth = (float(v) for v in found.x[:2])
        return self

    def type_term(self, x: pd.DataFrame) -> FloatArray:
        """The type's share of ln(epoch_s): differences between two types are ln ratios."""
        return np.asarray(self.elasticity_tflops * x["ln_tflops"].to_numpy(float)
                          + self.elasticity_bandwidth * x["ln_bandwidth"].to_numpy(float), dtype=float)


@dataclass
class EpochDifference:
    """The ratio a predictor of ln(epoch_s) implies, the difference of its two predictions: the baseline's
    ratio, fitted on the Zeus rows alone (Gavel's rows state no epoch time)."""

    predictor: Any

    def fit(self, rows: pd.DataFrame) -> EpochDifference:
        self.predictor = self.predictor.fit(rows[rows["source"] == ZEUS])
        return self

    def type_term(self, x: pd.DataFrame) -> FloatArray:
        return np.asarray(self.predictor.ln_epoch(x), dtype=float)


class RatioPredictor(Protocol):
    def fit(self, rows: pd.DataFrame) -> RatioPredictor: ...

    def type_term(self, x: pd.DataFrame) -> FloatArray: ...


RATIO_PREDICTORS: dict[str, Callable[[int], RatioPredictor]] = {
    MODEL: lambda _: RatioLaw(), BASELINE: lambda _: EpochDifference(Baseline())}


