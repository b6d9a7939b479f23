"""The registered bundle: every target's estimator and history state in one MLflow pyfunc model.

Input: one row per submitted job with the job-description columns below (missing ones are NA).
Output: per target ``<target>_point``, ``<target>_p50``, ``<target>_p90`` and ``model_version``.
One bundle is one registered model version, so promoting it moves every target at once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from mlflow.pyfunc.model import PythonModel

from models.calibrated import CalibratedEstimator
from models.prediction import Prediction
from training.encoder import JobEncoder
from training.features import TargetSpec, online_features
from training.history import HistoryState
from training.schema import COLUMNS, ROLES, conform

JOB_COLUMNS = ("job_id", "task_id", "role", "instances", "submit_time_s", "user", "group", "workload", "app",
               "cluster", "qos", "req_gpu", "req_gpu_mem_gib", "req_cpu_cores", "req_mem_gib", "req_disk_gib",
               "req_net_gbps", "req_gpu_type", "assigned_gpu_type", "hyperparams")
"""What a caller may say about a job it submits (a subset of the canonical columns)."""


@dataclass
class TargetModel:
    """One target of the bundle: what it predicts, from which source, and the fitted parts."""

    spec: TargetSpec
    source: str
    estimator: CalibratedEstimator
    state: HistoryState


class EstimatorBundle(PythonModel):
    """Per-target estimators plus the history they look jobs up in."""

    def __init__(self, targets: dict[str, TargetModel], version: str = "unregistered") -> None:
        self.targets = targets
        self.version = version

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_encoders", None)  # caches of the fast path, rebuilt on first use
        state.pop("_answers", None)
        state.pop("_cache_rows", None)
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
        out["model_version"] = self.version
        return out

    def predict_records(self, records: Sequence[Mapping[str, Any]], cache: bool = True) -> list[dict[str, Any]]:
        """The fast path for a few jobs given as dicts of job fields; same answers as :meth:`predict`.

        Answers are cached per target by the job's feature row (a bounded LRU): a scheduler sees the
        same job descriptions again and again (reruns of a group, a user's sweeps), and a row's answer
        depends on nothing but the row and this bundle, so only rows not seen lately reach the model.
        ``cache=False`` asks the model for every row (and leaves the cache as it was).
        """
        unknown = {k for r in records for k in r} - set(JOB_COLUMNS)
        if unknown:
            raise ValueError(f"unknown job field(s): {', '.join(sorted(unknown))}; known: {', '.join(JOB_COLUMNS)}")
        answers: list[dict[str, Any]] = [{"model_version": self.version} for _ in records]
        for name, target in self.targets.items():
            matrix = self._encoder(name, target).encode(records)
            rows = (self._answer_cache(name).answer(matrix, target.estimator) if cache
                    else _model_answers(matrix, target.estimator))
            for answer, values in zip(answers, rows, strict=True):
                answer[name] = dict(zip(("point", "p50", "p90", "mean"), values, strict=False))
        return answers

    def cache_stats(self) -> dict[str, int]:
        """Rows answered from the cache and by the model, over every target, since this bundle loaded."""
        caches: dict[str, AnswerCache] = self.__dict__.get("_answers", {})
        return {"hits": sum(c.hits for c in caches.values()), "misses": sum(c.misses for c in caches.values())}

    def set_cache_rows(self, rows: int) -> None:
        """How many answers the cache keeps per target (0: none, every row asks the model); empties it."""
        self.__dict__["_cache_rows"] = rows
        self.__dict__.pop("_answers", None)

    def _answer_cache(self, name: str) -> AnswerCache:
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
    """One target's answers (point, P50, P90 and the mean where there is one) by feature row, least
    recently used first out. Safe to share between threads."""

    DEFAULT_ROWS = 50_000

    def __init__(self, rows: int = DEFAULT_ROWS) -> None:
        self.rows = rows
        self.hits = self.misses = 0
        self._answers: OrderedDict[bytes, tuple[float, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def answer(self, matrix: np.ndarray, estimator: CalibratedEstimator) -> list[tuple[float, ...]]:
        """Each row's answer: from the cache where the row was answered lately, else from one model call
        for all such rows (a row asked twice in one call is answered once)."""
        keys = [row.tobytes() for row in matrix]
        answers: dict[bytes, tuple[float, ...] | None] = dict.fromkeys(keys)
        with self._lock:
            for key in answers:
                if (hit := self._answers.get(key)) is not None:
                    self._answers.move_to_end(key)
                    answers[key] = hit
        missing = [key for key, found in answers.items() if found is None]
        fresh: dict[bytes, tuple[float, ...]] = {}
        if missing:
            row_of = {key: i for i, key in enumerate(keys)}
            fresh = dict(zip(missing, _model_answers(matrix[[row_of[key] for key in missing]], estimator), strict=True))
            answers.update(fresh)
        with self._lock:
            self._answers.update(fresh)
            while len(self._answers) > self.rows:
                self._answers.popitem(last=False)
            self.hits += len(keys) - len(missing)
            self.misses += len(missing)
        return [answers[key] for key in keys]  # type: ignore[misc]  # every key is answered by now


def _model_answers(matrix: np.ndarray, estimator: CalibratedEstimator) -> list[tuple[float, ...]]:
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
