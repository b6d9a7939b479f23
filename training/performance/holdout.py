"""Hold-out validation of the speed model on the real profiles: whole configurations held out, each
check against naive baselines. Error of one point: APE = |predicted - measured| / measured.

| check           | held out                                | model                                 | baselines    |
|-----------------|-----------------------------------------|---------------------------------------|--------------|
| spread-lopo     | one (machines, GPUs) of a Pollux class  | Pollux's model refitted without it    | none; linear |
| spread-lomo     | a Pollux class's multi-GPU rows         | own 1-GPU compute, others' sync/grad  | none; linear |
| type-lomo       | a class's type ratios (every source)    | geometric mean of the other classes'  | all equal    |
| colocation-lomo | every Gavel pair with one model         | share predictor trained on the rest   | 1; 0.5       |
| unconsolidated  | nothing: Gavel is independent of Pollux | step(K on 1 machine) / step(K on K)   | none         |

"none" is no slowdown, "linear" is linear in machines (below); "all equal" a ratio of 1 on every GPU type;
1 and 0.5 are no slowdown and an equal split of the GPU.
A placement is a configuration by its (machines, GPUs), what the model sees: "1122" and "1212" go out
together, or the twin left in training would answer for it. Baselines, step times in s:

    no slowdown          step = s1(m), the class's 1-GPU step at the same local batch m (log-log interpolated)
    linear in machines   step = s1(m) x (1 + c (machines - 1)),  c = sum (n-1)(step/s1 - 1) / sum (n-1)^2
                         on the training rows (least squares on the relative slowdown)

The unconsolidated check takes Gavel's spread placement as one GPU per machine and its packed one as
one machine, and predicts throughput(spread) / throughput(packed) = step(K, 1) / step(K, K). A variant
scales the class's compute time to the GPU type first, grad x speed(T4) / speed(type): the Pollux paper's
testbed had T4 GPUs (the files do not record it), and sync time is network time, not GPU time.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from placement.model.speed import SpeedModel
from training.performance.build import Frames, fit_speed_model
from training.performance.colocation import SharePredictor, pair_shares
from training.performance.gpu_speed import GAVEL_STAND_IN, type_ratios, type_speed
from training.performance.profiles import load_gavel, load_pollux, load_zeus
from training.performance.spread import FloatArray, SpreadFit, fit_all, fit_spread, pooled_fit, predict_step_s
from training.png import save_png

MODEL = "model"
NO_SLOWDOWN = "no slowdown"
LINEAR = "linear in machines"
POINT_COLUMNS = ("check", "workload", "config", "method", "measured", "predicted")
POLLUX_GPU = "T4"
_NUMERIC = ("gpus", "machines", "local_bsz", "step_time_s", "sync_time_s")


def holdout(pollux: pd.DataFrame | None = None, gavel: Frames | None = None, zeus: Frames | None = None,
            seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(errors, points) of every check on the given tables (the shipped profiles when None)."""
    pollux = load_pollux() if pollux is None else pollux
    gavel = load_gavel() if gavel is None else gavel
    zeus = load_zeus() if zeus is None else zeus
    fits = fit_all(pollux)
    speed = fit_speed_model(pollux, gavel, zeus, seed=seed)
    points = pd.concat([spread_leave_one_placement_out(pollux, fits), spread_leave_one_model_out(pollux, fits),
                        type_leave_one_model_out(type_ratios(gavel[0], zeus[0])),
                        colocation_leave_one_model_out(gavel[1], seed), unconsolidated_check(gavel[0], fits, speed)],
                       ignore_index=True)
    return error_table(points), points


def error_table(points: pd.DataFrame) -> pd.DataFrame:
    """One row per (check, method): count, median and mean absolute percentage error (as fractions)."""
    ape = (points["predicted"] - points["measured"]).abs() / points["measured"]
    grouped = points.assign(ape=ape).groupby(["check", "method"], sort=False)["ape"]
    return grouped.agg(count="size", median_ape="median", mean_ape="mean").reset_index()


def spread_leave_one_placement_out(pollux: pd.DataFrame, fits: dict[str, SpreadFit]) -> pd.DataFrame:
    """Per class, each multi-GPU (machines, GPUs) configuration predicted by a fit without it."""
    frames = []
    for workload, rows in pollux.groupby("workload"):  # groupby sorts: a fixed order
        numeric = rows[list(_NUMERIC)].reset_index(drop=True)  # string columns would slow the 70 refits
        s1 = _single_gpu_s(numeric[numeric["gpus"] == 1], numeric)
        model, slope = np.full(len(rows), np.nan), np.full(len(rows), np.nan)
        for (machines, gpus), held in numeric[numeric["gpus"] >= 2].groupby(["machines", "gpus"]):
            out = (numeric["machines"] == machines).to_numpy() & (numeric["gpus"] == gpus).to_numpy()
            start = fits[str(workload)]
            fit = fit_spread(numeric[~out], str(workload), start.reference_bsz, start=start)
            model[out], slope[out] = predict_step_s(fit, held), _linear_slope(numeric[~out], s1[~out])
        multi = (numeric["gpus"] >= 2).to_numpy()
        frames.append(_spread_points("spread-lopo", rows[multi], model[multi], s1[multi], slope[multi]))
    return pd.concat(frames, ignore_index=True)


