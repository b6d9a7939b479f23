"""The REST service end to end: a real uvicorn process on 127.0.0.1 over the real PAI cluster, with a
SQLite state database; no model registered, so the documented heuristic answers."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.http.schemas import MachineIn
from tests.service.conftest import API_KEY, Server, independent_check, server_env

KEY = {"X-API-Key": API_KEY}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("home")
    running = Server(server_env(home, f"sqlite:///{home / 'state.db'}")).start()
    yield running
    running.stop()


def job(job_id: str, gpu: float = 1.0, instances: int = 1, **extra: Any) -> dict[str, Any]:
    return {"job_id": job_id, "user": "u1", "group": "g1",
            "tasks": [{"role": "worker", "instances": instances, "gpu": gpu, "cpu_cores": 4}], **extra}


def test_health_ready_and_openapi(server: Server) -> None:
    assert httpx.get(f"{server.url}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{server.url}/readyz").json()
    assert ready["status"] == "degraded" and ready["model_version"] == "heuristic" and ready["auth"] == "on"
    paths = httpx.get(f"{server.url}/openapi.json").json()["paths"]
    for path in ("/v1/predict", "/v1/place", "/v1/jobs/{job_id}", "/v1/jobs/{job_id}/release",
                 "/v1/jobs/{job_id}/complete", "/v1/cluster", "/v1/models", "/v1/models/reload", "/metrics",
                 "/v1/jobs", "/v1/jobs/{job_id}/events", "/v1/queues"):
        assert path in paths, path


def test_openapi_describes_every_answer(server: Server) -> None:
    spec = httpx.get(f"{server.url}/openapi.json").json()
    schemas = spec["components"]["schemas"]

    def resolved(schema: dict[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = schemas[schema["$ref"].rsplit("/", 1)[-1]] if "$ref" in schema else schema
        return found

    described = []
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            content = (operation["responses"].get("200") or operation["responses"]["202"])["content"]
            if path == "/metrics":  # Prometheus's text format
                assert content == {"text/plain": {"schema": {"type": "string"}}}
                continue
            if path == "/v1/jobs/{job_id}/events":  # server-sent events
                assert set(content["text/event-stream"]["schema"]["properties"]) == {"id", "event", "data"}
                continue
            answer = resolved(content["application/json"]["schema"])
            if answer.get("type") == "array":  # prioritize: a list of host scores
                answer = resolved(answer["items"])
            assert answer.get("properties"), f"{method.upper()} {path} answers an undescribed object: {answer}"
            described.append(f"{method.upper()} {path}")
    assert len(described) >= 15, described
    task = resolved(resolved(schemas["EstimateOut"]["properties"]["tasks"]["items"]))
    assert {"sources", "needs"} <= set(task["properties"])
    assert resolved(task["additionalProperties"]["anyOf"][0])["required"] == ["point", "p50", "p90"]
    assert "503" in spec["paths"]["/readyz"]["get"]["responses"]


def test_errors_are_problem_details(server: Server) -> None:
    """Every error answer is RFC 9457 problem details, and the OpenAPI document says so."""
    answers = {
        401: httpx.post(f"{server.url}/v1/place", json=job("problem-1")),
        404: httpx.get(f"{server.url}/v1/jobs/no-such-job", headers=KEY),
        413: httpx.post(f"{server.url}/v1/place", content=b"[" * (2 << 20),
                        headers={**KEY, "Content-Type": "application/json"}),
        422: httpx.post(f"{server.url}/v1/place", json=job("problem-2", -1.0), headers=KEY),
    }
    for status, answer in answers.items():
        assert answer.status_code == status, answer.text
        assert answer.headers["content-type"] == "application/problem+json", (status, answer.headers)
        body = answer.json()
        assert body["type"] == "about:blank" and body["status"] == status, body
        assert body["title"] == httpx.codes.get_reason_phrase(status) and body["detail"], body
    refused = answers[422].json()
    assert refused["errors"][0]["loc"] == ["body", "tasks", 0, "gpu"], refused
    assert refused["detail"].startswith("tasks.0.gpu: "), refused
    spec = httpx.get(f"{server.url}/openapi.json").json()
    problem_types = Counter()
    for operations in spec["paths"].values():
        for operation in operations.values():
            for status, answer in operation["responses"].items():
                for media_type, described in answer.get("content", {}).items():
                    if described.get("schema", {}).get("$ref", "").endswith("/ProblemOut"):
                        problem_types[(media_type, status.startswith(("4", "5")))] += 1
    assert set(problem_types) == {("application/problem+json", True)} and problem_types.total() > 50, problem_types


def test_mutating_endpoints_need_a_key(server: Server) -> None:
    missing = httpx.post(f"{server.url}/v1/place", json=job("auth-1"))
    assert missing.status_code == 401 and "X-API-Key" in missing.json()["detail"]
    wrong = httpx.post(f"{server.url}/v1/place", json=job("auth-1"), headers={"X-API-Key": "nope"})
    assert wrong.status_code == 403
    bearer = httpx.post(f"{server.url}/v1/place", json=job("auth-1"), headers={"Authorization": f"Bearer {API_KEY}"})
    assert bearer.status_code == 200 and bearer.json()["committed"]


def test_place_get_release_complete(server: Server) -> None:
    placed = httpx.post(f"{server.url}/v1/place", json=job("life-1", gpu=2, instances=2), headers=KEY).json()
    assert placed["verdict"] == "placed" and placed["committed"]
    instances = placed["allocation"]["instances"]
    assert len(instances) == 2 and all(len(i["gpus"]) == 2 for i in instances)
    assert placed["estimate"]["model_version"] == "heuristic"
    assert placed["estimate"]["tasks"][0]["gpu_request"]["p90"] == 2
    stored = httpx.get(f"{server.url}/v1/jobs/life-1").json()
    assert stored["state"] == "running" and stored["allocation"] == placed["allocation"]
    again = httpx.post(f"{server.url}/v1/place", json=job("life-1"), headers=KEY)
    assert again.status_code == 409 and "never reused" in again.json()["detail"]
    first = httpx.post(f"{server.url}/v1/jobs/life-1/release", headers=KEY).json()
    second = httpx.post(f"{server.url}/v1/jobs/life-1/release", headers=KEY).json()
    assert first["released"] and not second["released"] and second["state"] == "released"
    late = httpx.post(f"{server.url}/v1/jobs/life-1/complete", json={"duration_s": 5}, headers=KEY)
    assert late.status_code == 409
    httpx.post(f"{server.url}/v1/place", json=job("life-2"), headers=KEY)
    done = httpx.post(f"{server.url}/v1/jobs/life-2/complete", json={"duration_s": 321.5, "usage": {"gpu": 0.4}},
                      headers=KEY)
    assert done.status_code == 200
    assert httpx.get(f"{server.url}/v1/jobs/life-2").json()["completion"]["usage"] == {"gpu": 0.4}
    assert httpx.get(f"{server.url}/v1/jobs/nobody").status_code == 404


def test_dry_run_and_jobs_that_do_not_fit(server: Server) -> None:
    dry = httpx.post(f"{server.url}/v1/place", json=job("dry-1", dry_run=True), headers=KEY).json()
    assert dry["verdict"] == "placed" and not dry["committed"]
    assert httpx.get(f"{server.url}/v1/jobs/dry-1").status_code == 404
    huge = httpx.post(f"{server.url}/v1/place", json=job("huge-1", gpu=64), headers=KEY).json()
    assert huge["verdict"] == "can-never-fit" and not huge["committed"] and huge["reasons"]


@pytest.mark.parametrize(("body", "field"), [
    (job("bad-1", gpu=-1), "gpu"),
    (job("bad-2", gpu=1.5), "whole number"),
    (job("bad id!"), "job_id"),
    ({"job_id": "bad-3", "tasks": []}, "tasks"),
    ({**job("bad-4"), "colour": "red"}, "colour"),
    (job("bad-5", policy="annealing"), "annealing"),
])
def test_bad_input_is_422_naming_the_field(server: Server, body: dict[str, Any], field: str) -> None:
    answer = httpx.post(f"{server.url}/v1/place", json=body, headers=KEY)
    assert answer.status_code == 422 and field in answer.text


@pytest.mark.parametrize(("body", "field"), [
    ({"name": "x", "machines": [], "machine_racks": [["m", "r"]], "rack_domains": None}, "rack_domains"),
    ({"name": "pai", "machine_racks": [["m", "r"]], "rack_domains": [["r", "d"]]}, "machine_racks needs machines"),
    ({"name": "bad\u0000name"}, "name"),
    ({"name": "x", "machines": [{"name": "m", "gpu_type": "V100", "gpus": 8, "cpu_cores": 8, "mem_gib": 64,
                                 "gpu_mem_gib": 0}]}, "gpu_mem_gib: 0 GiB on a machine with 8 GPUs"),
])
def test_bad_cluster_spec_is_422_and_keeps_the_cluster(server: Server, body: dict[str, Any], field: str) -> None:
    before = httpx.get(f"{server.url}/v1/cluster").json()
    answer = httpx.put(f"{server.url}/v1/cluster", json=body, headers=KEY)
    assert answer.status_code == 422 and field in answer.text
    after = httpx.get(f"{server.url}/v1/cluster").json()
    assert (after["name"], after["generation"]) == (before["name"], before["generation"])


def test_a_machine_without_gpus_may_say_it_has_no_gpu_memory() -> None:
    """As the cluster's own description shows a CPU-only machine, so it can be loaded back."""
    machine = MachineIn.model_validate({"name": "c", "gpu_type": "CPU", "gpus": 0, "cpu_cores": 64, "mem_gib": 256,
                                        "gpu_mem_gib": 0})
    assert machine.gpu_mem_gib == 0


