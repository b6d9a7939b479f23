"""The queue end to end: real ``gpuplace serve`` processes on a SYNTHETIC 2-machine cluster of 8 V100
GPUs, loaded with ``PUT /v1/cluster``; no model registered (durations unknown).

On SQLite: jobs that do not fit wait and start when a release frees room (in the release's own cycle,
no poll); cancelling; quotas and priorities with preemption, ``/v1/queues`` and ``/metrics``; the events
stream. On PostgreSQL: two processes submitting, cancelling and releasing at once, then the database
read directly: no GPU over-allocated, every job in one state, none started twice, every one started."""

from __future__ import annotations

import json
import random
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from tests.service.conftest import API_KEY, Server, server_env

KEY = {"X-API-Key": API_KEY}
CLUSTER = {"name": "tiny", "force": True, "machines": [
    {"name": f"m{i}", "gpu_type": "V100", "gpus": 4, "cpu_cores": 32, "mem_gib": 256} for i in (1, 2)]}
DEFAULT = {"queues": [{"name": "default", "quota": {}}]}


def job(job_id: str, gpus: int, queue: str = "default", **extra: Any) -> dict[str, Any]:
    return {"job_id": job_id, "queue": queue, "tasks": [{"instances": gpus, "gpu": 1, "cpu_cores": 1}], **extra}


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    home = tmp_path_factory.mktemp("queue")
    server = Server(server_env(home, f"sqlite:///{home / 'state.db'}")).start()
    with httpx.Client(base_url=server.url, headers=KEY, timeout=30) as client:
        yield client
    server.stop()


@pytest.fixture
def api(http: httpx.Client) -> httpx.Client:
    """The server with its queues as at first and an empty cluster: pending jobs cancelled, running ones released."""
    assert http.put("/v1/queues", json=DEFAULT).status_code == 200
    assert http.put("/v1/cluster", json=CLUSTER).status_code == 200
    for listed in all_jobs(http, "pending"):
        http.delete(f"/v1/jobs/{listed['job_id']}")
    for listed in all_jobs(http, "running"):
        http.post(f"/v1/jobs/{listed['job_id']}/release")
    return http


def all_jobs(http: httpx.Client, state: str) -> list[dict[str, Any]]:
    out, after = [], None
    while True:
        page = http.get("/v1/jobs", params={"state": state, "limit": 50, **({"after": after} if after else {})})
        assert page.status_code == 200, page.text
        out += page.json()["jobs"]
        if (after := page.json()["next"]) is None:
            return out


def submitted(http: httpx.Client, body: dict[str, Any]) -> str:
    answer = http.post("/v1/jobs", json=body)
    assert answer.status_code == 202, answer.text
    state: str = answer.json()["state"]
    assert (answer.json()["allocation"] is not None) == (state == "running")
    return state


def state_of(http: httpx.Client, job_id: str) -> str:
    state: str = http.get(f"/v1/jobs/{job_id}").json()["state"]
    return state


def events(http: httpx.Client, job_id: str, **params: Any) -> list[dict[str, Any]]:
    with http.stream("GET", f"/v1/jobs/{job_id}/events", params=params) as stream:
        assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
        return [json.loads(line[len("data: "):]) for line in stream.iter_lines() if line.startswith("data: ")]


def test_jobs_that_do_not_fit_wait_and_start_when_a_release_frees_room(api: httpx.Client) -> None:
    assert [submitted(api, job(f"fit-{k}", 4)) for k in range(3)] == ["running", "running", "pending"]
    assert [j["job_id"] for j in all_jobs(api, "pending")] == ["fit-2"]
    assert {j["job_id"] for j in all_jobs(api, "running")} >= {"fit-0", "fit-1"}
    assert api.post("/v1/jobs/fit-0/release").json()["released"]
    assert state_of(api, "fit-2") == "running"  # started by the release's own cycle, before it answered
    assert [e["state"] for e in events(api, "fit-2")] == ["pending", "running"]
    assert [e["state"] for e in events(api, "fit-0")] == ["pending", "running", "released"]
    stored = api.get("/v1/jobs/fit-2").json()
    assert stored["queue"] == "default" and stored["mode"] == "guaranteed" and stored["allocation"] is not None
    assert api.post("/v1/jobs", json=job("fit-2", 1)).status_code == 409  # ids are never reused
    ended = [j["job_id"] for j in all_jobs(api, "ended")]
    assert "fit-0" in ended and "fit-2" not in ended


