"""Peak GPU memory and mean GPU utilisation of a training job from the hyperparameters it states, learned
from GPUMemNet (:mod:`training.needs.gpumemnet`), each beside a fitted analytical baseline, with a P50 and
a calibrated P90.

Peak GPU memory (MiB), analytical baseline::

    peak = context + b x (w + g + o) x parameters + b x batch_size x activations x k_act

``b`` = 4 bytes per value (fp32, the only precision measured), ``w + g + o`` the values kept per parameter
(weights, gradients, optimizer state), ``k_act`` the values kept per activation unit of a sample, and
``context`` the CUDA context with PyTorch's kernels and allocator pools, which is most of a small run's peak
(the smallest measured peaks are 1,443-1,459 MiB). ``context``, ``w + g + o`` and ``k_act`` are fitted by
non-negative least squares on the relative error (each row's equation divided by its measured peak) of
the training rows, refitted once without the runs more than 10 times the median relative error off: a
few runs peak far below what any such formula gives (the worst, a 137-million-parameter MLP with one
output unit, peaks at 1,987 MiB: about the context plus one copy of its weights, 523 MiB), and in a small
sample one of them drags the squares (20 of the 6,000 runs are left out of the refit). On all 6,000
runs: ``context`` ~ 1,458 MiB, ``w + g + o`` ~ 5.2, ``k_act`` ~ 0.76.

Learned estimator (``model``): a LightGBM booster corrects the baseline. It learns
``ln(measured / baseline)`` with the Huber loss at a 0.01 threshold (L1 beyond 1 %: close to the median,
and the error reported is the mean absolute log error; LightGBM allows no monotone constraint with pure
L1) from features of the vocabulary's keys: ln parameters, ln activations,
ln batch_size, ln(batch_size x activations), ln(batch_size x parameters), layers, batch-norm and dropout
layer counts, the activation function (categorical), ln parameters per layer, ln activations per layer,
and ln of the baseline itself. P50 = baseline x exp(correction): the context and the growth with batch
and model size come from the fitted formula, so a batch size outside the training range still scales,
and the trees learn what the formula misses (per-layer and per-activation-function costs, the
allocator's rounding). The correction is constrained not to decrease with any feature that grows with
the batch size, so a larger batch of the same architecture never gets a smaller P50.

Mean GPU utilisation (%), analytical baseline: a line in log-log,
``ln(util) = a + c x ln(batch_size x parameters)`` (work per step), least squares on the training rows.
Learned estimator: a LightGBM booster on ``ln(util)`` with the L1 objective and the same features (the
baseline adds nothing there). Both are clipped to 0-100.

P90 of either target and either predictor: split-conformal. Out-of-fold log residuals
``ln(measured / P50)`` of the training rows give the margin ``q`` = their :data:`P90_LEVEL` quantile, and
P90 = P50 x exp(q). The residuals are pooled from two sets of folds, each fold's predictor refitted
without it: 5 folds grouped by architecture, and 5 contiguous bands of the distinct batch sizes, so the
margin knows both kinds of novelty a job can bring. With the architecture folds alone, utilisation's P90
covered only 0.86 of runs at batch sizes outside the training ones (at batch sizes below 200, small
models show a higher utilisation than larger batches of them suggest, and only 0.65 were covered there).
The level is above 0.9 because a job whose peak exceeds its P90 crashes: held-out coverage on GPUMemNet
lands at 0.90-0.95.

Hold-out on all 6,000 runs (:func:`evaluate_memory_models`, seed 0; MALE = mean |ln(P50 / measured)|):

| target           | check                | predictor | MALE   | P90 coverage |
|------------------|----------------------|-----------|--------|--------------|
| gpu_mem_peak_mib | unseen architectures | model     | 0.0052 | 0.917        |
| gpu_mem_peak_mib | unseen architectures | baseline  | 0.0065 | 0.909        |
| gpu_mem_peak_mib | unseen batch sizes   | model     | 0.0054 | 0.907        |
| gpu_mem_peak_mib | unseen batch sizes   | baseline  | 0.0065 | 0.907        |
| gpu_util_pct     | unseen architectures | model     | 0.0417 | 0.943        |
| gpu_util_pct     | unseen architectures | baseline  | 0.2464 | 0.936        |
| gpu_util_pct     | unseen batch sizes   | model     | 0.0598 | 0.904        |
| gpu_util_pct     | unseen batch sizes   | baseline  | 0.2965 | 0.844        |

Memory is easy here because the context dominates (the baseline is already within 0.65 % on the
median run); the model removes a fifth of the baseline's error. Sized by the model's P90 instead of a
whole A100 40 GB each (:func:`right_sizing`, unseen architectures), a job would hold 4.3 % of the GPU's
memory on average, and 8.4 % of jobs would exceed their P90.

What GPUMemNet cannot say, and what is assumed instead:

* Precision. Every run trained in fp32. For ``precision`` fp16, bf16 or amp the part of the peak above
  ``context`` is split as the baseline splits it, into a parameter part and an activation part, and the
  activation part is halved (activations kept in 16 bits); the parameter part is kept: mixed precision
  keeps fp32 master weights, gradients and optimizer state. Pure 16-bit training (``model.half()``) would
  also halve the parameter part, so the estimate is on the safe, high side for it. None of this is
  measured. Utilisation is not adjusted for precision (tensor cores would change it; not measured either).
* Optimizer. GPUMemNet does not vary or record it. The fitted ``w + g + o`` ~ 5 values per parameter is
  consistent with Adam (weights, gradients, two moments: 4) plus some slack; SGD without momentum keeps
  less, so the estimate would be high for it. The ``optimizer`` key is accepted and not used.
* Family and GPU. MLPs only, one A100 40 GB; convolutions, attention and other GPUs are not in the data.

Every fit is seeded and single-threaded (a few thousand rows: threads cost more than they save).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightgbm as lgb
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import numpy.typing as npt
import pandas as pd
from scipy.optimize import nnls  # type: ignore[import-untyped]
from sklearn.model_selection import GroupKFold

from training.needs.gpumemnet import load_gpumemnet
from training.needs.scoring import POINT_COLUMNS, conformal_quantile, error_table
from training.needs.vocabulary import PRECISIONS, HyperparameterError
from training.png import save_png

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]

MEMORY = "gpu_mem_peak_mib"
UTILISATION = "gpu_util_pct"
TARGETS = (MEMORY, UTILISATION)
UNITS = {MEMORY: "MiB", UTILISATION: "%"}
MEASURED = {MEMORY: "peak_mib", UTILISATION: "gpu_util_pct"}
"""The column of :func:`load_gpumemnet` each target is measured in."""
MODEL = "model"
BASELINE = "baseline"
UNSEEN_ARCHITECTURES = "unseen architectures"
UNSEEN_BATCH_SIZES = "unseen batch sizes"

P90_LEVEL = 0.91
"""Quantile of the out-of-fold log residuals taken as the P90 margin (see the module doc)."""
FOLDS = 5
BYTES_PER_VALUE = 4
"""fp32."""
MIB = 2 ** 20
A100_40GB_MIB = 40960.0
HALF_PRECISION_ACTIVATIONS = 0.5
"""Factor on the activation part of the peak for fp16, bf16 and amp (assumed; GPUMemNet is fp32 only)."""
MAX_UTIL_PCT = 100.0
_MIN_UTIL_PCT = 0.1
"""Floor of a utilisation P50 before its log is taken (the measured values are 3-91 %)."""

REQUIRED = {MEMORY: ("parameters", "batch_size", "activations"), UTILISATION: ("parameters", "batch_size")}
_OUTLIER_FACTOR = 10.0
"""The memory baseline is refitted once without the runs whose relative error is above this many times
the median one."""
_OPTIONAL_COUNTS = ("layers", "batchnorm_layers", "dropout_layers")
TREES = 300
"""Boosting rounds of every booster (a smaller number only to keep tests fast)."""
_BOOSTER: dict[str, Any] = {
    "learning_rate": 0.05, "num_leaves": 31, "min_child_samples": 20,
    "subsample": 0.8, "subsample_freq": 1, "colsample_bytree": 0.8, "n_jobs": 1, "deterministic": True,
    "verbose": -1,
}
_OBJECTIVE: dict[str, dict[str, Any]] = {
    MEMORY: {"objective": "huber", "alpha": 0.01},
    UTILISATION: {"objective": "l1"},
}
"""L1 where it is allowed; LightGBM refuses monotone constraints with it, so memory takes the Huber loss
with a 1 % (0.01 in ln) threshold, which is L1 beyond it."""
_SHAPE = ("ln_parameters", "ln_activations", "layers", "batchnorm_layers", "dropout_layers", "activation",
          "ln_parameters_per_layer", "ln_activations_per_layer")
FEATURES = {
    MEMORY: (*_SHAPE, "ln_batch_size", "ln_batch_activations", "ln_batch_parameters", "ln_baseline"),
    UTILISATION: (*_SHAPE, "ln_batch_size", "ln_batch_activations", "ln_batch_parameters"),
}
MONOTONE_UP = {MEMORY: ("ln_batch_size", "ln_batch_activations", "ln_batch_parameters", "ln_baseline"),
               UTILISATION: ()}
"""Features a target's booster output must not decrease with: every memory feature that grows with the
batch size, so that a larger batch of the same architecture never gets a smaller peak."""


@dataclass
class MemoryBaseline:
    """``peak = context + b (w+g+o) parameters + b batch activations k_act``, MiB (module doc)."""

    context_mib: float
    values_per_parameter: float
    values_per_activation: float

    @classmethod
    def fit(cls, frame: pd.DataFrame) -> MemoryBaseline:
        measured = frame[MEASURED[MEMORY]].to_numpy(float)
        design = np.column_stack([np.ones(len(frame)), _parameter_mib(frame), _activation_mib(frame)])
        coef, _ = nnls(design / measured[:, None], np.ones(len(frame)))
        off = np.abs(np.log(measured / np.maximum(design @ coef, 1e-9)))
        kept = off <= _OUTLIER_FACTOR * float(np.median(off))
        if 3 <= kept.sum() < len(frame):
            coef, _ = nnls(design[kept] / measured[kept, None], np.ones(int(kept.sum())))
        return cls(float(coef[0]), float(coef[1]), float(coef[2]))

    def parts(self, frame: pd.DataFrame) -> tuple[FloatArray, FloatArray]:
        """(parameter part, activation part) of the peak above the context, MiB."""
        return (self.values_per_parameter * _parameter_mib(frame),
                self.values_per_activation * _activation_mib(frame))

    def predict(self, frame: pd.DataFrame) -> FloatArray:
        weights, activations = self.parts(frame)
        return self.context_mib + weights + activations


@dataclass
class UtilisationBaseline:
    """``ln(util) = intercept + slope ln(batch_size x parameters)``, clipped to 0-100 %."""

    intercept: float
    slope: float

    @classmethod
    def fit(cls, frame: pd.DataFrame) -> UtilisationBaseline:
        x = _ln_work(frame)
        design = np.column_stack([np.ones(len(frame)), x])
        coef = np.linalg.lstsq(design, np.log(frame[MEASURED[UTILISATION]].to_numpy(float)), rcond=None)[0]
        return cls(float(coef[0]), float(coef[1]))

    def predict(self, frame: pd.DataFrame) -> FloatArray:
        return np.asarray(np.clip(np.exp(self.intercept + self.slope * _ln_work(frame)), 0.0, MAX_UTIL_PCT),
                          dtype=float)


@dataclass
class NeedModel:
    """One fitted target: P50 and P90 from stated hyperparameters. Picklable.

    ``booster`` is None for the analytical baseline alone (``predictor == "baseline"``)."""

    target: str
    unit: str
    source: str
    predictor: str
    baseline: MemoryBaseline | UtilisationBaseline
    booster: lgb.LGBMRegressor | None
    p90_log_margin: float
    """P90 = P50 x exp(margin): the :data:`P90_LEVEL` quantile of out-of-fold log residuals."""
    activations_seen: tuple[str, ...]
    """Activation functions of the training rows (category codes of the booster, in this order)."""
    defaults: dict[str, float] = field(default_factory=dict)
    """Values standing in for optional keys a job does not state: median layers, zero batch-norm and
    dropout layers, and ln activations from ln parameters (a line fitted on the training rows)."""
    training_rows: int = 0
    fit_seconds: float = 0.0

    def required_keys(self) -> tuple[str, ...]:
        return REQUIRED[self.target]

    def predict(self, hyperparams: pd.DataFrame) -> pd.DataFrame:
        """Columns p50, p90 (in :attr:`unit`), one row per row of ``hyperparams`` and with its index; NaN
        where a required key is missing or not a positive number. Optional keys: layers,
        batchnorm_layers, dropout_layers, activation, precision (memory only; fp32 when missing)."""
        ok = _stated(hyperparams, self.required_keys())
        out = pd.DataFrame({"p50": np.nan, "p90": np.nan}, index=hyperparams.index)
        if not ok.any():
            return out
        rows = self._completed(hyperparams[ok])
        p50 = self._p50(rows)
        p90 = p50 * math.exp(self.p90_log_margin)
        if self.target == MEMORY:
            p50, p90 = self._precision_scaled(rows, p50), self._precision_scaled(rows, p90)
        else:
            p50, p90 = np.clip(p50, 0.0, MAX_UTIL_PCT), np.clip(p90, 0.0, MAX_UTIL_PCT)
        out.loc[ok, "p50"] = p50
        out.loc[ok, "p90"] = np.maximum(p90, p50)
        return out

    def _p50(self, rows: pd.DataFrame) -> FloatArray:
        base = self.baseline.predict(rows)
        if self.booster is None:
            return base
        matrix = _features(rows, self.target, self.activations_seen, base)
        correction = np.asarray(self.booster.booster_.predict(matrix, num_threads=1), dtype=float)
        if self.target == MEMORY:
            return np.asarray(base * np.exp(correction), dtype=float)
        return np.asarray(np.exp(correction), dtype=float)

    def _completed(self, rows: pd.DataFrame) -> pd.DataFrame:
        """Numeric keys as float, the optional ones a job left out filled from :attr:`defaults`."""
        done = pd.DataFrame(index=rows.index)
        for key in ("parameters", "batch_size", "activations", *_OPTIONAL_COUNTS):
            values = pd.to_numeric(rows[key], errors="coerce") if key in rows else pd.Series(np.nan, index=rows.index)
            done[key] = values.astype(float)
        missing = done["activations"].isna() | (done["activations"] <= 0)
        done.loc[missing, "activations"] = np.exp(self.defaults["ln_activations_at_ln_parameters_0"]
                                                  + self.defaults["ln_activations_per_ln_parameter"]
                                                  * np.log(done.loc[missing, "parameters"]))
        for key in _OPTIONAL_COUNTS:
            bad = done[key].isna() | (done[key] < (1 if key == "layers" else 0))
            done.loc[bad, key] = self.defaults[key]
        activation = rows["activation"] if "activation" in rows else pd.Series(None, index=rows.index, dtype=object)
        done["activation"] = activation.map(lambda a: a.strip().lower() if isinstance(a, str) else None)
        if "precision" in rows:
            done["precision"] = rows["precision"]
        return done

    def _precision_scaled(self, rows: pd.DataFrame, peak: FloatArray) -> FloatArray:
        if "precision" not in rows:
            return peak
        precision = rows["precision"].map(lambda p: p.strip().lower() if isinstance(p, str) else "fp32")
        unknown = sorted(set(precision) - set(PRECISIONS))
        if unknown:
            raise HyperparameterError("precision", f"{unknown[0]!r} is not one of {', '.join(PRECISIONS)}")
        half = (precision != "fp32").to_numpy()
        if not half.any() or not isinstance(self.baseline, MemoryBaseline):
            return peak
        weights, activations = self.baseline.parts(rows)
        share = np.divide(activations, weights + activations, out=np.zeros(len(rows)),
                          where=(weights + activations) > 0)
        above = np.maximum(peak - self.baseline.context_mib, 0.0)
        saved = above * share * (1.0 - HALF_PRECISION_ACTIVATIONS)
        return np.asarray(np.where(half, peak - saved, peak), dtype=float)


def fit_memory_models(frame: pd.DataFrame | None = None, seed: int = 0, *, trees: int = TREES) -> dict[str, NeedModel]:
    """The learned estimator of both targets, fitted on every row of ``frame`` (default: all of GPUMemNet)."""
    frame = load_gpumemnet() if frame is None else frame
    return {target: fit_need(frame, target, MODEL, seed, trees=trees) for target in TARGETS}


def fit_need(frame: pd.DataFrame, target: str, predictor: str = MODEL, seed: int = 0, *,
             trees: int = TREES) -> NeedModel:
    """One target's ``model`` or ``baseline`` predictor, with its conformal P90 margin (module doc)."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; expected one of {', '.join(TARGETS)}")
    if predictor not in (MODEL, BASELINE):
        raise ValueError(f"unknown predictor {predictor!r}; expected {MODEL!r} or {BASELINE!r}")
    started = time.perf_counter()
    frame = frame.reset_index(drop=True)
    measured = frame[MEASURED[target]].to_numpy(float)
    residuals = []
    for train, held in architecture_folds(frame) + batch_size_folds(frame):
        inner = _fit_point(frame.iloc[train], target, predictor, seed, trees)
        residuals.append(np.log(measured[held] / _floored(inner._p50(frame.iloc[held]), target)))
    model = _fit_point(frame, target, predictor, seed, trees)
    model.p90_log_margin = max(0.0, conformal_quantile(np.concatenate(residuals), P90_LEVEL))
    model.fit_seconds = time.perf_counter() - started
    return model


