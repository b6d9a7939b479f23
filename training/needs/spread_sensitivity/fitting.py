"""Fitting the law, the baselines it is held against, and the conformal margins of its P90, by leaving out models
and batch sizes (:mod:`training.needs.spread_sensitivity`)."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from scipy.optimize import least_squares  # type: ignore[import-untyped]

from training.needs.scoring import conformal_quantile
from training.needs.spread_sensitivity.data import ProfileData, hyperparams_frame
from training.needs.spread_sensitivity.facts import (
    ANALYTICAL,
    BATCH_FOLDS,
    BYTES_PER_GB,
    BYTES_PER_GRADIENT,
    CLASS_BLIND,
    COMPUTE_GROUP,
    POLLUX_MODELS,
    QUANTILE,
    TINY_S,
)
from training.needs.spread_sensitivity.law import SpreadLaw, step_seconds
from training.performance.spread import SpreadFit, fit_spread

FloatArray = NDArray[np.float64]


def fit_law(data: ProfileData, fits: Mapping[str, SpreadFit], workloads: tuple[str, ...],
             exclude: NDArray[np.bool_] | None = None) -> SpreadLaw:
    """Stage 2 on ``workloads`` (each with its own compute line from ``fits``), leaving out ``exclude`` rows."""
    facts = [POLLUX_MODELS[w] for w in workloads]
    p = np.array([f.parameters for f in facts], dtype=float)
    alpha = np.array([max(fits[w].alpha_s, TINY_S) for w in workloads])
    beta = np.array([max(fits[w].beta_s, TINY_S * 1e-3) for w in workloads])

    def overhead_residuals(x: FloatArray) -> FloatArray:
        return np.asarray(np.log(alpha) - np.log(np.maximum(x[0] + x[1] * p, TINY_S)), dtype=float)

    start = np.array([float(np.min(alpha)) / 2, float(np.median(alpha / p)) / 2])
    overhead = least_squares(overhead_residuals, start, bounds=([0.0, 0.0], [np.inf, np.inf]), x_scale="jac").x
    log_c = np.log(beta / p)
    groups = [COMPUTE_GROUP[f.family] for f in facts]
    per_sample = {g: float(np.exp(np.mean([c for c, h in zip(log_c, groups, strict=True) if h == g])))
                  for g in sorted(set(groups))}

    use = np.isin(data.workload, workloads) & (data.gpus >= 2)
    if exclude is not None:
        use &= ~exclude
    w = data.workload[use]
    k, n, m, step = data.gpus[use], data.machines[use], data.batch[use], data.step[use]
    grad = np.empty(len(w))
    gigabytes = np.empty(len(w))
    weight = np.empty(len(w))
    for name in workloads:
        mine = w == name
        grad[mine] = fits[name].grad_s(m[mine])
        trained = POLLUX_MODELS[name]
        gigabytes[mine] = trained.parameters * BYTES_PER_GRADIENT[trained.precision] / BYTES_PER_GB
        weight[mine] = 1.0 / math.sqrt(max(int(mine.sum()), 1))
    grad = np.maximum(grad, TINY_S)

    def sync_terms(x: FloatArray) -> tuple[FloatArray, ...]:
        ar, br = x[0] + x[1] * gigabytes, x[2] + x[3] * gigabytes
        return grad, ar, br, ar + x[4] + x[5] * gigabytes, br + x[6] + x[7] * gigabytes

    def residuals(x: FloatArray) -> FloatArray:
        return np.asarray(weight * (np.log(step) - np.log(step_seconds(sync_terms(x), k, n, float(x[8])))), dtype=float)

    x0 = _sync_start(fits, workloads)
    bounds = ([0.0] * 8 + [1.0], [np.inf] * 8 + [10.0])
    result = least_squares(residuals, x0, bounds=bounds, x_scale="jac", method="trf")
    x = result.x
    sync = (x[0], x[1], x[2], x[3], x[0] + x[4], x[1] + x[5], x[2] + x[6], x[3] + x[7])
    return SpreadLaw((float(overhead[0]), float(overhead[1])), per_sample, float(np.exp(np.median(log_c))),
                tuple(float(v) for v in sync), float(x[8]))


def _sync_start(fits: Mapping[str, SpreadFit], workloads: tuple[str, ...]) -> FloatArray:
    """Starting point of the sync fit: small latencies, the workloads' median seconds per GB, their median gamma."""
    gigabytes = np.array([POLLUX_MODELS[w].parameters * BYTES_PER_GRADIENT[POLLUX_MODELS[w].precision] / BYTES_PER_GB
                          for w in workloads])
    terms = np.array([[*fits[w].local_s, fits[w].network_s[0] - fits[w].local_s[0],
                       fits[w].network_s[1] - fits[w].local_s[1]] for w in workloads])
    per_gb = np.median(np.maximum(terms, 0.0) / gigabytes[:, None], axis=0)
    gamma = float(np.clip(np.median([fits[w].gamma for w in workloads]), 1.0, 10.0))
    return np.array([1e-3, per_gb[0], 1e-4, per_gb[1], 1e-3, per_gb[2], 1e-4, per_gb[3], gamma])


