"""Pollux's iteration-time model of one workload class, fitted to its measured Pollux profiles.

For a class, with ``m`` the local batch (samples per GPU per step), ``K`` GPUs on ``n`` machines,
times in seconds per step:

    grad(m)   = alpha_s + beta_s x m                                  compute
    sync(K,n) = 0                                      K = 1
              = a_r + b_r x (K - 2)                    n = 1          (local_s = (a_r, b_r))
              = a_n + b_n x (K - 2)                    n > 1          (network_s = (a_n, b_n))
    step      = (grad ** gamma + sync ** gamma) ** (1 / gamma)       gamma >= 1

Fit, as Pollux fits its own model: least squares (``scipy.optimize.least_squares``, every parameter
>= 0, 1 <= gamma <= 10) over every row of both kinds of file, on two residuals per row:

    log(step_time - sync_time) - log grad(m)       the files record step = compute + sync
    log(step_time)             - log step(K, n, m)

Logs, so a 10 ms NCF step weighs as much as a 2 s BERT step. Unlike Pollux, the fit keeps
a_n >= a_r and b_n >= b_r (it solves for the non-negative excess of the network terms): crossing
machines never syncs faster than staying on one, so no placement is predicted to gain by spreading,
even at more GPUs than the profiles put on one machine (4). On these profiles the constraint moves
the leave-one-placement-out median error by less than 0.1 point.

The sync curve handed to the replay keeps ``grad`` at the class's **reference local batch**: the lower
median of ``local_bsz`` over the class's rows (lower, so it is a batch size that was measured; on the
shipped profiles bert 8, cifar10 182, deepspeech2 28, imagenet 57, ncf 363, yolov3 8). The profiles
were taken on one switch, so the cross-machine factor of every fitted row is 1.

A class with a single-GPU profile only gets :func:`pooled_fit`: its own compute line plus the sync
parameters of other classes, each scaled by the ratio sync / grad(reference) they showed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from scipy.optimize import least_squares  # type: ignore[import-untyped]

from placement.model.speed import SyncCurve

FloatArray = NDArray[np.float64]
GAMMA_MAX = 10.0
_TINY_S = 1e-6
"""Floor of a fitted time, s: keeps every log finite while the solver explores the bounds."""


@dataclass(frozen=True)
class SpreadFit:
    """The fitted iteration-time model of one class; times in seconds per step."""

    workload: str
    alpha_s: float
    beta_s: float
    """Compute seconds per extra sample of local batch."""
    local_s: tuple[float, float]
    network_s: tuple[float, float]
    gamma: float
    reference_bsz: int

    def grad_s(self, local_bsz: FloatArray | float) -> FloatArray:
        return np.asarray(self.alpha_s + self.beta_s * np.asarray(local_bsz, dtype=float), dtype=float)

    def step_s(self, gpus: FloatArray, machines: FloatArray, local_bsz: FloatArray) -> FloatArray:
        """Predicted step time, s, of each (K GPUs, n machines, local batch m) row."""
        return _step(self._vector(), np.asarray(gpus, float), np.asarray(machines, float),
                     np.asarray(local_bsz, float))

    def curve(self) -> SyncCurve:
        """The plain-data curve the replay applies, at the reference local batch."""
        return SyncCurve(float(self.grad_s(self.reference_bsz)), self.local_s, self.network_s, self.gamma)

    def _vector(self) -> FloatArray:
        extra = (self.network_s[0] - self.local_s[0], self.network_s[1] - self.local_s[1])
        return np.array([self.alpha_s, self.beta_s, *self.local_s, *extra, self.gamma])


def reference_bsz(rows: pd.DataFrame) -> int:
    """The lower median of the rows' local batch: a measured batch size."""
    return int(np.percentile(rows["local_bsz"].to_numpy(), 50, method="lower"))


