"""The endpoints the dashboard reads beyond the rest of the API, and the page's files, in process (no
browser): every GPU's shares as the allocations hold them, the recent error and drift of completed jobs'
estimates against the version's training metrics, why pending jobs wait, the page served with its
headers, and reads protected when ``protect_reads`` is set."""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import httpx
import pytest

from models.estimate import CacheCounts, JobRecord, Quantiles, TaskEstimate
from placement import Cluster, load_cluster
from service.estimator import EstimatorHolder
from service.http import ui
from service.http.app import create_app
from service.runtime import Runtime
from service.settings import Settings
from service.store import MemoryStore
from tests.service.conftest import API_KEY

KEY = {"X-API-Key": API_KEY}
PAI = load_cluster("pai")


class ModelVersion:
    """A registered version that estimates each task's duration (from its GPUs) and GPU usage."""

    def __init__(self, version: str) -> None:
        self.version = version

    def predict(self, records: Sequence[JobRecord]) -> list[TaskEstimate]:
        out = []
        for record in records:
            gpu = float(record.get("req_gpu") or 0.0)
            duration = 600.0 * (1 + gpu)
            out.append(TaskEstimate(self.version, {"duration": Quantiles(duration, duration, 2 * duration, "s"),
                                                   "gpu": Quantiles(0.8 * gpu, 0.8 * gpu, gpu, "GPUs")}))
        return out

    def cache_counts(self) -> CacheCounts:
        return CacheCounts(0, 0)


class Registry:
    """Version 4 behind the alias, with what its training run logged (``models.registry``'s ``run_info``,
    which the registered estimators hold as ``registry``); ``down``: asking it fails."""

    TRAINED: ClassVar[dict[str, float]] = {"duration.model.male": 0.25, "duration.model.p90_coverage": 0.9,
                                           "gpu.model.male": 0.2, "gpu.model.p90_coverage": 0.9}

    def __init__(self) -> None:
        self.registry = self
        self.asked: list[str] = []
        self.down = False

    def alias_version(self, alias: str) -> str | None:
        return "4"

    def load(self, alias_or_version: str) -> tuple[str, ModelVersion]:
        return alias_or_version, ModelVersion(alias_or_version)

    def run_info(self, version: str) -> SimpleNamespace:
        self.asked.append(version)
        if self.down:
            raise ConnectionError("model registry at http://127.0.0.1:1 unreachable")
        if version != "4":
            raise KeyError(version)
        return SimpleNamespace(metrics=dict(self.TRAINED))


def runtime(tmp_path: Path, registry: Registry | None = None, cluster: Cluster = PAI, **settings: Any) -> Runtime:
    return Runtime(Settings(home=tmp_path, api_keys=API_KEY, model_poll_s=0, **settings), MemoryStore(cluster),
                   EstimatorHolder(registry, "champion"))


@asynccontextmanager
async def client(rt: Runtime) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(rt=rt)
    async with app.router.lifespan_context(app), httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://gpuplace", headers=KEY) as http:
        yield http


def run(rt: Runtime, scenario: Callable[[httpx.AsyncClient], Awaitable[None]]) -> None:
    async def served() -> None:
        async with client(rt) as http:
            await scenario(http)

    asyncio.run(served())


def task(gpu: float, instances: int = 1, cpu_cores: float = 4, **extra: Any) -> dict[str, Any]:
    return {"instances": instances, "gpu": gpu, "cpu_cores": cpu_cores, "mem_gib": 16, **extra}


async def placed(http: httpx.AsyncClient, job_id: str, *tasks: dict[str, Any]) -> dict[str, Any]:
    answer = (await http.post("/v1/place", json={"job_id": job_id, "tasks": list(tasks)})).json()
    assert answer["committed"], answer
    allocation: dict[str, Any] = answer["allocation"]
    return allocation


