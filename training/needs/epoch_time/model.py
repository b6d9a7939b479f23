"""The fitted model: epoch-time and ratio predictors with their conformal bands, fitted on every row, and the
folds the bands are calibrated on (:mod:`training.needs.epoch_time`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from training.needs.epoch_time.facts import (
    BASELINE,
    BATCH_FOLDS,
    COVERAGE,
    GPU_SPECS,
    MODEL,
    REQUIRED_KEYS,
    SOURCE,
    TARGET,
    ZEUS,
    ZEUS_SOURCE,
)
from training.needs.epoch_time.predictors import PREDICTORS, RATIO_PREDICTORS, EpochDifference, RatioPredictor
from training.needs.epoch_time.rows import feature_frame, fill_in, gavel_rows, ordered_pairs, profile_rows, type_rows
from training.needs.scoring import conformal_quantile, grouped_conformal_quantile
from training.performance.profiles import load_gavel, load_zeus

FloatArray = npt.NDArray[np.float64]


# The fitted model

BANDS = ("profiled", "workload", "type", "ratio_workload", "ratio_type")
"""Conformal bands (ln units) and their folds: "profiled" holds out whole batch sizes of each Zeus workload,
"workload" one Zeus workload and "type" one GPU type (epoch_s, Zeus); "ratio_workload" one workload of
either source (with "ratio_workload:<source>", each testbed's own, the larger of which it is) and
"ratio_type" one GPU chip of both (ratios, Zeus and Gavel)."""


@dataclass
class EpochTimeModel:
    """Seconds per epoch (P50, P90) on each GPU type of :data:`GPU_SPECS` from stated hyperparameters, and
    the ratio between two types."""

    predictor: Any
    source: str = SOURCE
    gpu_types: tuple[str, ...] = tuple(GPU_SPECS)
    measured_types: tuple[str, ...] = ()
    """Types with measured epoch times (Zeus)."""
    profiled: tuple[tuple[float, float], ...] = ()
    """(parameters, samples_per_epoch) of the training workloads."""
    bands: dict[str, float] = field(default_factory=dict)
    target: str = TARGET
    unit: str = "s"
    ratio_law: Any = None
    """What :meth:`ratio` answers from (a :class:`RatioLaw`); None: the quotient of two predictions."""
    ratio_types: tuple[str, ...] = ()
    """Types with measured ratios (Zeus and Gavel)."""
    ratio_sources: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """(testbed, the types it measured) of each source of ratios, whose band is ``bands["ratio_workload:<testbed>"]``
    (none: every measured pair gets "ratio_workload")."""

    def required_keys(self) -> tuple[str, ...]:
        return REQUIRED_KEYS

    def _check_type(self, gpu_type: str) -> None:
        if gpu_type not in self.gpu_types:
            raise ValueError(f"unknown gpu_type {gpu_type!r}; known: {', '.join(self.gpu_types)}")

    def _ln_p50(self, filled: pd.DataFrame, types: pd.Series) -> FloatArray:
        ok = filled[list(REQUIRED_KEYS)].notna().all(axis=1).to_numpy()
        out = np.full(len(filled), np.nan)
        if ok.any():
            out[ok] = self.predictor.ln_epoch(feature_frame(filled[ok], types[ok]))
        return out

    def _band(self, filled: pd.DataFrame, types: pd.Series) -> FloatArray:
        pairs = set(self.profiled)
        known = np.array([(p, s) in pairs for p, s in zip(filled["parameters"], filled["samples_per_epoch"],
                                                             strict=True)], dtype=bool)
        measured = {_chip(m) for m in self.measured_types}
        new_type = np.array([_chip(str(t)) not in measured for t in types], dtype=bool)
        band = np.where(known, self.bands["profiled"], self.bands["workload"])
        band = np.where(new_type, np.where(known, self.bands["type"], np.maximum(band, self.bands["type"])), band)
        return np.asarray(band, dtype=float)

    def predict(self, hyperparams: pd.DataFrame, gpu_type: str) -> pd.DataFrame:
        """Columns p50, p90 (s per epoch), the index of ``hyperparams``; NaN where a required key is missing."""
        return self.predict_types(hyperparams, (gpu_type,))[gpu_type]

    def predict_types(self, hyperparams: pd.DataFrame, gpu_types: Sequence[str]) -> dict[str, pd.DataFrame]:
        """:meth:`predict` for each of ``gpu_types``, in one pass over the fitted models."""
        for gpu_type in gpu_types:
            self._check_type(gpu_type)
        filled = fill_in(hyperparams)
        stacked = pd.concat([filled] * len(gpu_types), ignore_index=True)
        types = pd.Series(np.repeat(np.asarray(gpu_types, dtype=object), len(filled)), index=stacked.index)
        ln_p50 = self._ln_p50(stacked, types)
        band = self._band(stacked, types)
        return {gpu_type: pd.DataFrame({"p50": np.exp(ln_p50[part]), "p90": np.exp(ln_p50[part] + band[part])},
                                       index=hyperparams.index)
                for k, gpu_type in enumerate(gpu_types) for part in [slice(k * len(filled), (k + 1) * len(filled))]}

    def ratio(self, hyperparams: pd.DataFrame, from_type: str, to_type: str) -> pd.DataFrame:
        """Columns p50, p90 of epoch_s(to_type) / epoch_s(from_type): multiply a job's observed epoch time
        (or duration) on ``from_type`` by it to predict ``to_type``. From the ratio law (module docstring),
        which depends on the two types only: every row gets an answer, stated keys or not."""
        self._check_type(from_type)
        self._check_type(to_type)
        filled = fill_in(hyperparams)
        if self.ratio_law is None:
            ln_ratio = (self._ln_p50(filled, pd.Series(to_type, index=filled.index))
                        - self._ln_p50(filled, pd.Series(from_type, index=filled.index)))
        else:
            ln_ratio = self._type_term(filled, to_type) - self._type_term(filled, from_type)
        band = self._ratio_band(from_type, to_type)
        return pd.DataFrame({"p50": np.exp(ln_ratio), "p90": np.exp(ln_ratio + band)}, index=hyperparams.index)

    def _type_term(self, filled: pd.DataFrame, gpu_type: str) -> FloatArray:
        return np.asarray(self.ratio_law.type_term(feature_frame(filled, pd.Series(gpu_type, index=filled.index))),
                          dtype=float)

    def _ratio_band(self, from_type: str, to_type: str) -> float:
        """The ratio's band: the largest "ratio_workload:<testbed>" of the testbeds that measured both chips,
        or else of those that measured either ("ratio_workload", the largest of all, when none did); the larger
        with "ratio_type" when a side is a chip without measured ratios; 0 between a type and itself."""
        if from_type == to_type:
            return 0.0
        a, b = _chip(from_type), _chip(to_type)
        chips = {source: {_chip(t) for t in types} for source, types in self.ratio_sources}
        both = [s for s, mine in chips.items() if a in mine and b in mine]
        either = [s for s, mine in chips.items() if a in mine or b in mine]
        band = max((self.bands[f"ratio_workload:{s}"] for s in both or either), default=self.bands["ratio_workload"])
        measured = {_chip(t) for t in (self.ratio_types or self.measured_types)}
        if a not in measured or b not in measured:
            band = max(band, self.bands["ratio_type"])
        return float(band)


def _chip(gpu_type: str) -> tuple[float, float]:
    """What the model sees of a type: types with the same compute and bandwidth (e.g. V100 and V100M32) are
    one chip to it, so a measured chip's band serves its aliases."""
    spec = GPU_SPECS[gpu_type]
    return spec.peak_fp32_tflops, spec.memory_bw_gbs


def fit_epoch_time(zeus: tuple[pd.DataFrame, pd.DataFrame] | None = None,
                   gavel: tuple[pd.DataFrame, pd.DataFrame] | None = None, seed: int = 0) -> EpochTimeModel:
    """The learned model on every Zeus row (epoch_s) and every Zeus and Gavel row (ratios), with every
    conformal band (:data:`BANDS`). ``zeus``, ``gavel``: what ``load_zeus()``, ``load_gavel()`` return
    (loaded when None); a ``gavel`` with no solo rows fits the ratios on Zeus alone."""
    epochs = (zeus if zeus is not None else load_zeus())[0]
    solo = (gavel if gavel is not None else load_gavel())[0]
    return fit_on_rows(profile_rows(epochs), gavel_rows(solo), MODEL, seed, BANDS)


def fit_on_rows(rows: pd.DataFrame, gavel: pd.DataFrame, predictor: str, seed: int, bands: Sequence[str],
         ratios: bool = True) -> EpochTimeModel:
    """``rows``: Zeus's (:func:`profile_rows`); ``gavel``: Gavel's (:func:`gavel_rows`), ratios only;
    ``ratios``: False for a model only asked for epoch times (its ``ratio`` is then the quotient)."""
    fitted = PREDICTORS[predictor](seed).fit(rows)
    typed = type_rows(rows, gavel if ratios else gavel.iloc[:0])
    model = EpochTimeModel(
        fitted, source=SOURCE if len(gavel) else ZEUS_SOURCE,
        measured_types=tuple(sorted(set(rows["gpu_type"]))),
        profiled=tuple(sorted(set(zip(rows["parameters"].astype(float), rows["samples_per_epoch"].astype(float),
                                      strict=True)))),
        bands={b: float("nan") for b in BANDS},
        ratio_law=_fit_ratio(typed, predictor, seed, fitted) if ratios else None,
        ratio_types=tuple(sorted(set(typed["gpu_type"]))),
    )
    wanted = set(bands)
    if "profiled" in wanted:
        model.bands["profiled"] = conformal_quantile(_residuals(rows, predictor, seed, batch_folds(rows, seed)),
                                                     COVERAGE)
    if "workload" in wanted:
        # Held out by whole workloads, the rows are exchangeable by workload: each weighs the same.
        model.bands["workload"] = grouped_conformal_quantile(
            _residuals(rows, predictor, seed, leave_one_out(rows["workload"])), rows["workload"], COVERAGE)
    if "type" in wanted:
        model.bands["type"] = conformal_quantile(_residuals(rows, predictor, seed, leave_one_out(rows["gpu_type"])),
                                                 COVERAGE)
    if "ratio_workload" in wanted:
        residual, workload, source = _ratio_residuals(typed, predictor, seed, leave_one_out(typed["workload"]))
        # One band per testbed, each workload weighing the same within it: pooled, the testbed with more pairs
        # would set the band of the other's chips.
        per_source = {}
        for name, types in typed.groupby("source")["gpu_type"]:
            mine = source == name
            band = grouped_conformal_quantile(residual[mine], workload[mine], COVERAGE)
            if math.isfinite(band):
                per_source[str(name)] = band, tuple(sorted(set(types)))
        model.bands.update({f"ratio_workload:{name}": band for name, (band, _) in per_source.items()})
        model.ratio_sources = tuple((name, types) for name, (_, types) in sorted(per_source.items()))
        model.bands["ratio_workload"] = max((band for band, _ in per_source.values()), default=math.nan)
    if "ratio_type" in wanted:
        chips = typed["gpu_type"].map(lambda t: str(_chip(str(t))))
        model.bands["ratio_type"] = conformal_quantile(
            _ratio_residuals(typed, predictor, seed, leave_one_out(chips))[0], COVERAGE)
    return model


def _fit_ratio(typed: pd.DataFrame, predictor: str, seed: int, fitted: Any = None) -> RatioPredictor:
    """The ratio part of ``predictor`` on ``typed`` (:data:`TYPE_ROW_COLUMNS`); the baseline's is the
    difference of its epoch predictions (``fitted``, when already fitted on these Zeus rows)."""
    if predictor == BASELINE and fitted is not None:
        return EpochDifference(fitted)
    return RATIO_PREDICTORS[predictor](seed).fit(typed)


Folds = list[tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]]