def predict_rows(data: ProfileData, law: SpreadLaw, rows: NDArray[np.bool_]) -> dict[str, FloatArray]:
    """P50 spread slowdown, scaling slowdown and step time of ``rows`` from their hyperparameters."""
    # the hyperparameter path
    frame = hyperparams_frame(data.hyperparams[rows].drop(columns="model").to_dict("records"))
    p = frame["parameters"].to_numpy(float)
    terms = law.terms(p, frame["batch_size"].to_numpy(float), frame["_group"], frame["_gigabytes"].to_numpy(float))
    k, n = data.gpus[rows], data.machines[rows]
    step = step_seconds(terms, k, n, law.gamma)
    ones = np.ones(len(k))
    return {"step": step, "spread": step / step_seconds(terms, k, ones, law.gamma),
            "scaling": step / step_seconds(terms, ones, ones, law.gamma)}


def class_blind(data: ProfileData, rows: NDArray[np.bool_], others: tuple[str, ...]) -> FloatArray:
    """Median over ``others`` (one vote each: its median) of the measured spread slowdown at each row's (K, n)."""
    table = pd.DataFrame({"w": data.workload, "k": data.gpus, "n": data.machines, "s": data.spread})
    table = table[table["w"].isin(others) & table["s"].notna()]
    per = table.groupby(["k", "n", "w"])["s"].median().groupby(["k", "n"]).median()
    overall = float(table.groupby("w")["s"].median().median())
    keys = zip(data.gpus[rows], data.machines[rows], strict=True)
    return np.array([float(per.get((k, n), overall)) if n > 1 else 1.0 for k, n in keys])


def analytical_constant(data: ProfileData, rows: NDArray[np.bool_]) -> float:
    """t of step = t P m: the geometric mean over ``rows``, every workload weighing the same."""
    p = data.hyperparams["parameters"].to_numpy(float)
    log_t = np.log(data.step / (p * data.batch))
    means = [float(np.mean(log_t[rows & (data.workload == w)])) for w in np.unique(data.workload[rows])]
    return float(np.exp(np.mean(means)))


def cached_law(laws: dict[tuple[str, ...], SpreadLaw], data: ProfileData, fits: Mapping[str, SpreadFit],
                workloads: tuple[str, ...]) -> SpreadLaw:
    key = tuple(sorted(workloads))
    if key not in laws:
        laws[key] = fit_law(data, fits, key)
    return laws[key]


def lomo_residuals(data: ProfileData, fits: Mapping[str, SpreadFit], workloads: tuple[str, ...],
                    laws: dict[tuple[str, ...], SpreadLaw] | None = None) -> dict[str, FloatArray]:
    """Signed log residuals log(measured / P50) of every row of ``workloads``, each predicted by the model (and
    the baselines) fitted on the others; NaN elsewhere. Keys: spread, scaling, step, class-blind, analytical."""
    out = {key: np.full(len(data.step), np.nan) for key in ("spread", "scaling", "step", CLASS_BLIND, ANALYTICAL)}
    p = data.hyperparams["parameters"].to_numpy(float)
    for held in workloads:
        others = tuple(w for w in workloads if w != held)
        rows = data.workload == held
        predicted = predict_rows(data, cached_law({} if laws is None else laws, data, fits, others), rows)
        out["spread"][rows] = np.log(data.spread[rows] / predicted["spread"])
        out["scaling"][rows] = np.log(data.scaling[rows] / predicted["scaling"])
        out["step"][rows] = np.log(data.step[rows] / predicted["step"])
        out[CLASS_BLIND][rows] = np.log(data.spread[rows] / class_blind(data, rows, others))
        t = analytical_constant(data, np.isin(data.workload, others))
        out[ANALYTICAL][rows] = np.log(data.step[rows] / (t * p[rows] * data.batch[rows]))
    return out