def _fit_point(frame: pd.DataFrame, target: str, predictor: str, seed: int, trees: int = TREES) -> NeedModel:
    """P50 only: the baseline, and for ``model`` the booster (no P90 margin yet)."""
    baseline: MemoryBaseline | UtilisationBaseline = (MemoryBaseline.fit(frame) if target == MEMORY
                                                      else UtilisationBaseline.fit(frame))
    activations = tuple(sorted(frame["activation"].unique()))
    model = NeedModel(target=target, unit=UNITS[target],
                      source=f"GPUMemNet: {len(frame):,} measured MLP runs on an A100 40 GB (CC BY 4.0)",
                      predictor=predictor, baseline=baseline, booster=None, p90_log_margin=0.0,
                      activations_seen=activations, defaults=_defaults(frame), training_rows=len(frame))
    if predictor == MODEL:
        base = baseline.predict(frame)
        measured = frame[MEASURED[target]].to_numpy(float)
        goal = np.log(measured / base) if target == MEMORY else np.log(measured)
        monotone = [1 if name in MONOTONE_UP[target] else 0 for name in FEATURES[target]]
        constraints: dict[str, Any] = {"monotone_constraints": monotone} if any(monotone) else {}
        booster = lgb.LGBMRegressor(**_BOOSTER, **_OBJECTIVE[target], n_estimators=trees, random_state=seed,
                                    **constraints)
        model.booster = booster.fit(_features(frame, target, activations, base), goal,
                                    feature_name=list(FEATURES[target]), categorical_feature=["activation"])
    return model


