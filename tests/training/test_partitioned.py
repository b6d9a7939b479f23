"""The duration estimator trained and scored on Dask partitions (training.pipeline.partitioned), against the
single-process path on real PAI rows."""

from __future__ import annotations

import dask.dataframe as dd
import numpy as np
import pandas as pd
import pytest
from distributed import Client

from models.calibrated import CalibratedEstimator
from training.features.targets import target_spec
from training.ingest.sources import get_source
from training.pipeline.distributed import DaskLightGBMLearner, DaskResidualLearner
from training.pipeline.evaluate import Split, baselines, by_depth, evaluate, model, time_split
from training.pipeline.metrics import scores
from training.pipeline.partitioned import (
    TARGET,
    PartitionedSplit,
    fit_on_targets,
    fit_partitioned,
    predict_partitioned,
    score_partitioned,
    split_partitioned,
)

ROWS = 5000
SMALL = {"n_estimators": 20, "n_jobs": 1}
"""Few trees: the tests are about where the estimator is fitted, not how well."""
SPEC = target_spec("pai2020-jobs", "duration")


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return get_source("pai2020-jobs").load().iloc[:ROWS]


@pytest.fixture(scope="module")
def single(table: pd.DataFrame) -> Split:
    return time_split(table, SPEC)


@pytest.fixture(scope="module")
def spread(table: pd.DataFrame, client: Client) -> PartitionedSplit:
    return split_partitioned(dd.from_pandas(table, npartitions=3), SPEC, state=True)


def test_the_split_holds_the_same_jobs_and_features_in_the_same_order(single: Split, spread: PartitionedSplit) -> None:
    assert (spread.train_rows, spread.test_rows) == (len(single.train), len(single.test))
    for rows, frame in ((single.train, spread.train), (single.test, spread.test)):
        held = frame.compute()
        pd.testing.assert_frame_equal(held.drop(columns=[TARGET]), single.features.iloc[rows])
        np.testing.assert_array_equal(held[TARGET].to_numpy(), single.target[rows])


def test_the_split_carries_the_history_state_serving_starts_from(single: Split, spread: PartitionedSplit) -> None:
    assert spread.state is not None and spread.state.tables == single.state.tables
    assert spread.state.recent is not None and single.state.recent is not None
    assert spread.state.recent.error_q90 == single.state.recent.error_q90


def test_the_rule_alone_is_fitted_and_scored_exactly_as_in_one_process(single: Split,
                                                                       spread: PartitionedSplit) -> None:
    one = model(SPEC, "history").fit(single.features.iloc[single.train], single.target[single.train])
    spread_fit = fit_partitioned(model(SPEC, "history"), spread.train)
    assert (spread_fit.fallback_, spread_fit.offset_, spread_fit.default_scale_) == \
        (one.fallback_, one.offset_, one.default_scale_)
    np.testing.assert_array_equal(spread_fit.weights_, one.weights_)
    np.testing.assert_array_equal(spread_fit.mean_weights_, one.mean_weights_)
    expected = one.predict(single.features.iloc[single.test])
    answered = predict_partitioned(spread_fit, spread.test).compute()
    np.testing.assert_array_equal(answered["p50"].to_numpy(), expected.p50)
    np.testing.assert_array_equal(answered["p90"].to_numpy(), expected.p90)
    scored = score_partitioned(spread_fit, spread.test, np.array([0, 5, 9]))
    actual = single.target[single.test]
    np.testing.assert_array_equal(scored.sample.p50, expected.p50[[0, 5, 9]])
    np.testing.assert_array_equal(scored.actual, actual[[0, 5, 9]])
    assert scored.scores == {**scores(expected.point, expected.p90, actual),
                      "by_depth": by_depth(expected, actual, single.features.iloc[single.test]["depth"].to_numpy())}