def leave_one_out(key: pd.Series) -> Folds:
    values = key.to_numpy()
    return [(np.flatnonzero(values != k), np.flatnonzero(values == k)) for k in sorted(set(values))]


def batch_folds(rows: pd.DataFrame, seed: int) -> Folds:
    """Whole batch sizes of each workload held out: each workload's batch sizes in a seeded order, dealt
    round-robin to :data:`BATCH_FOLDS` folds (every type of a held-out batch size goes out together)."""
    rng = np.random.default_rng(seed)
    fold = np.empty(len(rows), dtype=int)
    for _, positions in sorted(rows.groupby("workload").indices.items()):
        sizes = np.unique(rows["batch_size"].to_numpy()[positions])
        order = {int(b): i % BATCH_FOLDS for i, b in enumerate(rng.permutation(sizes))}
        fold[positions] = [order[int(b)] for b in rows["batch_size"].to_numpy()[positions]]
    return [(np.flatnonzero(fold != k), np.flatnonzero(fold == k)) for k in range(BATCH_FOLDS)
            if (fold == k).any() and (fold != k).any()]


def _residuals(rows: pd.DataFrame, predictor: str, seed: int, folds: Folds) -> FloatArray:
    """Out-of-fold ln(measured / P50) of every Zeus row, in the order of ``rows`` (NaN where no fold holds a
    row out)."""
    out = np.full(len(rows), np.nan)
    for train, held in folds:
        fitted = PREDICTORS[predictor](seed).fit(rows.iloc[train])
        part = rows.iloc[held]
        out[held] = np.log(part["epoch_s"].to_numpy(float)) - fitted.ln_epoch(feature_frame(part, part["gpu_type"]))
    return out


