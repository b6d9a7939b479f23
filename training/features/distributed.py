"""The causal feature frame of a trace larger than one machine's memory, computed on Dask.

Every causal column of :func:`training.features.frames.build_features` belongs to one key: a job's history,
recent runs and running siblings are read from the earlier jobs of the same key only. So the trace is shuffled
(``dask.dataframe`` ``shuffle``) on a few columns such that all jobs of a key land in one partition, and the
pandas functions of the single-process path (:mod:`~training.features.history`, :mod:`~training.features.recent`,
:mod:`~training.features.activity`) run on each partition unchanged. One shuffle serves every key that contains
its columns: on PAI, ``user`` serves the user, group + user and group + user + GPU keys, ``group`` the history
rule's keys and ``app`` the application keys, so a trace is shuffled three times, not eight.

Those functions break ties (two jobs of a key ending in the same second) by row order, so each partition is
put back in trace order (sorted by the trace's index) first. The keyed columns then return to the trace's own
partitions (``set_index`` on the row index with the trace's divisions) and the per-row columns are added there.

Two parts span the whole trace and are not partitioned:

* which hyperparameters become ``hp_*`` columns (the most frequent names): counted per partition, then added up;
* ``rule_err_q90``, a rolling quantile of the history rule's errors over all jobs in end order: the end time and
  error of each finished job are gathered into this process (two floats per job, one pass over the trace), and
  each partition reads the gauge at its own submit times. That pass computes the keyed columns once more when
  the frame itself is computed: ``persist()`` the trace first where the cluster has the memory for it.

The largest key's jobs must fit in one worker's memory (the shuffle keeps a key together). The result equals
``build_features(table, spec)[0]`` row for row (``tests/training/test_features_dask.py``).

The history state a registered model serves from (``build_features(table, spec)[1]``), :func:`causal_state`, is
made on shuffles by the same columns (run again: the features' shuffles keep only columns): each partition's keys
are its own, so each partition's state after its last finished
job is that of its keys, and the states are merged in this process. It holds one entry per key value (what a
served model keeps in memory anyway), not one per job.
"""

from __future__ import annotations

import importlib
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np
import pandas as pd

from training.features.activity import ACTIVITY_STATS, activity_features
from training.features.frames import (
    TargetSpec,
    assemble,
    hyperparameter_counts,
    hyperparameter_names,
    recent_columns,
    with_keys,
)
from training.features.history import HistoryState, causal_history, feature_names
from training.features.recent import RecentState, recent_history
from training.features.rule import RULE, RULE_SCALE, rolling_errors, scale_at

if TYPE_CHECKING:
    import dask.dataframe as dd

ROW = "_row"
"""The trace's index while the keyed columns travel between partitionings."""
Columns = tuple[str, ...]


class Served(NamedTuple):
    """The keys one shuffle serves, by name: history (and activity) keys, and the history rule's recent keys."""

    history: list[str]
    recent: list[str]


def shuffle_plan(spec: TargetSpec) -> dict[Columns, Served]:
    """The columns to shuffle on, each with the keys it serves.

    A key is served by the first shuffle whose columns are all among the key's own: every job of the key then
    has the same values there and lands in the same partition. Shuffles are the keys that contain no other key.
    """
    history = {name: tuple(columns) for name, columns in spec.keys.items()}
    recent = {name: tuple(columns) for name, columns in spec.recent_keys}
    every = [*history.values(), *recent.values()]
    minimal = [columns for columns in every if not any(set(other) < set(columns) for other in every)]
    plan: dict[Columns, Served] = {columns: Served([], []) for columns in dict.fromkeys(minimal)}
    for name, columns in history.items():
        plan[next(s for s in plan if set(s) <= set(columns))].history.append(name)
    for name, columns in recent.items():
        plan[next(s for s in plan if set(s) <= set(columns))].recent.append(name)
    return plan


def causal_features(trace: dd.DataFrame, spec: TargetSpec) -> dd.DataFrame:
    """The feature frame of ``trace`` for ``spec``, as ``build_features(trace.compute(), spec)[0]`` gives it,
    partitioned as ``trace`` is. ``trace`` needs a unique, sorted index with known divisions (``from_pandas``
    of a sorted frame, or ``read_parquet(..., index=..., calculate_divisions=True)``)."""
    if not trace.known_divisions:
        raise ValueError("trace: the index needs known divisions (a sorted index: dd.from_pandas of a sorted frame, "
                         "or read_parquet(..., index=<column>, calculate_divisions=True)); got unknown divisions")
    lazy: Any = importlib.import_module("dask.dataframe")  # dask's collection functions carry no annotations
    rows: Any = trace
    work = rows.map_partitions(_keyed_rows, meta=_keyed_rows(rows._meta))
    keyed = [_keyed_columns(work, columns, served, spec) for columns, served in shuffle_plan(spec).items()]
    causal = lazy.concat(keyed, axis=1)
    history = feature_names(spec.keys) + recent_columns(spec)
    activity = [f"act_{k}_{stat}" for k in spec.activity_keys for stat in ACTIVITY_STATS]
    counts = work["hyperparams"].map_partitions(_hyperparameter_counts, meta=pd.Series(dtype="int64")).compute()
    finish = partial(_assembled, spec=spec, history=history, activity=activity, index=rows.index.name,
                     hyperparams=hyperparameter_names(counts.groupby(level=0).sum().to_dict()))
    frame = lazy.map_partitions(finish, work, causal, meta=finish(work._meta, causal._meta), align_dataframes=False)
    if spec.recent_keys:
        ends, rolling = _rule_errors(work, frame, spec)
        gauge = partial(_with_scale, ends=ends, rolling=rolling)
        frame = lazy.map_partitions(gauge, frame, work["submit_time_s"], align_dataframes=False,
                                    meta=gauge(frame._meta, work._meta["submit_time_s"]))
    return cast("dd.DataFrame", frame)


