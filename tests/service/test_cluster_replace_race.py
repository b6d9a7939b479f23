"""Replacing the cluster while other processes place and release, on the real PostgreSQL: afterwards no
GPU is held twice, and every process's view of the running jobs is the database's.

Two server processes (and one server with two workers) share one database. Clients place and
release on both while ``PUT /v1/cluster`` reloads the same cluster on one of them again and again;
then that process places V100 jobs until they stop fitting. The database is then read directly and
recounted (``independent_check``)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.service.conftest import API_KEY, Server, independent_check, server_env

KEY = {"X-API-Key": API_KEY}


def job(job_id: str, gpu: float, instances: int = 1, gpu_types: list[str] | None = None) -> dict[str, Any]:
    return {"job_id": job_id, "tasks": [{"instances": instances, "gpu": gpu, "cpu_cores": 1,
                                         "gpu_types": gpu_types or []}]}


class Churn:
    """Clients placing and releasing on ``urls`` in turn, and one reloading the cluster on ``urls[0]``,
    until stopped: what was acknowledged and not released, and any answer that was not what it should be."""

    def __init__(self, urls: list[str], clients: int, reloads: int) -> None:
        self.urls, self.reloads = urls, reloads
        self.running: dict[str, dict[str, Any]] = {}
        self.failures: list[str] = []
        self._lock, self._stop = threading.Lock(), threading.Event()
        self._threads = [threading.Thread(target=self._guarded, args=(self._client, k)) for k in range(clients)]
        self._threads.append(threading.Thread(target=self._guarded, args=(self._reload, 0)))

    def run(self) -> None:
        for thread in self._threads:
            thread.start()
        self._threads[-1].join()  # the reloads set the length of the run
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _guarded(self, work: Any, k: int) -> None:
        try:
            work(k)
        except Exception as exc:  # an assertion in a thread would only warn: collect it
            self.failures.append(repr(exc))

    def _client(self, k: int) -> None:
        with httpx.Client(headers=KEY, timeout=60) as http:
            n = 0
            while not self._stop.is_set():
                url, job_id = self.urls[n % len(self.urls)], f"churn-{k}-{n}"
                answer = http.post(f"{url}/v1/place", json=job(job_id, gpu=[1, 2, 0.5, 8][n % 4]))
                assert answer.status_code == 200, answer.text
                if answer.json()["committed"]:
                    with self._lock:
                        self.running[job_id] = answer.json()["allocation"]
                if n % 2 and job_id in self.running:
                    freed = http.post(f"{self.urls[(n + 1) % len(self.urls)]}/v1/jobs/{job_id}/release")
                    assert freed.status_code == 200 and freed.json()["released"], freed.text
                    with self._lock:
                        del self.running[job_id]
                n += 1

    def _reload(self, _: int) -> None:
        with httpx.Client(headers=KEY, timeout=120) as http:
            for _ in range(self.reloads):
                answer = http.put(f"{self.urls[0]}/v1/cluster", json={"name": "pai"})
                assert answer.status_code == 200, answer.text


def fill_v100(url: str) -> dict[str, dict[str, Any]]:
    """V100 GPUs taken 16 at a time (one GPU per instance) on ``url`` until they no longer fit."""
    placed: dict[str, dict[str, Any]] = {}
    with httpx.Client(headers=KEY, timeout=60) as http:
        for n in range(200):  # 200 x 16 is far more than the cluster's V100s
            answer = http.post(f"{url}/v1/place", json=job(f"fill-{n}", gpu=1, instances=16, gpu_types=["V100"]))
            assert answer.status_code == 200, answer.text
            if not answer.json()["committed"]:
                return placed
            placed[f"fill-{n}"] = answer.json()["allocation"]
    raise AssertionError("V100 jobs never stopped fitting: the cluster is over-allocated")


def running_jobs(url: str) -> int:
    return int(httpx.get(f"{url}/v1/cluster").json()["running_jobs"])


@pytest.mark.parametrize("layout", ["two processes", "one server, two workers"])
def test_reloading_the_cluster_under_load_never_double_allocates(tmp_path: Path, postgres_url: str,
                                                                 layout: str) -> None:
    env = server_env(tmp_path, postgres_url)
    if layout == "two processes":
        servers = [Server(env).start(log=tmp_path / "a.log"), Server(env).start(log=tmp_path / "b.log")]
        urls = [s.url for s in servers]
    else:
        servers = [Server(env).start("--workers", "2", log=tmp_path / "workers.log")]
        urls = [servers[0].url, servers[0].url]
    try:
        churn = Churn(urls, clients=6, reloads=12)
        churn.run()
        assert not churn.failures, churn.failures[:3]
        filled = fill_v100(urls[0])
        expected = {**churn.running, **filled}
        if layout == "two processes":  # each process's own view; workers behind one port cannot be told apart
            assert [running_jobs(url) for url in urls] == [len(expected)] * 2
    finally:
        for server in servers:
            server.stop()
    independent_check(postgres_url, expected)
