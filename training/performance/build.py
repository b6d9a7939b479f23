"""Assembling the replay's speed model (``placement.model.speed.SpeedModel``) from the three real profiles.

* sync curve of each class: Pollux's iteration-time model fitted to its Pollux profile (``spread``);
* type speed of each class, relative to V100: Gavel and Zeus (``gpu_speed``), with its stand-in table
  and the default aliases for cluster types no profile measured;
* co-location share of each class beside each class: Gavel's pairs (``colocation``).

``level_factor`` multiplies cross-machine sync time within a rack, across racks and across domains:
Pollux measured one switch only, so the last two are assumptions (default 2 and 4), stated in the
provenance. Deterministic: the least-squares fits start from the data and the regressor takes ``seed``.
"""

from __future__ import annotations

from types import MappingProxyType

import pandas as pd

from placement.model.speed import SpeedModel, WorkloadSpeed
from training.performance.colocation import SharePredictor, class_features, colocated_table, pair_shares
from training.performance.gpu_speed import DEFAULT_TYPE_ALIASES, type_ratios, type_speed
from training.performance.profiles import POLLUX_WORKLOADS, load_gavel, load_pollux, load_zeus
from training.performance.spread import SpreadFit, fit_all

Frames = tuple[pd.DataFrame, pd.DataFrame]


def fit_speed_model(pollux: pd.DataFrame | None = None, gavel: Frames | None = None, zeus: Frames | None = None,
                    level_factor: tuple[float, float, float] = (1.0, 2.0, 4.0), seed: int = 0) -> SpeedModel:
    """Fit every part on the given tables (``load_pollux()``, ``load_gavel()``, ``load_zeus()`` when None)."""
    pollux = load_pollux() if pollux is None else pollux
    gavel_solo, gavel_pairs = load_gavel() if gavel is None else gavel
    zeus_epochs = (load_zeus() if zeus is None else zeus)[0]
    fits = fit_all(pollux)
    classes = [c for c in POLLUX_WORKLOADS if c in fits] + sorted(set(fits) - set(POLLUX_WORKLOADS))
    speeds = type_speed(type_ratios(gavel_solo, zeus_epochs), classes)
    shares = pair_shares(gavel_pairs)
    predictor = SharePredictor(seed=seed).fit(shares)
    colocated = colocated_table(shares, classes, predictor, class_features(gavel_solo, fits))
    workloads = {c: WorkloadSpeed(c, fits[c].curve(), MappingProxyType(speeds[c]), MappingProxyType(colocated[c]))
                 for c in classes}
    return SpeedModel(MappingProxyType(workloads), DEFAULT_TYPE_ALIASES, level_factor,
                      provenance=_provenance(fits, level_factor))


def _provenance(fits: dict[str, SpreadFit], level_factor: tuple[float, float, float]) -> str:
    batches = ", ".join(f"{c} {f.reference_bsz}" for c, f in sorted(fits.items()))
    return ("sync curves: Pollux (OSDI'21) step-time profiles, Pollux's iteration-time model by least squares "
            f"on log step time, at the reference local batch ({batches}); "
            "type speed: Gavel (OSDI'20) solo throughputs and Zeus (NSDI'23) epoch times at the highest power "
            "limit, geometric means over sources and batch sizes, through a stand-in table of models; "
            "co-location: Gavel's measured pairs, median share per class pair; "
            f"cross-rack and cross-domain sync factors {level_factor[1]:g} and {level_factor[2]:g} assumed "
            "(Pollux measured one switch); unmeasured GPU types by stated aliases (peak FP32 where named).")
