"""The service's model holder: atomic swap on reload, last good model kept on failure, heuristic without any."""

from __future__ import annotations

import asyncio
import gc
import math
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

from models.estimate import CacheCounts, JobRecord, Quantiles, TaskEstimate
from service.estimator import HEURISTIC, PROBE, EstimatorHolder, Loaded
from service.http.app import create_app
from service.http.schemas import JobIn
from service.runtime import Runtime
from service.settings import Settings
from service.store.memory import MemoryStore
from tests.service.test_store import CLUSTER


class FakeEstimator:
    """Stands in for a registered version: answers with its own version (``fault``: raises, or answers NaN);
    every record it is asked counts as a cache miss."""

    def __init__(self, version: str, fault: str | None = None) -> None:
        self.version, self.fault = version, fault
        self.asked = 0

    def predict(self, records: Sequence[JobRecord]) -> list[TaskEstimate]:
        self.asked += len(records)
        if self.fault == "raise":
            raise IndexError("index 1000000 is out of bounds for axis 1 with size 40")
        p90 = math.nan if self.fault == "nan" else 120.0
        return [TaskEstimate(self.version, {"duration": Quantiles(60.0, 60.0, p90, "s")}) for _ in records]

    def cache_counts(self) -> CacheCounts:
        return CacheCounts(0, self.asked)


class FakeRegistry:
    """Versions by number; ``broken``: cannot be loaded; ``faults``: load, then fail as asked; ``down``: the
    registry does not answer; ``silent``: it does not answer until set."""

    def __init__(self) -> None:
        self.alias: str | None = None
        self.broken: set[str] = set()
        self.faults: dict[str, str] = {}
        self.down = False
        self.silent: threading.Event | None = None
        self.loads = 0

    def alias_version(self, alias: str) -> str | None:
        if self.silent is not None:
            self.silent.wait()
        if self.down:
            raise ConnectionError("model registry at http://127.0.0.1:1 unreachable: Connection refused")
        return self.alias

    def load(self, alias_or_version: str) -> tuple[str, FakeEstimator]:
        self.loads += 1
        if alias_or_version in self.broken:
            raise OSError(f"artifact of version {alias_or_version} is unreadable")
        return alias_or_version, FakeEstimator(alias_or_version, self.faults.get(alias_or_version))


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


def test_a_version_that_fails_its_probe_is_refused_and_the_last_good_keeps_answering() -> None:
    registry = FakeRegistry()
    holder = EstimatorHolder(registry, "champion")
    registry.alias, registry.faults = "1", {"2": "raise", "3": "nan"}
    assert holder.reload() == "1" and not holder.degraded
    for version, why in (("2", "raised IndexError: index 1000000"), ("3", "not a finite non-negative number")):
        registry.alias = version
        assert holder.reload() == "1" and holder.degraded and holder.refused == version
        assert f"version {version} of 'champion' refused: predicting the probe jobs" in (holder.last_error or "")
        assert why in (holder.last_error or "") and (holder.last_error or "").endswith("version 1 answers")
        assert holder.predict([{}])[0].model_version == "1"
    registry.alias = "1"  # moved back: nothing to load, nothing wrong
    assert holder.reload() == "1" and not holder.degraded and holder.refused is None


def test_a_refused_version_is_kept_with_its_reason_and_time_until_a_version_answers_again() -> None:
    registry = FakeRegistry()
    holder = EstimatorHolder(registry, "champion")
    registry.alias, registry.faults = "1", {"2": "raise"}
    assert holder.reload() == "1" and holder.refusal is None
    registry.alias = "2"
    before = time.time()
    holder.reload()
    refusal = holder.refusal
    assert refusal is not None and refusal.version == "2" and before <= refusal.at <= time.time()
    assert refusal.reason == "raised IndexError: index 1000000 is out of bounds for axis 1 with size 40"
    assert f"refused: predicting the probe jobs {refusal.reason}" in (holder.last_error or "")
    registry.alias, registry.broken = "3", {"3"}  # a version that cannot be loaded is no refusal by the probe
    holder.reload()
    assert holder.refusal == refusal and "unreadable" in (holder.last_error or "")
    registry.alias = "1"
    holder.reload()
    assert holder.refusal is None and not holder.degraded