def test_oversized_body_is_413(server: Server) -> None:
    answer = httpx.post(f"{server.url}/v1/place", content=b"{" + b" " * 2_000_000 + b"}", headers=KEY)
    assert answer.status_code == 413


def _chunks(text: bytes, size: int = 65_536) -> Iterator[bytes]:
    for i in range(0, len(text), size):
        yield text[i:i + size]


def test_chunked_body_is_counted_too(server: Server) -> None:
    # no Content-Length: httpx sends a generator with Transfer-Encoding: chunked
    big = httpx.post(f"{server.url}/v1/place", content=_chunks(b"{" + b" " * 2_000_000 + b"}"), headers=KEY)
    assert big.status_code == 413 and "limit" in big.text
    small = httpx.post(f"{server.url}/v1/predict", content=_chunks(json.dumps(job("chunked-1")).encode(), 7),
                       headers={**KEY, "Content-Type": "application/json"})
    assert small.status_code == 200 and small.json()["job_id"] == "chunked-1"


def test_predict_cluster_models_and_metrics(server: Server) -> None:
    estimate = httpx.post(f"{server.url}/v1/predict", json=job("p-1", gpu=0.5)).json()
    assert estimate["model_version"] == "heuristic" and estimate["duration_s"] is None
    assert estimate["tasks"][0]["gpu_request"] == {"point": 0.5, "p50": 0.5, "p90": 0.5}
    cluster = httpx.get(f"{server.url}/v1/cluster").json()
    assert cluster["name"] == "pai" and cluster["machines"] == 1897 and cluster["gpus"] == 6742
    assert cluster["gpus_allocated"] == sum(m["gpus_allocated"] for m in cluster["per_machine"])
    assert httpx.get(f"{server.url}/v1/models").json()["answering"] == "heuristic"
    text = httpx.get(f"{server.url}/metrics").text
    assert 'gpuplace_decisions_total{committed="true",policy="liquid",verdict="placed"}' in text
    assert "gpuplace_request_seconds_bucket" in text and 'gpuplace_model_info{version="heuristic"} 1.0' in text


