"""Pollux's rows as arrays, with their hyperparameters and measured slowdowns, and the reading of a job's stated
hyperparameters (:mod:`training.needs.spread_sensitivity`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from training.needs.spread_sensitivity.facts import (
    BYTES_PER_GB,
    BYTES_PER_GRADIENT,
    COMPUTE_GROUP,
    PARAMETER_TOLERANCE,
    POLLUX_MODELS,
    pollux_hyperparams,
    profiled_workload,
)
from training.performance.spread import SpreadFit

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class ProfileData:
    """The Pollux rows as arrays, with their hyperparameters and measured slowdowns."""

    rows: pd.DataFrame
    hyperparams: pd.DataFrame
    workload: NDArray[np.str_]
    gpus: FloatArray
    machines: FloatArray
    batch: FloatArray
    step: FloatArray
    spread: FloatArray
    """Measured spread slowdown; NaN on one machine."""
    scaling: FloatArray
    """Measured scaling slowdown; NaN on one GPU."""

    @staticmethod
    def of(pollux: pd.DataFrame, fits: Mapping[str, SpreadFit]) -> ProfileData:
        rows = pollux.reset_index(drop=True)
        return ProfileData(rows, pollux_hyperparams(rows), rows["workload"].to_numpy(str), rows["gpus"].to_numpy(float),
                     rows["machines"].to_numpy(float), rows["local_bsz"].to_numpy(float),
                     rows["step_time_s"].to_numpy(float), _measured_spread(rows, fits),
                     _measured_scaling(rows, fits))


def _measured_spread(rows: pd.DataFrame, fits: Mapping[str, SpreadFit]) -> FloatArray:
    packed = rows[rows["machines"] == 1].groupby(["workload", "gpus", "local_bsz"])["step_time_s"].median()
    out = np.full(len(rows), np.nan)
    for i, (w, k, n, m, step) in enumerate(rows[["workload", "gpus", "machines", "local_bsz", "step_time_s"]]
                                           .itertuples(index=False)):
        if n > 1:
            base = packed.get((w, k, m))
            if base is None:
                base = float(fits[w].step_s(np.array([k]), np.array([1.0]), np.array([m]))[0])
            out[i] = step / base
    return out


def _measured_scaling(rows: pd.DataFrame, fits: Mapping[str, SpreadFit]) -> FloatArray:
    single = rows[rows["gpus"] == 1].groupby(["workload", "local_bsz"])["step_time_s"].median()
    out = np.full(len(rows), np.nan)
    for i, (w, k, m, step) in enumerate(rows[["workload", "gpus", "local_bsz", "step_time_s"]]
                                        .itertuples(index=False)):
        if k > 1:
            base = single.get((w, m))
            if base is None:
                base = float(fits[w].step_s(np.array([1.0]), np.array([1.0]), np.array([m]))[0])
            out[i] = step / base
    return out


def hyperparams_frame(records: Iterable[Mapping[Any, Any]]) -> pd.DataFrame:
    """Stated hyperparameters as the columns the model reads: parameters, batch_size (float, NaN where
    missing), _group, _gigabytes, _workload (the profiled workload the job names, None if none or if its
    stated parameters or precision say it trains another model), _missing. A job naming a profiled model
    takes the keys it leaves out (parameters, model_family, precision) from :data:`POLLUX_MODELS`."""
    parameters, batch, groups, gigabytes, workloads, missing = [], [], [], [], [], []
    for r in records:
        workload = profiled_workload(r.get("model"))
        facts = POLLUX_MODELS[workload] if workload is not None else None
        p, m = _number(r.get("parameters")), _number(r.get("batch_size"))
        stated_precision, family = r.get("precision"), r.get("model_family")
        precision = (stated_precision.lower() if isinstance(stated_precision, str)
                     else facts.precision if facts is not None else "fp32")
        if facts is not None:
            if not p > 0:  # NaN compares False
                p = float(facts.parameters)
            if not isinstance(family, str):
                family = facts.family
            if abs(p / facts.parameters - 1.0) > PARAMETER_TOLERANCE or precision != facts.precision:
                workload = None
        parameters.append(p)
        batch.append(m)
        groups.append(COMPUTE_GROUP.get(family.lower()) if isinstance(family, str) else None)
        gigabytes.append(p * BYTES_PER_GRADIENT.get(precision, 4) / BYTES_PER_GB)
        workloads.append(workload)
        missing.append(not (p > 0 and m > 0))
    return pd.DataFrame({"parameters": np.array(parameters, dtype=float), "batch_size": np.array(batch, dtype=float),
                         "_group": groups, "_gigabytes": np.array(gigabytes, dtype=float),
                         "_workload": pd.Series(workloads, dtype=object), "_missing": missing})


def _number(value: Any) -> float:
    if value is None or isinstance(value, bool | str):
        return math.nan
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number if math.isfinite(number) else math.nan
