"""The serving fast path: job descriptions (dicts) straight to a feature matrix, no DataFrame.

It computes exactly the features of :func:`training.features.frames.online_features` (a test holds the two
equal on real jobs) in the estimator's column order, for the one-job-at-a-time latency a scheduler
needs: a DataFrame per request costs tens of milliseconds, this costs tens of microseconds.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from training.features.frames import GPU_CODES, TargetSpec
from training.features.history import STATS, HistoryState
from training.features.rule import RULE, RULE_SCALE
from training.ingest.schema import ROLES

ROLE_CODES = {r: float(i) for i, r in enumerate(ROLES)}
Record = Mapping[str, Any]


class JobEncoder:
    """Encodes job records into the feature columns ``names`` for one target."""

    def __init__(self, spec: TargetSpec, state: HistoryState, names: Sequence[str]) -> None:
        self.spec = spec
        self.state = state
        self.names = list(names)
        self.position = {n: i for i, n in enumerate(self.names)}

    def encode(self, records: Sequence[Record], activity: Sequence[Mapping[str, float]] | None = None) -> np.ndarray:
        matrix = np.full((len(records), len(self.names)), np.nan)
        rows = [self._row(record) for record in records]
        self._add_recent(records, rows)
        for row, values in enumerate(rows):
            if activity is not None:
                values.update(activity[row])
            for name, value in values.items():
                index = self.position.get(name)
                if index is not None:
                    matrix[row, index] = value
        return matrix

    def _add_recent(self, records: Sequence[Record], rows: list[dict[str, float]]) -> None:
        """The history rule's columns (``training.features.rule``), looked up for all records at once."""
        recent = self.state.recent if self.spec.recent_keys else None
        if recent is None:
            return
        keyed = [_with_keys(record) for record in records]
        for name, columns in self.spec.recent_keys:
            keys = [None if any(k.get(c) is None for c in columns) else tuple(k.get(c) for c in columns)
                    for k in keyed]
            for stat, values in recent.lookup(name, keys).items():
                for row, value in zip(rows, values.tolist(), strict=True):
                    row[f"rec_{name}_{stat}"] = value
        for row in rows:
            rule = next((row[f"rec_{k}_rwmed"] for k, _ in self.spec.recent_keys
                         if not math.isnan(row[f"rec_{k}_rwmed"])), row["baseline"])
            row[RULE], row[RULE_SCALE] = rule, recent.error_q90

    def _row(self, record: Record) -> dict[str, float]:
        values: dict[str, float] = {}
        keyed = _with_keys(record)
        baseline = math.nan
        for name, columns in self.spec.keys.items():
            parts = tuple(keyed.get(c) for c in columns)
            stats = self.state.lookup(name, None if any(p is None for p in parts) else parts)
            for stat, value in zip(STATS, stats, strict=True):
                values[f"hist_{name}_{stat}"] = value
        for name in self.spec.baseline_chain:
            if math.isnan(baseline):
                baseline = values[f"hist_{name}_median"]
        values["baseline"] = baseline
        values["depth"] = values[f"hist_{self.spec.depth_key}_n"]
        values.update(_own(record, keyed, self.spec))
        return values


def _number(record: Record, name: str) -> float:
    value = record.get(name)
    return math.nan if value is None else float(value)


def _with_keys(record: Record) -> dict[str, Any]:
    keyed = {k: v for k, v in record.items() if v is not None and not (isinstance(v, float) and math.isnan(v))}
    gpu = keyed.get("req_gpu_type", keyed.get("assigned_gpu_type"))
    if gpu is not None:
        keyed["gpu_key"] = gpu
    instances = float(record.get("instances", 1) or 1)
    total = _number(record, "req_gpu") * instances
    if not math.isnan(total):
        keyed["size_key"] = str(round(total, 3))
    cpus = _number(record, "req_cpu_cores") * instances
    if not math.isnan(total) and not math.isnan(cpus):
        keyed["shape_key"] = f"{round(total, 3)}|{round(cpus, 3)}|{instances}"
    keyed.setdefault("task_id", "0")
    return keyed


def _own(record: Record, keyed: Mapping[str, Any], spec: TargetSpec) -> dict[str, float]:
    own = {c: _number(record, c) for c in spec.request_columns()}
    if "instances" in own and math.isnan(own["instances"]):
        own["instances"] = 1.0
    if "req_gpu" in own and "instances" in own:
        own["total_gpu"] = own["req_gpu"] * own["instances"]
    own["gpu_type_code"] = float(GPU_CODES[keyed["gpu_key"]]) if keyed.get("gpu_key") in GPU_CODES else math.nan
    own["role_code"] = ROLE_CODES.get(str(record.get("role", "job")), ROLE_CODES["other"])
    seconds = _number(record, "submit_time_s")
    own["hour"] = math.floor((seconds % 86400.0) / 3600.0) if not math.isnan(seconds) else math.nan
    own["weekday"] = math.floor((seconds // 86400.0) % 7.0) if not math.isnan(seconds) else math.nan
    text = record.get("hyperparams")
    if isinstance(text, str):
        for name, value in json.loads(text).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                own[f"hp_{name}"] = float(value)
    return own