def _defaults(frame: pd.DataFrame) -> dict[str, float]:
    ln_p = np.log(frame["parameters"].to_numpy(float))
    ln_a = np.log(frame["activations"].to_numpy(float))
    slope, intercept = np.polyfit(ln_p, ln_a, 1) if np.ptp(ln_p) > 0 else (0.0, float(np.mean(ln_a)))
    return {"layers": float(frame["layers"].median()), "batchnorm_layers": 0.0, "dropout_layers": 0.0,
            "ln_activations_per_ln_parameter": float(slope), "ln_activations_at_ln_parameters_0": float(intercept)}


def _features(frame: pd.DataFrame, target: str, activations: tuple[str, ...], base: FloatArray) -> FloatArray:
    """The booster's feature matrix of ``target``, columns in the order of ``FEATURES[target]``."""
    p = frame["parameters"].to_numpy(float)
    a = frame["activations"].to_numpy(float)
    b = frame["batch_size"].to_numpy(float)
    layers = frame["layers"].to_numpy(float)
    codes = {name: float(i) for i, name in enumerate(activations)}
    columns = {
        "ln_parameters": np.log(p), "ln_activations": np.log(a), "ln_batch_size": np.log(b),
        "ln_batch_activations": np.log(b * a), "ln_batch_parameters": np.log(b * p), "layers": layers,
        "batchnorm_layers": frame["batchnorm_layers"].to_numpy(float),
        "dropout_layers": frame["dropout_layers"].to_numpy(float),
        # An activation function not seen in training is "missing" to the booster.
        "activation": frame["activation"].map(lambda x: codes.get(x, np.nan)).to_numpy(float),
        "ln_parameters_per_layer": np.log(p / layers), "ln_activations_per_layer": np.log(a / layers),
        "ln_baseline": np.log(base),
    }
    return np.column_stack([columns[name] for name in FEATURES[target]])


