"""Feature frames for one target of one source, computed without leakage.

A feature frame has one row per canonical row, in submission order, with:

* history statistics of the target per key (``hist_*``, :mod:`training.features.history`) and activity of
  earlier-submitted jobs per key (``act_*``, :mod:`training.features.activity`) - both causal;
* the job's own request (``req_*``, ``instances``, ``total_gpu`` = req_gpu x instances), its GPU type
  and role as stable integer codes, hour of day and day of week on the trace's clock;
* numeric hyperparameters (``hp_<name>``) parsed from the ``hyperparams`` JSON text;
* ``baseline``: the first available history median along the target's baseline chain (the causal
  SJGG-style estimate), and ``depth``: the history depth of the target's depth key;
* where the target names recent keys: recency-weighted statistics of each key's last finished jobs
  (``rec_*``, :mod:`training.features.recent`), the history rule built on them (``rule``) and its
  recent error scale (``rule_err_q90``, :mod:`training.features.rule`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from placement.model.gpu_types import KNOWN_TYPES
from training.features.activity import activity_features
from training.features.history import STATS, HistoryState, causal_history, key_tuples
from training.features.recent import RECENT_STATS, recent_history
from training.features.rule import RULE, RULE_SCALE, error_scale, first_available, history_rule
from training.ingest.schema import ROLES

GPU_CODES = {name: code for code, name in enumerate(sorted(KNOWN_TYPES))}
REQUEST_COLUMNS = ("req_gpu", "req_cpu_cores", "req_mem_gib", "req_disk_gib", "req_net_gbps", "instances")
MAX_HYPERPARAMS = 20


@dataclass(frozen=True)
class TargetSpec:
    """What to predict for a source, and which keys carry its history.

    Keys are tuples of canonical columns or of the derived ``gpu_key`` (see :func:`gpu_type_key`) and
    ``size_key`` (the job's total GPUs as text).
    """

    name: str
    column: str
    keys: Mapping[str, tuple[str, ...]]
    baseline_chain: tuple[str, ...]
    depth_key: str
    activity_keys: tuple[str, ...] = ()
    requests: tuple[str, ...] = REQUEST_COLUMNS
    exclude_requests: tuple[str, ...] = field(default=())
    censoring_matters: bool = True
    """False for labels known in full at submission (a request): censored rows keep their label."""
    request_baseline: str | None = None
    """The request column that is the user's own estimate of this target (for observed usage)."""
    recent_keys: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Keys of the history rule, finest first, as (name, columns); none: the target has no rule."""
    recent_window: int = 50
    recent_halflife: float = 5.0

    def mean_columns(self) -> list[str]:
        """History means along the baseline chain (what an expected value falls back on)."""
        return [f"hist_{k}_mean" for k in self.baseline_chain]

    def request_columns(self) -> list[str]:
        return [c for c in self.requests if c not in self.exclude_requests]


def gpu_type_key(table: pd.DataFrame) -> pd.Series:
    """The GPU type a job is known by: its constraint if it states one, else the type it ran on."""
    constraint: pd.Series = table["req_gpu_type"].fillna(table["assigned_gpu_type"])
    return constraint


def with_keys(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with the derived key columns ``gpu_key``, ``size_key`` and ``shape_key``."""
    instances = table["instances"].astype("float64")
    total = (table["req_gpu"] * instances).round(3)
    cpus = (table["req_cpu_cores"] * instances).round(3)
    # the request shape (GPUs, CPUs, pods of the whole job), as text: NA where any part is unknown
    shape = total.astype("string") + "|" + cpus.astype("string") + "|" + instances.astype("string")
    return table.assign(gpu_key=gpu_type_key(table), size_key=total.astype("string"), shape_key=shape)


def build_features(table: pd.DataFrame, spec: TargetSpec) -> tuple[pd.DataFrame, HistoryState]:
    """The causal feature frame of ``table`` (any row order) for ``spec``, index aligned with ``table``,
    and the history state after every finished job (what serving starts from)."""
    work = with_keys(table)
    history, state = causal_history(work, spec.column, spec.keys)
    activity = activity_features(work, {k: spec.keys[k] for k in spec.activity_keys}) if spec.activity_keys else None
    if not spec.recent_keys:
        return assemble(work, spec, history, activity), state
    recent, state.recent = recent_history(work, spec.column, dict(spec.recent_keys), spec.recent_window,
                                          spec.recent_halflife)
    frame = assemble(work, spec, pd.concat([history, recent], axis=1), activity)
    frame[RULE_SCALE], state.recent.error_q90 = error_scale(work, spec.column, frame[RULE].to_numpy())
    return frame, state


def online_features(jobs: pd.DataFrame, spec: TargetSpec, state: HistoryState,
                    activity: pd.DataFrame | None = None) -> pd.DataFrame:
    """Features of newly submitted ``jobs`` against ``state`` (all jobs finished so far).

    ``activity`` holds the ``act_*`` columns of the jobs if the caller knows what is running now;
    without it they are NaN (unknown). The service passes none yet (docs/estimators.md gives the cost).
    """
    work = with_keys(jobs)
    tuples = key_tuples(work, spec.keys)
    stats = {name: np.array([state.lookup(name, kv) for kv in tuples[name]]).reshape(len(work), len(STATS))
             for name in spec.keys}
    history = pd.DataFrame({f"hist_{name}_{stat}": stats[name][:, s] for name in spec.keys
                            for s, stat in enumerate(STATS)}, index=work.index)
    recent_state = state.recent if spec.recent_keys else None
    if recent_state is None:
        return assemble(work, spec, history, activity)
    recent_tuples = key_tuples(work, dict(spec.recent_keys))
    recent = pd.DataFrame({f"rec_{name}_{stat}": values for name, _ in spec.recent_keys
                           for stat, values in recent_state.lookup(name, recent_tuples[name]).items()},
                          index=work.index)
    frame = assemble(work, spec, pd.concat([history, recent[recent_columns(spec)]], axis=1), activity)
    frame[RULE_SCALE] = recent_state.error_q90
    return frame


def assemble(work: pd.DataFrame, spec: TargetSpec, history: pd.DataFrame, activity: pd.DataFrame | None,
             hyperparams: Sequence[str] | None = None) -> pd.DataFrame:
    """The frame from the keyed ``work`` rows and their causal columns; everything added here is per row but
    the hyperparameter names, chosen on ``work`` unless ``hyperparams`` names them (a part of a larger trace)."""
    parts = [history] + ([activity] if activity is not None else [])
    parts += [_own_features(work, spec), hyperparameter_features(work["hyperparams"], hyperparams)]
    frame = pd.concat(parts, axis=1)
    frame["baseline"] = first_available(frame, [f"hist_{k}_median" for k in spec.baseline_chain])
    frame["depth"] = frame[f"hist_{spec.depth_key}_n"]
    if spec.recent_keys:
        frame[RULE] = history_rule(frame, [k for k, _ in spec.recent_keys])
    return frame


def recent_columns(spec: TargetSpec) -> list[str]:
    """The ``rec_*`` columns of ``spec``, in frame order."""
    return [f"rec_{name}_{stat}" for name, _ in spec.recent_keys for stat in RECENT_STATS]


def rule_frame_columns(spec: TargetSpec) -> list[str]:
    """Every column the history rule adds to ``spec``'s frame (none where it has no rule)."""
    return [*recent_columns(spec), RULE, RULE_SCALE] if spec.recent_keys else []


def _own_features(table: pd.DataFrame, spec: TargetSpec) -> pd.DataFrame:
    own = pd.DataFrame(index=table.index)
    for column in spec.request_columns():
        own[column] = table[column].astype("float64")
    if "req_gpu" in own and "instances" in own:
        own["total_gpu"] = own["req_gpu"] * own["instances"]
    own["gpu_type_code"] = table["gpu_key"].map(GPU_CODES).astype("float64")
    own["role_code"] = table["role"].map({r: i for i, r in enumerate(ROLES)}).astype("float64")
    seconds = table["submit_time_s"].to_numpy(dtype=float)
    own["hour"] = np.floor((seconds % 86400.0) / 3600.0)
    own["weekday"] = np.floor((seconds // 86400.0) % 7.0)
    return own


def hyperparameter_features(texts: pd.Series, names: Sequence[str] | None = None) -> pd.DataFrame:
    """Numeric hyperparameters as ``hp_<name>`` columns: ``names``, or the most frequent in ``texts`` (at most 20)."""
    parsed = _parsed(texts)
    names = hyperparameter_names(_counts(parsed)) if names is None else names
    data = {f"hp_{n}": [float(e[n]) if isinstance(e.get(n), int | float) else np.nan for e in parsed] for n in names}
    return pd.DataFrame(data, index=texts.index)


def hyperparameter_counts(texts: pd.Series) -> dict[str, int]:
    """How many of ``texts`` give each numeric hyperparameter (added up over the parts of a larger trace)."""
    return _counts(_parsed(texts))


def hyperparameter_names(counts: Mapping[str, int]) -> list[str]:
    """The names :func:`hyperparameter_features` keeps: the most frequent, at most 20, ties by name."""
    return sorted(counts, key=lambda n: (-counts[n], n))[:MAX_HYPERPARAMS]


def _parsed(texts: pd.Series) -> list[dict[str, Any]]:
    return [json.loads(t) if isinstance(t, str) else {} for t in texts.astype("object").where(texts.notna(), None)]


def _counts(parsed: list[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for entry in parsed:
        for name, value in entry.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                counts[name] = counts.get(name, 0) + 1
    return counts


def target_rows(table: pd.DataFrame, spec: TargetSpec) -> np.ndarray:
    """Rows that carry a usable label for ``spec``: present, not censored, not a failed run."""
    has = table[spec.column].notna().to_numpy()
    censored = table["censored"].fillna(False).to_numpy(dtype=bool) & spec.censoring_matters
    failed = table["status"].isin(["failed", "killed"]).to_numpy(dtype=bool)
    return np.flatnonzero(has & ~censored & ~failed)


@dataclass(frozen=True)
class ResidualInputs:
    """Frame columns by how the residual learner reads them (see :func:`residual_inputs`)."""

    relative: list[str]
    log_relative: list[str]
    excluded: list[str]


def residual_inputs(spec: TargetSpec) -> ResidualInputs:
    """How a learner on the history rule's residual (``models.residual``) reads ``spec``'s frame.

    ``relative``: statistics in the target's unit, fed as ln(1 + v) - ln(1 + rule); ``log_relative``: those
    already in ln(1 + v), fed minus ln(1 + rule); ``excluded``: not fed. Linear means follow outliers,
    and the weekday of an 8-day trace names the period more than a weekly rhythm: both are left out.
    """
    keys, recent = list(spec.keys), [k for k, _ in spec.recent_keys]
    relative = [f"hist_{k}_{s}" for k in keys for s in ("median", "last")]
    relative += [f"rec_{k}_{s}" for k in recent for s in ("rwmed", "last", "rwq25", "rwq75")]
    relative += [f"act_{k}_elapsed_s" for k in spec.activity_keys] + ["baseline"]
    log_relative = [f"hist_{k}_mlog" for k in keys] + [f"rec_{k}_rwlog" for k in recent]
    return ResidualInputs(relative, log_relative, [f"hist_{k}_mean" for k in keys] + ["weekday"])
