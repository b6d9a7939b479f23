"""The serving fast path (dict records -> matrix) answers exactly like the DataFrame path, on real jobs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from models.estimate import unit_of
from training.features.encoder import JobEncoder
from training.features.frames import online_features
from training.features.targets import target_spec
from training.ingest.sources import get_source
from training.pipeline.bundle import JOB_COLUMNS, AnswerCache, EstimatorBundle, TargetModel
from training.pipeline.evaluate import model, time_split
from training.pipeline.serving import BundleEstimator


@pytest.fixture(scope="module", params=[("pai2020-jobs", "duration", "lgbm"), ("pai2020-jobs", "duration", "history"),
                                        ("pai2020-jobs", "duration", "lgbm-stacked"),
                                        ("dlrm2025", "bandwidth_request", "lgbm"), ("philly", "duration", "lgbm")])
def fitted(request: pytest.FixtureRequest) -> tuple[EstimatorBundle, pd.DataFrame]:
    source, target, family = request.param
    table = get_source(source).load()
    if len(table) > 20000:
        table = table.iloc[:20000]
    spec = target_spec(source, target)
    split = time_split(table, spec)
    # PAI duration: the history rule corrected by LightGBM, the rule alone, and LightGBM stacked on the median
    estimator = model(spec, family, params={"n_estimators": 20}).fit(
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
    from training.pipeline.bundle import job_table

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


def test_the_cache_keeps_the_keys_used_last_and_stays_bounded() -> None:
    computed: list[list[int]] = []
    cache = AnswerCache(rows=3)

    def ask(keys: list[int]) -> list[object]:
        def compute(positions: list[int]) -> list[int]:
            computed.append([keys[i] for i in positions])
            return [keys[i] * 10 for i in positions]
        return cache.answer(keys, compute)

    assert ask([1, 2, 3, 4, 2]) == [10, 20, 30, 40, 20]
    assert computed == [[1, 2, 3, 4]] and list(cache._answers) == [2, 3, 4]  # 2 computed once; 1 evicted
    assert ask([2]) == [20] and list(cache._answers) == [3, 4, 2]  # a hit moves to the back
    assert ask([5]) == [50] and list(cache._answers) == [4, 2, 5]  # evicts 3, the least recently used
    assert ask([3, 4]) == [30, 40] and computed[-1] == [3]
    assert (cache.hits, cache.misses) == (3, 6)


def test_a_record_seen_under_another_job_id_is_answered_without_encoding(
        fitted: tuple[EstimatorBundle, pd.DataFrame], monkeypatch: pytest.MonkeyPatch) -> None:
    bundle = EstimatorBundle(fitted[0].targets)
    records = _records(fitted[1])[:20]
    first = bundle.predict_records(records)
    monkeypatch.setattr(JobEncoder, "encode", lambda *_: pytest.fail("a record seen lately was encoded again"))
    again = bundle.predict_records([{**r, "job_id": f"again-{i}"} for i, r in enumerate(records)])
    assert again == first


def test_no_feature_reads_the_job_id(fitted: tuple[EstimatorBundle, pd.DataFrame]) -> None:
    bundle, jobs = fitted
    records = _records(jobs)
    renamed = [{**r, "job_id": f"other-{i}"} for i, r in enumerate(records)]
    assert "job_id" in bundle._unread_fields()
    for name, target in bundle.targets.items():
        encoder = bundle._encoder(name, target)
        np.testing.assert_array_equal(encoder.encode(records), encoder.encode(renamed), err_msg=name)


def test_a_record_differing_in_any_field_gets_its_own_answer(fitted: tuple[EstimatorBundle, pd.DataFrame]) -> None:
    bundle = EstimatorBundle(fitted[0].targets)
    records = _records(fitted[1])
    base = records[0]
    bundle.predict_records([base])
    changed = 0
    for field in sorted({k for r in records for k in r} - {"job_id"}):
        other = next((r[field] for r in records if r.get(field) is not None and r.get(field) != base.get(field)), None)
        if other is None:
            continue
        variant = {**base, field: other}
        cached, fresh = bundle.predict_records([variant]), bundle.predict_records([variant], cache=False)
        assert cached == fresh, field
        changed += cached != bundle.predict_records([base])
    assert changed >= 1  # some field moves the answer, so a cache that ignored them would be caught


def test_the_service_reads_the_bundle_s_answers_as_they_are(fitted: tuple[EstimatorBundle, pd.DataFrame]) -> None:
    bundle, jobs = fitted
    records = _records(jobs)[:50]
    answers = bundle.predict_records(records)
    estimates = BundleEstimator(bundle).predict(records)
    assert len(estimates) == len(answers)
    for answer, estimate in zip(answers, estimates, strict=True):
        assert estimate.model_version == answer["model_version"] and estimate.sources == answer["sources"]
        assert estimate.needs == answer.get("needs") and set(estimate.targets) == set(bundle.targets)
        for target, quantiles in estimate.targets.items():
            assert quantiles is not None and quantiles.unit == unit_of(target)
            mean = {} if quantiles.mean is None else {"mean": quantiles.mean}
            assert {"point": quantiles.point, "p50": quantiles.p50, "p90": quantiles.p90, **mean} == answer[target]