def test_models_answers_the_refused_version_as_a_field_of_its_own(tmp_path: Path) -> None:
    """``/v1/models`` (and the reload's answer) say which version was refused, why and when, besides
    ``last_error``'s sentence; nothing while none is."""
    registry = FakeRegistry()
    registry.alias, registry.faults = "1", {"2": "nan"}
    rt = Runtime(Settings(home=tmp_path, model_poll_s=0, api_keys=""), MemoryStore(CLUSTER),
                 EstimatorHolder(registry, "champion"))
    app = create_app(rt=rt)

    async def scenario() -> None:
        async with app.router.lifespan_context(app), httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://gpuplace") as client:
            assert (await client.get("/v1/models")).json()["refused"] is None
            registry.alias = "2"
            before = time.time()
            reloaded = (await client.post("/v1/models/reload")).json()
            refused = reloaded["refused"]
            assert reloaded["answering"] == "1" and reloaded["degraded"]
            assert set(refused) == {"version", "reason", "at"} and refused["version"] == "2"
            assert refused["reason"].startswith("gave task 0 of probe-whole-gpu a duration that is not a finite")
            assert before <= refused["at"] <= time.time()
            assert refused["reason"] in reloaded["last_error"]
            assert (await client.get("/v1/models")).json() == reloaded
            registry.alias = "1"
            back = (await client.post("/v1/models/reload")).json()
            assert back["refused"] is None and not back["degraded"]

    try:
        asyncio.run(scenario())
    finally:
        gc.unfreeze()  # the app settles the heap when it starts


def test_the_probe_jobs_have_exactly_the_fields_the_http_layer_hands_the_estimator() -> None:
    """``PROBE`` stands for what serving asks: a field ``JobIn.records`` adds, renames or drops must be
    followed there, or a version could pass the probe and fail every request."""
    fields = [set(record) for record in JobIn(job_id="j", tasks=[{}, {"role": "ps"}]).records()]
    assert fields[0] == fields[1]
    for record in PROBE:
        assert set(record) == fields[0], (record["job_id"], set(record) ^ fields[0])


def test_without_a_good_version_the_heuristic_answers_and_the_poller_does_not_load_a_refused_one_again() -> None:
    registry = FakeRegistry()
    holder = EstimatorHolder(registry, "champion")
    registry.alias, registry.faults = "2", {"2": "raise"}
    assert holder.reload() is None and holder.version == HEURISTIC and holder.refused == "2"
    refusal = holder.last_error
    assert refusal is not None and refusal.endswith("the heuristic answers")
    holder.start(every_s=0.01)
    try:
        time.sleep(0.3)
        assert registry.loads == 1 and holder.last_error == refusal  # the same artifact would answer the same
        assert holder.reload() is None and registry.loads == 2  # asked for: tried again
        registry.alias = "4"
        deadline = time.monotonic() + 10
        while holder.version != "4" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert holder.version == "4" and not holder.degraded
    finally:
        holder.stop()


def test_the_probe_is_not_counted_as_the_services_cache_rows() -> None:
    registry = FakeRegistry()
    holder = EstimatorHolder(registry, "champion")
    registry.alias = "1"
    holder.reload()
    assert holder.current is not None and holder.current.estimator.cache_counts().misses == len(PROBE)
    assert holder.cache_counts() == ("1", CacheCounts(0, 0))
    holder.predict([{}, {}])
    assert holder.cache_counts() == ("1", CacheCounts(0, 2))


def test_a_registry_that_is_down_is_named_and_retried_until_the_model_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("service.estimator.RETRY_FIRST_S", 0.01)
    registry = FakeRegistry()
    registry.alias, registry.down = "1", True
    holder = EstimatorHolder(registry, "champion")
    assert holder.reload() is None and holder.degraded
    assert (holder.last_error or "").startswith("model registry at http://127.0.0.1:1 unreachable")
    holder.start(every_s=0)  # polling off: still retried, as no model answers yet
    try:
        time.sleep(0.1)
        registry.down = False
        deadline = time.monotonic() + 10
        while holder.version != "1" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert holder.version == "1" and not holder.degraded
    finally:
        holder.stop()


def test_a_silent_registry_holds_a_reload_up_for_lookup_wait_s_and_the_load_finishes_in_the_background() -> None:
    registry = FakeRegistry()
    registry.alias, registry.silent = "1", threading.Event()
    holder = EstimatorHolder(registry, "champion", wait_s=5.0, lookup_wait_s=0.2)
    try:
        started = time.monotonic()
        assert holder.reload() is None
        assert 0.2 <= time.monotonic() - started < 2.0
        assert holder.degraded and "looking up the alias 'champion'" in (holder.last_error or "")
        assert "still waiting" in (holder.last_error or "")
        registry.silent.set()
        deadline = time.monotonic() + 10
        while holder.version != "1" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert holder.version == "1" and not holder.degraded
    finally:
        registry.silent.set()
        holder.stop()


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
