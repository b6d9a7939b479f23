"""The checks of :func:`evaluate_epoch_time` (:mod:`training.needs.epoch_time`): each predictor held out by batch
size, workload, GPU type and testbed, and the plot of measured against predicted."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import numpy.typing as npt
import pandas as pd
from matplotlib.ticker import NullFormatter

from training.needs.epoch_time.facts import (
    BASELINE,
    CHECK_BATCH,
    CHECK_GAVEL,
    CHECK_RATIO,
    CHECK_TYPE,
    CHECK_WORKLOAD,
    MODEL,
    RATIO_TARGET,
    TARGET,
)
from training.needs.epoch_time.model import EpochTimeModel, Folds, batch_folds, fit_on_rows, leave_one_out
from training.needs.epoch_time.rows import feature_frame, gavel_rows, ordered_pairs, profile_rows, type_rows
from training.needs.scoring import POINT_COLUMNS, error_table
from training.performance.profiles import load_gavel, load_zeus
from training.png import save_png

FloatArray = npt.NDArray[np.float64]


# Evaluation

def evaluate_epoch_time(zeus: tuple[pd.DataFrame, pd.DataFrame] | None = None,
                        gavel: tuple[pd.DataFrame, pd.DataFrame] | None = None,
                        seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(errors, points): every check (module docstring) for the model and the baseline. errors columns
    :data:`ERROR_COLUMNS` (male = mean |ln(p50 / measured)|, p90_coverage = share measured <= p90); points
    columns :data:`POINT_COLUMNS`."""
    rows = profile_rows((zeus if zeus is not None else load_zeus())[0])
    extra = gavel_rows((gavel if gavel is not None else load_gavel())[0])
    frames = []
    for predictor in (MODEL, BASELINE):
        frames.append(_holdout(rows, extra, predictor, seed, CHECK_BATCH, batch_folds(rows, seed), ("profiled",)))
        epoch, ratio = _holdout_with_ratios(rows, extra, predictor, seed)
        frames += [epoch, ratio]
        frames.append(_holdout(rows, extra, predictor, seed, CHECK_TYPE, leave_one_out(rows["gpu_type"]),
                               ("type",)))
        frames.append(_gavel_holdout(rows, extra, predictor, seed))
    points = pd.concat([f for f in frames if len(f)], ignore_index=True)[list(POINT_COLUMNS)]
    return error_table(points), points


def _points(target: str, check: str, predictor: str, measured: FloatArray, ln_p50: FloatArray,
            band: float | FloatArray) -> pd.DataFrame:
    return pd.DataFrame({"target": target, "check": check, "predictor": predictor, "measured": measured,
                         "p50": np.exp(ln_p50), "p90": np.exp(ln_p50 + band)})


def _holdout(rows: pd.DataFrame, gavel: pd.DataFrame, predictor: str, seed: int, check: str, folds: Folds,
             bands: tuple[str, ...]) -> pd.DataFrame:
    frames = []
    for train, held in folds:
        model = fit_on_rows(rows.iloc[train], gavel, predictor, seed, bands, ratios=False)
        part = rows.iloc[held]
        for gpu_type, typed in part.groupby("gpu_type"):
            out = model.predict(typed, str(gpu_type))
            frames.append(_points(TARGET, check, predictor, typed["epoch_s"].to_numpy(float),
                                  np.log(out["p50"].to_numpy(float)),
                                  np.log(out["p90"].to_numpy(float) / out["p50"].to_numpy(float))))
    return pd.concat(frames, ignore_index=True)