def test_every_gpus_shares_are_the_running_jobs_allocations(tmp_path: Path) -> None:
    async def scenario(http: httpx.AsyncClient) -> None:
        await placed(http, "half", task(0.5, gpu_types=["T4"]))
        await placed(http, "quarter", task(0.25, gpu_types=["T4"]))
        await placed(http, "whole", task(2, instances=2, gpu_types=["V100"]))
        await placed(http, "with-ps", task(0, role="ps", cpu_cores=16), task(1, instances=2))
        gpus = (await http.get("/v1/cluster/gpus")).json()
        cluster = (await http.get("/v1/cluster")).json()
        assert gpus["name"] == "pai" and gpus["generation"] == cluster["generation"]
        assert gpus["running_jobs"] == cluster["running_jobs"] == 4
        assert [m["name"] for m in gpus["machines"]] == list(PAI.topology.machines)
        expected: dict[tuple[str, int], dict[str, int]] = defaultdict(lambda: defaultdict(int))
        hosts: dict[str, set[str]] = defaultdict(set)
        for job_id in ("half", "quarter", "whole", "with-ps"):
            for instance in (await http.get(f"/v1/jobs/{job_id}")).json()["allocation"]["instances"]:
                hosts[instance["machine"]].add(job_id)
                for gpu in instance["gpus"]:
                    expected[(instance["machine"], gpu)][job_id] += instance["gpu_milli"]
        per_machine = {m["name"]: m for m in cluster["per_machine"]}
        for m in gpus["machines"]:
            assert len(m["gpu_milli"]) == len(m["gpu_mem_mib"]) == per_machine[m["name"]]["gpus"]
            assert sum(m["gpu_milli"]) / 1000 == per_machine[m["name"]]["gpus_allocated"]
            assert m["cpu_cores_allocated"] == per_machine[m["name"]]["cpu_cores_allocated"]
            assert (m["rack"], m["domain"]) == (PAI.topology.rack_of(m["name"]), PAI.topology.domain_of(m["name"]))
            assert m["jobs"] == sorted(hosts.get(m["name"], ()))
            held: dict[int, dict[str, int]] = defaultdict(dict)
            for s in m["shares"]:
                held[s["gpu"]][s["job_id"]] = s["milli"]
            for gpu, milli in enumerate(m["gpu_milli"]):
                assert held.get(gpu, {}) == dict(expected.get((m["name"], gpu), {}))
                assert milli == sum(held.get(gpu, {}).values())
        half = [s for m in gpus["machines"] for s in m["shares"] if s["job_id"] == "half"]
        assert [s["milli"] for s in half] == [500]

    run(runtime(tmp_path), scenario)


def test_the_models_recent_error_against_its_training_metrics(tmp_path: Path) -> None:
    registry = Registry()

    async def scenario(http: httpx.AsyncClient) -> None:
        for i in range(60):
            gpu = 1 + i % 2
            await placed(http, f"done-{i}", task(gpu))
            late = 1.0 if i < 30 else 4.0  # the second half ran four times as long as estimated
            done = await http.post(f"/v1/jobs/done-{i}/complete", json={
                "duration_s": 600.0 * (1 + gpu) * late, "usage": {"gpu": 0.8 * gpu}})
            assert done.status_code == 200, done.text
        await placed(http, "not-done", task(1))
        error = (await http.get("/v1/models/error")).json()
        assert error["answering"] == "4" and error["completions"] == 60 and error["window"] == 200
        assert (error["ratio_limit"], error["coverage_drop"]) == (1.25, 0.1)
        by_target = {t["target"]: t for t in error["targets"]}
        assert set(by_target) == {"duration", "gpu"}
        duration, gpu = by_target["duration"], by_target["gpu"]
        assert duration["jobs"] == gpu["jobs"] == 60 and duration["model_version"] == "4"
        assert duration["train_male"] == 0.25 and duration["train_p90_coverage"] == 0.9
        assert duration["drifted"] is True and duration["recent_p90_coverage"] == 0.5
        assert duration["male_ratio"] == pytest.approx(duration["recent_male"] / 0.25)
        assert gpu["drifted"] is False and gpu["recent_male"] == pytest.approx(0.0) and gpu["recent_p90_coverage"] == 1
        assert len(duration["rolling_male"]) == 60 - 50 + 1
        assert duration["rolling_male"][0] < duration["rolling_male"][-1]
        again = (await http.get("/v1/models/error")).json()
        assert again == error and registry.asked == ["4"]  # a version's training metrics are asked once

    run(runtime(tmp_path, registry), scenario)


def test_without_training_metrics_drift_is_unknown_and_the_registry_is_not_asked_at_every_read(
        tmp_path: Path) -> None:
    registry = Registry()
    registry.down = True

    async def scenario(http: httpx.AsyncClient) -> None:
        await placed(http, "one", task(1))
        assert (await http.post("/v1/jobs/one/complete", json={"duration_s": 100.0})).status_code == 200
        for _ in range(3):
            error = (await http.get("/v1/models/error")).json()
            (duration,) = error["targets"]
            assert duration["target"] == "duration" and duration["jobs"] == 1
            assert duration["train_male"] is None and duration["male_ratio"] is None and duration["drifted"] is None
            assert duration["rolling_male"] == [pytest.approx(duration["recent_male"])]
        assert registry.asked == ["4"]

    run(runtime(tmp_path, registry), scenario)


def test_the_heuristic_has_no_error_to_show(tmp_path: Path) -> None:
    async def scenario(http: httpx.AsyncClient) -> None:
        await placed(http, "one", task(1))
        assert (await http.post("/v1/jobs/one/complete", json={"duration_s": 100.0, "usage": {"gpu": 1.0}})
                ).status_code == 200
        error = (await http.get("/v1/models/error")).json()
        assert error == {"answering": "heuristic", "completions": 1, "window": 200, "ratio_limit": 1.25,
                         "coverage_drop": 0.1, "targets": []}

    run(runtime(tmp_path), scenario)