def spread_leave_one_model_out(pollux: pd.DataFrame, fits: dict[str, SpreadFit]) -> pd.DataFrame:
    """Each class's multi-GPU rows from its own 1-GPU rows and the other classes' fitted sync."""
    s1 = np.empty(len(pollux))
    for positions in pollux.groupby("workload").indices.values():
        rows = pollux.iloc[positions]
        s1[positions] = _single_gpu_s(rows[rows["gpus"] == 1], rows)
    frames = []
    for workload in sorted(pollux["workload"].unique()):
        own = (pollux["workload"] == workload).to_numpy()
        held_mask = own & (pollux["gpus"] >= 2).to_numpy()
        held = pollux[held_mask]
        others = [f for w, f in fits.items() if w != workload]
        fit = pooled_fit(str(workload), pollux[own & (pollux["gpus"] == 1).to_numpy()], others,
                         fits[str(workload)].reference_bsz)
        c = _linear_slope(pollux[~own], s1[~own])
        frames.append(_spread_points("spread-lomo", held, predict_step_s(fit, held), s1[held_mask], c))
    return pd.concat(frames, ignore_index=True)


def _spread_points(check: str, held: pd.DataFrame, model_s: FloatArray, s1: FloatArray,
                   c: FloatArray | float) -> pd.DataFrame:
    n = held["machines"].to_numpy(float)
    config = (held["machines"].astype(str) + " machines, " + held["gpus"].astype(str) + " GPUs, m="
              + held["local_bsz"].astype(str)).to_numpy()
    return _points(check, held["workload"].to_numpy(), config, held["step_time_s"].to_numpy(float),
                   {MODEL: model_s, NO_SLOWDOWN: s1, LINEAR: s1 * (1 + c * (n - 1))})


def _single_gpu_s(single: pd.DataFrame, rows: pd.DataFrame) -> FloatArray:
    """Each row's 1-GPU step time at its local batch, s: one class's median per batch, log-log interpolated."""
    curve = single.groupby("local_bsz")["step_time_s"].median()
    x = np.log(rows["local_bsz"].to_numpy(float))
    log_s = np.interp(x, np.log(curve.index.to_numpy(float)), np.log(curve.to_numpy(float)))
    return np.asarray(np.exp(log_s), dtype=float)


def _linear_slope(train: pd.DataFrame, s1: FloatArray) -> float:
    """c of step = s1 (1 + c (machines - 1)), least squares on the training rows' relative slowdown."""
    multi = (train["gpus"] >= 2).to_numpy()
    excess = train["machines"].to_numpy(float)[multi] - 1
    slowdown = train["step_time_s"].to_numpy(float)[multi] / s1[multi] - 1
    denominator = float(np.sum(excess ** 2))
    return float(np.sum(excess * slowdown) / denominator) if denominator > 0 else 0.0


def type_leave_one_model_out(ratios: pd.DataFrame) -> pd.DataFrame:
    """Each class's measured type ratios predicted by the geometric mean of the other classes'."""
    frames = []
    classes = sorted(ratios["workload"].dropna().unique())
    for workload in classes:
        held = ratios[ratios["workload"] == workload]
        predicted = type_speed(ratios[ratios["workload"] != workload], classes)[workload]
        held = held[held["gpu_type"].isin(list(predicted))]
        config = (held["source"] + " " + held["model"] + " m=" + held["batch_size"].astype(str) + " on "
                  + held["gpu_type"]).to_numpy()
        model = held["gpu_type"].map(predicted).to_numpy(float)
        frames.append(_points("type-lomo", held["workload"].to_numpy(), config, held["ratio"].to_numpy(float),
                              {MODEL: model, "all types equal": np.ones(len(held))}))
    return pd.concat(frames, ignore_index=True)


