"""``gpuplace.client`` against a real ``gpuplace serve`` process on a SYNTHETIC one-machine cluster of two
V100 GPUs, API keys on, no model registered (the heuristic answers): the typed answers, the errors, the
queue, the async client, a server that is not there, and every operation of ``/openapi.json`` having a
method."""

from __future__ import annotations

import asyncio
import inspect
import json
import pickle
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpuplace.client import (
    NOT_CALLED,
    OPERATIONS,
    ApiError,
    AsyncClient,
    Client,
    ClientError,
    JobEvent,
    ServiceUnreachable,
)
from placement import Verdict
from service.http.responses import (
    CancelledOut,
    CompletedOut,
    DecisionOut,
    EstimateOut,
    JobOut,
    QueuesOut,
    SubmittedOut,
)
from service.http.schemas import PlaceIn
from tests.service.conftest import API_KEY, Server, free_port, server_env

CLUSTER = {"name": "client-tiny", "force": True, "machines": [
    {"name": "m1", "gpu_type": "V100", "gpus": 2, "cpu_cores": 32, "mem_gib": 128}]}


def job(job_id: str, gpus: int = 1, instances: int = 1, **extra: Any) -> dict[str, Any]:
    return {"job_id": job_id, "user": "u1", "tasks": [{"instances": instances, "gpu": gpus, "cpu_cores": 2}], **extra}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("client")
    running = Server(server_env(home, f"sqlite:///{home / 'state.db'}")).start()
    yield running
    running.stop()


@pytest.fixture
def api(server: Server) -> Iterator[Client]:
    """A client of the server with the test cluster loaded and nothing running or waiting."""
    with Client(server.url, api_key=API_KEY) as client:
        for pending in list(client.iter_jobs("pending", page_size=2)):
            client.cancel_job(pending.job_id)
        for running in list(client.iter_jobs("running", page_size=2)):
            client.release_job(running.job_id)
        assert client.load_cluster(CLUSTER).gpus == 2
        yield client


def test_every_operation_of_the_openapi_document_has_a_client_method(server: Server) -> None:
    document = httpx.get(f"{server.url}/openapi.json", timeout=30).json()
    served = {op["operationId"]: (method.upper(), path)
              for path, item in document["paths"].items() for method, op in item.items()}
    assert set(served) == set(OPERATIONS) | set(NOT_CALLED), "an operation the client neither calls nor excludes"
    assert not set(OPERATIONS) & set(NOT_CALLED)
    for operation_id, operation in OPERATIONS.items():
        assert served[operation_id] == (operation.method, operation.path), operation_id
        blocking, coroutine = getattr(Client, operation.client_method), getattr(AsyncClient, operation.client_method)
        assert callable(blocking) and not inspect.iscoroutinefunction(blocking), operation_id
        assert inspect.iscoroutinefunction(coroutine) or inspect.isasyncgenfunction(coroutine), operation_id
        assert inspect.signature(blocking) == inspect.signature(coroutine).replace(
            return_annotation=inspect.signature(blocking).return_annotation), operation_id


def test_predict_place_complete_and_release(api: Client) -> None:
    assert api.health().status == "ok"
    ready = api.ready()
    assert ready.auth == "on" and ready.model_version == "heuristic"
    estimate = api.predict(job("c-predict", gpus=1, instances=2))
    assert isinstance(estimate, EstimateOut) and estimate.job_id == "c-predict"
    assert estimate.model_version == "heuristic" and len(estimate.tasks) == 1
    gpu = (estimate.tasks[0].model_extra or {})["gpu_request"]
    assert gpu is not None and gpu.p50 == 1.0

    decision = api.place(job("c-place"))
    assert isinstance(decision, DecisionOut) and decision.verdict is Verdict.PLACED and decision.committed
    assert decision.allocation is not None and [i.machine for i in decision.allocation.instances] == ["m1"]
    stored = api.get_job("c-place")
    assert isinstance(stored, JobOut) and stored.state == "running"
    assert api.get_cluster().gpus_allocated == 1.0

    done = api.complete_job("c-place", 5.0, {"gpu": 0.5})
    assert isinstance(done, CompletedOut) and (done.state, done.duration_s) == ("completed", 5.0)
    completion = api.get_job("c-place").completion
    assert completion is not None and completion.usage == {"gpu": 0.5}
    again = api.release_job("c-place")
    assert (again.released, again.state) == (False, "completed")
    assert api.get_cluster().gpus_allocated == 0.0

    dry = api.place(PlaceIn.model_validate({**job("c-dry"), "dry_run": True}))  # a request model as the body
    assert dry.verdict is Verdict.PLACED and not dry.committed
    with pytest.raises(ApiError) as missing:
        api.get_job("c-dry")
    assert missing.value.status == 404 and "c-dry" in missing.value.detail


