"""kill -9 while every scheduling cycle preempts, then a restart on the same SQLite database: no
acknowledged job lost, none running twice, no GPU over-allocated, and every job still able to run.

A real ``gpuplace serve`` on a SYNTHETIC 2-machine cluster of 8 V100 GPUs. Eight low-priority jobs fill
it; then clients submit jobs of ever higher priority, each of which starts in the place of the lowest
running one, so every cycle of the flood writes a preemption beside a start. The server is killed while
they flow (the moment varies from run to run; it cannot be pinned to a point inside a transaction from
outside the process). The database is then read directly, and again after the restarted server has run
every job to its end."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import httpx

from tests.service.conftest import API_KEY, Server, server_env
from tests.service.test_queue_e2e import CLUSTER, drain, histories, job, recount

KEY = {"X-API-Key": API_KEY}
QUEUES = {"queues": [{"name": "default", "order": "priority", "quota": {}}]}
NEXT = {"pending": {"running", "cancelled"}, "running": {"pending", "released", "completed", "evicted"}}
"""Which states may follow each in a job's events: a preempted job goes back to pending, and a job is
never started again while it runs."""


class Flood:
    """Clients submitting 1-GPU jobs of ever higher priority until the server stops answering."""

    def __init__(self, url: str, clients: int) -> None:
        self.url = url
        self.acked: dict[str, str] = {}
        self.unanswered: set[str] = set()
        self.failures: list[str] = []
        self._priority = itertools.count(1)
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._client, args=(k,)) for k in range(clients)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def join(self) -> None:
        for thread in self._threads:
            thread.join(timeout=120)

    def _client(self, k: int) -> None:
        with httpx.Client(headers=KEY, timeout=60) as http:
            for n in itertools.count():
                job_id = f"urgent-{k}-{n}"
                with self._lock:
                    priority = next(self._priority)
                try:
                    answer = http.post(f"{self.url}/v1/jobs", json=job(job_id, 1, priority=priority))
                except httpx.TransportError:  # killed: this one may or may not have been stored
                    with self._lock:
                        self.unanswered.add(job_id)
                    return
                if answer.status_code != 202:
                    self.failures.append(answer.text)
                    return
                with self._lock:
                    self.acked[job_id] = answer.json()["state"]


def preemptions(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=60).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("gpuplace_preemptions_total{"))


def check_paths(states: dict[str, str], history: dict[str, list[str]]) -> None:
    """Each job's events one path through the states, ending in the state its row holds."""
    for job_id, state in states.items():
        path = history[job_id]
        assert path and path[0] == "pending" and path[-1] == state, (job_id, path, state)
        for before, after in itertools.pairwise(path):
            assert after in NEXT.get(before, set()), (job_id, path)


def test_kill_9_while_cycles_preempt_loses_no_job_and_starts_none_twice(tmp_path: Path) -> None:
    database_url = f"sqlite:///{tmp_path / 'state.db'}"
    env = server_env(tmp_path, database_url)
    first = Server(env).start()
    try:
        with httpx.Client(base_url=first.url, headers=KEY, timeout=60) as http:
            assert http.put("/v1/queues", json=QUEUES).status_code == 200
            assert http.put("/v1/cluster", json=CLUSTER).status_code == 200
            for n in range(8):
                assert http.post("/v1/jobs", json=job(f"low-{n}", 1, priority=0)).json()["state"] == "running"
        flood = Flood(first.url, clients=4)
        flood.start()
        deadline = time.monotonic() + 300  # a loaded machine: preemptions come slowly, never a fixed wait
        while preemptions(first.url) < 12 and time.monotonic() < deadline and not flood.failures:
            time.sleep(0.05)
        assert not flood.failures, flood.failures[:3]
        assert preemptions(first.url) >= 12
    finally:
        first.kill()
    flood.join()
    assert not flood.failures, flood.failures[:3]

    states, history = histories(database_url)
    acknowledged = {f"low-{n}" for n in range(8)} | set(flood.acked)
    assert acknowledged <= set(states), sorted(acknowledged - set(states))[:5]  # nothing acknowledged lost
    assert set(states) <= acknowledged | flood.unanswered  # nothing stored that nobody submitted
    assert sum(path.count("pending") > 1 for path in history.values()) >= 8  # low jobs went back to pending
    check_paths(states, history)
    recount(database_url)

    second = Server(env).start()
    try:
        assert drain([second.url, second.url], timeout_s=300)
    finally:
        second.stop()
    states, history = histories(database_url)
    check_paths(states, history)
    assert set(states.values()) == {"released"}, {s for s in states.values()}  # every job ran and ended
