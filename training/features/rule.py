"""The history rule: a causal duration estimate from recent runs of the same group, and how wrong it has lately been.

``rule`` is, per job, the first available along the target's recent keys (finest first, e.g. group +
GPU type + request shape, then group + GPU type, then group) of the recency-weighted median of the key's
last finished jobs (:mod:`training.features.recent`), else the history median chain (``baseline``).
Chosen on a validation split of the earlier PAI jobs (the later 30% of the first 70%), this ordering and
a window of 50 jobs with a half-life of 5 jobs beat the all-history median of group + user + GPU type;
a user's jobs of the same shape as a fallback and a still-running job of the group as a lower bound
both made the rule worse there.

``rule_err_q90`` is a drift gauge: over the last ``error_window`` jobs that finished before a job's
submission, the 90th percentile of ln(1 + actual) - ln(1 + rule). A conformal P90 scaled by it widens
when the workload turns less predictable and narrows when it settles, which a band fixed at training
time cannot (a fixed band covered 0.82-0.86 of the later PAI jobs against 0.90 on validation).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

RULE = "rule"
RULE_SCALE = "rule_err_q90"
ERROR_WINDOW = 3000
MIN_ERRORS = 50
SCALE_QUANTILE = 0.9


def first_available(frame: pd.DataFrame, columns: Sequence[str]) -> np.ndarray:
    """Per row, the first non-missing of ``columns`` (NaN where none is)."""
    value = np.full(len(frame), np.nan)
    for column in columns:
        value = np.where(np.isnan(value), frame[column].to_numpy(dtype=float), value)
    return value


def history_rule(frame: pd.DataFrame, recent_keys: Sequence[str]) -> np.ndarray:
    """``rule``: the recent medians along ``recent_keys``, then ``baseline`` (NaN where none is known)."""
    return first_available(frame, [*(f"rec_{k}_rwmed" for k in recent_keys), "baseline"])


def error_scale(table: pd.DataFrame, value: str, rule: np.ndarray,
                window: int = ERROR_WINDOW) -> tuple[np.ndarray, float]:
    """Per row, ``rule_err_q90`` from the jobs finished at or before its submission (NaN with fewer than
    ``MIN_ERRORS``), and its value after every finished job (what serving starts from)."""
    ends, rolling = rolling_errors(table, value, rule, window)
    if len(ends) == 0:
        return np.full(len(table), np.nan), float("nan")
    return scale_at(table["submit_time_s"].to_numpy(dtype=float), ends, rolling), float(rolling[-1])


def rolling_errors(table: pd.DataFrame, value: str, rule: np.ndarray,
                   window: int = ERROR_WINDOW) -> tuple[np.ndarray, np.ndarray]:
    """The end times of the finished rows of ``table`` that have a rule, in order (ties in row order), and
    ``rule_err_q90`` after each of them."""
    end = table["end_time_s"].to_numpy(dtype=float)
    actual = table[value].to_numpy(dtype=float)
    censored = table["censored"].fillna(False).to_numpy(dtype=bool)
    done = np.flatnonzero(~np.isnan(end) & ~np.isnan(actual) & ~np.isnan(rule) & ~censored)
    done = done[np.argsort(end[done], kind="stable")]
    errors = pd.Series(np.log1p(np.maximum(actual[done], 0.0)) - np.log1p(np.maximum(rule[done], 0.0)))
    return end[done], errors.rolling(window, min_periods=MIN_ERRORS).quantile(SCALE_QUANTILE).to_numpy()


def scale_at(submit: np.ndarray, ends: np.ndarray, rolling: np.ndarray) -> np.ndarray:
    """``rule_err_q90`` at each ``submit`` time: after the last of the sorted ``ends`` at or before it."""
    if len(ends) == 0:
        return np.full(len(submit), np.nan)
    seen = np.searchsorted(ends, np.nan_to_num(submit, nan=-np.inf), side="right")
    scale: np.ndarray = np.where(seen > 0, rolling[np.maximum(seen - 1, 0)], np.nan)
    return scale