def test_kill_9_loses_no_acknowledged_allocation(tmp_path: Path, database_url: str) -> None:
    env = server_env(tmp_path, database_url)
    first = Server(env).start()
    acknowledged = []
    try:
        for n in range(15):
            answer = httpx.post(f"{first.url}/v1/place", json=job(f"crash-{n}", gpu=1), headers=KEY)
            if answer.status_code == 200 and answer.json()["committed"]:
                acknowledged.append(answer.json())
    finally:
        first.kill()
    second = Server(env).start()
    try:
        cluster = httpx.get(f"{second.url}/v1/cluster").json()
        assert cluster["running_jobs"] == len(acknowledged) == 15
        for placed in acknowledged:
            stored = httpx.get(f"{second.url}/v1/jobs/{placed['job_id']}").json()
            assert stored["state"] == "running" and stored["allocation"] == placed["allocation"]
    finally:
        second.stop()


def test_batch_placement_stores_every_placed_job(server: Server) -> None:
    body = {"policy": "gga", "time_limit_s": 0.5, "jobs": [job(f"batch-{n}", gpu=n % 3 or 0.5) for n in range(6)]}
    answer = httpx.post(f"{server.url}/v1/place/batch", json=body, headers=KEY, timeout=30)
    assert answer.status_code == 200, answer.text
    result = answer.json()
    assert result["jobs_placed"] == 6 and all(d["committed"] for d in result["decisions"])
    for n in range(6):
        assert httpx.get(f"{server.url}/v1/jobs/batch-{n}").json()["state"] == "running"
    twice = httpx.post(f"{server.url}/v1/place/batch", json=body, headers=KEY)
    assert twice.status_code == 409
    duplicate = {"jobs": [job("same-1"), job("same-1")]}
    assert httpx.post(f"{server.url}/v1/place/batch", json=duplicate, headers=KEY).status_code == 422


def test_sixteen_clients_on_two_processes_never_over_allocate(tmp_path: Path, database_url: str) -> None:
    started = Server(server_env(tmp_path, database_url)).start("--workers", "2", log=tmp_path / "server.log")
    acknowledged: dict[str, dict[str, Any]] = {}
    released: set[str] = set()
    lock = threading.Lock()

    failures: list[str] = []

    def client(k: int) -> None:
        try:
            place_and_release(k)
        except Exception as exc:  # an assertion in a thread would only warn: collect it
            failures.append(repr(exc))

    def place_and_release(k: int) -> None:
        with httpx.Client(base_url=started.url, headers=KEY, timeout=30) as http:
            for n in range(8):
                job_id = f"c{k}-{n}"
                answer = http.post("/v1/place", json=job(job_id, gpu=[1, 2, 0.5, 4][n % 4], instances=1 + n % 3))
                assert answer.status_code == 200, answer.text
                if answer.json()["committed"]:
                    with lock:
                        acknowledged[job_id] = answer.json()["allocation"]
                if n % 2 and job_id in acknowledged:
                    freed = http.post(f"/v1/jobs/{job_id}/release")
                    assert freed.status_code == 200, freed.text
                    with lock:
                        released.add(job_id)

    try:
        threads = [threading.Thread(target=client, args=(k,)) for k in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        started.stop()
    assert not failures, failures[:3]
    independent_check(database_url, {j: a for j, a in acknowledged.items() if j not in released})
