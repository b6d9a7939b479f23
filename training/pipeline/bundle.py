"""The registered bundle: every target's estimator and history state in one MLflow pyfunc model.

Input: one row per submitted job with the job-description columns below (missing ones are NA).
Output: per target ``<target>_point``, ``<target>_p50``, ``<target>_p90`` and ``model_version``.
One bundle is one registered model version, so promoting it moves every target at once.
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import pandas as pd
from mlflow.pyfunc.model import PythonModel

from models.calibrated import CalibratedEstimator
from models.prediction import Prediction
from models.residual import ResidualEstimator
from training.features.encoder import JobEncoder
from training.features.frames import TargetSpec, online_features
from training.features.history import HistoryState
from training.ingest.schema import COLUMNS, ROLES, conform
from training.needs.estimator import NeedsEstimator, stated

JOB_COLUMNS = ("job_id", "task_id", "role", "instances", "submit_time_s", "user", "group", "workload", "app",
               "cluster", "qos", "req_gpu", "req_gpu_mem_gib", "req_cpu_cores", "req_mem_gib", "req_disk_gib",
               "req_net_gbps", "req_gpu_type", "assigned_gpu_type", "hyperparams")
"""What a caller may say about a job it submits (a subset of the canonical columns)."""


@dataclass
class TargetModel:
    """One target of the bundle: what it predicts, from which source, and the fitted parts."""

    spec: TargetSpec
    source: str
    estimator: CalibratedEstimator | ResidualEstimator
    state: HistoryState


class EstimatorBundle(PythonModel):
    """Per-target estimators plus the history they look jobs up in."""

    def __init__(self, targets: dict[str, TargetModel], version: str = "unregistered",
                 needs: NeedsEstimator | None = None) -> None:
        self.targets = targets
        self.version = version
        self.needs = needs
        """Estimators from stated hyperparameters, trained on measurements (``training.needs``)."""

    def needs_of(self, record: Mapping[str, Any]) -> dict[str, Any] | None:
        """What the record's stated hyperparameters answer (``training.needs.estimator``), or None when it
        states none or the bundle carries no needs estimators (bundles registered before them)."""
        needs: NeedsEstimator | None = self.__dict__.get("needs")
        hyperparams = stated(record.get("hyperparams"))
        if needs is None or hyperparams is None:
            return None
        gpu, instances = record.get("req_gpu"), record.get("instances")
        gpu = 0.0 if gpu is None or gpu != gpu else float(gpu)
        count = 1 if instances is None or instances != instances else int(instances)
        replicas = count * max(1, round(gpu)) if gpu > 0 else 0
        key = (json.dumps(hyperparams, sort_keys=True), replicas)
        return self._cache(_NEEDS).answer([key], lambda _: [needs.answer(hyperparams, replicas)])[0]  # type: ignore[no-any-return]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_encoders", None)  # caches of the fast path, rebuilt on first use
        state.pop("_answers", None)
        state.pop("_cache_rows", None)
        state.pop("_unread", None)
        return state

    def set_version(self, version: str) -> None:
        """Stamp the registry version on the bundle and every estimator (it answers with it)."""
        self.version = version
        for target in self.targets.values():
            target.estimator.version = version

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        jobs = job_table(model_input)
        out = pd.DataFrame(index=model_input.index)
        for name in self.targets:
            predicted = self.predict_target(name, jobs)
            out[f"{name}_point"], out[f"{name}_p50"], out[f"{name}_p90"] = (
                predicted.point, predicted.p50, predicted.p90)
            if predicted.mean is not None:
                out[f"{name}_mean"] = predicted.mean
        if "hyperparams" in model_input:
            for column, values in _needs_columns([self.needs_of({str(k): v for k, v in r.items()})
                                                           for r in jobs.to_dict("records")]).items():
                out[column] = values
        out["model_version"] = self.version
        return out

    def predict_records(self, records: Sequence[Mapping[str, Any]], cache: bool = True) -> list[dict[str, Any]]:
        """The fast path for a few jobs given as dicts of job fields; same answers as :meth:`predict`, plus
        ``sources`` (the trace each target was trained on) and, for a record stating hyperparameters,
        ``needs`` (:meth:`needs_of`; each answer names its measurements).

        Answers are cached (bounded LRUs): a scheduler sees the same job descriptions again and again
        (reruns of a group, a user's sweeps). First by the whole record but its job id, which no
        feature reads; then per target by the record's feature row, which depends on nothing but the
        record and this bundle. So only rows not seen lately reach the model, and records seen
        lately are not even encoded. ``cache=False`` asks the model for every row (and leaves the
        caches as they were).
        """
        unknown = {k for r in records for k in r} - set(JOB_COLUMNS)
        if unknown:
            raise ValueError(f"unknown job field(s): {', '.join(sorted(unknown))}; known: {', '.join(JOB_COLUMNS)}")
        keys = [self._record_key(r) for r in records] if cache else None
        if keys is None or any(k is None for k in keys):
            per_record = self._by_features(records, cache)
        else:
            per_record = self._cache(_RECORDS).answer(keys, lambda rows: self._by_features(
                [records[i] for i in rows], cache=True))
        names = list(self.targets)
        sources = {name: target.source for name, target in self.targets.items()}
        answers = [{"model_version": self.version, **{name: dict(zip(_QUANTITIES, values, strict=False))
                                                     for name, values in zip(names, answer, strict=True)},
                    "sources": dict(sources)}
                   for answer in per_record]
        for record, answer in zip(records, answers, strict=True):
            needs = self.needs_of(record)
            if needs is not None:
                answer["needs"] = needs
        return answers

    def _by_features(self, records: Sequence[Mapping[str, Any]], cache: bool) -> list[tuple[tuple[float, ...], ...]]:
        """Per record, every target's answer, through the per-target caches of feature rows."""
        per_target = []
        for name, target in self.targets.items():
            matrix = self._encoder(name, target).encode(records)
            if cache:
                compute = partial(_answers_of_rows, matrix, target.estimator)
                per_target.append(self._cache(name).answer([row.tobytes() for row in matrix], compute))
            else:
                per_target.append(_model_answers(matrix, target.estimator))
        return list(zip(*per_target, strict=True)) if per_target else [() for _ in records]

    def _record_key(self, record: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """What the record's answers depend on, hashable; ``None`` if a value cannot be hashed."""
        unread = self._unread_fields()
        key = tuple(sorted(item for item in record.items() if item[0] not in unread))
        try:
            hash(key)
        except TypeError:
            return None
        return key

    def _unread_fields(self) -> frozenset[str]:
        """Record fields no target's features read (the job id, unless some key is made of it)."""
        found: frozenset[str] | None = self.__dict__.get("_unread")
        if found is None:
            read = {c for t in self.targets.values() for columns in t.spec.keys.values() for c in columns}
            read |= {c for t in self.targets.values() for c in t.spec.request_columns()}
            found = self.__dict__["_unread"] = frozenset({"job_id"} - read)
        return found

    def cache_stats(self) -> dict[str, int]:
        """Rows (one per record and target) answered from a cache and by the model, since this bundle
        loaded."""
        caches: dict[str, AnswerCache] = self.__dict__.get("_answers", {})
        records = caches.get(_RECORDS)
        from_records = records.hits * len(self.targets) if records else 0
        per_target = [c for name, c in caches.items() if name not in (_RECORDS, _NEEDS)]
        return {"hits": from_records + sum(c.hits for c in per_target), "misses": sum(c.misses for c in per_target)}

    def set_cache_rows(self, rows: int) -> None:
        """How many answers each cache keeps (0: none, every row asks the model); empties them."""
        self.__dict__["_cache_rows"] = rows
        self.__dict__.pop("_answers", None)

    def _cache(self, name: str) -> AnswerCache:
        caches: dict[str, AnswerCache] = self.__dict__.setdefault("_answers", {})
        rows = self.__dict__.get("_cache_rows", AnswerCache.DEFAULT_ROWS)
        return caches.get(name) or caches.setdefault(name, AnswerCache(rows))  # setdefault: one cache, first asker's

    def _encoder(self, name: str, target: TargetModel) -> JobEncoder:
        cache: dict[str, JobEncoder] = self.__dict__.setdefault("_encoders", {})
        if name not in cache:
            cache[name] = JobEncoder(target.spec, target.state, target.estimator.feature_names_)
        return cache[name]

    def predict_target(self, name: str, jobs: pd.DataFrame, activity: pd.DataFrame | None = None) -> Prediction:
        """Predict one target for canonical ``jobs`` (see :func:`job_table`)."""
        target = self.targets[name]
        features = online_features(jobs, target.spec, target.state, activity)
        missing = [c for c in target.estimator.feature_names_ if c not in features]
        for column in missing:  # e.g. a hyperparameter seen in training that these jobs do not state
            features[column] = np.nan
        return target.estimator.predict(features)


class AnswerCache:
    """Answers by key, least recently used first out; safe to share between threads."""

    DEFAULT_ROWS = 50_000

    def __init__(self, rows: int = DEFAULT_ROWS) -> None:
        self.rows = rows
        self.hits = self.misses = 0
        self._answers: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def answer(self, keys: Sequence[Hashable], compute: Callable[[list[int]], Sequence[Any]]) -> list[Any]:
        """Each key's answer: from the cache where it was answered lately, else from one ``compute`` call
        given the positions of the others (a key asked twice in one call is computed once)."""
        answers: dict[Hashable, Any] = dict.fromkeys(keys, _MISSING)
        with self._lock:
            for key in answers:
                if (hit := self._answers.get(key, _MISSING)) is not _MISSING:
                    self._answers.move_to_end(key)
                    answers[key] = hit
        missing = [key for key, found in answers.items() if found is _MISSING]
        fresh: dict[Hashable, Any] = {}
        if missing:
            position = {key: i for i, key in enumerate(keys)}
            fresh = dict(zip(missing, compute([position[key] for key in missing]), strict=True))
            answers.update(fresh)
        with self._lock:
            self._answers.update(fresh)
            while len(self._answers) > self.rows:
                self._answers.popitem(last=False)
            self.hits += len(keys) - len(missing)
            self.misses += len(missing)
        return [answers[key] for key in keys]


_MISSING = object()
_RECORDS = "(records)"
"""The name of the cache of whole answers by record (no target's name has brackets)."""
_NEEDS = "(needs)"
"""The name of the cache of answers from stated hyperparameters."""


def _needs_columns(answers: list[dict[str, Any] | None]) -> dict[str, list[float]]:
    """Flat ``needs.<target>_p50`` / ``_p90`` columns (epoch time per GPU type: ``needs.epoch_s.<type>``)."""
    columns: dict[str, list[float]] = {}
    for i, answer in enumerate(answers):
        for target, value in (answer or {}).items():
            for q in ("p50", "p90"):
                cells = value[q].items() if isinstance(value[q], dict) else [("", value[q])]
                for sub, number in cells:
                    name = f"needs.{target}{'.' + sub if sub else ''}_{q}"
                    columns.setdefault(name, [math.nan] * len(answers))[i] = float(number)
    return columns
_QUANTITIES = ("point", "p50", "p90", "mean")


def _answers_of_rows(matrix: np.ndarray, estimator: CalibratedEstimator | ResidualEstimator,
                     rows: list[int]) -> list[tuple[float, ...]]:
    return _model_answers(matrix[rows], estimator)


def _model_answers(matrix: np.ndarray, estimator: CalibratedEstimator | ResidualEstimator) -> list[tuple[float, ...]]:
    """Per row: point, P50, P90, and the mean where the estimator gives one."""
    predicted = estimator.predict_matrix(matrix)
    columns = [predicted.point, predicted.p50, predicted.p90] + ([] if predicted.mean is None else [predicted.mean])
    return [tuple(float(v) for v in row) for row in zip(*columns, strict=True)]


def job_table(jobs: pd.DataFrame) -> pd.DataFrame:
    """Job descriptions as canonical rows: unknown columns are refused, absent ones are NA."""
    unknown = sorted(set(jobs.columns) - set(JOB_COLUMNS) - {c.name for c in COLUMNS})
    if unknown:
        raise ValueError(f"unknown job field(s): {', '.join(unknown)}; known: {', '.join(JOB_COLUMNS)}")
    frame = jobs.reset_index(drop=True).copy()
    defaults: dict[str, Any] = {"source": "request", "task_id": "0", "role": "job", "instances": 1,
                                "status": "pending", "censored": False}
    for column, value in defaults.items():
        if column not in frame:
            frame[column] = value
    if "job_id" not in frame:
        frame["job_id"] = [f"job-{i}" for i in range(len(frame))]
    frame["role"] = frame["role"].where(frame["role"].isin(ROLES), "other")
    keep = [c.name for c in COLUMNS if c.name in frame]
    return conform(frame[keep], "<request>")
