"""LightGBM estimators with their boosters fitted on Dask workers (training.pipeline.distributed)."""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import lightgbm as lgb
import numpy as np
import pytest
from distributed import Client, LocalCluster

from models.calibrated import CalibratedEstimator
from models.learners import LightGBMLearner
from models.residual import ResidualEstimator, ResidualLearner
from training.features.targets import target_spec
from training.ingest.sources import get_source
from training.pipeline.distributed import DaskCalibratedEstimator, DaskResidualEstimator, on_workers
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


class _LocalResidual(DaskResidualEstimator):
    learner_kind = ResidualLearner


class _LocalCalibrated(DaskCalibratedEstimator):
    learner_kind = LightGBMLearner


def test_the_dask_estimators_fit_as_their_parents_but_for_where_the_boosters_are_fitted(split: Split) -> None:
    # the Dask estimators repeat their parents' fit with another learner; with the parents' learners they must
    # give the parents' estimates exactly, so the copies cannot drift apart unnoticed
    spec = target_spec("pai2020-jobs", "duration")
    residual = model(spec, "lgbm", seed=3, params=SMALL)
    assert isinstance(residual, ResidualEstimator)
    same = _LocalResidual(**{k: getattr(residual, k) for k in ("family", "relative", "log_relative", "excluded",
                                                                  "seed", "params", "mean_columns")})
    np.testing.assert_array_equal(_fit(same, split), _fit(residual, split))
    stacked = model(spec, "lgbm-stacked", seed=3, params=SMALL)
    assert isinstance(stacked, CalibratedEstimator)
    same_stacked = _LocalCalibrated(family="lgbm", seed=3, params=SMALL, mean_columns=stacked.mean_columns,
                                    dropped=stacked.dropped)
    np.testing.assert_array_equal(_fit(same_stacked, split), _fit(stacked, split))


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
