"""The fitted cross-workload law and what it says of one step: compute from parameters and family, synchronisation
from gradient bytes, and the slowdown of a spread (:mod:`training.needs.spread_sensitivity`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray
from scipy.optimize import brentq  # type: ignore[import-untyped]

from placement.model.speed import SyncCurve
from training.needs.spread_sensitivity.facts import TINY_S

FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class SpreadLaw:
    """The fitted cross-workload laws: compute from parameters and family, sync from gradient bytes."""

    overhead_s: tuple[float, float]
    """(o_0 s, o_1 s per parameter) of the per-step overhead."""
    per_sample_s: Mapping[str, float]
    """c_f by compute group: seconds per sample per parameter."""
    pooled_per_sample_s: float
    sync: tuple[float, ...]
    """(latency s, s per GB) of a_r, b_r, a_n, b_n: eight numbers."""
    gamma: float

    def terms(self, parameters: FloatArray, batch: FloatArray, groups: Iterable[str | None],
              gigabytes: FloatArray) -> tuple[FloatArray, ...]:
        """(grad_s, a_r, b_r, a_n, b_n) of each job."""
        c = np.array([self.per_sample_s.get(g, self.pooled_per_sample_s) if g else self.pooled_per_sample_s
                      for g in groups], dtype=float)
        grad = self.overhead_s[0] + self.overhead_s[1] * parameters + c * parameters * batch
        s = self.sync
        return (np.maximum(grad, TINY_S), s[0] + s[1] * gigabytes, s[2] + s[3] * gigabytes,
                s[4] + s[5] * gigabytes, s[6] + s[7] * gigabytes)


def step_seconds(terms: tuple[FloatArray, ...], k: FloatArray, n: FloatArray, gamma: float | FloatArray) -> FloatArray:
    grad, ar, br, an, bn = terms
    sync = np.where(n <= 1, ar + br * (k - 2), an + bn * (k - 2))
    sync = np.where(k <= 1, 0.0, np.maximum(sync, 0.0))
    return np.asarray(grad * (1.0 + (sync / grad) ** gamma) ** (1.0 / gamma), dtype=float)


def slowdown_of(curve: SyncCurve, replicas: int, machines: int) -> float:
    return curve.step_s(replicas, machines) / curve.step_s(replicas, 1)


def scaled_network(curve: SyncCurve, replicas: int, machines: int, target: float) -> SyncCurve:
    """``curve`` with network_s scaled by the factor that makes its spread slowdown ``target``."""
    def scaled(s: float) -> SyncCurve:
        return replace(curve, network_s=(curve.network_s[0] * s, curve.network_s[1] * s))

    if slowdown_of(curve, replicas, machines) >= target:
        return curve
    high = 2.0
    while slowdown_of(scaled(high), replicas, machines) < target:
        high *= 2
        if high > 1e12:
            raise ValueError(f"no scaling of the cross-machine terms of {curve} reaches a slowdown of {target}")
    s = brentq(lambda x: slowdown_of(scaled(x), replicas, machines) - target, 1.0, high, xtol=1e-10, rtol=1e-12)
    return scaled(float(s))
