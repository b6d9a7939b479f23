"""The service's model holder: atomic swap on reload, last good model kept on failure, heuristic without any."""

from __future__ import annotations

import threading
import time
from typing import Any

from service.estimator import HEURISTIC, EstimatorHolder, Loaded


class FakeBundle:
    """Stands in for a registered bundle: answers with its own version."""

    def __init__(self, version: str) -> None:
        self.version = version

    def predict_records(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"model_version": self.version, "duration": {"point": 60.0, "p50": 60.0, "p90": 120.0}}
                for _ in records]


class FakeRegistry:
    def __init__(self) -> None:
        self.alias: str | None = None
        self.broken: set[str] = set()
        self.loads = 0

    def alias_version(self, alias: str) -> str | None:
        return self.alias

    def load(self, alias_or_version: str) -> tuple[str, Any]:
        self.loads += 1
        if alias_or_version in self.broken:
            raise OSError(f"artifact of version {alias_or_version} is unreadable")
        return alias_or_version, FakeBundle(alias_or_version)


def test_without_a_model_the_heuristic_answers_with_the_request() -> None:
    holder = EstimatorHolder(FakeRegistry(), "champion")
    assert holder.reload() is None and holder.degraded and "alias" in (holder.last_error or "")
    answer = holder.predict([{"req_gpu": 2.0, "req_cpu_cores": 8.0}])[0]
    assert answer["model_version"] == HEURISTIC and answer["duration"] is None
    assert answer["gpu_request"] == {"point": 2.0, "p50": 2.0, "p90": 2.0}
    assert answer["mem_request"] is None  # not stated: unknown


def test_reload_swaps_when_the_alias_moves_and_keeps_the_last_good_on_failure() -> None:
    registry = FakeRegistry()
    holder = EstimatorHolder(registry, "champion")
    registry.alias = "1"
    assert holder.reload() == "1" and not holder.degraded
    assert holder.predict([{}])[0]["model_version"] == "1"
    assert holder.reload() == "1" and registry.loads == 1  # same version: not loaded again
    registry.alias, registry.broken = "2", {"2"}
    assert holder.reload() == "1"  # version 2 cannot be loaded: version 1 keeps answering
    assert holder.degraded and "unreadable" in (holder.last_error or "")
    assert holder.predict([{}])[0]["model_version"] == "1"
    registry.broken = set()
    assert holder.reload() == "2" and not holder.degraded
    assert holder.predict([{}])[0]["model_version"] == "2"


class CountingBundle:
    """Echoes each record's ``job_id``; counts model calls; refuses records marked bad; a little slow."""

    def __init__(self) -> None:
        self.calls = 0
        self.gate = threading.Event()  # the first call waits here while the other requests queue up

    def predict_records(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.calls += 1
        self.gate.wait(timeout=30)
        if any(r.get("bad") for r in records):
            raise ValueError("unknown job field(s): bad")
        time.sleep(0.005)
        return [{"model_version": "7", "echo": r["job_id"]} for r in records]


def _ask_all(holder: EstimatorHolder, bundle: CountingBundle, keys: list[int]) -> tuple[dict[int, list[str]],
                                                                                       dict[int, str]]:
    """Every key asks at once from its own thread (key 5 with a bad record); the model's first call
    waits until all have asked, so the rest queue up behind it."""
    answers: dict[int, list[str]] = {}
    errors: dict[int, str] = {}
    entered: list[int] = []

    def call(k: int) -> None:
        records = [{"job_id": f"{k}-{i}", "bad": k == 5} for i in range(1 + k % 3)]
        entered.append(k)
        try:
            answers[k] = [a["echo"] for a in holder.predict(records)]
        except ValueError as exc:
            errors[k] = str(exc)

    threads = [threading.Thread(target=call, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while len(entered) < len(threads) and time.monotonic() < deadline:  # however loaded the machine is
        time.sleep(0.01)
    time.sleep(0.2)
    bundle.gate.set()
    for t in threads:
        t.join()
    return answers, errors


def test_concurrent_predictions_are_batched() -> None:
    holder, bundle = EstimatorHolder(FakeRegistry(), "champion"), CountingBundle()
    holder.current = Loaded("7", bundle, 0.0)
    answers, errors = _ask_all(holder, bundle, [k for k in range(32) if k != 5])
    assert not errors and len(answers) == 31
    for k, echoed in answers.items():
        assert echoed == [f"{k}-{i}" for i in range(1 + k % 3)]
    assert bundle.calls <= 3  # the first request alone, then the 30 queued behind it together


def test_a_bad_request_in_a_batch_fails_alone_and_the_others_get_their_own_answers() -> None:
    holder, bundle = EstimatorHolder(FakeRegistry(), "champion"), CountingBundle()
    holder.current = Loaded("7", bundle, 0.0)
    answers, errors = _ask_all(holder, bundle, list(range(12)))
    assert set(errors) == {5} and "bad" in errors[5]
    assert sorted(answers) == [k for k in range(12) if k != 5]
    for k, echoed in answers.items():
        assert echoed == [f"{k}-{i}" for i in range(1 + k % 3)]