def colocation_leave_one_model_out(pairs: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """Every positive Gavel pair involving one model, predicted by a predictor trained on pairs without it.
    A pair of two different models is predicted in both models' folds."""
    shares = pair_shares(pairs)
    frames = []
    for model in sorted(set(shares["model_a"]) | set(shares["model_b"])):
        involved = (shares["model_a"] == model) | (shares["model_b"] == model)
        held = shares[involved]
        predicted = SharePredictor(seed=seed).fit(shares[~involved]).predict(held)
        config = (held["model_a"] + " m=" + held["batch_a"].astype(str) + " beside " + held["model_b"] + " m="
                  + held["batch_b"].astype(str) + " on " + held["gpu_type"]).to_numpy()
        frames.append(_points("colocation-lomo", np.full(len(held), model), config, held["share"].to_numpy(float),
                              {MODEL: predicted, NO_SLOWDOWN: np.ones(len(held)),
                               "equal split": np.full(len(held), 0.5)}))
    return pd.concat(frames, ignore_index=True)


def unconsolidated_check(solo: pd.DataFrame, fits: dict[str, SpreadFit], speed: SpeedModel) -> pd.DataFrame:
    """Gavel's measured throughput(spread) / throughput(packed) against the spread model's prediction."""
    kept = solo[(solo["scale_factor"] > 1) & solo["model"].isin(list(GAVEL_STAND_IN))]
    wide = kept.pivot_table(index=["model", "batch_size", "scale_factor", "gpu_type"], columns="consolidated",
                            values="throughput", aggfunc="first").dropna().reset_index()
    workload = wide["model"].map(dict(GAVEL_STAND_IN)).to_numpy()
    k = wide["scale_factor"].to_numpy(int)
    model, scaled = np.empty(len(wide)), np.empty(len(wide))
    for i, (w, gpus, gpu_type) in enumerate(zip(workload, k, wide["gpu_type"], strict=True)):
        curve = fits[w].curve()
        model[i] = curve.step_s(gpus, 1) / curve.step_s(gpus, gpus)
        t4, here = speed.speed_of(w, POLLUX_GPU), speed.speed_of(w, gpu_type)
        factor = 1.0 if t4 is None or here is None else t4 / here
        typed = replace(curve, grad_s=curve.grad_s * factor)
        scaled[i] = typed.step_s(gpus, 1) / typed.step_s(gpus, gpus)
    config = (wide["model"] + " m=" + wide["batch_size"].astype(str) + " x" + wide["scale_factor"].astype(str)
              + " on " + wide["gpu_type"]).to_numpy()
    wide = wide.rename(columns={True: "packed", False: "spread"})
    measured = wide["spread"].to_numpy(float) / wide["packed"].to_numpy(float)
    return _points("unconsolidated", workload, config, measured,
                   {MODEL: model, "model, compute scaled to the GPU type": scaled, NO_SLOWDOWN: np.ones(len(wide))})


def _points(check: str, workload: np.ndarray, config: np.ndarray, measured: FloatArray,
            methods: dict[str, FloatArray]) -> pd.DataFrame:
    """Long table: one row per (point, method)."""
    return pd.concat([pd.DataFrame({"check": check, "workload": workload, "config": config, "method": name,
                                    "measured": measured, "predicted": np.asarray(predicted, dtype=float)})
                      for name, predicted in methods.items()], ignore_index=True)[list(POINT_COLUMNS)]


_COLOURS = {MODEL: "tab:green", NO_SLOWDOWN: "tab:grey", LINEAR: "tab:orange", "all types equal": "tab:grey",
            "equal split": "tab:orange", "model, compute scaled to the GPU type": "tab:olive"}
"""One colour per method in every panel: the model green, the baselines grey and orange."""


def plot_measured_vs_predicted(points: pd.DataFrame, path: Path, max_points: int = 1500, seed: int = 0) -> Path:
    """Log-log measured against predicted, one panel per check, the model and each baseline (at most
    ``max_points`` each, a seeded sample: more only hide one another)."""
    checks = list(dict.fromkeys(points["check"]))
    fig, axes = plt.subplots(1, len(checks), figsize=(4.2 * len(checks), 4.2), squeeze=False)
    for ax, check in zip(axes[0], checks, strict=True):
        part = points[points["check"] == check]
        for method, rows in reversed(list(part.groupby("method", sort=False))):  # the model last, on top
            rows = rows.sample(n=min(max_points, len(rows)), random_state=seed)
            ax.scatter(rows["measured"], rows["predicted"], s=6, alpha=0.5, label=str(method),
                       color=_COLOURS.get(str(method), "tab:purple"))
        lo, hi = float(part[["measured", "predicted"]].min().min()), float(part[["measured", "predicted"]].max().max())
        ax.plot([lo, hi], [lo, hi], color="red", linewidth=1)
        ax.set(xscale="log", yscale="log", title=check, xlabel="measured")
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("predicted")
    return save_png(fig, path)


def plot_errors(errors: pd.DataFrame, path: Path) -> Path:
    """Median absolute percentage error of each method, one group of bars per check."""
    fig, ax = plt.subplots(figsize=(10, 4))
    labels = [f"{c}\n{m} ({n:,})" for c, m, n in errors[["check", "method", "count"]].itertuples(index=False)]
    colours = ["tab:blue" if m.startswith(MODEL) else "tab:grey" for m in errors["method"]]
    ax.bar(np.arange(len(errors)), 100 * errors["median_ape"], color=colours)
    ax.set_xticks(np.arange(len(errors)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("median absolute % error")
    return save_png(fig, path)