def test_the_learners_are_fitted_on_the_workers_and_calibrated_as_in_one_process(single: Split,
                                                                                  spread: PartitionedSplit) -> None:
    fitted = fit_partitioned(model(SPEC, "lgbm", seed=2, params=SMALL), spread.train)
    assert isinstance(fitted.learner_, DaskResidualLearner) and isinstance(fitted.cold_, DaskResidualLearner)
    assert fitted.learner_.model_.n_estimators == SMALL["n_estimators"]
    # The same learners, calibrated in this process on the whole training frame: the same calibration.
    x, y = single.features.iloc[single.train], single.target[single.train]
    again = model(SPEC, "lgbm", seed=2, params=SMALL)
    split = again.prepare(list(x.columns), len(y))
    again.fallback_, again.learner_, again.cold_ = fitted.fallback_, fitted.learner_, fitted.cold_
    again.calibrate(np.log1p(y[split:]), again.calibration_columns(x.to_numpy(dtype=float)[split:]))
    assert again.offset_ == fitted.offset_
    np.testing.assert_array_equal(again.weights_, fitted.weights_)
    np.testing.assert_array_equal(again.cold_weights_, fitted.cold_weights_)
    # And it answers as the single-process estimator does, from its local boosters, without the cluster.
    held = single.features.iloc[single.test]
    np.testing.assert_array_equal(fitted.predict(held).p50, predict_partitioned(fitted, spread.test).compute()["p50"])


def test_the_stacked_estimator_is_fitted_on_the_workers_and_calibrated_as_in_one_process(
        table: pd.DataFrame) -> None:
    # A target without a history rule: the median and P90 boosters on the features as they are.
    spec = target_spec("pai2020-jobs", "gpu_request")
    single, spread = time_split(table, spec), split_partitioned(dd.from_pandas(table, npartitions=3), spec)
    fitted = fit_partitioned(model(spec, "lgbm", seed=2, params=SMALL), spread.train)
    assert isinstance(fitted, CalibratedEstimator) and isinstance(fitted.learner_, DaskLightGBMLearner)
    x, y = single.features.iloc[single.train], single.target[single.train]
    again = model(spec, "lgbm", seed=2, params=SMALL)
    assert isinstance(again, CalibratedEstimator)
    split = again.prepare(list(x.columns), len(y))
    again.fallback_, again.learner_ = fitted.fallback_, fitted.learner_
    again.calibrate(np.log1p(y[split:]), again.calibration_columns(x[again.feature_names_].to_numpy(float)[split:]))
    np.testing.assert_array_equal(again.offsets_, fitted.offsets_)
    np.testing.assert_array_equal(again.weights_, fitted.weights_)
    held = single.features.iloc[single.test]
    np.testing.assert_array_equal(fitted.predict(held).p90, predict_partitioned(fitted, spread.test).compute()["p90"])


def test_the_baselines_learn_the_targets_alone_and_score_as_in_one_process(single: Split,
                                                                          spread: PartitionedSplit) -> None:
    fitted = fit_on_targets(baselines(SPEC), spread.train)
    expected = evaluate(single, baselines(SPEC))["estimators"]
    for name, estimator in fitted.items():
        scored = score_partitioned(estimator, spread.test).scores
        assert scored["male"] == expected[name]["male"] and scored["mae"] == expected[name]["mae"], name


def test_the_forest_is_refused_by_name(spread: PartitionedSplit) -> None:
    with pytest.raises(ValueError, match="'rf' has no fit on Dask partitions"):
        fit_partitioned(model(SPEC, "rf"), spread.train)


def test_a_trace_out_of_submission_order_is_refused_naming_the_job(table: pd.DataFrame, client: Client) -> None:
    shuffled = table.copy()
    shuffled.loc[10, "submit_time_s"] = shuffled["submit_time_s"].max() + 1.0
    with pytest.raises(ValueError, match=r"submission order.*partition 0, job 11"):
        split_partitioned(dd.from_pandas(shuffled, npartitions=3), SPEC)