def predict_step_s(fit: SpreadFit, rows: pd.DataFrame) -> FloatArray:
    """Step time, s, of Pollux-shaped rows (columns ``gpus``, ``machines``, ``local_bsz``)."""
    return fit.step_s(rows["gpus"].to_numpy(float), rows["machines"].to_numpy(float), rows["local_bsz"].to_numpy(float))


def fit_spread(rows: pd.DataFrame, workload: str, reference: int | None = None,
               start: SpreadFit | None = None) -> SpreadFit:
    """Fit one class's model on its rows (columns gpus, machines, local_bsz, step_time_s, sync_time_s);
    ``start`` (e.g. the fit on all rows) only speeds the solver up."""
    if rows.empty:
        raise ValueError(f"no Pollux rows to fit the class {workload!r} on")
    k, n, m = (rows[c].to_numpy(float) for c in ("gpus", "machines", "local_bsz"))
    step, sync = rows["step_time_s"].to_numpy(float), rows["sync_time_s"].to_numpy(float)
    compute = step - sync
    has = compute > 0

    def residuals(x: FloatArray) -> FloatArray:
        grad = np.maximum(x[0] + x[1] * m[has], _TINY_S)
        return np.concatenate([np.log(compute[has]) - np.log(grad), np.log(step) - np.log(_step(x, k, n, m))])

    def jacobian(x: FloatArray) -> FloatArray:
        grad = np.maximum(x[0] + x[1] * m[has], _TINY_S)
        top = np.zeros((int(has.sum()), 7))
        top[:, 0], top[:, 1] = -1.0 / grad, -m[has] / grad
        return np.vstack([top, -_log_step_jacobian(x, k, n, m)])

    x0 = _start(k, n, m, compute, sync) if start is None else np.clip(start._vector(), *_bounds())
    # lsmr, the iterative trust-region step: here it reaches the SVD step's optimum to 6 digits several
    # times faster, which the leave-one-out validation's 400 refits need.
    result = least_squares(residuals, x0, jac=jacobian, bounds=_bounds(), x_scale="jac", tr_solver="lsmr")
    a, b, ar, br, da, db, g = (float(v) for v in result.x)
    ref = reference if reference is not None else reference_bsz(rows)
    return SpreadFit(workload, a, b, (ar, br), (ar + da, br + db), g, ref)


def fit_all(pollux: pd.DataFrame) -> dict[str, SpreadFit]:
    """One fit per class of a :func:`training.performance.profiles.load_pollux` table, by class name."""
    return {str(w): fit_spread(rows, str(w)) for w, rows in pollux.groupby("workload")}  # groupby sorts


def fit_compute(rows: pd.DataFrame) -> tuple[float, float]:
    """(alpha_s, beta_s) of grad(m) = alpha_s + beta_s x m from single-GPU rows, least squares on logs."""
    m = rows["local_bsz"].to_numpy(float)
    compute = np.maximum(rows["step_time_s"].to_numpy(float) - rows["sync_time_s"].to_numpy(float), _TINY_S)
    x0 = np.array([float(np.median(compute)) / 2, float(np.median(compute / m)) / 2])
    result = least_squares(lambda x: np.log(compute) - np.log(np.maximum(x[0] + x[1] * m, _TINY_S)), x0,
                           bounds=([0.0, 0.0], [np.inf, np.inf]), x_scale="jac")
    return float(result.x[0]), float(result.x[1])


def pooled_fit(workload: str, single_gpu_rows: pd.DataFrame, others: Sequence[SpreadFit],
               reference: int | None = None) -> SpreadFit:
    """A class measured on one GPU only: its own compute line, and each sync parameter set to
    grad(reference) x the median over ``others`` of (their parameter / their grad(reference)); gamma the
    others' median."""
    if not others:
        raise ValueError("pooling sync parameters needs at least one other fitted class")
    alpha, beta = fit_compute(single_gpu_rows)
    ref = reference if reference is not None else reference_bsz(single_gpu_rows)
    grad_ref = alpha + beta * ref
    ratios = np.array([[*o.local_s, *o.network_s] for o in others]) / \
        np.array([[float(o.grad_s(o.reference_bsz))] for o in others])
    ar, br, an, bn = (float(v) * grad_ref for v in np.median(ratios, axis=0))
    gamma = float(np.median([o.gamma for o in others]))
    return SpreadFit(workload, alpha, beta, (ar, br), (an, bn), gamma, ref)


