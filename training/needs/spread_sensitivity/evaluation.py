"""The checks of :func:`evaluate_spread_sensitivity` (unseen model, unseen batch sizes) for the model and its
baselines, and the plot of measured against predicted (:mod:`training.needs.spread_sensitivity`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from numpy.typing import NDArray

from training.needs.scoring import POINT_COLUMNS, error_table
from training.needs.spread_sensitivity.data import ProfileData, hyperparams_frame
from training.needs.spread_sensitivity.facts import (
    ANALYTICAL,
    CLASS_BLIND,
    MODEL,
    NO_SLOWDOWN,
    STEP_TARGET,
    TARGET,
    UNSEEN_BATCH,
    UNSEEN_MODEL,
)
from training.needs.spread_sensitivity.fitting import (
    analytical_constant,
    batch_folds,
    cached_law,
    class_blind,
    fit_law,
    lomo_residuals,
    margin_of,
    own_fit,
    predict_rows,
    profiled_margins_of,
    profiled_residuals,
)
from training.needs.spread_sensitivity.law import SpreadLaw
from training.needs.spread_sensitivity.model import SpreadSensitivityModel
from training.performance.profiles import load_pollux
from training.performance.spread import SpreadFit, fit_all
from training.png import save_png

FloatArray = NDArray[np.float64]


def evaluate_spread_sensitivity(pollux: pd.DataFrame | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(errors, points) of the two checks (see the module doc) on the given table (the shipped profiles
    when None). errors: target, check, predictor, n, male (mean |log(p50 / measured)|), p90_coverage."""
    pollux = load_pollux() if pollux is None else pollux
    fits = fit_all(pollux)
    data = ProfileData.of(pollux, fits)
    workloads = tuple(sorted(fits))
    frames: list[pd.DataFrame] = []
    margins_of: dict[str, dict[str, float]] = {}
    laws: dict[tuple[str, ...], SpreadLaw] = {}  # the pairs left out of the inner folds repeat across outer folds
    for held in workloads:
        others = tuple(w for w in workloads if w != held)
        inner = lomo_residuals(data, fits, others, laws)
        margins = {k: margin_of(data, v) for k, v in inner.items()}
        margins_of[held] = margins
        rows = data.workload == held
        predicted = predict_rows(data, cached_law(laws, data, fits, others), rows)  # the rows name no model
        band = {k: np.full(int(rows.sum()), margins[k]) for k in ("spread", "step")}
        frames.append(_check_points(data, rows, others, UNSEEN_MODEL, predicted, band, margins))
    fold = batch_folds(data)
    own_fits: dict[tuple[str, tuple[int, ...]], SpreadFit] = {}  # the inner folds' fits repeat across outer folds
    for held in workloads:
        others = tuple(w for w in workloads if w != held)
        for f in sorted(set(fold[data.workload == held].tolist()) - {-1}):  # one batch size: nothing to hold out
            rows = (data.workload == held) & (fold == f)
            train = ~rows
            refit = dict(fits)
            refit[held] = own_fit(own_fits, data, fits, held, train & (data.workload == held), fold)
            model = SpreadSensitivityModel(
                fit_law(data, refit, workloads, exclude=rows),
                {k: margins_of[held][k] for k in ("spread", "scaling", "step")}, workloads, profiled=refit,
                profiled_margins=profiled_margins_of(profiled_residuals(data, fits, fold, train, own_fits)))
            frame = hyperparams_frame(data.hyperparams[rows].to_dict("records"))  # the rows name their model
            if not model._is_profiled(frame).all():
                raise RuntimeError(f"held-out rows of {held} do not take the profiled path")
            frames.append(_check_points(data, rows, others, UNSEEN_BATCH,
                                        model._quantities(frame, data.gpus[rows], data.machines[rows]),
                                        model._margins(frame), margins_of[held], analytical_rows=train))
    points = pd.concat(frames, ignore_index=True)[list(POINT_COLUMNS)]
    return error_table(points), points


_COLOURS = {MODEL: "tab:green", NO_SLOWDOWN: "tab:grey", CLASS_BLIND: "tab:orange", ANALYTICAL: "tab:orange"}


def plot_measured_vs_predicted(points: pd.DataFrame, path: Path, max_points: int = 1500, seed: int = 0) -> Path:
    """Log-log measured against predicted P50, one panel per (target, check), every predictor (at most
    ``max_points`` each, a seeded sample)."""
    panels = list(dict.fromkeys(zip(points["target"], points["check"], strict=True)))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.2), squeeze=False)
    for ax, (target, check) in zip(axes[0], panels, strict=True):
        part = points[(points["target"] == target) & (points["check"] == check)]
        for predictor, rows in reversed(list(part.groupby("predictor", sort=False))):  # the model on top
            rows = rows.sample(n=min(max_points, len(rows)), random_state=seed)
            ax.scatter(rows["measured"], rows["p50"], s=6, alpha=0.5, label=str(predictor),
                       color=_COLOURS.get(str(predictor), "tab:purple"))
        lo = float(part[["measured", "p50"]].min().min())
        hi = float(part[["measured", "p50"]].max().max())
        ax.plot([lo, hi], [lo, hi], color="red", linewidth=1)
        ax.set(xscale="log", yscale="log", title=f"{target}, {check}", xlabel="measured")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("predicted P50")
    return save_png(fig, path)


def _check_points(data: ProfileData, rows: NDArray[np.bool_], others: tuple[str, ...], check: str,
                  predicted: Mapping[str, FloatArray], band: Mapping[str, FloatArray], margins: Mapping[str, float],
                  analytical_rows: NDArray[np.bool_] | None = None) -> pd.DataFrame:
    """Points of one held-out set: spread slowdown of its multi-machine rows, step time of all its rows. The
    model's P50 are ``predicted`` and its log margins ``band`` (per row); the baselines' margins
    ``margins``."""
    spread = data.machines[rows] > 1
    measured = data.spread[rows][spread]
    model = predicted["spread"][spread]
    blind = class_blind(data, rows, others)[spread]
    fit_rows = np.isin(data.workload, others) if analytical_rows is None else analytical_rows
    t = analytical_constant(data, fit_rows)
    p = data.hyperparams["parameters"].to_numpy(float)[rows]
    analytical = t * p * data.batch[rows]
    step = data.step[rows]
    frames = [
        _points(TARGET, check, MODEL, measured, model, model * np.exp(band["spread"][spread])),
        _points(TARGET, check, NO_SLOWDOWN, measured, np.ones(len(measured)), np.ones(len(measured))),
        _points(TARGET, check, CLASS_BLIND, measured, blind, blind * math.exp(margins[CLASS_BLIND])),
        _points(STEP_TARGET, check, MODEL, step, predicted["step"], predicted["step"] * np.exp(band["step"])),
        _points(STEP_TARGET, check, ANALYTICAL, step, analytical, analytical * math.exp(margins[ANALYTICAL])),
    ]
    return pd.concat(frames, ignore_index=True)


def _points(target: str, check: str, predictor: str, measured: FloatArray, p50: FloatArray,
            p90: FloatArray) -> pd.DataFrame:
    return pd.DataFrame({"target": target, "check": check, "predictor": predictor, "measured": measured,
                         "p50": p50, "p90": p90})
