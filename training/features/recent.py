"""Recent history: what the last few finished jobs of a key looked like, weighted towards the newest.

The statistics of :mod:`training.features.history` weigh every earlier job alike. Recurring jobs drift
(data grows, code changes), so a group's last few runs say more about its next one than its first
runs. Per key (e.g. group + GPU type + request shape) and job submitted at t, over the last ``window``
jobs of the key that **finished at or before t** (not censored), newest last:

* ``n``      - count of all earlier finished jobs of the key (not only the window);
* ``rwmed``  - median of the window with weight 0.5 ** (rank / halflife), rank 0 for the newest;
* ``rwlog``  - the same weights' mean of ln(1 + v);
* ``sdlog``  - standard deviation of ln(1 + v) over the window (how noisy the key is);
* ``last``   - v of the most recently finished job;
* ``rwq25``, ``rwq75`` - the same weights' lower and upper quartile (how far the key's runs spread, in
  the target's unit);
* ``quick``  - the same weights' share of values under ``QUICK_S`` (60; seconds, for a duration): how often
  the key's runs lately ended at once (a crash at start-up, a sweep's trial cut short), which a median hides.

It is computed with array operations, not a loop over jobs: finished jobs are sorted by (key, end
time); a job's position among them is one ``searchsorted`` of (key, submit time); the window is a
gather of the ``window`` positions before it. :class:`RecentState` keeps, per key, the count and the
window after every finished job, so that serving computes the same statistics with the same code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from training.features.history import key_tuples

RECENT_STATS = ("n", "rwmed", "rwlog", "sdlog", "last", "rwq25", "rwq75", "quick")
QUICK_S = 60.0
Key = tuple[object, ...]


@dataclass
class RecentState:
    """Per key name and key value: (count of finished jobs, their last ``window`` values, oldest first)."""

    window: int
    halflife: float
    tables: dict[str, dict[Key, tuple[int, tuple[float, ...]]]] = field(default_factory=dict)
    error_q90: float = float("nan")
    """The rolling error scale of the history rule after the last finished job (``training.features.rule``)."""

    def lookup(self, name: str, keys: Sequence[Key | None]) -> dict[str, np.ndarray]:
        """The statistics of ``keys`` (one per job; ``None`` = key not available) under key ``name``."""
        counts = np.zeros(len(keys))
        values = np.full((len(keys), self.window), np.nan)
        table = self.tables.get(name, {})
        for row, key in enumerate(keys):
            found = table.get(key) if key is not None else None
            if found is not None:
                counts[row] = found[0]
                values[row, self.window - len(found[1]):] = found[1]
        return window_stats(counts, values, self.halflife)


def recent_history(table: pd.DataFrame, value: str, keys: Mapping[str, Sequence[str]], window: int = 50,
                   halflife: float = 5.0, prefix: str = "rec") -> tuple[pd.DataFrame, RecentState]:
    """Columns ``<prefix>_<key>_<stat>`` for every row of ``table`` (any order), and the state after every
    finished job. A row counts for later rows once finished: ``end_time_s`` and ``value`` known, not censored."""
    submit = table["submit_time_s"].to_numpy(dtype=float)
    end = table["end_time_s"].to_numpy(dtype=float)
    values = table[value].to_numpy(dtype=float)
    censored = table["censored"].fillna(False).to_numpy(dtype=bool)
    usable = ~np.isnan(end) & ~np.isnan(values) & ~censored
    state = RecentState(window, halflife)
    columns: dict[str, np.ndarray] = {}
    for name, parts in keys.items():
        groups = table.groupby(list(parts), dropna=True, sort=False, observed=True).ngroup()
        code = np.nan_to_num(groups.to_numpy(dtype=float), nan=-1.0).astype(np.int64)  # -1: a key part is missing
        count, window_values, last_rows = _windows(code, submit, end, values, usable, window)
        stats = window_stats(count, window_values, halflife)
        columns.update({f"{prefix}_{name}_{stat}": stats[stat] for stat in RECENT_STATS})
        state.tables[name] = _final_windows(table, parts, code, end, values, usable, window, last_rows)
    return pd.DataFrame(columns, index=table.index), state


def window_stats(count: np.ndarray, values: np.ndarray, halflife: float) -> dict[str, np.ndarray]:
    """The statistics of windows ``values`` (one row per job, newest last, NaN where empty)."""
    present = ~np.isnan(values)
    rank = np.arange(values.shape[1])[::-1]  # 0 for the newest (last) column
    weight = np.where(present, 0.5 ** (rank / halflife), 0.0)
    total = weight.sum(axis=1)
    logs = np.log1p(np.where(present, np.maximum(values, 0.0), 0.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        rwlog = (weight * logs).sum(axis=1) / total
        mean_log = logs.sum(axis=1) / present.sum(axis=1)
        sdlog = np.sqrt((np.where(present, logs - mean_log[:, None], 0.0) ** 2).sum(axis=1) / present.sum(axis=1))
        quick = (weight * (np.where(present, values, np.inf) < QUICK_S)).sum(axis=1) / total
    order = np.argsort(np.where(present, values, np.inf), axis=1, kind="stable")
    sorted_values = np.take_along_axis(values, order, axis=1)
    cumulative = np.cumsum(np.take_along_axis(weight, order, axis=1), axis=1)
    return {"n": count.astype(float), "rwmed": _weighted_quantile(sorted_values, cumulative, total, 0.5),
            "rwlog": np.where(total > 0, rwlog, np.nan), "sdlog": np.where(total > 0, sdlog, np.nan),
            "last": values[:, -1] if values.shape[1] else np.full(len(values), np.nan),
            "rwq25": _weighted_quantile(sorted_values, cumulative, total, 0.25),
            "rwq75": _weighted_quantile(sorted_values, cumulative, total, 0.75),
            "quick": np.where(total > 0, quick, np.nan)}


def _weighted_quantile(sorted_values: np.ndarray, cumulative: np.ndarray, total: np.ndarray, q: float) -> np.ndarray:
    """The lower weighted ``q``-quantile per row of values sorted ascending (NaN last) with their cumulative
    weights: the smallest value whose cumulative weight reaches ``q`` of the total (``q`` = 0.5: the median)."""
    if not sorted_values.shape[1]:
        return np.full(len(sorted_values), np.nan)
    pick = np.argmax(cumulative >= total[:, None] * q, axis=1)
    return np.where(total > 0, sorted_values[np.arange(len(sorted_values)), pick], np.nan)


def _windows(code: np.ndarray, submit: np.ndarray, end: np.ndarray, values: np.ndarray, usable: np.ndarray,
             window: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: count of finished rows of its key with end <= its submit time, the values of the last
    ``window`` of them (oldest first), and per key the sorted positions' end (for the final state)."""
    n = len(code)
    done = np.flatnonzero(usable & (code >= 0))
    empty = (np.zeros(n), np.full((n, window), np.nan), np.zeros(0, dtype=np.int64))
    if len(done) == 0 or window < 1:
        return empty
    # One sorted axis for all keys: key k's jobs live in [k * span, (k + 1) * span), ordered by end time.
    times = np.concatenate([end[done], submit[~np.isnan(submit)]])
    base, span = float(times.min()), float(times.max() - times.min()) + 1.0
    position = code[done] * span + (end[done] - base)
    order = np.argsort(position, kind="stable")
    sorted_position, sorted_rows = position[order], done[order]
    keys = int(code.max()) + 1
    first = np.searchsorted(sorted_position, np.arange(keys) * span, side="left")
    asked = (code >= 0) & ~np.isnan(submit)
    own = np.where(asked, code, 0)
    upto = np.where(asked, np.searchsorted(sorted_position, own * span + (np.nan_to_num(submit) - base),
                                           side="right"), 0)
    start = np.where(asked, first[own], 0)
    count = upto - start
    gather = upto[:, None] - window + np.arange(window)[None, :]
    inside = asked[:, None] & (gather >= start[:, None])
    picked = values[sorted_rows[np.clip(gather, 0, len(sorted_rows) - 1)]]
    return count.astype(float), np.where(inside, picked, np.nan), sorted_rows


def _final_windows(table: pd.DataFrame, parts: Sequence[str], code: np.ndarray, end: np.ndarray,
                   values: np.ndarray, usable: np.ndarray, window: int,
                   sorted_rows: np.ndarray) -> dict[Key, tuple[int, tuple[float, ...]]]:
    """Per key value, the count of all its finished rows and the values of the last ``window`` (by end time)."""
    if len(sorted_rows) == 0:
        return {}
    frame = pd.DataFrame({"code": code[sorted_rows], "value": values[sorted_rows], "row": sorted_rows})
    counts = frame.groupby("code", sort=False)["value"].size()
    tails = frame.groupby("code", sort=False).tail(window)
    grouped = tails.groupby("code", sort=False)
    lists = grouped["value"].agg(tuple)
    rows = grouped["row"].first()
    names = key_tuples(table.iloc[rows.to_numpy()], {"key": tuple(parts)})["key"]
    return {name: (int(counts[c]), tuple(float(v) for v in lists[c]))
            for c, name in zip(rows.index, names, strict=True) if name is not None}
