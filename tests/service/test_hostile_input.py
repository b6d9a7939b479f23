"""Hostile requests against a real server: every one gets a 4xx naming what is wrong, never a 500;
the keep-alive connection they came on stays usable; and nothing of them is stored.

Bodies are sent as raw bytes, so that they can carry what a JSON library would refuse to write:
``NaN``, ``Infinity``, numbers past float range, lone UTF-16 surrogates, control characters."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from service.http.schemas import MAX_INSTANCES_PER_BATCH, MAX_INSTANCES_PER_JOB
from tests.service.conftest import API_KEY, Server, server_env

HEADERS = {"X-API-Key": API_KEY, "Content-Type": "application/json"}
NON_FINITE = ("NaN", "Infinity", "-Infinity", "1e400")
BAD_TEXT = ("\\ud800", "\\udfff", "a\\u0000b", "tab\\there", "\\u001b[31m")  # as JSON escapes


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("hostile")
    running = Server(server_env(home, f"sqlite:///{home / 'state.db'}")).start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def client(server: Server) -> Iterator[httpx.Client]:
    """One keep-alive connection for the whole module: a request that broke the server's handling would
    reset it, and the next request would fail."""
    with httpx.Client(base_url=server.url, headers=HEADERS, timeout=60,
                      limits=httpx.Limits(max_connections=1, max_keepalive_connections=1)) as http:
        yield http


def job(job_id: str = "h1", **extra: Any) -> dict[str, Any]:
    return {"job_id": job_id, "user": "u", "tasks": [{"gpu": 1, "cpu_cores": 4}], **extra}


def with_number(body: dict[str, Any], path: str, number: str) -> str:
    """``body`` as JSON text with the value at ``path`` (dotted, list indices as numbers) replaced by the
    literal ``number``, which no JSON writer would emit."""
    marker = "__NUMBER__"
    target: Any = body
    *parents, last = path.split(".")
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    target[int(last) if isinstance(target, list) else last] = marker
    return json.dumps(body).replace(f'"{marker}"', number)


def assert_refused(reply: httpx.Response, status: int = 422, naming: str | None = None) -> None:
    assert reply.status_code == status, reply.text
    assert reply.headers["content-type"].startswith("application/problem+json")
    assert reply.json()["status"] == status, reply.text
    if naming is not None:
        assert naming in reply.text, reply.text


NUMBER_FIELDS = [
    ("POST", "/v1/place", job(), "tasks.0.gpu"),
    ("POST", "/v1/place", job(), "tasks.0.cpu_cores"),
    ("POST", "/v1/predict", job(), "tasks.0.gpu"),
    ("POST", "/v1/place", job(hyperparams={"batch_size": 32}), "hyperparams.batch_size"),
    ("POST", "/v1/place/batch", {"jobs": [job()], "time_limit_s": 1.0}, "time_limit_s"),
    ("POST", "/v1/jobs/h1/complete", {"duration_s": 10.0}, "duration_s"),
    ("PUT", "/v1/cluster", {"name": "x", "machines": [{"name": "m", "gpu_type": "V100", "gpus": 1,
                                                       "cpu_cores": 8, "mem_gib": 64}]}, "machines.0.cpu_cores"),
]


@pytest.mark.parametrize("number", NON_FINITE)
@pytest.mark.parametrize(("method", "path", "body", "field"), NUMBER_FIELDS,
                         ids=[f"{m} {p} {f}" for m, p, _, f in NUMBER_FIELDS])
def test_non_finite_numbers_are_422_naming_the_field(client: httpx.Client, method: str, path: str,
                                                     body: dict[str, Any], field: str, number: str) -> None:
    reply = client.request(method, path, content=with_number(json.loads(json.dumps(body)), field, number))
    assert_refused(reply, naming=field.split(".")[-1])


STRING_FIELDS = ["job_id", "user", "group", "workload", "app", "qos", "policy"]


@pytest.mark.parametrize("text", BAD_TEXT)
@pytest.mark.parametrize("field", STRING_FIELDS)
def test_surrogates_and_control_characters_are_422(client: httpx.Client, field: str, text: str) -> None:
    raw = json.dumps(job(**{field: "__TEXT__"})).replace("__TEXT__", text)
    assert_refused(client.post("/v1/place", content=raw), naming=field)


@pytest.mark.parametrize("text", BAD_TEXT)
def test_bad_text_in_hyperparameters_and_cluster_names_is_422(client: httpx.Client, text: str) -> None:
    for raw in (json.dumps(job(hyperparams={"model_family": "__TEXT__"})).replace("__TEXT__", text),
                json.dumps(job(hyperparams={"__TEXT__": 1})).replace("__TEXT__", text),
                json.dumps({"name": "__TEXT__"}).replace("__TEXT__", text)):
        path = "/v1/cluster" if raw.startswith('{"name"') else "/v1/place"
        assert_refused(client.request("PUT" if path == "/v1/cluster" else "POST", path, content=raw))


@pytest.mark.parametrize(("field", "value"), [
    ("tasks.0.gpu", "true"), ("tasks.0.gpu", '"1"'), ("tasks.0.cpu_cores", "false"),
    ("tasks.0.instances", "1.5"), ("tasks.0.instances", "true"), ("dry_run", "0"), ("dry_run", '"yes"'),
])
def test_no_lax_coercions(client: httpx.Client, field: str, value: str) -> None:
    body = job(dry_run=False)
    body["tasks"][0]["instances"] = 1
    assert_refused(client.post("/v1/place", content=with_number(body, field, value)), naming=field.split(".")[-1])


def test_instances_are_bounded_per_job_and_per_batch(client: httpx.Client) -> None:
    many = job(tasks=[{"instances": MAX_INSTANCES_PER_JOB // 2 + 1, "gpu": 0, "cpu_cores": 0}] * 2)
    assert_refused(client.post("/v1/place", json=many), naming="instances")
    per_job = MAX_INSTANCES_PER_JOB // 2
    jobs = [job(f"b{i}", tasks=[{"instances": per_job, "gpu": 0, "cpu_cores": 0}])
            for i in range(MAX_INSTANCES_PER_BATCH // per_job + 1)]
    assert_refused(client.post("/v1/place/batch", json={"jobs": jobs}), naming="instances")


@pytest.mark.parametrize("share", ["1e-13", "5e-324"])
def test_a_gpu_share_too_small_to_count_is_placed_as_one_milli_gpu(client: httpx.Client, share: str) -> None:
    # placement counts shares in milli-GPUs: one that rounded to none still needed a GPU, and no
    # allocation could give it one (a 500, found by the stateful schemathesis test)
    body = job("tiny", tasks=[{"gpu": 0.5, "instances": 2, "cpu_cores": 1}])
    reply = client.post("/v1/place", content=with_number({**body, "dry_run": True}, "tasks.0.gpu", share))
    assert reply.status_code == 200 and reply.json()["verdict"] == "placed", reply.text
    assert all(p["gpu_milli"] == 1 and len(p["gpus"]) == 1 for p in reply.json()["allocation"]["instances"])
    for policy in ("gga", "ffd", "cpsat"):
        batch = with_number({"jobs": [body], "policy": policy, "dry_run": True}, "jobs.0.tasks.0.gpu", share)
        reply = client.post("/v1/place/batch", content=batch)
        assert reply.status_code == 200 and reply.json()["decisions"][0]["verdict"] == "placed", reply.text


@pytest.mark.parametrize("raw", [
    "[" * 5000 + "]" * 5000, '{"job_id": "n", "tasks": ' + "[" * 5000 + "]" * 5000 + "}",
    "not json", "", '{"job_id": "t", "tasks": [{"gpu": 1}]', "\xff\xfe{}",
])
def test_malformed_bodies_are_refused(client: httpx.Client, raw: str) -> None:
    reply = client.post("/v1/place", content=raw.encode("utf-8", "surrogateescape"))
    assert reply.status_code in (400, 422), reply.text


def test_a_wrong_content_type_is_refused(client: httpx.Client) -> None:
    reply = client.post("/v1/place", content=json.dumps(job("ct")), headers={"Content-Type": "text/plain"})
    assert reply.status_code in (415, 422), reply.text


def test_a_chunked_body_is_read_and_checked_like_any_other(client: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:
        yield with_number(job("chunked"), "tasks.0.gpu", "NaN").encode()

    assert_refused(client.post("/v1/place", content=chunks()), naming="gpu")


@pytest.mark.parametrize("args", [
    {"Pod": 5, "NodeNames": ["a"]}, {"Pod": [], "NodeNames": []}, {"Pod": "x", "NodeNames": ["a"]},
    {"Pod": {"metadata": "x"}, "NodeNames": ["a"]}, {"Pod": {"spec": {"containers": [5]}}, "NodeNames": ["a"]},
    {"Pod": {"spec": {"containers": [{"resources": []}]}}, "NodeNames": ["a"]},
    {"Pod": {"metadata": {"annotations": ["x"]}}, "NodeNames": ["a"]},
    {"Pod": {"metadata": {"labels": {"scheduling.x-k8s.io/pod-group": 5}}}, "NodeNames": ["a"]},
    {"Pod": {"spec": {"containers": [{"resources": {"limits": {"aliyun.com/gpu-mem": "1.5"}}}]}}, "NodeNames": ["a"]},
    {"Pod": {"spec": {"containers": [{"resources": {"limits": {"aliyun.com/gpu-mem": "8", "nvidia.com/gpu": "1"}}}]}},
     "NodeNames": ["a"]},
])
def test_the_extender_filter_says_what_it_cannot_read_in_a_pod(client: httpx.Client, args: dict[str, Any]) -> None:
    reply = client.post("/k8s/extender/filter", json=args, headers={"X-API-Key": ""})
    assert reply.status_code == 200 and "Pod" in reply.json()["Error"], reply.text
    assert client.post("/k8s/extender/prioritize", json=args).status_code == 200


@pytest.mark.parametrize("args", [{"Pod": {}, "NodeNames": "a"}, {"Pod": {}, "NodeNames": [1]},
                                  {"Pod": {}, "Nodes": {"items": [5]}}, {"Pod": {}, "Nodes": 3}])
def test_the_extender_refuses_node_lists_it_cannot_read(client: httpx.Client, args: dict[str, Any]) -> None:
    assert_refused(client.post("/k8s/extender/filter", json=args), naming="Node")


def test_the_extender_reserves_nothing_for_a_gang_it_cannot_check(client: httpx.Client) -> None:
    pod = {"metadata": {"name": "g-0", "namespace": "ml", "uid": "g0",
                        "labels": {"scheduling.x-k8s.io/pod-group": "g"}},
           "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    reply = client.post("/k8s/extender/filter", json={"Pod": pod, "NodeNames": ["a"]})
    assert reply.status_code == 200 and "gangs need the Kubernetes API" in reply.json()["Error"], reply.text


def test_nothing_of_the_refused_requests_was_stored(client: httpx.Client) -> None:
    # last in this module: every request before it was refused, so the cluster holds no job
    cluster = client.get("/v1/cluster").json()
    assert cluster["running_jobs"] == 0 and cluster["generation"] == 0
    assert client.get("/v1/jobs/h1").status_code == 404
    assert client.get("/healthz").json() == {"status": "ok"}