def _stated(hyperparams: pd.DataFrame, keys: tuple[str, ...]) -> npt.NDArray[np.bool_]:
    ok = np.ones(len(hyperparams), dtype=bool)
    for key in keys:
        if key not in hyperparams:
            return np.zeros(len(hyperparams), dtype=bool)
        values = pd.to_numeric(hyperparams[key], errors="coerce").to_numpy(float)
        ok &= np.isfinite(values) & (values > 0)
    return ok


def _parameter_mib(frame: pd.DataFrame) -> FloatArray:
    return np.asarray(BYTES_PER_VALUE * frame["parameters"].to_numpy(float) / MIB, dtype=float)


def _activation_mib(frame: pd.DataFrame) -> FloatArray:
    values = frame["batch_size"].to_numpy(float) * frame["activations"].to_numpy(float)
    return np.asarray(BYTES_PER_VALUE * values / MIB, dtype=float)


def _ln_work(frame: pd.DataFrame) -> FloatArray:
    return np.asarray(np.log(frame["batch_size"].to_numpy(float) * frame["parameters"].to_numpy(float)), dtype=float)


def _floored(p50: FloatArray, target: str) -> FloatArray:
    return np.clip(p50, _MIN_UTIL_PCT, MAX_UTIL_PCT) if target == UTILISATION else p50