def _step(x: FloatArray, k: FloatArray, n: FloatArray, m: FloatArray) -> FloatArray:
    """Pollux's step time, s, for parameters x = (alpha, beta, a_r, b_r, a_n, b_n, gamma)."""
    grad = np.maximum(x[0] + x[1] * m, _TINY_S)
    local = x[2] + x[3] * (k - 2)
    network = local + x[4] + x[5] * (k - 2)
    sync = np.where(k <= 1, 0.0, np.maximum(np.where(n <= 1, local, network), 0.0))
    gamma = x[6]
    # Divide by grad before the power: sync / grad stays moderate, so gamma up to 10 cannot overflow.
    return np.asarray(grad * (1.0 + (sync / grad) ** gamma) ** (1.0 / gamma), dtype=float)


def _log_step_jacobian(x: FloatArray, k: FloatArray, n: FloatArray, m: FloatArray) -> FloatArray:
    """d log step / d x, with u = sync / grad and w = u^gamma / (1 + u^gamma):

    log step = log grad + log(1 + u^gamma) / gamma
    d/d grad = (1 - w) / grad     d/d sync = u^(gamma-1) / (grad (1 + u^gamma))
    d/d gamma = (w log u - log(1 + u^gamma) / gamma) / gamma
    """
    grad = np.maximum(x[0] + x[1] * m, _TINY_S)
    local = x[2] + x[3] * (k - 2)
    network = local + x[4] + x[5] * (k - 2)
    raw = np.where(n <= 1, local, network)
    live = (k >= 2) & (raw >= 0)  # where sync moves with its parameters (not K = 1, not clipped at 0)
    u = np.where(live, raw, 0.0) / grad
    gamma = x[6]
    power = u ** gamma
    w = power / (1 + power)
    d_grad = (1 - w) / grad * (x[0] + x[1] * m > _TINY_S)
    d_sync = np.where(live, u ** (gamma - 1) / (grad * (1 + power)), 0.0)
    log_u = np.log(np.where(u > 0, u, 1.0))
    out = np.zeros((len(k), 7))
    out[:, 0], out[:, 1] = d_grad, d_grad * m
    out[:, 2] = d_sync
    out[:, 3] = d_sync * (k - 2)
    out[:, 4] = d_sync * (n > 1)
    out[:, 5] = out[:, 4] * (k - 2)
    out[:, 6] = (w * log_u - np.log1p(power) / gamma) / gamma
    return out


def _start(k: FloatArray, n: FloatArray, m: FloatArray, compute: FloatArray, sync: FloatArray) -> FloatArray:
    """Data-driven starting point, so the solver begins at the right order of magnitude for every class."""
    g0 = float(np.median(compute[compute > 0])) if np.any(compute > 0) else 1.0
    local = sync[(n <= 1) & (k >= 2)]
    network = sync[(n > 1) & (k >= 2)]
    ar0 = float(np.median(local)) if local.size else g0 / 10
    an0 = float(np.median(network)) if network.size else g0 / 5
    extra0 = max(an0 - ar0, _TINY_S)
    return np.array([g0 / 2, g0 / (2 * float(np.median(m))), max(ar0, _TINY_S), max(ar0, _TINY_S) / 10,
                     extra0, extra0 / 10, 1.05])


def _bounds() -> tuple[list[float], list[float]]:
    return [0.0] * 6 + [1.0], [np.inf] * 6 + [GAMMA_MAX]