def test_only_a_pending_job_can_be_cancelled(api: httpx.Client) -> None:
    assert submitted(api, job("cx-big", 8)) == "running"
    assert submitted(api, job("cx-wait", 2)) == "pending"
    assert api.post("/v1/jobs", json=job("cx-x", 1, queue="nowhere")).status_code == 422
    unknown = api.post("/v1/jobs", json=job("cx-p", 1, policy="nowhere"))
    assert unknown.status_code == 422 and "unknown placement policy 'nowhere'" in unknown.text
    assert submitted(api, job("cx-own", 1, policy="balance")) == "pending"  # waits behind cx-wait: fifo
    own = api.get("/v1/jobs/cx-own").json()
    assert own["requested_policy"] == "balance" and own["policy"] == ""
    assert api.delete("/v1/jobs/cx-wait", headers={"X-API-Key": ""}).status_code == 401
    cancelled = api.delete("/v1/jobs/cx-wait")
    assert cancelled.status_code == 200 and cancelled.json() == {"job_id": "cx-wait", "state": "cancelled"}
    assert api.delete("/v1/jobs/cx-wait").status_code == 409
    assert api.delete("/v1/jobs/cx-big").status_code == 409  # running: release it instead
    assert api.delete("/v1/jobs/cx-nobody").status_code == 404
    api.post("/v1/jobs/cx-big/release")
    assert state_of(api, "cx-wait") == "cancelled"
    assert [e["state"] for e in events(api, "cx-wait")] == ["pending", "cancelled"]


@pytest.mark.parametrize(("quota", "field"), [
    ({"gpus": 100}, "queues[a].quota.gpus"),
    ({"gpus_by_type": {"H100": 1}}, "queues[a].quota.gpus_by_type.H100"),
])
def test_bad_queues_are_a_422_naming_the_field(api: httpx.Client, quota: dict[str, Any], field: str) -> None:
    answer = api.put("/v1/queues", json={"queues": [{"name": "a", "quota": quota}]})
    assert answer.status_code == 422 and field in answer.json()["detail"], answer.text
    cycle = {"cohorts": [{"name": "x", "parent": "y"}, {"name": "y", "parent": "x"}],
             "queues": [{"name": "a", "cohort": "x", "quota": {"gpus": 1}}]}
    assert "cycle" in api.put("/v1/queues", json=cycle).json()["detail"]
    assert api.get("/v1/queues").json()["queues"][0]["name"] == "default"  # nothing stored


def test_quotas_are_kept_and_a_higher_priority_preempts(api: httpx.Client) -> None:
    queues = {"queues": [{"name": "a", "order": "priority", "quota": {"gpus": 4}},
                         {"name": "b", "quota": {"gpus": 4}}]}
    assert api.put("/v1/queues", json=queues).status_code == 200
    assert submitted(api, job("qa-1", 4, "a")) == "running"
    assert submitted(api, job("qa-2", 4, "a")) == "pending"  # 4 GPUs idle, but over a's quota
    assert submitted(api, job("qb-1", 4, "b")) == "running"
    assert submitted(api, job("qa-urgent", 4, "a", priority=10)) == "running"  # in qa-1's place
    assert state_of(api, "qa-1") == "pending"
    preempted = events(api, "qa-1")
    assert [e["state"] for e in preempted] == ["pending", "running", "pending"]
    assert "higher-priority" in preempted[-1]["reason"] and "qa-urgent" in preempted[-1]["reason"]
    shown = {q["name"]: q for q in api.get("/v1/queues").json()["queues"]}
    assert shown["a"]["usage"]["gpus"] == 4 and shown["a"]["pending"] == 2 and shown["a"]["quota"] == {"gpus": 4}
    assert shown["b"]["usage"]["gpus"] == 4 and shown["b"]["pending"] == 0
    # a's quota is taken by qa-urgent, whose end no estimate knows (no model registered here)
    assert (shown["a"]["next_wait_reason"], shown["a"]["next_start_in_s"]) == ("over-quota", None)
    assert (shown["b"]["next_wait_reason"], shown["b"]["next_start_in_s"]) == (None, None)  # nothing waits
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(httpx.get(f"{api.base_url}/metrics").text)
               for s in family.samples}
    assert samples[("gpuplace_pending_jobs", (("queue", "a"),))] == 2
    assert samples[("gpuplace_preemptions_total", (("queue", "a"), ("reason", "higher-priority")))] >= 1
    api.post("/v1/jobs/qa-urgent/release")
    assert state_of(api, "qa-1") == "running"  # back first: it was submitted before qa-2


