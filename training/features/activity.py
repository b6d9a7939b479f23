"""Causal activity features: what earlier-submitted jobs of the same key are doing right now.

At a job's submission, jobs of the same key (e.g. the same group and user) submitted earlier are
either finished (see :mod:`training.features.history`) or still pending/running. A running sibling's elapsed
time is a lower bound on its duration that is known at submission time, which is what a job with
no finished history can lean on. Per key and job, with t = its submit time:

* ``active``     - earlier-submitted jobs of the key not finished by t;
* ``elapsed_s``  - the longest t - start among those that have started (NaN if none);
* ``gap_s``      - t minus the previous submission of the key (NaN for the first).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from training.features.history import key_tuples

ACTIVITY_STATS = ("active", "elapsed_s", "gap_s")


def activity_features(table: pd.DataFrame, keys: Mapping[str, Sequence[str]], prefix: str = "act") -> pd.DataFrame:
    """Columns ``<prefix>_<key>_<stat>`` for every row of ``table``."""
    tuples = key_tuples(table, keys)
    submit = table["submit_time_s"].to_numpy(dtype=float)
    start = table["start_time_s"].to_numpy(dtype=float)
    end = np.nan_to_num(table["end_time_s"].to_numpy(dtype=float), nan=np.inf)
    order = np.argsort(np.where(np.isnan(submit), -np.inf, submit), kind="stable")
    columns: dict[str, np.ndarray] = {}
    for name in keys:
        columns.update(_one_key(tuples[name], submit, start, end, order, f"{prefix}_{name}"))
    return pd.DataFrame(columns, index=table.index)


def _one_key(key: list[tuple[object, ...] | None], submit: np.ndarray, start: np.ndarray, end: np.ndarray,
             order: np.ndarray, prefix: str) -> dict[str, np.ndarray]:
    n = len(key)
    active, elapsed, gap = np.zeros(n), np.full(n, np.nan), np.full(n, np.nan)
    by_end: dict[tuple[object, ...], list[tuple[float, int]]] = {}    # heap of (end, row) still active
    by_start: dict[tuple[object, ...], list[tuple[float, int]]] = {}  # heap of (start, row), lazily pruned
    last_submit: dict[tuple[object, ...], float] = {}
    for row in order:
        k, t = key[row], submit[row]
        if k is None or np.isnan(t):
            continue
        ends, starts = by_end.setdefault(k, []), by_start.setdefault(k, [])
        while ends and ends[0][0] <= t:
            heapq.heappop(ends)
        while starts and end[starts[0][1]] <= t:
            heapq.heappop(starts)
        active[row] = len(ends)
        if starts and starts[0][0] <= t:
            elapsed[row] = t - starts[0][0]
        if k in last_submit:
            gap[row] = t - last_submit[k]
        last_submit[k] = t
        heapq.heappush(ends, (end[row], int(row)))
        if not np.isnan(start[row]):
            heapq.heappush(starts, (start[row], int(row)))
    return {f"{prefix}_active": active, f"{prefix}_elapsed_s": elapsed, f"{prefix}_gap_s": gap}