def evaluate_memory_models(frame: pd.DataFrame | None = None, seed: int = 0, *,
                           trees: int = TREES) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(errors, points) of both targets, both predictors, on two hold-out checks:

    * ``unseen architectures``: 5 folds grouped by architecture (GroupKFold);
    * ``unseen batch sizes``: the distinct batch sizes sorted into 5 contiguous bands, each band's rows
      held out in turn (so the smallest and the largest batches are extrapolated).

    Each fold refits everything, conformal margin included, on the other rows. errors: one row per
    (target, check, predictor) with ``n``, ``male`` (mean |ln(P50 / measured)|) and ``p90_coverage``
    (share of held-out rows with measured <= P90). points: every held-out prediction."""
    frame = (load_gpumemnet() if frame is None else frame).reset_index(drop=True)
    parts = []
    for check, folds in ((UNSEEN_ARCHITECTURES, architecture_folds(frame)),
                         (UNSEEN_BATCH_SIZES, batch_size_folds(frame))):
        for target in TARGETS:
            for predictor in (MODEL, BASELINE):
                for train, held in folds:
                    need = fit_need(frame.iloc[train], target, predictor, seed, trees=trees)
                    predicted = need.predict(frame.iloc[held])
                    parts.append(pd.DataFrame({
                        "target": target, "check": check, "predictor": predictor,
                        "measured": frame[MEASURED[target]].to_numpy(float)[held],
                        "p50": predicted["p50"].to_numpy(float), "p90": predicted["p90"].to_numpy(float)}))
    points = pd.concat(parts, ignore_index=True)[list(POINT_COLUMNS)]
    return error_table(points), points


def architecture_folds(frame: pd.DataFrame) -> list[tuple[IntArray, IntArray]]:
    """(train, held) positions of 5 folds grouped by architecture (fewer with fewer architectures)."""
    groups = int(frame["architecture"].nunique())
    if groups < 2:
        raise ValueError(f"need runs of at least 2 architectures to hold one out, got {groups}")
    splits = GroupKFold(n_splits=min(FOLDS, groups)).split(frame, groups=frame["architecture"])
    return [(np.asarray(train, dtype=np.intp), np.asarray(held, dtype=np.intp)) for train, held in splits]


def batch_size_folds(frame: pd.DataFrame) -> list[tuple[IntArray, IntArray]]:
    """(train, held) positions: the distinct batch sizes sorted into 5 contiguous bands (fewer with fewer
    sizes), each band's rows held out in turn; none with a single batch size."""
    sizes = np.sort(frame["batch_size"].unique())
    batch = frame["batch_size"].to_numpy()
    folds = []
    for band in np.array_split(sizes, min(FOLDS, len(sizes))) if len(sizes) >= 2 else []:
        held = np.isin(batch, band)
        folds.append((np.flatnonzero(~held), np.flatnonzero(held)))
    return folds