def test_the_events_stream_follows_a_job_until_it_ends(api: httpx.Client) -> None:
    assert submitted(api, job("ev-big", 8)) == "running"
    assert submitted(api, job("ev-wait", 1)) == "pending"
    seen: list[dict[str, Any]] = []
    follower = threading.Thread(target=lambda: seen.extend(events(api, "ev-wait", follow=True)))
    follower.start()
    time.sleep(0.3)
    api.post("/v1/jobs/ev-big/release")
    time.sleep(0.3)
    api.post("/v1/jobs/ev-wait/release")
    follower.join(timeout=20)
    assert not follower.is_alive()
    assert [e["state"] for e in seen] == ["pending", "running", "released"]
    assert [e["state"] for e in events(api, "ev-wait")[1:]] == ["running", "released"]


def test_a_job_out_of_patience_starts_opportunistically_and_waits_again_as_submitted(tmp_path: Path) -> None:
    """With ``GPUPLACE_OPPORTUNISTIC_AFTER_S``, a guaranteed job waiting over its queue's quota starts on idle GPUs
    once it has waited that long, woken by the time alone (no request comes in between); preempted for a job
    within its queue's guarantee, it waits again as guaranteed, the mode it was submitted in."""
    server = Server(server_env(tmp_path, f"sqlite:///{tmp_path / 'state.db'}",
                               GPUPLACE_OPPORTUNISTIC_AFTER_S="2")).start()
    try:
        with httpx.Client(base_url=server.url, headers=KEY, timeout=30) as api:
            assert api.put("/v1/cluster", json=CLUSTER).status_code == 200
            queues = {"queues": [{"name": "a", "quota": {"gpus": 4}}, {"name": "b", "quota": {"gpus": 4}}]}
            assert api.put("/v1/queues", json=queues).status_code == 200
            assert submitted(api, job("pa-1", 4, "a")) == "running"
            assert submitted(api, job("pa-2", 2, "a")) == "pending"  # 4 GPUs idle, but over a's quota
            deadline = time.monotonic() + 120  # a loaded machine delays the timer's pass, not its outcome
            while state_of(api, "pa-2") != "running" and time.monotonic() < deadline:
                time.sleep(0.2)
            late = api.get("/v1/jobs/pa-2").json()
            assert late["state"] == "running" and late["mode"] == "opportunistic", late
            assert [e["reason"] for e in events(api, "pa-2")][-1] == "started (opportunistic)"
            assert submitted(api, job("pb-1", 4, "b")) == "running"  # within b's guarantee: in pa-2's place
            back = api.get("/v1/jobs/pa-2").json()
            assert back["state"] == "pending" and back["mode"] == "guaranteed", back
            assert "preempted (opportunistic) for 'pb-1'" in events(api, "pa-2")[-1]["reason"]
    finally:
        server.stop()


class Crowd:
    """Clients submitting to two processes in turn, cancelling some on the other, releasing older ones."""

    def __init__(self, urls: list[str], clients: int, seconds: float) -> None:
        self.urls, self.seconds = urls, seconds
        self.acked: dict[str, str] = {}
        self.cancelled: set[str] = set()
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._guarded, args=(k,)) for k in range(clients)]

    def run(self) -> None:
        for thread in self._threads:
            thread.start()
        for thread in self._threads:
            thread.join()

    def _guarded(self, k: int) -> None:
        try:
            self._client(k)
        except Exception as exc:  # an assertion in a thread would only warn: collect it
            self.failures.append(repr(exc))

    def _client(self, k: int) -> None:
        rng, mine, stop = random.Random(k), list[str](), time.monotonic() + self.seconds
        with httpx.Client(headers=KEY, timeout=60) as http:
            n = 0
            while time.monotonic() < stop:
                url, other = self.urls[n % 2], self.urls[(n + 1) % 2]
                job_id = f"crowd-{k}-{n}"
                body = job(job_id, rng.choice([1, 2, 4]))
                if (policy := rng.choice([None, "first-fit", "balance", "pack"])) is not None:
                    body["policy"] = policy  # a job's own policy, when it starts whichever process starts it
                answer = http.post(f"{url}/v1/jobs", json=body)
                assert answer.status_code == 202, answer.text
                with self._lock:
                    self.acked[job_id] = answer.json()["state"]
                mine.append(job_id)
                if answer.json()["state"] == "pending" and rng.random() < 0.5:
                    cancel = http.delete(f"{other}/v1/jobs/{job_id}")
                    assert cancel.status_code in (200, 409), cancel.text
                    if cancel.status_code == 200:
                        with self._lock:
                            self.cancelled.add(job_id)
                while len(mine) > 2:
                    freed = http.post(f"{other}/v1/jobs/{mine.pop(rng.randrange(len(mine) - 1))}/release")
                    assert freed.status_code == 200, freed.text
                n += 1


