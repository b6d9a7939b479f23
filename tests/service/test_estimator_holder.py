"""The service's model holder: atomic swap on reload, last good model kept on failure, heuristic without any."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Sequence

from models.estimate import CacheCounts, JobRecord, Quantiles, TaskEstimate
from service.estimator import HEURISTIC, EstimatorHolder, Loaded


class FakeEstimator:
    """Stands in for a registered version: answers with its own version."""

    def __init__(self, version: str) -> None:
        self.version = version

    def predict(self, records: Sequence[JobRecord]) -> list[TaskEstimate]:
        return [TaskEstimate(self.version, {"duration": Quantiles(60.0, 60.0, 120.0, "s")}) for _ in records]

    def cache_counts(self) -> CacheCounts:
        return CacheCounts(0, 0)


class FakeRegistry:
    def __init__(self) -> None:
        self.alias: str | None = None
        self.broken: set[str] = set()
        self.loads = 0

    def alias_version(self, alias: str) -> str | None:
        return self.alias

    def load(self, alias_or_version: str) -> tuple[str, FakeEstimator]:
        self.loads += 1
        if alias_or_version in self.broken:
            raise OSError(f"artifact of version {alias_or_version} is unreadable")
        return alias_or_version, FakeEstimator(alias_or_version)


def test_without_a_model_the_heuristic_answers_with_the_request() -> None:
    holder = EstimatorHolder(FakeRegistry(), "champion")
    assert holder.reload() is None and holder.degraded and "alias" in (holder.last_error or "")
    answer = holder.predict([{"req_gpu": 2.0, "req_cpu_cores": 8.0}])[0]
    assert answer.model_version == HEURISTIC and answer.targets["duration"] is None
    assert answer.targets["gpu_request"] == Quantiles(point=2.0, p50=2.0, p90=2.0, unit="GPUs")
    assert answer.targets["mem_request"] is None  # not stated: unknown


def test_a_loaded_model_is_kept_out_of_the_collectors_passes_and_a_replaced_one_is_freed() -> None:
    registry, holder = FakeRegistry(), EstimatorHolder(FakeRegistry(), "champion")
    holder.registry = registry
    try:
        registry.alias = "1"
        holder.reload()
        first = holder.current.estimator if holder.current else None
        assert first is not None and gc.get_freeze_count() > 0
        assert not any(o is first for o in gc.get_objects())  # frozen: the collector no longer walks it
        first.cycle = first  # a replaced model in a reference cycle must still be collected
        gone = weakref.ref(first)
        del first
        registry.alias = "2"
        holder.reload()
        assert gone() is None and holder.version == "2"
        assert not any(o is holder.current.estimator for o in gc.get_objects())  # type: ignore[union-attr]
    finally:
        gc.unfreeze()


def test_reload_swaps_when_the_alias_moves_and_keeps_the_last_good_on_failure() -> None:
    registry = FakeRegistry()
    holder = EstimatorHolder(registry, "champion")
    registry.alias = "1"
    assert holder.reload() == "1" and not holder.degraded
    assert holder.predict([{}])[0].model_version == "1"
    assert holder.reload() == "1" and registry.loads == 1  # same version: not loaded again
    registry.alias, registry.broken = "2", {"2"}
    assert holder.reload() == "1"  # version 2 cannot be loaded: version 1 keeps answering
    assert holder.degraded and "unreadable" in (holder.last_error or "")
    assert holder.predict([{}])[0].model_version == "1"
    registry.broken = set()
    assert holder.reload() == "2" and not holder.degraded
    assert holder.predict([{}])[0].model_version == "2"


class CountingEstimator:
    """Echoes each record's ``job_id`` (as its answer's model version); counts model calls and the records
    of each; refuses records marked bad."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def predict(self, records: Sequence[JobRecord]) -> list[TaskEstimate]:
        self.calls.append(len(records))
        if any(r.get("bad") for r in records):
            raise ValueError("unknown job field(s): bad")
        return [TaskEstimate(str(r["job_id"]), {}) for r in records]

    def cache_counts(self) -> CacheCounts:
        return CacheCounts(0, 0)


async def _ask_all(holder: EstimatorHolder, keys: list[int]) -> tuple[dict[int, list[str]], dict[int, str]]:
    """Every key asks in the same pass of the event loop (key 5 with a bad record)."""
    answers: dict[int, list[str]] = {}
    errors: dict[int, str] = {}

    async def call(k: int) -> None:
        records = [{"job_id": f"{k}-{i}", "bad": k == 5} for i in range(1 + k % 3)]
        try:
            answers[k] = [a.model_version for a in await holder.predict_async(records)]
        except ValueError as exc:
            errors[k] = str(exc)

    await asyncio.gather(*(call(k) for k in keys))
    return answers, errors


def test_requests_of_one_pass_of_the_loop_share_one_model_call() -> None:
    holder, estimator = EstimatorHolder(FakeRegistry(), "champion"), CountingEstimator()
    holder.current = Loaded("7", estimator, 0.0)
    answers, errors = asyncio.run(_ask_all(holder, [k for k in range(32) if k != 5]))
    assert not errors and len(answers) == 31
    for k, echoed in answers.items():
        assert echoed == [f"{k}-{i}" for i in range(1 + k % 3)]
    assert estimator.calls == [sum(1 + k % 3 for k in range(32) if k != 5)]


def test_a_bad_request_in_a_batch_fails_alone_and_the_others_get_their_own_answers() -> None:
    holder, estimator = EstimatorHolder(FakeRegistry(), "champion"), CountingEstimator()
    holder.current = Loaded("7", estimator, 0.0)
    answers, errors = asyncio.run(_ask_all(holder, list(range(12))))
    assert set(errors) == {5} and "bad" in errors[5]
    assert sorted(answers) == [k for k in range(12) if k != 5]
    for k, echoed in answers.items():
        assert echoed == [f"{k}-{i}" for i in range(1 + k % 3)]
    assert len(estimator.calls) == 1 + 12  # the batch, then each request on its own


def test_a_request_that_has_gone_does_not_hold_up_the_batch() -> None:
    holder, estimator = EstimatorHolder(FakeRegistry(), "champion"), CountingEstimator()
    holder.current = Loaded("7", estimator, 0.0)

    async def scenario() -> list[str]:
        gone = asyncio.ensure_future(holder.predict_async([{"job_id": "gone"}]))
        staying = asyncio.ensure_future(holder.predict_async([{"job_id": "stays"}]))
        await asyncio.sleep(0)  # both have asked
        gone.cancel()
        return [a.model_version for a in await staying]

    assert asyncio.run(scenario()) == ["stays"]