def right_sizing(points: pd.DataFrame, gpu_mem_mib: float = A100_40GB_MIB,
                 check: str | None = None) -> dict[str, float]:
    """What sizing each job's GPU memory by the model's P90 would give, on the held-out memory points of
    the model (of ``check`` only, when given; else of every check in ``points``), against each job asking
    for a whole GPU of ``gpu_mem_mib`` (an A100 40 GB by default).

    The whole-GPU request is an assumption: GPUMemNet runs record no request. Keys: ``jobs``,
    ``request_mib``, ``freed_mib_mean`` (mean of capacity - P90, at least 0), ``freed_share`` (that over
    the capacity), ``p90_gpu_share_mean`` (mean P90 / capacity, at most 1: the GPU share the P90
    implies), ``measured_gpu_share_mean`` (the same for the measured peak) and ``crash_share`` (jobs whose
    measured peak exceeds their P90, which would run out of memory)."""
    rows = points[(points["target"] == MEMORY) & (points["predictor"] == MODEL)]
    if check is not None:
        rows = rows[rows["check"] == check]
    if rows.empty:
        raise ValueError("no held-out memory points of the model" + (f" for check {check!r}" if check else ""))
    p90 = rows["p90"].to_numpy(float)
    measured = rows["measured"].to_numpy(float)
    freed = np.clip(gpu_mem_mib - p90, 0.0, None)
    return {"jobs": float(len(rows)), "request_mib": float(gpu_mem_mib),
            "freed_mib_mean": float(freed.mean()), "freed_share": float(freed.mean() / gpu_mem_mib),
            "p90_gpu_share_mean": float(np.minimum(p90 / gpu_mem_mib, 1.0).mean()),
            "measured_gpu_share_mean": float(np.minimum(measured / gpu_mem_mib, 1.0).mean()),
            "crash_share": float((measured > p90).mean())}


