"""The fitted model: a job's predicted sync curve and spread slowdown from its hyperparameters, with its P90
(:mod:`training.needs.spread_sensitivity`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from placement.model.speed import SyncCurve
from training.needs.spread_sensitivity.data import ProfileData, hyperparams_frame
from training.needs.spread_sensitivity.facts import POLLUX_MODELS, REFERENCE_SPREAD, SOURCE, TARGET, TINY_S, VERSUS
from training.needs.spread_sensitivity.fitting import (
    batch_folds,
    fit_law,
    lomo_residuals,
    margin_of,
    profiled_margins_of,
    profiled_residuals,
)
from training.needs.spread_sensitivity.law import SpreadLaw, scaled_network, slowdown_of, step_seconds
from training.performance.profiles import load_pollux
from training.performance.spread import SpreadFit, fit_all

FloatArray = NDArray[np.float64]


@dataclass
class SpreadSensitivityModel:
    """Predicted sync curve and spread slowdown of a job from its hyperparameters (see the module doc)."""

    law: SpreadLaw
    margins: dict[str, float]
    """log margins of the P90 over the P50 of a job that names no profiled model ("unseen model"):
    "spread", "scaling", "step"."""
    workloads: tuple[str, ...]
    target: str = TARGET
    unit: str = "x"
    source: str = SOURCE
    reference_spread: tuple[int, int] = REFERENCE_SPREAD
    notes: dict[str, str] = field(default_factory=dict)
    profiled: dict[str, SpreadFit] = field(default_factory=dict)
    """Each profiled workload's own measured fit, by workload: the P50 of a job that names its model."""
    profiled_margins: dict[str, float] = field(default_factory=dict)
    """log margins of the P90 over the P50 of a job that names a profiled model ("profiled"): "spread",
    "scaling", "step"."""

    def required_keys(self) -> tuple[str, ...]:
        """What a job must state, or fill by naming a profiled ``model`` (which gives ``parameters``)."""
        return ("parameters", "batch_size")

    def curve(self, hyperparams: Mapping[str, Any], quantile: str = "p50",
              at: tuple[int, int] | None = None) -> SyncCurve | None:
        """The job's sync curve at its batch size (``quantile`` "p50" or "p90"); None where ``parameters`` or
        ``batch_size`` is missing. The P90 curve's spread slowdown at ``at`` (replicas, machines; default
        :data:`REFERENCE_SPREAD`) is the P90 there."""
        if quantile not in ("p50", "p90"):
            raise ValueError(f"quantile must be 'p50' or 'p90', got {quantile!r}")
        frame = hyperparams_frame([hyperparams])
        if frame["_missing"].iloc[0]:
            return None
        terms, gamma = self._terms(frame)
        grad, ar, br, an, bn = (float(v[0]) for v in terms)
        p50 = SyncCurve(grad, (ar, br), (an, bn), float(gamma[0]))
        if quantile == "p50":
            return p50
        k, n = at if at is not None else self.reference_spread
        if k < 2 or n < 2:
            raise ValueError(f"the P90 curve is matched on a spread placement (K >= 2, n >= 2), got {(k, n)}")
        target = slowdown_of(p50, k, n) * math.exp(float(self._margins(frame)["spread"][0]))
        return scaled_network(p50, k, n, target)

    def predict(self, hyperparams: pd.DataFrame, replicas: int, machines: int,
                versus: str = "one machine") -> pd.DataFrame:
        """P50 and P90 of step(K = ``replicas`` on ``machines``) / step(K on one machine), or / step(one GPU)
        with ``versus="one gpu"``; one row per job (same index), NaN where a required key is missing."""
        if versus not in VERSUS:
            raise ValueError(f"versus must be one of {VERSUS}, got {versus!r}")
        if replicas < 1 or machines < 1 or machines > replicas:
            raise ValueError(f"need 1 <= machines <= replicas, got {replicas} replicas on {machines} machines")
        frame = hyperparams_frame(hyperparams.to_dict("records"))
        k, n = np.full(len(frame), float(replicas)), np.full(len(frame), float(machines))
        key = "spread" if versus == VERSUS[0] else "scaling"
        p50 = self._quantities(frame, k, n)[key]
        moved = machines > 1 if versus == VERSUS[0] else replicas > 1
        margin = self._margins(frame)[key] if moved else np.zeros(len(frame))
        return pd.DataFrame({"p50": p50, "p90": p50 * np.exp(margin)}, index=hyperparams.index)

    def step_s(self, hyperparams: pd.DataFrame, replicas: FloatArray, machines: FloatArray) -> FloatArray:
        """P50 step time, s, of each job at its own (replicas, machines); NaN where a key is missing."""
        frame = hyperparams_frame(hyperparams.to_dict("records"))
        k = np.broadcast_to(np.asarray(replicas, float), (len(frame),))
        n = np.broadcast_to(np.asarray(machines, float), (len(frame),))
        return self._quantities(frame, k, n)["step"]

    def _quantities(self, frame: pd.DataFrame, k: FloatArray, n: FloatArray) -> dict[str, FloatArray]:
        """P50 step time (s), spread and scaling slowdown of each job of a :func:`hyperparams_frame` at its own (K, n);
        NaN where a required key is missing."""
        terms, gamma = self._terms(frame)
        ones = np.ones(len(frame))
        step = step_seconds(terms, k, n, gamma)
        missing = frame["_missing"].to_numpy(bool)
        out = {"step": step, "spread": step / step_seconds(terms, k, ones, gamma),
               "scaling": step / step_seconds(terms, ones, ones, gamma)}
        return {key: np.where(missing, np.nan, value) for key, value in out.items()}

    def _is_profiled(self, frame: pd.DataFrame) -> NDArray[np.bool_]:
        return np.array([w in self.profiled for w in frame["_workload"]], dtype=bool)

    def _margins(self, frame: pd.DataFrame) -> dict[str, FloatArray]:
        """log margin of each job's P90 over its P50: the "profiled" one where it names a profiled model (the
        "unseen model" one where no profiled margin could be calibrated: no workload with two batch sizes)."""
        profiled = self._is_profiled(frame)
        out = {}
        for key in ("spread", "scaling", "step"):
            own = self.profiled_margins.get(key, math.nan)
            out[key] = np.where(profiled, own if math.isfinite(own) else self.margins[key], self.margins[key])
        return out

    def _terms(self, frame: pd.DataFrame) -> tuple[tuple[FloatArray, ...], FloatArray]:
        """((grad_s, a_r, b_r, a_n, b_n), gamma) of each job: the law's, or its workload's measured fit where
        the job names a profiled model."""
        p = frame["parameters"].to_numpy(float)
        m = np.nan_to_num(frame["batch_size"].to_numpy(float), nan=1.0)
        terms = tuple(np.array(t, dtype=float) for t in self.law.terms(
            np.where(np.isnan(p), 1.0, p), m, frame["_group"],
            np.nan_to_num(frame["_gigabytes"].to_numpy(float), nan=0.0)))
        gamma = np.full(len(frame), self.law.gamma)
        for i, workload in enumerate(frame["_workload"]):
            fit = self.profiled.get(workload) if workload else None
            if fit is None:
                continue
            values = (max(float(fit.grad_s(m[i])), TINY_S), *fit.local_s, *fit.network_s)
            for term, value in zip(terms, values, strict=True):
                term[i] = value
            gamma[i] = fit.gamma
        return terms, gamma


def fit_spread_sensitivity(pollux: pd.DataFrame | None = None) -> SpreadSensitivityModel:
    """The model on every Pollux workload: its "unseen model" P90 margins from leave-one-model-out residuals,
    its "profiled" ones from residuals out of batch-size folds."""
    pollux = load_pollux() if pollux is None else pollux
    fits = fit_all(pollux)
    data = ProfileData.of(pollux, fits)
    workloads = tuple(sorted(fits))
    law = fit_law(data, fits, workloads)
    residuals = lomo_residuals(data, fits, workloads)
    margins = {k: margin_of(data, v) for k, v in residuals.items() if k in ("spread", "scaling", "step")}
    everything = np.ones(len(data.step), dtype=bool)
    profiled = profiled_margins_of(profiled_residuals(data, fits, batch_folds(data), everything, {}))
    return SpreadSensitivityModel(law, margins, workloads, notes={w: POLLUX_MODELS[w].source for w in workloads},
                                  profiled=dict(fits), profiled_margins=profiled)