def causal_state(trace: dd.DataFrame, spec: TargetSpec, features: dd.DataFrame) -> HistoryState:
    """The history state after every finished job of ``trace``, as ``build_features(trace.compute(), spec)[1]``
    gives it; ``features``: :func:`causal_features` of the same trace (its rule column sets the error scale)."""
    rows: Any = trace
    work = rows.map_partitions(_keyed_rows, meta=_keyed_rows(rows._meta))
    state = HistoryState({name: tuple(columns) for name, columns in spec.keys.items()})
    recent = RecentState(spec.recent_window, spec.recent_halflife) if spec.recent_keys else None
    for columns, served in shuffle_plan(spec).items():
        compute = partial(_part_state, served=served, spec=spec)
        meta = pd.DataFrame({"history": pd.Series(dtype=object), "recent": pd.Series(dtype=object)})
        states = work.shuffle(on=list(columns)).map_partitions(compute, meta=meta).compute()
        for history, windows in states.itertuples(index=False):
            for name, table in history.items():
                state.tables[name].update(table)
            if recent is not None:
                for name, table in windows.items():
                    recent.tables.setdefault(name, {}).update(table)
    if recent is not None:
        ends, rolling = _rule_errors(work, features, spec)
        recent.error_q90 = float(rolling[-1]) if len(ends) else float("nan")
        state.recent = recent
    return state


def _rule_errors(work: Any, frame: Any, spec: TargetSpec) -> tuple[np.ndarray, np.ndarray]:
    """``rolling_errors`` over the whole trace: each finished job's end time and the history rule's error, two
    floats per job, gathered into this process."""
    lazy: Any = importlib.import_module("dask.dataframe")
    finished = lazy.concat([work[["end_time_s", spec.column, "censored"]], frame[[RULE]]], axis=1).compute()
    return rolling_errors(finished, spec.column, finished[RULE].to_numpy(dtype=float))


def _part_state(part: pd.DataFrame, served: Served, spec: TargetSpec) -> pd.DataFrame:
    """One row: the history tables and recent windows of the keys ``served`` after one partition's finished jobs."""
    part = part.sort_index(kind="stable")
    history_keys = {n: spec.keys[n] for n in served.history}
    recent = dict(spec.recent_keys)
    recent_keys = {n: recent[n] for n in served.recent}
    tables = causal_history(part, spec.column, history_keys)[1].tables if history_keys else {}
    windows = (recent_history(part, spec.column, recent_keys, spec.recent_window, spec.recent_halflife)[1].tables
               if recent_keys else {})
    return pd.DataFrame({"history": [tables], "recent": [windows]})


def _keyed_rows(part: pd.DataFrame) -> pd.DataFrame:
    keyed = with_keys(part)
    keyed.index = keyed.index.rename(ROW)
    return keyed


def _keyed_columns(work: Any, columns: Columns, served: Served, spec: TargetSpec) -> Any:
    """The causal columns of the keys ``served``, on a shuffle by ``columns``, back on ``work``'s partitions."""
    compute = partial(_causal_part, served=served, spec=spec)
    shuffled = work.shuffle(on=list(columns))
    found = shuffled.map_partitions(compute, meta=compute(work._meta))
    return found.reset_index().set_index(ROW, divisions=list(work.divisions))


def _causal_part(part: pd.DataFrame, served: Served, spec: TargetSpec) -> pd.DataFrame:
    """History, recent and activity columns of the keys ``served`` over one partition, in trace order."""
    part = part.sort_index(kind="stable")
    recent = dict(spec.recent_keys)
    history_keys = {n: spec.keys[n] for n in served.history}
    recent_keys = {n: recent[n] for n in served.recent}
    activity_keys = {n: spec.keys[n] for n in served.history if n in spec.activity_keys}
    parts: list[pd.DataFrame] = []
    if history_keys:
        parts.append(causal_history(part, spec.column, history_keys)[0])
    if recent_keys:
        parts.append(recent_history(part, spec.column, recent_keys, spec.recent_window, spec.recent_halflife)[0])
    if activity_keys:
        parts.append(activity_features(part, activity_keys))
    return pd.concat(parts, axis=1)


def _hyperparameter_counts(texts: pd.Series) -> pd.Series:
    return pd.Series(hyperparameter_counts(texts), dtype="int64")


def _assembled(work: pd.DataFrame, causal: pd.DataFrame, spec: TargetSpec, history: list[str],
               activity: list[str], hyperparams: list[str], index: Any) -> pd.DataFrame:
    frame = assemble(work, spec, causal[history], causal[activity] if activity else None, hyperparams)
    return frame.rename_axis(index)


def _with_scale(frame: pd.DataFrame, submit: pd.Series, ends: np.ndarray, rolling: np.ndarray) -> pd.DataFrame:
    return frame.assign(**{RULE_SCALE: scale_at(submit.to_numpy(dtype=float), ends, rolling)})