_COLOURS = {MODEL: "tab:green", BASELINE: "tab:grey"}
"""The model green, the baseline grey, as in :mod:`training.performance.holdout`."""


def plot_measured_vs_predicted(points: pd.DataFrame, path: Path, max_points: int = 1500, seed: int = 0) -> Path:
    """Log-log measured against predicted P50, one panel per target, the model and the baseline (at most
    ``max_points`` each, a seeded sample), with the y = x line."""
    targets = [t for t in TARGETS if (points["target"] == t).any()]
    fig, axes = plt.subplots(1, len(targets), figsize=(4.6 * len(targets), 4.4), squeeze=False)
    for ax, target in zip(axes[0], targets, strict=True):
        part = points[points["target"] == target]
        for predictor in (BASELINE, MODEL):  # the model last, on top
            rows = part[part["predictor"] == predictor]
            if rows.empty:
                continue
            rows = rows.sample(n=min(max_points, len(rows)), random_state=seed)
            ax.scatter(rows["measured"], rows["p50"], s=6, alpha=0.5, label=f"{predictor} P50",
                       color=_COLOURS[predictor])
        lo = float(part[["measured", "p50"]].min().min())
        hi = float(part[["measured", "p50"]].max().max())
        ax.plot([lo, hi], [lo, hi], color="red", linewidth=1)
        ax.set(xscale="log", yscale="log", title=target, xlabel=f"measured ({UNITS[target]})")
        ax.set_ylabel(f"predicted P50 ({UNITS[target]})")
        ax.legend(fontsize=7)
    return save_png(fig, path)