def test_why_each_pending_job_waits_from_a_pass_that_commits_nothing(tmp_path: Path) -> None:
    async def scenario(http: httpx.AsyncClient) -> None:
        queues = {"queues": [{"name": "research", "quota": {"gpus": 2}}, {"name": "prod", "quota": {"gpus": 40}}]}
        assert (await http.put("/v1/queues", json=queues)).status_code == 200
        for job_id, queue, tasks, state in [("r-1", "research", [task(1, instances=2)], "running"),
                                            ("r-2", "research", [task(1)], "pending"),
                                            ("p-never", "prod", [task(8, gpu_types=["T4"])], "pending")]:
            answer = await http.post("/v1/jobs", json={"job_id": job_id, "queue": queue, "tasks": tasks})
            assert answer.status_code == 202 and answer.json()["state"] == state, answer.text
        before = (await http.get("/readyz")).json()["generation"]
        waiting = (await http.get("/v1/queues/waiting")).json()
        assert waiting["generation"] == before == (await http.get("/readyz")).json()["generation"]
        assert waiting["starting"] == []
        by_job = {w["job_id"]: w for w in waiting["waiting"]}
        assert set(by_job) == {"r-2", "p-never"}
        assert (by_job["r-2"]["queue"], by_job["r-2"]["reason"]) == ("research", "over-quota")
        assert by_job["r-2"]["details"] and by_job["r-2"]["reservation_at_s"] is None
        assert by_job["p-never"]["reason"] == "can-never-fit"
        assert "T4" in by_job["p-never"]["details"][0]
        assert (await http.post("/v1/jobs/r-1/release")).json()["released"]
        assert (await http.get("/v1/jobs/r-2")).json()["state"] == "running"
        assert [w["job_id"] for w in (await http.get("/v1/queues/waiting")).json()["waiting"]] == ["p-never"]

    run(runtime(tmp_path), scenario)


def test_the_page_is_served_with_its_files_and_headers_that_keep_it_to_this_service(tmp_path: Path) -> None:
    async def scenario(http: httpx.AsyncClient) -> None:
        moved = await http.get("/ui")
        assert moved.status_code == 308 and moved.headers["location"] == "/ui/"
        page = await http.get("/ui/", headers={})
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["x-content-type-options"] == "nosniff" and page.headers["cache-control"] == "no-cache"
        linked = re.findall(r'(?:src|href)="([^"#:]+)"', page.text)
        assert set(linked) == {"app.js", "style.css"}
        for name, kind in (("app.js", "text/javascript"), ("style.css", "text/css")):
            served = await http.get(f"/ui/{name}", headers={})
            assert served.status_code == 200 and served.headers["content-type"].startswith(kind)
            assert served.content == (ui.STATIC / name).read_bytes()
        assert (await http.get("/ui/missing.js")).status_code == 404
        revalidated = await http.get("/ui/app.js", headers={"If-None-Match": served.headers["etag"]})
        assert revalidated.status_code in (200, 304)

    run(runtime(tmp_path), scenario)


def test_with_reads_protected_the_page_is_served_and_its_data_needs_the_key(tmp_path: Path) -> None:
    async def scenario(http: httpx.AsyncClient) -> None:
        assert (await http.get("/ui/", headers={"X-API-Key": ""})).status_code == 200
        for path in ("/v1/cluster/gpus", "/v1/models/error", "/v1/queues/waiting"):
            assert (await http.get(path, headers={"X-API-Key": ""})).status_code == 401, path
            assert (await http.get(path, headers={"X-API-Key": "nope"})).status_code == 403, path
            assert (await http.get(path)).status_code == 200, path

    run(runtime(tmp_path, protect_reads=True), scenario)


def test_the_openapi_document_describes_the_dashboards_endpoints(tmp_path: Path) -> None:
    async def scenario(http: httpx.AsyncClient) -> None:
        document = (await http.get("/openapi.json")).json()
        for path, operation_id, answer in (("/v1/cluster/gpus", "get_cluster_gpus", "ClusterGpusOut"),
                                           ("/v1/models/error", "get_model_error", "ModelErrorOut"),
                                           ("/v1/queues/waiting", "get_waiting", "WaitingOut")):
            operation = document["paths"][path]["get"]
            assert operation["operationId"] == operation_id
            described = operation["responses"]["200"]["content"]["application/json"]["schema"]
            assert described == {"$ref": f"#/components/schemas/{answer}"}
            assert {"401", "403", "422", "500"} <= set(operation["responses"])
        assert not [path for path in document["paths"] if path.startswith("/ui")]

    run(runtime(tmp_path), scenario)