def test_two_processes_on_postgresql_never_double_start_or_over_allocate(tmp_path: Path, postgres_url: str) -> None:
    servers = [Server(server_env(tmp_path / f"home{i}", postgres_url)) for i in range(2)]
    starting = [threading.Thread(target=s.start) for s in servers]  # together: start-up takes a while
    for thread in starting:
        thread.start()
    for thread in starting:
        thread.join()
    try:
        assert httpx.put(f"{servers[0].url}/v1/cluster", json=CLUSTER, headers=KEY).status_code == 200
        crowd = Crowd([s.url for s in servers], clients=6, seconds=4.0)
        crowd.run()
        assert not crowd.failures, crowd.failures[:3]
        assert len(crowd.acked) > 30 and "pending" in crowd.acked.values()
        recount(postgres_url)
        drained = drain([s.url for s in servers])
    finally:
        for server in servers:
            server.stop()
    check_history(postgres_url, crowd.acked, crowd.cancelled)
    check_policies(postgres_url)
    assert drained


def check_policies(url: str) -> None:
    """Every started job that asked for a policy was placed by it, and some did."""
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT job_id, requested_policy, policy FROM jobs "
                                    "WHERE requested_policy IS NOT NULL AND policy != ''")).all()
    engine.dispose()
    assert rows and all(asked == placed_by for _, asked, placed_by in rows), [r for r in rows if r[1] != r[2]][:3]


def drain(urls: list[str], timeout_s: float = 60.0) -> bool:
    """Release whatever runs until nothing waits: every job that could run must start."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(headers=KEY, timeout=60) as http:
        while time.monotonic() < deadline:
            pending = all_jobs(http_at(http, urls[0]), "pending")
            running = all_jobs(http_at(http, urls[1]), "running")
            if not pending and not running:
                return True
            for k, listed in enumerate(running):
                http.post(f"{urls[k % 2]}/v1/jobs/{listed['job_id']}/release")
    return False


def http_at(http: httpx.Client, url: str) -> httpx.Client:
    http.base_url = httpx.URL(url)
    return http


def recount(url: str) -> None:
    """No GPU, CPU or memory over capacity among the running allocations, and the pending count kept
    beside the generation equal to the pending rows."""
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        spec = json.loads(conn.execute(sa.text("SELECT cluster FROM cluster_spec")).scalar_one())
        rows = conn.execute(sa.text("SELECT allocation FROM jobs WHERE state = 'running'")).scalars().all()
        pending = conn.execute(sa.text("SELECT count(*) FROM jobs WHERE state = 'pending'")).scalar_one()
        counted = conn.execute(sa.text("SELECT pending FROM cluster_state")).scalar_one()
    engine.dispose()
    machines = {m["name"]: m for m in spec["machines"]}
    gpu: dict[tuple[str, int], int] = defaultdict(int)
    cpu: dict[str, int] = defaultdict(int)
    for allocation in map(json.loads, rows):
        for p in allocation["instances"]:
            cpu[p["machine"]] += p["cpu_milli"]
            for g in p["gpus"]:
                assert 0 <= g < machines[p["machine"]]["gpus"]
                gpu[(p["machine"], g)] += p["gpu_milli"]
    assert all(v <= 1000 for v in gpu.values()) and all(v <= machines[m]["cpu_cores"] * 1000 for m, v in cpu.items())
    assert pending == counted


def check_history(url: str, acked: dict[str, str], cancelled: set[str]) -> None:
    """Every acknowledged job once in the table, ended or cancelled; its events one path through the
    states: pending, then running at most once, then its end (none preempts here: one queue, one priority)."""
    states, history = histories(url)
    assert set(states) == set(acked)
    for job_id, first in acked.items():
        final = "cancelled" if job_id in cancelled else "released"
        assert states[job_id] == final, (job_id, states[job_id])
        path = ["pending", final] if final == "cancelled" else ["pending", "running", "released"]
        assert history[job_id] == path, (job_id, history[job_id])
        assert first == "pending" or job_id not in cancelled


def histories(url: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Each job's state as stored, and the states of its events in order, read from the database directly."""
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        states = dict(conn.execute(sa.text("SELECT job_id, state FROM jobs")).all())
        history: dict[str, list[str]] = defaultdict(list)
        for job_id, state in conn.execute(sa.text("SELECT job_id, state FROM job_events ORDER BY id")).all():
            history[job_id].append(state)
    engine.dispose()
    return states, history
