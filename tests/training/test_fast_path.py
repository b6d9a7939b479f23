"""The serving fast path (dict records -> matrix) answers exactly like the DataFrame path, on real jobs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from models.calibrated import CalibratedEstimator
from training.bundle import JOB_COLUMNS, EstimatorBundle, TargetModel
from training.encoder import JobEncoder
from training.evaluate import time_split
from training.features import online_features
from training.sources import get_source
from training.targets import target_spec


@pytest.fixture(scope="module", params=[("pai2020-jobs", "duration"), ("dlrm2025", "bandwidth_request"),
                                        ("philly", "duration")])
def fitted(request: pytest.FixtureRequest) -> tuple[EstimatorBundle, pd.DataFrame]:
    source, target = request.param
    table = get_source(source).load()
    if len(table) > 20000:
        table = table.iloc[:20000]
    spec = target_spec(source, target)
    split = time_split(table, spec)
    estimator = CalibratedEstimator("lgbm", params={"n_estimators": 20}, mean_columns=spec.mean_columns()).fit(
        split.features.iloc[split.train], split.target[split.train])
    bundle = EstimatorBundle({target: TargetModel(spec, source, estimator, split.state)})
    jobs = table.iloc[split.test[:300]][[c for c in JOB_COLUMNS if c in table]].reset_index(drop=True)
    return bundle, jobs


def _records(jobs: pd.DataFrame) -> list[dict[str, object]]:
    rows = jobs.astype("object").where(jobs.notna(), None).to_dict(orient="records")
    return [{str(k): v for k, v in row.items() if v is not None} for row in rows]


def test_encoder_matches_online_features(fitted: tuple[EstimatorBundle, pd.DataFrame]) -> None:
    bundle, jobs = fitted
    for name, target in bundle.targets.items():
        names = target.estimator.feature_names_
        frame = online_features(bundle_jobs(jobs), target.spec, target.state)
        expected = frame.reindex(columns=names).to_numpy(dtype=float)
        got = JobEncoder(target.spec, target.state, names).encode(_records(jobs))
        np.testing.assert_allclose(got, expected, equal_nan=True, err_msg=name)


def test_records_and_frames_get_the_same_answers(fitted: tuple[EstimatorBundle, pd.DataFrame]) -> None:
    bundle, jobs = fitted
    frame_answer = bundle.predict(None, jobs)
    record_answer = bundle.predict_records(_records(jobs))
    for name in bundle.targets:
        np.testing.assert_allclose([a[name]["p90"] for a in record_answer], frame_answer[f"{name}_p90"])
        np.testing.assert_allclose([a[name]["point"] for a in record_answer], frame_answer[f"{name}_point"])
        np.testing.assert_allclose([a[name]["mean"] for a in record_answer], frame_answer[f"{name}_mean"])


def bundle_jobs(jobs: pd.DataFrame) -> pd.DataFrame:
    from training.bundle import job_table

    return job_table(jobs)


def test_fast_path_refuses_unknown_fields(fitted: tuple[EstimatorBundle, pd.DataFrame]) -> None:
    bundle, _ = fitted
    with pytest.raises(ValueError, match="unknown job field"):
        bundle.predict_records([{"req_gpu": 1.0, "gpu_count": 2}])
