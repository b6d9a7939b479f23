"""The share of its solo throughput a job keeps beside another job on the same GPU, from Gavel's pairs.

    share = throughput_a (beside b) / solo_a                steps/s over steps/s, 0..1

Measured on Gavel's consolidated pairs at scale factor 1 (its only pairs with a non-zero throughput),
both jobs on the same GPU type. Gavel writes 0 for a pair it did not run (mostly pairs that do not fit
in memory together), so zero shares are left out: whether a pair fits is the memory filter's question.

Per class pair (models mapped by the stand-in table of ``gpu_speed``): the median share over batch
sizes and GPU types. A class pair with no positive measurement (a class without a Gavel stand-in) is
predicted by :class:`SharePredictor`, a gradient-boosted regressor on numeric features only, so it can
answer for models it never saw:

    log solo_a, log solo_b        steps/s of each job alone on that GPU type
    log batch_a, log batch_b      samples per step (0 = log 1 for a model that names none: A3C, CycleGAN)
    scale_factor                  GPUs per job

A class enters the predictor with the median of its stand-ins' V100 features; without a stand-in, with
its Pollux step rate 1 / grad(reference batch) and reference batch (a different GPU, an approximation).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from placement.model.speed import REFERENCE_SPEED_TYPE
from training.performance.gpu_speed import GAVEL_STAND_IN
from training.performance.spread import FloatArray, SpreadFit

FEATURES = ("log_solo_a", "log_solo_b", "log_batch_a", "log_batch_b", "scale_factor")
SHARE_FLOOR = 0.05
"""Lowest share a prediction may give: the smallest measured share is 0.09."""


def pair_shares(pairs: pd.DataFrame) -> pd.DataFrame:
    """One row per measured positive pair with its share, features and classes (None without a stand-in)."""
    kept = pairs[(pairs["scale_factor"] == 1) & (pairs["throughput_a"] > 0) & (pairs["solo_a"] > 0)
                 & (pairs["solo_b"] > 0)]
    return kept.assign(
        share=kept["throughput_a"] / kept["solo_a"],
        log_solo_a=np.log(kept["solo_a"]), log_solo_b=np.log(kept["solo_b"]),
        log_batch_a=np.log(kept["batch_a"].clip(lower=1)), log_batch_b=np.log(kept["batch_b"].clip(lower=1)),
        workload_a=kept["model_a"].map(dict(GAVEL_STAND_IN)), workload_b=kept["model_b"].map(dict(GAVEL_STAND_IN)),
    ).reset_index(drop=True)


class SharePredictor:
    """Share kept beside another job, from the two jobs' solo features (scikit-learn contract)."""

    def __init__(self, seed: int = 0, n_estimators: int = 200, max_depth: int = 3) -> None:
        self.seed = seed
        self.n_estimators = n_estimators
        self.max_depth = max_depth

    def fit(self, shares: pd.DataFrame) -> SharePredictor:
        from sklearn.ensemble import GradientBoostingRegressor  # on fitting: a replay imports this module

        self.model_ = GradientBoostingRegressor(n_estimators=self.n_estimators, max_depth=self.max_depth,
                                                learning_rate=0.05, subsample=0.8, random_state=self.seed)
        self.model_.fit(shares[list(FEATURES)].to_numpy(float), shares["share"].to_numpy(float))
        return self

    def predict(self, frame: pd.DataFrame) -> FloatArray:
        if not hasattr(self, "model_"):
            raise RuntimeError("SharePredictor.predict called before fit")
        raw = self.model_.predict(frame[list(FEATURES)].to_numpy(float))
        return np.asarray(np.clip(raw, SHARE_FLOOR, 1.0), dtype=float)


def class_features(gavel_solo: pd.DataFrame, fits: Mapping[str, SpreadFit]) -> pd.DataFrame:
    """Per class (index), ``log_solo`` and ``log_batch`` as the predictor sees a job of that class."""
    v100 = gavel_solo[(gavel_solo["gpu_type"] == REFERENCE_SPEED_TYPE) & (gavel_solo["scale_factor"] == 1)
                      & gavel_solo["consolidated"]]
    v100 = v100.assign(workload=v100["model"].map(dict(GAVEL_STAND_IN)), log_solo=np.log(v100["throughput"]),
                       log_batch=np.log(v100["batch_size"].clip(lower=1))).dropna(subset=["workload"])
    measured = v100.groupby("workload")[["log_solo", "log_batch"]].median()
    rows = {c: (-float(np.log(f.grad_s(f.reference_bsz))), float(np.log(f.reference_bsz)))
            for c, f in fits.items() if c not in measured.index}
    pollux = pd.DataFrame.from_dict(rows, orient="index", columns=["log_solo", "log_batch"])
    return pd.concat([measured, pollux]).sort_index()


def colocated_table(shares: pd.DataFrame, classes: Iterable[str], predictor: SharePredictor,
                    features: pd.DataFrame) -> dict[str, dict[str, float]]:
    """colocated[k][j]: share a class-k job keeps beside a class-j job; measured median, else predicted."""
    names = sorted(classes)
    measured = shares.dropna(subset=["workload_a", "workload_b"]).groupby(["workload_a", "workload_b"])["share"]
    medians = measured.median().to_dict()
    grid = pd.DataFrame([(a, b) for a in names for b in names], columns=["workload_a", "workload_b"])
    missing = grid[[(a, b) not in medians for a, b in grid.itertuples(index=False)]]
    predicted: dict[tuple[str, str], float] = {}
    if not missing.empty:
        predicted = dict(zip(missing.itertuples(index=False, name=None),
                             predictor.predict(_class_pair_features(missing, features)), strict=True))
    return {a: {b: float(medians.get((a, b), predicted.get((a, b), np.nan))) for b in names} for a in names}


def _class_pair_features(grid: pd.DataFrame, features: pd.DataFrame) -> pd.DataFrame:
    a, b = features.loc[grid["workload_a"]], features.loc[grid["workload_b"]]
    return pd.DataFrame({"log_solo_a": a["log_solo"].to_numpy(), "log_solo_b": b["log_solo"].to_numpy(),
                         "log_batch_a": a["log_batch"].to_numpy(), "log_batch_b": b["log_batch"].to_numpy(),
                         "scale_factor": 1.0})