def _holdout_with_ratios(rows: pd.DataFrame, gavel: pd.DataFrame, predictor: str,
                         seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Leave one Zeus workload out (every Gavel row stays in): its epoch times and its cross-type ratios,
    from one fit per fold."""
    epoch, ratio = [], []
    for train, held in leave_one_out(rows["workload"]):
        model = fit_on_rows(rows.iloc[train], gavel, predictor, seed, ("workload", "ratio_workload"))
        part = rows.iloc[held]
        ln_p50 = model.predictor.ln_epoch(feature_frame(part, part["gpu_type"]))
        epoch.append(_points(TARGET, CHECK_WORKLOAD, predictor, part["epoch_s"].to_numpy(float), ln_p50,
                             model.bands["workload"]))
        ratio.append(_ratio_points(model, type_rows(part, gavel.iloc[:0]), CHECK_RATIO, predictor))
    return pd.concat(epoch, ignore_index=True), pd.concat(ratio, ignore_index=True)


def _gavel_holdout(rows: pd.DataFrame, gavel: pd.DataFrame, predictor: str, seed: int) -> pd.DataFrame:
    """Leave one Gavel model out (every Zeus row stays in): its ratios between Gavel's types."""
    frames = [pd.DataFrame(columns=list(POINT_COLUMNS))]
    for train, held in leave_one_out(gavel["workload"]):
        model = fit_on_rows(rows, gavel.iloc[train], predictor, seed, ("ratio_workload",))
        frames.append(_ratio_points(model, gavel.iloc[held], CHECK_GAVEL, predictor))
    return pd.concat([f for f in frames if len(f)] or frames, ignore_index=True)


def _ratio_points(model: EpochTimeModel, part: pd.DataFrame, check: str, predictor: str) -> pd.DataFrame:
    """Every ordered pair of types of ``part`` (:data:`TYPE_ROW_COLUMNS`) at one (workload, batch size):
    the measured ratio and the model's (what ``model.ratio`` answers, computed once per row)."""
    part = part.reset_index(drop=True)
    first, second = ordered_pairs(part)
    ln_time = part["ln_time"].to_numpy(float)
    x = feature_frame(part, part["gpu_type"])
    term = model.ratio_law.type_term(x) if model.ratio_law is not None else model.predictor.ln_epoch(x)
    types = part["gpu_type"].to_numpy(object)
    ln_p50 = term[second] - term[first]
    band = np.array([model._ratio_band(str(a), str(b)) for a, b in zip(types[first], types[second], strict=True)])
    return _points(RATIO_TARGET, check, predictor, np.exp(ln_time[second] - ln_time[first]), ln_p50, band)


def gavel_ratios(solo: pd.DataFrame) -> pd.DataFrame:
    """Gavel's measured epoch-time ratios between its types, alone at scale factor 1, for the models of
    :data:`GAVEL_MODELS`: columns model, batch_size, from_type, to_type, ratio = throughput(from) /
    throughput(to) (steps/s at one batch size, so the same ratio of epoch times)."""
    rows = gavel_rows(solo)
    first, second = ordered_pairs(rows)
    ln_time = rows["ln_time"].to_numpy(float)
    out = pd.DataFrame({"model": rows["workload"].to_numpy()[first],
                        "batch_size": rows["batch_size"].to_numpy()[first],
                        "from_type": rows["gpu_type"].to_numpy()[first], "to_type": rows["gpu_type"].to_numpy()[second],
                        "ratio": np.exp(ln_time[second] - ln_time[first])})
    return out


_COLOURS = {MODEL: "tab:green", BASELINE: "tab:grey"}


def plot_measured_vs_predicted(points: pd.DataFrame, path: Path) -> Path:
    """Log-log measured against predicted P50, one panel per check, the model and the baseline, y = x."""
    checks = list(dict.fromkeys(points["check"]))
    fig, axes = plt.subplots(1, len(checks), figsize=(4.2 * len(checks), 4.2), squeeze=False)
    for ax, check in zip(axes[0], checks, strict=True):
        part = points[points["check"] == check]
        for predictor in (BASELINE, MODEL):  # the model last, on top
            rows = part[part["predictor"] == predictor]
            ax.scatter(rows["measured"], rows["p50"], s=7, alpha=0.55, label=predictor,
                       color=_COLOURS[predictor])
        lo = float(part[["measured", "p50"]].min().min())
        hi = float(part[["measured", "p50"]].max().max())
        ax.plot([lo, hi], [lo, hi], color="red", linewidth=1)
        unit = "s" if (part["target"] == TARGET).all() else "x"
        ax.set(xscale="log", yscale="log", title=check, xlabel=f"measured ({unit})")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("predicted P50")
    return save_png(fig, path)

