"""The registered bundle as an estimator the service answers with (:class:`models.estimate.CachingEstimator`),
and the registry's versions loaded as such."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from models.estimate import CacheCounts, JobRecord, Quantiles, TaskEstimate, unit_of
from models.registry import ModelRegistry
from training.pipeline.bundle import EstimatorBundle


class BundleEstimator:
    """A bundle's answers (:meth:`EstimatorBundle.predict_records`) as typed estimates; ``cache_rows``:
    how many answers each of its caches keeps (``None``: the bundle's default)."""

    def __init__(self, bundle: EstimatorBundle, cache_rows: int | None = None) -> None:
        self.bundle = bundle
        if cache_rows is not None:
            bundle.set_cache_rows(cache_rows)
        self.units = {target: unit_of(target) for target in bundle.targets}

    def predict(self, records: Sequence[JobRecord]) -> list[TaskEstimate]:
        return [self._estimate(answer) for answer in self.bundle.predict_records(records)]

    def cache_counts(self) -> CacheCounts:
        counts = self.bundle.cache_stats()
        return CacheCounts(counts["hits"], counts["misses"])

    def _estimate(self, answer: Mapping[str, Any]) -> TaskEstimate:
        """One answer of the bundle: ``model_version``, per target ``{point, p50, p90[, mean]}``,
        ``sources``, and ``needs`` for a record that states hyperparameters."""
        targets = {target: _quantiles(answer[target], unit) for target, unit in self.units.items()}
        return TaskEstimate(str(answer["model_version"]), targets, dict(answer["sources"]), answer.get("needs"))


def _quantiles(quantities: Mapping[str, float], unit: str) -> Quantiles:
    mean = quantities.get("mean")
    return Quantiles(float(quantities["point"]), float(quantities["p50"]), float(quantities["p90"]), unit,
                     None if mean is None else float(mean))


REQUEST_TIMEOUT_S = 10
REQUEST_RETRIES = 2
"""A service asking an HTTP registry gives up after about half a minute at worst, a couple of seconds when
the port is closed: it answers with the last good model (or the heuristic) meanwhile and asks again later,
so waiting longer buys nothing and holds up start-up and reloads."""


class RegisteredEstimators:
    """The versions of one registered model, loaded as :class:`BundleEstimator`; each keeps
    ``cache_rows`` answers per cache (``None``: the bundle's default). Bounds the registry's HTTP
    requests (``REQUEST_TIMEOUT_S``, ``REQUEST_RETRIES``; ``MLFLOW_HTTP_REQUEST_*`` set in the
    environment win)."""

    def __init__(self, registry: ModelRegistry, cache_rows: int | None = None) -> None:
        self.registry, self.cache_rows = registry, cache_rows
        registry.bound_requests(REQUEST_TIMEOUT_S, REQUEST_RETRIES)

    def alias_version(self, alias: str) -> str | None:
        return self.registry.alias_version(alias)

    def load(self, alias_or_version: str) -> tuple[str, BundleEstimator]:
        """The version of ``alias_or_version`` and its estimator; ``TypeError`` if what is registered
        there is not an estimator bundle."""
        version, model = self.registry.load(alias_or_version)
        if not isinstance(model, EstimatorBundle):
            raise TypeError(f"version {version} of {self.registry.name!r} is a {type(model).__name__}, "
                            "not an estimator bundle")
        return version, BundleEstimator(model, self.cache_rows)
