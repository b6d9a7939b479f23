"""The serving fast path (dict records -> matrix) answers exactly like the DataFrame path, on real jobs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from models.calibrated import CalibratedEstimator
from training.bundle import JOB_COLUMNS, AnswerCache, EstimatorBundle, TargetModel
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


def test_cached_answers_are_the_models_answers(fitted: tuple[EstimatorBundle, pd.DataFrame]) -> None:
    bundle = EstimatorBundle(fitted[0].targets)  # the same model with an empty cache
    records = _records(fitted[1])
    uncached = bundle.predict_records(records, cache=False)
    assert bundle.cache_stats() == {"hits": 0, "misses": 0}
    first = bundle.predict_records(records)
    distinct = len({tuple(sorted((k, str(v)) for k, v in r.items() if k != "job_id")) for r in records})
    misses = bundle.cache_stats()["misses"]
    assert distinct * len(bundle.targets) >= misses  # a description asked twice reaches the model once at most
    again = bundle.predict_records(list(reversed(records)))[::-1]
    assert bundle.cache_stats() == {"hits": 2 * len(records) * len(bundle.targets) - misses, "misses": misses}
    assert first == uncached and again == uncached
    bundle.set_cache_rows(0)  # keeps nothing: every distinct row of a call asks the model, answers the same
    assert bundle.predict_records(records) == uncached and bundle.predict_records(records) == uncached
    rows = sum(len({row.tobytes() for row in bundle._encoder(name, target).encode(records)})
               for name, target in bundle.targets.items())
    assert bundle.cache_stats()["misses"] == 2 * rows


def test_the_cache_keeps_the_rows_used_last_and_stays_bounded(fitted: tuple[EstimatorBundle, pd.DataFrame]) -> None:
    bundle, jobs = fitted
    target = next(iter(bundle.targets.values()))
    encoded = JobEncoder(target.spec, target.state, target.estimator.feature_names_).encode(_records(jobs))
    matrix = np.stack(list({row.tobytes(): row for row in encoded}.values()))  # distinct rows (NaN included)
    assert len(matrix) >= 4
    cache = AnswerCache(rows=3)
    expected = cache.answer(matrix, target.estimator)
    assert len(cache._answers) == 3
    assert cache.answer(matrix[-3:], target.estimator) == expected[-3:]  # the last three stayed
    assert (cache.hits, cache.misses) == (3, len(matrix))
    cache.answer(matrix[:1], target.estimator)  # evicts the least recently used of the three
    assert cache.answer(matrix[-2:], target.estimator) == expected[-2:]
    assert (cache.hits, cache.misses) == (5, len(matrix) + 1)
    assert cache.answer(matrix[-3:-2], target.estimator) == expected[-3:-2]
    assert cache.misses == len(matrix) + 2