def _ratio_residuals(typed: pd.DataFrame, predictor: str, seed: int,
                     folds: Folds) -> tuple[FloatArray, npt.NDArray[np.object_], npt.NDArray[np.object_]]:
    """Out-of-fold ln(measured / P50) of every ordered pair of types at one (workload, batch size) with a
    held-out row on at least one side (the other side held out or not), Zeus's and Gavel's rows alike; with
    each pair's workload and source."""
    out, workloads, sources = [], [], []
    keys = typed["workload"] + "|" + typed["batch_size"].astype(str)
    zeus = (typed["source"] == ZEUS).to_numpy()
    fitted: dict[bytes, RatioPredictor] = {}
    for train, held in folds:
        # The baseline learns from the Zeus rows only: folds that hold out Gavel rows alone share one fit.
        key = (train[zeus[train]] if predictor == BASELINE else train).tobytes()
        if key not in fitted:
            fitted[key] = _fit_ratio(typed.iloc[train], predictor, seed)
        law = fitted[key]
        near = np.flatnonzero(keys.isin(set(keys.iloc[held])).to_numpy())
        part = typed.iloc[near]
        term = law.type_term(feature_frame(part, part["gpu_type"]))
        first, second = ordered_pairs(part, np.isin(near, held))
        ln_time = part["ln_time"].to_numpy(float)
        out.append((ln_time[second] - ln_time[first]) - (term[second] - term[first]))
        workloads.append(part["workload"].to_numpy(object)[first])
        sources.append(part["source"].to_numpy(object)[first])
    if not out:
        return np.array([]), np.array([], dtype=object), np.array([], dtype=object)
    return np.concatenate(out), np.concatenate(workloads), np.concatenate(sources)
