"""Causal history statistics: for each job, what earlier jobs with the same key looked like.

Only jobs that **finished before this job was submitted** count (``end_time_s <= submit_time_s``),
so no future information can reach a feature. One sweep over time does it: finished jobs are added to
per-key accumulators in end-time order, and each job reads the accumulators at its submit time.

For every key (e.g. ``group_user`` = (group, user)) and job, the statistics of the earlier values
``v`` of that key are, with ``n`` their count:

* ``n``      - count of earlier finished jobs (the history depth);
* ``mean``   - arithmetic mean of v (the PAI paper's estimators average durations this way);
* ``median`` - median of v;
* ``mlog``   - mean of ln(1 + v), a geometric-style centre robust to long tails;
* ``last``   - v of the most recently finished job.

Missing key parts (NA) mean "no history" for that key: the statistics are NaN and ``n`` is 0.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from training.features.recent import RecentState

STATS = ("n", "mean", "median", "mlog", "last")


@dataclass
class _Accumulator:
    """Earlier values of one key, kept sorted for the median."""

    values: list[float] = field(default_factory=list)
    total: float = 0.0
    total_log: float = 0.0
    last: float = math.nan

    def add(self, value: float) -> None:
        bisect.insort(self.values, value)
        self.total += value
        self.total_log += math.log1p(value)
        self.last = value

    def stats(self) -> tuple[float, float, float, float, float]:
        n = len(self.values)
        mid = n // 2
        median = self.values[mid] if n % 2 else (self.values[mid - 1] + self.values[mid]) / 2
        return float(n), self.total / n, median, self.total_log / n, self.last


@dataclass
class HistoryState:
    """Per-key accumulators at some moment; can keep growing as jobs finish (online use)."""

    keys: Mapping[str, tuple[str, ...]]
    tables: dict[str, dict[tuple[object, ...], _Accumulator]] = field(default_factory=dict)
    recent: RecentState | None = None
    """Windows of the last finished jobs per recent key (:mod:`training.features.recent`), where the target
    has recent keys; states pickled before them have none."""

    def __post_init__(self) -> None:
        for name in self.keys:
            self.tables.setdefault(name, {})

    def add(self, key_values: Mapping[str, tuple[object, ...] | None], value: float) -> None:
        """Record a finished job's ``value`` under each of its keys (``None`` = key not available)."""
        for name, kv in key_values.items():
            if kv is not None:
                self.tables[name].setdefault(kv, _Accumulator()).add(value)

    def lookup(self, name: str, kv: tuple[object, ...] | None) -> tuple[float, float, float, float, float]:
        acc = self.tables[name].get(kv) if kv is not None else None
        if acc is None:
            return (0.0, math.nan, math.nan, math.nan, math.nan)
        return acc.stats()


def key_tuples(table: pd.DataFrame, keys: Mapping[str, Sequence[str]]) -> dict[str, list[tuple[object, ...] | None]]:
    """For each key, each row's tuple of key values, or ``None`` where any part is missing."""
    out: dict[str, list[tuple[object, ...] | None]] = {}
    for name, columns in keys.items():
        parts = [table[c].astype("object").where(table[c].notna(), None).tolist() for c in columns]
        out[name] = [None if any(p is None for p in row) else tuple(row) for row in zip(*parts, strict=True)]
    return out


def causal_history(table: pd.DataFrame, value: str, keys: Mapping[str, Sequence[str]],
                   prefix: str = "hist") -> tuple[pd.DataFrame, HistoryState]:
    """History features of ``value`` for every row, and the state after the last finished job.

    A row contributes to later rows once it has finished: it needs ``end_time_s`` and ``value``,
    and must not be censored. Columns are ``<prefix>_<key>_<stat>``.
    """
    tuples = key_tuples(table, keys)
    submit = table["submit_time_s"].to_numpy(dtype=float)
    end = table["end_time_s"].to_numpy(dtype=float)
    values = table[value].to_numpy(dtype=float)
    censored = table["censored"].fillna(False).to_numpy(dtype=bool)
    finished = np.flatnonzero(~np.isnan(end) & ~np.isnan(values) & ~censored)
    finished = finished[np.argsort(end[finished], kind="stable")]
    queries = np.argsort(np.where(np.isnan(submit), -np.inf, submit), kind="stable")
    state = HistoryState({k: tuple(v) for k, v in keys.items()})
    result = np.full((len(table), len(keys), len(STATS)), np.nan)
    pointer = 0
    for row in queries:
        t = submit[row]
        while pointer < len(finished) and end[finished[pointer]] <= t:
            done = finished[pointer]
            state.add({k: tuples[k][done] for k in keys}, float(values[done]))
            pointer += 1
        for j, name in enumerate(keys):
            result[row, j] = state.lookup(name, tuples[name][row])
    for done in finished[pointer:]:  # the rest finish after the last submission: state for serving
        state.add({k: tuples[k][done] for k in keys}, float(values[done]))
    columns = {f"{prefix}_{name}_{stat}": result[:, j, s] for j, name in enumerate(keys)
               for s, stat in enumerate(STATS)}
    return pd.DataFrame(columns, index=table.index), state


def feature_names(keys: Iterable[str], prefix: str = "hist") -> list[str]:
    """The column names :func:`causal_history` produces for ``keys``."""
    return [f"{prefix}_{name}_{stat}" for name in keys for stat in STATS]