def test_a_refused_placement_is_an_answer_with_its_verdict_and_reasons(api: Client) -> None:
    never = api.place(job("c-never", instances=3))  # three GPUs on a two-GPU cluster
    assert never.verdict is Verdict.CAN_NEVER_FIT and not never.committed and never.allocation is None
    assert never.reasons and all(isinstance(r, str) and r for r in never.reasons)
    assert api.place(job("c-full", gpus=2)).verdict is Verdict.PLACED
    later = api.place(job("c-later"))
    assert later.verdict is Verdict.UNSCHEDULABLE_NOW and not later.committed and later.reasons
    batch = api.place_batch({"jobs": [job("c-b1"), job("c-b2")], "policy": "ffd", "dry_run": True})
    assert [d.job_id for d in batch.decisions] == ["c-b1", "c-b2"] and batch.jobs_placed == 0


def test_errors_carry_status_title_detail_and_the_field(server: Server, api: Client) -> None:
    with pytest.raises(ApiError) as bad:
        api.place({**job("c-bad"), "tasks": [{"gpu": -1}]})
    error = bad.value
    assert (error.status, error.title, error.field) == (422, "Unprocessable Entity", "tasks.0.gpu")
    assert "tasks.0.gpu" in error.detail and error.errors[0]["loc"] == ["body", "tasks", 0, "gpu"]
    assert error.method == "POST" and error.url == f"{server.url}/v1/place" and "tasks.0.gpu" in str(error)

    with pytest.raises(ApiError) as unknown_queue:  # a 422 the handler words names its field first
        api.submit_job({**job("c-queue"), "queue": "nowhere"})
    assert (unknown_queue.value.status, unknown_queue.value.field) == (422, "queue")
    with pytest.raises(ApiError) as page:
        api.list_jobs(limit=0)
    assert (page.value.status, page.value.field) == (422, "limit")

    with Client(server.url) as anonymous, pytest.raises(ApiError) as no_key:
        anonymous.place(job("c-anonymous"))
    assert (no_key.value.status, no_key.value.title) == (401, "Unauthorized") and "API key" in no_key.value.detail
    with Client(server.url, api_key="wrong") as stranger, pytest.raises(ApiError) as wrong_key:
        stranger.place(job("c-stranger"))
    assert wrong_key.value.status == 403 and wrong_key.value.field is None

    api.place(job("c-twice"))
    with pytest.raises(ClientError) as twice:
        api.place(job("c-twice"))
    assert isinstance(twice.value, ApiError) and twice.value.status == 409 and "c-twice" in twice.value.detail


def test_submit_list_cancel_and_the_events(api: Client) -> None:
    assert api.place(job("c-hold", gpus=2)).committed
    submitted = api.submit_job(job("c-wait", priority=3))
    assert isinstance(submitted, SubmittedOut) and (submitted.state, submitted.queue) == ("pending", "default")
    assert submitted.allocation is None and submitted.estimate.job_id == "c-wait"
    page = api.list_jobs(state="pending")
    assert [j.job_id for j in page.jobs] == ["c-wait"] and page.jobs[0].priority == 3 and page.next is None
    assert "c-hold" in [j.job_id for j in api.iter_jobs("running", page_size=1)]

    cancelled = api.cancel_job("c-wait")
    assert isinstance(cancelled, CancelledOut) and cancelled.state == "cancelled"
    assert api.get_job("c-wait").state == "cancelled"
    with pytest.raises(ApiError) as again:
        api.cancel_job("c-wait")
    assert again.value.status == 409

    events = list(api.job_events("c-wait"))
    assert all(isinstance(e, JobEvent) for e in events) and [e.state for e in events] == ["pending", "cancelled"]
    assert events[0].id < events[1].id and {e.job_id for e in events} == {"c-wait"}
    assert [e.state for e in api.job_events("c-wait", follow=True)] == ["pending", "cancelled"]  # it has ended
    assert list(api.job_events("c-wait", last_event_id=events[0].id)) == events[1:]
    with pytest.raises(ApiError) as none:
        list(api.job_events("c-nobody"))
    assert none.value.status == 404


def test_queues_cluster_models_and_metrics(api: Client) -> None:
    queues = api.set_queues({"queues": [{"name": "default", "quota": {}}]})
    assert isinstance(queues, QueuesOut) and queues.configured and [q.name for q in queues.queues] == ["default"]
    assert api.get_queues().config == queues.config
    cluster = api.get_cluster()
    assert (cluster.name, cluster.gpus, [m.name for m in cluster.per_machine]) == ("client-tiny", 2, ["m1"])
    with pytest.raises(ApiError) as unknown:
        api.load_cluster("no-such-cluster")
    assert unknown.value.status == 422
    models = api.get_models()
    assert models.answering == "heuristic" and api.reload_models().answering == "heuristic"
    assert "gpuplace_" in api.metrics()


