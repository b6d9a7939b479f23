"""The quick start's replay against a real server on a tiny synthetic cluster (two GPUs), with the
arithmetic worked out: who is placed at once, who waits for a completion, who can never fit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.cli.quickstart import API_KEY_ENV, Arrival, replay
from tests.service.conftest import API_KEY, Server, server_env

TINY = {"name": "tiny-synthetic", "machines": [{"name": "m1", "gpu_type": "V100", "gpus": 2, "cpu_cores": 32,
                                                "mem_gib": 128}]}


def body(job_id: str, gpus: int = 1, instances: int = 1) -> dict[str, object]:
    return {"job_id": job_id, "user": "u1", "tasks": [{"instances": instances, "gpu": gpus, "cpu_cores": 2}]}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    running = Server(server_env(tmp_path, f"sqlite:///{tmp_path / 'state.db'}")).start()
    put = httpx.put(f"{running.url}/v1/cluster", json=TINY, headers={"X-API-Key": API_KEY})
    assert put.status_code == 200, put.text
    yield running
    running.stop()


def test_replay_places_waits_for_completions_and_reports(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, API_KEY)
    arrivals = [Arrival(0.0, 10.0, body("a")), Arrival(1.0, 10.0, body("b")),
                Arrival(2.0, 5.0, body("c")),  # both GPUs busy until a ends at 10: waits 8 s
                Arrival(3.0, 1.0, body("d", instances=3)),  # three GPUs on a two-GPU cluster
                Arrival(4.0, 1.0, {**body("e"), "tasks": [{"gpu": -1}]})]  # bad input: refused
    summary = replay(server.url, arrivals)
    assert (summary.placed_at_once, summary.placed_after_wait, summary.never_fit) == (2, 1, 1)
    assert sorted(summary.waits_s) == [0.0, 0.0, 8.0] and summary.waiting_at_end == 0
    assert summary.completed == 3 and len(summary.refused) == 1 and "e:" in summary.refused[0]
    assert summary.requested["gpu"] == 6.0 and summary.model_versions == {"heuristic"}
    done = httpx.get(f"{server.url}/v1/jobs/c").json()
    assert done["state"] == "completed" and done["completion"]["duration_s"] == 5.0
    assert httpx.get(f"{server.url}/v1/cluster").json()["gpus_allocated"] == 0.0
