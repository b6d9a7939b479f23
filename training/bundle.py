"""The registered bundle: every target's estimator and history state in one MLflow pyfunc model.

Input: one row per submitted job with the job-description columns below (missing ones are NA).
Output: per target ``<target>_point``, ``<target>_p50``, ``<target>_p90`` and ``model_version``.
One bundle is one registered model version, so promoting it moves every target at once.
"""

from __future__ import annotations

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
        state.pop("_encoders", None)  # a cache of the fast path, rebuilt on first use
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

    def predict_records(self, records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The fast path for a few jobs given as dicts of job fields; same answers as :meth:`predict`."""
        unknown = {k for r in records for k in r} - set(JOB_COLUMNS)
        if unknown:
            raise ValueError(f"unknown job field(s): {', '.join(sorted(unknown))}; known: {', '.join(JOB_COLUMNS)}")
        answers: list[dict[str, Any]] = [{"model_version": self.version} for _ in records]
        for name, target in self.targets.items():
            encoder = self._encoder(name, target)
            predicted = target.estimator.predict_matrix(encoder.encode(records))
            for i, answer in enumerate(answers):
                answer[name] = {"point": float(predicted.point[i]), "p50": float(predicted.p50[i]),
                                "p90": float(predicted.p90[i])}
                if predicted.mean is not None:
                    answer[name]["mean"] = float(predicted.mean[i])
        return answers

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
