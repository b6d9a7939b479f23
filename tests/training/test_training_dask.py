"""LightGBM estimators with their boosters fitted on Dask workers (training.pipeline.distributed)."""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import lightgbm as lgb
import numpy as np
import pytest
from distributed import Client, LocalCluster

from models.calibrated import CalibratedEstimator
from models.residual import ResidualEstimator
from training.features.targets import target_spec
from training.ingest.sources import get_source
from training.pipeline.distributed import (
    DaskCalibratedEstimator,
    DaskLightGBMLearner,
    DaskResidualEstimator,
    DaskResidualLearner,
    on_workers,
)
from training.pipeline.evaluate import Split, model, time_split
from training.pipeline.metrics import male

ROWS = 5000
SMALL = {"n_estimators": 20, "n_jobs": 1}
"""Few trees, one thread each: the tests are about where the boosters are fitted, not how well or how fast."""


@pytest.fixture(scope="module")
def split() -> Split:
    table = get_source("pai2020-jobs").load().iloc[:ROWS]
    return time_split(table, target_spec("pai2020-jobs", "duration"))


def _fit(estimator: CalibratedEstimator | ResidualEstimator, split: Split) -> np.ndarray:
    fitted = estimator.fit(split.features.iloc[split.train], split.target[split.train])
    return fitted.predict(split.features.iloc[split.test]).p50


def test_the_dask_estimators_fit_as_their_parents_with_learners_fitted_on_the_workers() -> None:
    # one fit for both: only the learner differs, so the two cannot drift apart
    assert DaskResidualEstimator.fit is ResidualEstimator.fit
    assert DaskCalibratedEstimator.fit is CalibratedEstimator.fit
    assert DaskResidualEstimator.learner_kind is DaskResidualLearner
    spec = target_spec("pai2020-jobs", "duration")
    stacked = on_workers(model(spec, "lgbm-stacked", seed=3, params=SMALL))
    assert isinstance(stacked, DaskCalibratedEstimator) and isinstance(stacked._learner(), DaskLightGBMLearner)
    forest_stacked = DaskCalibratedEstimator(family="rf", seed=3)
    assert not isinstance(forest_stacked._learner(), DaskLightGBMLearner)


def test_on_workers_keeps_the_settings_and_leaves_other_families_alone() -> None:
    spec = target_spec("pai2020-jobs", "duration")
    residual = model(spec, "lgbm", seed=7, params=SMALL)
    moved = on_workers(residual)
    assert isinstance(moved, DaskResidualEstimator)
    assert vars(moved) == vars(residual)
    assert isinstance(on_workers(model(spec, "lgbm-stacked", seed=7)), DaskCalibratedEstimator)
    forest = model(spec, "rf", seed=7)
    assert on_workers(forest) is forest


@pytest.fixture(scope="module")
def workers() -> Iterator[Client]:
    # worker processes: LightGBM's distributed learner runs one network per process
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        yield client


@pytest.mark.slow
def test_boosters_fitted_on_two_workers_serve_without_the_cluster(split: Split, workers: Client) -> None:
    spec = target_spec("pai2020-jobs", "duration")
    here = model(spec, "lgbm", seed=0, params=SMALL)
    there = on_workers(model(spec, "lgbm", seed=0, params=SMALL))
    local, spread = _fit(here, split), _fit(there, split)
    assert isinstance(there, DaskResidualEstimator) and there.learner_ is not None
    assert type(there.learner_.model_) is lgb.LGBMRegressor  # a plain booster: pickles and predicts anywhere
    restored = pickle.loads(pickle.dumps(there))
    np.testing.assert_array_equal(restored.predict(split.features.iloc[split.test]).p50, spread)
    actual = split.target[split.test]
    # distributed LightGBM bins and bags per worker: close to, not the same as, one process
    assert not np.array_equal(local, spread)
    assert abs(male(spread, actual) - male(local, actual)) < 0.05