def margin_of(data: ProfileData, residuals: FloatArray) -> float:
    """The log margin that covers 0.9 of the rows of every calibration workload: the largest of their 0.9
    quantiles of the signed residuals, at least 0 (see the module doc)."""
    ok = np.isfinite(residuals)
    quantiles = [float(np.quantile(residuals[ok & (data.workload == w)], QUANTILE))
                 for w in np.unique(data.workload[ok])]
    return max([*quantiles, 0.0])


def batch_folds(data: ProfileData) -> NDArray[np.int64]:
    """The batch-size fold of every row: each workload's distinct local batches dealt into up to
    :data:`BATCH_FOLDS` folds by rank (every fourth value); -1 for a workload with one batch size."""
    fold = np.full(len(data.step), -1, dtype=np.int64)
    for w in np.unique(data.workload):
        own = data.workload == w
        values = np.unique(data.batch[own])  # sorted
        folds = min(BATCH_FOLDS, len(values))
        if folds >= 2:
            fold[own] = np.searchsorted(values, data.batch[own]) % folds
    return fold


def own_fit(cache: dict[tuple[str, tuple[int, ...]], SpreadFit], data: ProfileData, fits: Mapping[str, SpreadFit],
             workload: str, rows: NDArray[np.bool_], fold: NDArray[np.int64]) -> SpreadFit:
    """``workload``'s own Pollux fit on ``rows`` (whole batch folds of it), cached by the folds it is fitted on;
    the solver starts from those rows alone (:func:`fit_spread`'s own start), not from the full fit."""
    key = (workload, tuple(sorted(set(fold[rows].tolist()))))
    if key not in cache:
        cache[key] = fit_spread(data.rows[rows], workload, fits[workload].reference_bsz)
    return cache[key]


def profiled_residuals(data: ProfileData, fits: Mapping[str, SpreadFit], fold: NDArray[np.int64],
                        train: NDArray[np.bool_], cache: dict[tuple[str, tuple[int, ...]], SpreadFit],
                        ) -> dict[str, FloatArray]:
    """Signed log residuals log(measured / P50) of the profiled path, out of batch fold, on ``train`` rows
    only: each workload's rows of one batch fold predicted by its own fit on its other ``train`` rows; NaN
    elsewhere (and for a workload with fewer than two folds among ``train``). Keys: spread, scaling, step."""
    measured = {"spread": data.spread, "scaling": data.scaling, "step": data.step}
    out = {key: np.full(len(data.step), np.nan) for key in measured}
    for w in sorted(set(data.workload[train].tolist())):
        mine = train & (data.workload == w)
        present = sorted(set(fold[mine].tolist()) - {-1})
        for f in present if len(present) >= 2 else []:
            held = mine & (fold == f)
            predicted = _own_quantities(own_fit(cache, data, fits, w, mine & ~held, fold), data, held)
            for name, values in measured.items():
                out[name][held] = np.log(values[held] / predicted[name])
    return out


def _own_quantities(fit: SpreadFit, data: ProfileData, rows: NDArray[np.bool_]) -> dict[str, FloatArray]:
    """P50 step time, spread and scaling slowdown of ``rows`` from one workload's own fit."""
    k, n, m = data.gpus[rows], data.machines[rows], data.batch[rows]
    ones = np.ones(len(k))
    step = fit.step_s(k, n, m)
    return {"step": step, "spread": step / fit.step_s(k, ones, m), "scaling": step / fit.step_s(ones, ones, m)}


def profiled_margins_of(residuals: Mapping[str, FloatArray]) -> dict[str, float]:
    """The "profiled" log margins: the split-conformal 0.9 quantile of the out-of-fold residuals of every
    row, at least 0 (P90 >= P50); NaN where there is no residual."""
    quantiles = {key: conformal_quantile(values, QUANTILE) for key, values in residuals.items()}
    return {key: max(q, 0.0) if math.isfinite(q) else math.nan for key, q in quantiles.items()}