def test_the_async_client(server: Server, api: Client) -> None:
    async def scenario() -> None:
        async with AsyncClient(server.url, api_key=API_KEY) as api:
            assert (await api.health()).status == "ok"
            assert (await api.predict(job("a-predict"))).model_version == "heuristic"
            placed = await api.place(job("a-place", gpus=2))
            assert placed.verdict is Verdict.PLACED and placed.committed
            never = await api.place(job("a-never", instances=3))
            assert never.verdict is Verdict.CAN_NEVER_FIT and not never.committed and never.reasons
            with pytest.raises(ApiError) as bad:
                await api.place({**job("a-bad"), "tasks": [{"gpu": 1.5}]})
            assert (bad.value.status, bad.value.field) == (422, "tasks.0")

            submitted = await api.submit_job(job("a-wait"))
            assert submitted.state == "pending"
            assert "a-wait" in [j.job_id async for j in api.iter_jobs("pending", page_size=1)]
            assert (await api.list_jobs(state="pending", queue="default")).jobs[-1].job_id == "a-wait"
            assert (await api.cancel_job("a-wait")).state == "cancelled"
            events = [e.state async for e in api.job_events("a-wait", follow=True)]
            assert events == ["pending", "cancelled"]
            assert (await api.release_job("a-place")).released
            assert (await api.get_job("a-place")).state == "released"
        async with AsyncClient(server.url) as anonymous:
            with pytest.raises(ApiError) as no_key:
                await anonymous.submit_job(job("a-anonymous"))
            assert no_key.value.status == 401
            assert (await anonymous.get_cluster()).running_jobs >= 0  # reads need no key

    asyncio.run(scenario())
    assert api.get_job("a-wait").state == "cancelled" and api.get_cluster().running_jobs == 0


def test_a_server_that_is_not_there_names_its_url() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with Client(url, api_key=API_KEY, timeout=5) as api, pytest.raises(ServiceUnreachable) as down:
        api.place(job("d-place"))
    assert isinstance(down.value, ConnectionError) and isinstance(down.value, ClientError)
    assert down.value.url == url and url in str(down.value) and "POST /v1/place" in str(down.value)
    assert not down.value.sent  # connecting failed: nothing was sent, sending it again is safe
    copy = pickle.loads(pickle.dumps(down.value))
    assert (type(copy), str(copy), copy.sent) == (ServiceUnreachable, str(down.value), False)

    async def asking() -> None:
        async with AsyncClient(url, timeout=5) as api:
            await api.ready()

    with pytest.raises(ServiceUnreachable) as also_down:
        asyncio.run(asking())
    assert url in str(also_down.value) and "GET /readyz" in str(also_down.value)


def test_error_bodies_that_are_not_a_field_list() -> None:
    """What the server answers besides a field list: ``/readyz``'s 503 body, a refusal of the whole body
    whose message names the field, and a page that is not JSON."""
    whole = {"loc": ["body"], "type": "value_error", "msg": "Value error, jobs: job ids must be distinct"}
    answers = {
        "/readyz": httpx.Response(503, json={"status": "unavailable", "database": "error: gone"}),
        "/v1/place/batch": httpx.Response(422, json={"detail": [whole]}),
        "/v1/cluster": httpx.Response(502, text="<html>bad gateway</html>"),
    }
    with Client("http://gpuplace.test", transport=httpx.MockTransport(lambda r: answers[r.url.path])) as api:
        with pytest.raises(ApiError) as not_ready:
            api.ready()
        assert (not_ready.value.status, not_ready.value.title) == (503, "Service Unavailable")
        assert json.loads(not_ready.value.detail)["database"] == "error: gone" and not_ready.value.field is None
        with pytest.raises(ApiError) as batch:
            api.place_batch({"jobs": [job("x"), job("x")]})
        assert batch.value.field == "jobs" and "job ids must be distinct" in batch.value.detail
        with pytest.raises(ApiError) as proxy:
            api.get_cluster()
        assert (proxy.value.status, proxy.value.detail) == (502, "<html>bad gateway</html>")
    copy = pickle.loads(pickle.dumps(batch.value))  # to another process, as it was
    assert (copy.status, copy.field, copy.errors, copy.url, str(copy)) == (
        422, "jobs", [whole], "http://gpuplace.test/v1/place/batch", str(batch.value))


def test_the_client_imports_no_web_framework_or_ml_stack(tmp_path: Path) -> None:
    probe = ("import sys, gpuplace.client; print(sorted(m for m in ('fastapi', 'starlette', 'sqlalchemy', "
             "'sklearn', 'lightgbm', 'pandas', 'mlflow') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_request_without_an_answer_may_have_been_processed() -> None:
    def no_answer(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with Client("http://gpuplace.test", timeout=1, transport=httpx.MockTransport(no_answer)) as api, \
            pytest.raises(ServiceUnreachable) as silent:
        api.submit_job(job("t-submit"))
    assert silent.value.sent and str(silent.value) == (
        "no answer from the gpuplace service at http://gpuplace.test (POST /v1/jobs): timed out (ReadTimeout)")
