"""The LightGBM estimator family with its boosters fitted on a Dask cluster (``lightgbm.dask``).

Each booster an estimator fits (the median and P90 boosters of :class:`models.learners.LightGBMLearner`, the
residual and cold-start boosters of :class:`models.residual.ResidualEstimator`) is fitted by
``DaskLGBMRegressor``: the training rows are split into one block per worker, and LightGBM's data-parallel
learner builds each tree from histograms summed over the workers. The fitted model is kept as the plain
``LGBMRegressor`` it amounts to (``to_local()``), so prediction, the calibration on later jobs, pickling,
registering and serving are those of the single-process estimator, and need no cluster.

The boosters are not bit-for-bit those of one process: the feature bins are found from a sample of each
worker's rows rather than of all rows, and bagging (``subsample``) draws per worker; the trees, and so the
estimates, differ slightly (docs/scale-out.md gives the holdout errors of both on the PAI trace). The
calibration, the blend with the history rule and everything else are computed as in one process.

The rows travel from this process to the workers: the estimators' calibration works in memory. A trace larger
than memory gets its feature frame from :mod:`training.features.distributed`.
"""

from __future__ import annotations

import importlib
import inspect
import warnings
from collections.abc import Sequence
from typing import Any, Self

import lightgbm as lgb
import numpy as np

from models.calibrated import CalibratedEstimator
from models.learners import LGBM_DEFAULTS, LightGBMLearner, QuantileLearner
from models.residual import LGBM_PARAMS, ResidualEstimator, ResidualLearner

Fitted = CalibratedEstimator | ResidualEstimator


def on_workers(estimator: Fitted) -> Fitted:
    """The same estimator (same settings) with its LightGBM boosters fitted on the default Dask client's workers;
    an estimator of another family is returned as it is."""
    if estimator.family != "lgbm":
        return estimator
    kind = DaskCalibratedEstimator if isinstance(estimator, CalibratedEstimator) else DaskResidualEstimator
    settings = {name: getattr(estimator, name) for name in inspect.signature(type(estimator)).parameters}
    return kind(**settings)


def fit_booster(params: dict[str, Any], inputs: Any, target: Any, weight: Any = None,
                names: Sequence[str] | None = None) -> lgb.LGBMRegressor:
    """One ``LGBMRegressor`` with ``params``, fitted by ``DaskLGBMRegressor`` on the default client's workers.
    The rows are numpy arrays (spread over the workers first) or dask arrays (fitted where they are)."""
    from lightgbm.dask import DaskLGBMRegressor

    client = importlib.import_module("distributed").default_client()
    workers = sorted(client.scheduler_info()["workers"])
    model = DaskLGBMRegressor(client=client, **params)

    def held(values: Any) -> Any:  # rows already on the workers (a dask collection) stay where they are
        on_workers = importlib.import_module("dask").is_dask_collection(values)
        return values if on_workers else _spread(client, workers, values)

    with warnings.catch_warnings():
        # each worker trains with its own threads: the n_jobs of the single-process settings has no say there
        warnings.filterwarnings("ignore", message="Parameter n_jobs will be ignored")
        model.fit(held(inputs), held(target), sample_weight=None if weight is None else held(weight),
                  feature_name=list(names) if names is not None else "auto")
    local: lgb.LGBMRegressor = model.to_local()
    return local


def _spread(client: Any, workers: list[str], values: np.ndarray) -> Any:
    """``values`` as a dask array of one row block per worker, each block held by its worker (in worker order,
    so that the same cluster gets the same split)."""
    dask: Any = importlib.import_module("dask")  # dask's collection functions carry no annotations
    da: Any = importlib.import_module("dask.array")
    used = workers[:max(1, min(len(workers), len(values)))]
    blocks = np.array_split(np.asarray(values, dtype=float), len(used))
    held = [client.scatter(block, workers=[worker]) for block, worker in zip(blocks, used, strict=True)]
    return da.concatenate([da.from_delayed(dask.delayed(future), shape=block.shape, dtype=block.dtype)
                           for future, block in zip(held, blocks, strict=True)])


class DaskLightGBMLearner(LightGBMLearner):
    """The median (L1) and P90 (quantile) boosters, fitted on the workers."""

    def fit(self, features: Any, target: Any) -> Self:
        """A pandas frame and numpy target, or a dask frame and series whose partitions the workers hold."""
        params = {**LGBM_DEFAULTS, **(self.params or {}), "random_state": self.seed}
        on_workers = importlib.import_module("dask").is_dask_collection(features)
        matrix, names = (features if on_workers else features.to_numpy(dtype=float)), list(features.columns)
        self.median_ = fit_booster({"objective": "l1", **params}, matrix, target, names=names)
        self.upper_ = fit_booster({"objective": "quantile", "alpha": 0.9, **params}, matrix, target, names=names)
        return self


class DaskResidualLearner(ResidualLearner):
    """The L1 booster of the residual (or of the whole duration, cold start), fitted on the workers."""

    def fit(self, inputs: Any, residual: Any, weight: Any) -> Self:
        """Numpy arrays, or dask arrays whose blocks the workers hold (``lgbm`` only)."""
        if self.family != "lgbm":
            return super().fit(inputs, residual, weight)
        params = {**LGBM_PARAMS, **(self.params or {}), "random_state": self.seed}
        self.model_ = fit_booster({"objective": "l1", **params}, inputs, residual, weight)
        return self


class DaskCalibratedEstimator(CalibratedEstimator):
    """:class:`models.calibrated.CalibratedEstimator` with its LightGBM learner fitted on the workers."""

    def _learner(self) -> QuantileLearner:
        if self.family == "lgbm":
            return DaskLightGBMLearner(seed=self.seed, params=self.params)
        return super()._learner()


class DaskResidualEstimator(ResidualEstimator):
    """:class:`models.residual.ResidualEstimator` with the residual and cold-start learners fitted on the workers.

    Only the learners differ: the parent's ``fit`` makes them through ``learner_kind``."""

    learner_kind: type[ResidualLearner] = DaskResidualLearner
