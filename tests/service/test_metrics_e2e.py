"""``GET /metrics`` as Prometheus reads it, from real ``gpuplace serve`` processes on the PAI cluster.

One worker: after placements on chosen GPU types, a queue with a preemption and calls to the Kubernetes
extender, the families carry what was done (allocated GPUs per type equal what was placed, and agree with
``/v1/cluster``). Two workers (``--workers 2``, prometheus_client's multiprocess mode): requests sent until
both workers have served some, then every scrape, whichever worker answers, counts them all; what an
earlier run left in the metrics folder is not counted. ``promtool check metrics`` (Prometheus's own
checker, Debian's ``prometheus`` package) accepts both scrapes. In process: the error of completed jobs'
estimates against what they measured, and the newest completions the coverage is read over."""

from __future__ import annotations

import itertools
import math
import os
import shutil
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from placement import PlacementConfig, online_policy
from service.cycle import run_cycle
from service.estimator import EstimatorHolder
from service.metrics import RECENT_COMPLETIONS, Metrics
from service.store import Completion, End, MemoryStore, Place, Planner, Store
from tests.service.conftest import API_KEY, Server, server_env
from tests.service.test_store import CLUSTER, PLACE, job, store_at

KEY = {"X-API-Key": API_KEY}
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    """Every sample of a scrape by (name, sorted labels)."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def by_label(found: Samples, name: str, label: str) -> dict[str, float]:
    """The samples of ``name`` by the value of ``label``."""
    return {dict(labels)[label]: value for (n, labels), value in found.items() if n == name}


def promtool_check(text: str) -> None:
    """``promtool check metrics`` on a scrape: it must find no problem. Skipped only where promtool is not
    installed and the run is not CI's (``.ci/run`` installs it and requires it)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI") or os.environ.get("GPUPLACE_REQUIRE_PROMTOOL"):
            pytest.fail("promtool is required here: install Debian's prometheus package (.ci/promtool.sh)")
        pytest.skip("promtool not installed (Debian's prometheus package; .ci/promtool.sh installs it)")
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0 and not checked.stdout.strip() and not checked.stderr.strip(), \
        checked.stdout + checked.stderr


def pod(uid: str, gpus: int, cpu: str = "4") -> dict[str, Any]:
    return {"metadata": {"name": uid, "namespace": "team-a", "uid": uid},
            "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)},
                                                                   "requests": {"cpu": cpu, "memory": "8Gi"}}}]}}


def typed_job(job_id: str, gpu: float, gpu_type: str, **extra: Any) -> dict[str, Any]:
    return {"job_id": job_id, "tasks": [{"gpu": gpu, "cpu_cores": 3, "mem_gib": 10, "gpu_types": [gpu_type]}],
            **extra}


PLACED = [("v-2", 2.0, "V100"), ("v-1", 1.0, "V100"), ("v-half", 0.5, "V100"), ("t-1", 1.0, "T4"),
          ("t-quarter", 0.25, "T4")]
"""Jobs placed directly (job id, GPUs, GPU type); the queue's job adds 4 P100 GPUs."""


@dataclass
class Scraped:
    server: Server
    text: str
    cluster: dict[str, Any]


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    home = tmp_path_factory.mktemp("metrics")
    server = Server(server_env(home, f"sqlite:///{home / 'state.db'}")).start()
    try:
        with httpx.Client(base_url=server.url, headers=KEY, timeout=60) as http:
            for job_id, gpu, gpu_type in PLACED:
                placed = http.post("/v1/place", json=typed_job(job_id, gpu, gpu_type))
                assert placed.status_code == 200 and placed.json()["committed"], placed.text
            queues = {"queues": [{"name": "a", "order": "priority", "quota": {"gpus": 4}}]}
            assert http.put("/v1/queues", json=queues).status_code == 200
            for job_id, priority in (("qa-1", 0), ("qa-urgent", 10)):
                answer = http.post("/v1/jobs", json={"job_id": job_id, "queue": "a", "priority": priority, "tasks": [
                    {"instances": 2, "gpu": 2, "cpu_cores": 1, "gpu_types": ["P100"]}]})
                assert answer.status_code == 202 and answer.json()["state"] == "running", answer.text
            assert http.get("/v1/jobs/qa-1").json()["state"] == "pending"  # preempted for qa-urgent
            v100 = [m["name"] for m in http.get("/v1/cluster").json()["per_machine"] if m["gpu_type"] == "V100"]
            def extender(verb: str, body: dict[str, Any]) -> Any:
                return http.post(f"/k8s/extender/{verb}", json=body).json()

            assert extender("filter", {"Pod": pod("ok", 1), "NodeNames": v100[:3]})["NodeNames"]
            assert extender("filter", {"Pod": pod("big", 16), "NodeNames": v100[:3]})["NodeNames"] == []
            assert extender("filter", {"Pod": pod("bad", 1, cpu="x"), "NodeNames": v100[:3]})["Error"]
            assert len(extender("prioritize", {"Pod": pod("ok", 1), "NodeNames": v100[:3]})) == 3
            assert "GPUPLACE_KUBE_API" in extender("bind", {"PodName": "ok", "PodNamespace": "team-a", "PodUID": "ok",
                                                            "Node": v100[0]})["Error"]
            done = http.post("/v1/jobs/t-1/complete", json={"duration_s": 60.0, "usage": {"gpu": 0.5}})
            assert done.status_code == 200, done.text
            cluster = http.get("/v1/cluster").json()
            text = http.get("/metrics").text
        yield Scraped(server, text, cluster)
    finally:
        server.stop()


def test_a_scrape_after_placements_carries_what_was_placed(one_worker: Scraped) -> None:
    found, cluster = samples(one_worker.text), one_worker.cluster
    allocated = by_label(found, "gpuplace_allocated_gpus", "gpu_type")
    # t-1 completed; a shared GPU counts as its share; qa-urgent holds 4 P100 GPUs, qa-1 waits
    assert allocated == {"CPU": 0.0, "MISC": 0.0, "P100": 4.0, "T4": 0.25, "V100": 3.5, "V100M32": 0.0}
    assert by_label(found, "gpuplace_partially_allocated_gpus", "gpu_type") == {
        "CPU": 0.0, "MISC": 0.0, "P100": 0.0, "T4": 1.0, "V100": 1.0, "V100M32": 0.0}
    per_type: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for machine in cluster["per_machine"]:
        totals = per_type[machine["gpu_type"]]
        for key in ("gpus", "gpus_allocated", "cpu_cores", "cpu_cores_allocated", "mem_gib", "mem_gib_allocated"):
            totals[key] += machine[key]
    for gpu_type, totals in per_type.items():
        labels = (("gpu_type", gpu_type),)
        assert found[("gpuplace_capacity_gpus", labels)] == totals["gpus"]
        assert math.isclose(found[("gpuplace_allocated_gpus", labels)], totals["gpus_allocated"])
        assert math.isclose(found[("gpuplace_capacity_cpu_cores", labels)], totals["cpu_cores"])
        assert math.isclose(found[("gpuplace_allocated_cpu_cores", labels)], totals["cpu_cores_allocated"])
        assert math.isclose(found[("gpuplace_allocated_memory_bytes", labels)], totals["mem_gib_allocated"] * 2**30)
        assert found[("gpuplace_capacity_memory_bytes", labels)] <= totals["mem_gib"] * 2**30
    assert sum(by_label(found, "gpuplace_capacity_gpus", "gpu_type").values()) == cluster["gpus"] == 6742
    assert found[("gpuplace_running_jobs", ())] == cluster["running_jobs"] == 5
    assert found[("gpuplace_state_generation", ())] == cluster["generation"]


def test_a_scrape_carries_queues_preemptions_extender_and_decisions(one_worker: Scraped) -> None:
    found = samples(one_worker.text)
    assert found[("gpuplace_pending_jobs", (("queue", "a"),))] == 1
    assert found[("gpuplace_queue_usage", (("queue", "a"), ("resource", "gpus")))] == 4
    assert found[("gpuplace_queue_quota", (("queue", "a"), ("resource", "gpus")))] == 4
    assert found[("gpuplace_preemptions_total", (("queue", "a"), ("reason", "higher-priority")))] == 1
    extender = {(dict(labels)["verb"], dict(labels)["outcome"]): value for (name, labels), value in found.items()
                if name == "gpuplace_extender_requests_total"}
    assert extender == {("filter", "ok"): 1, ("filter", "refused"): 1, ("filter", "error"): 1,
                        ("prioritize", "ok"): 1, ("prioritize", "error"): 0,
                        ("bind", "ok"): 0, ("bind", "refused"): 0, ("bind", "error"): 1}
    placed = (("committed", "true"), ("policy", "liquid"), ("verdict", "placed"))
    assert found[("gpuplace_decisions_total", placed)] == len(PLACED)
    # the heuristic answers: no duration estimate to compare t-1's duration with
    assert not [key for key in found if key[0].startswith("gpuplace_prediction_p90")]


def test_a_scrape_carries_how_long_the_scheduling_passes_took(one_worker: Scraped) -> None:
    found = samples(one_worker.text)
    # each submission to the queue and the completion after them woke a pass while a job was pending
    passes = found[("gpuplace_scheduling_pass_seconds_count", ())]
    assert passes >= 2
    assert 0 < found[("gpuplace_scheduling_pass_seconds_sum", ())] < 60 * passes
    buckets = sorted((float(dict(labels)["le"]), value) for (name, labels), value in found.items()
                     if name == "gpuplace_scheduling_pass_seconds_bucket")
    assert buckets[-1] == (math.inf, passes)
    assert all(a[1] <= b[1] for a, b in itertools.pairwise(buckets))  # cumulative


def test_a_scrape_carries_the_process_and_its_platform(one_worker: Scraped) -> None:
    found = samples(one_worker.text)
    assert found[("process_cpu_seconds_total", ())] > 0 and found[("process_resident_memory_bytes", ())] > 0
    assert found[("process_start_time_seconds", ())] <= time.time()
    assert [labels for name, labels in found if name == "python_info"]
    assert found[("gpuplace_workers", ())] == 1
    assert found[("gpuplace_model_info", (("version", "heuristic"),))] == 1


def test_promtool_accepts_the_scrape(one_worker: Scraped) -> None:
    promtool_check(one_worker.text)


DECISIONS = ("gpuplace_decisions", "gpuplace_decisions_total", ["policy", "verdict", "committed"])


def decided_per_worker(folder: Path) -> dict[str, float]:
    """Decisions each worker counted, read from its own file (``counter_<pid>.db``)."""
    counted: dict[str, float] = {}
    for path in sorted(folder.glob("counter_*.db")):
        total = sum(s.value for family in MultiProcessCollector.merge([str(path)], accumulate=False)
                    if family.name == DECISIONS[0] for s in family.samples if s.name == DECISIONS[1])
        counted[path.stem.split("_")[-1]] = total
    return counted


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    home = tmp_path_factory.mktemp("metrics-workers")
    server = Server(server_env(home, f"sqlite:///{home / 'state.db'}"))
    folder = home / "prometheus" / f"port-{server.port}"
    folder.mkdir(parents=True)
    stale = MmapedDict(str(folder / "counter_999999.db"))  # what an earlier run would have left
    stale.write_value(mmap_key(DECISIONS[0], DECISIONS[1], DECISIONS[2], ["liquid", "placed", "false"],
                               "placement decisions"), 1000.0, 0.0)
    stale.close()
    server.start("--workers", "2", log=home / "server.log")
    try:
        yield server, folder
    finally:
        server.stop()


def test_two_workers_counts_are_added_up_whichever_answers(two_workers: tuple[Server, Path]) -> None:
    server, folder = two_workers
    assert not (folder / "counter_999999.db").exists()
    sent, failures = 0, []

    def ask(n: int) -> None:
        body = {"job_id": f"dry-{n}", "dry_run": True, "tasks": [{"gpu": 1, "cpu_cores": 2}]}
        answer = httpx.post(f"{server.url}/v1/place", json=body, headers=KEY, timeout=60)  # a connection each
        if answer.status_code != 200:
            failures.append(answer.text)

    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:  # until both workers have served some
        clients = [threading.Thread(target=ask, args=(sent + k,)) for k in range(16)]
        for client in clients:
            client.start()
        for client in clients:
            client.join()
        sent += len(clients)
        per_worker = decided_per_worker(folder)
        if len([n for n in per_worker.values() if n > 0]) >= 2:
            break
    assert not failures, failures[:3]
    assert len(per_worker) == 2 and all(n > 0 for n in per_worker.values()) and sum(per_worker.values()) == sent
    dry = (("committed", "false"), ("policy", "liquid"), ("verdict", "placed"))
    for _ in range(6):  # scrapes answered by either worker
        found = samples(httpx.get(f"{server.url}/metrics", timeout=60).text)
        assert found[("gpuplace_decisions_total", dry)] == sent
        assert found[("gpuplace_workers", ())] == 2
        assert {dict(labels)["pid"] for name, labels in found if name == "process_cpu_seconds_total"} == set(per_worker)
        requests = sum(v for (name, labels), v in found.items() if name == "gpuplace_request_seconds_count"
                       and ("route", "/v1/place") in labels)
        assert requests == sent


def test_promtool_accepts_the_scrape_of_two_workers(two_workers: tuple[Server, Path]) -> None:
    server, _ = two_workers
    promtool_check(httpx.get(f"{server.url}/metrics", timeout=60).text)


def estimated(job_id: str, p50: float, p90: float) -> dict[str, Any]:
    """What a placement stores of its estimate: a duration, and one task's GPU usage."""
    return {"model_version": "7", "estimate": {
        "model_version": "7", "duration_s": {"point": p50, "p50": p50, "p90": p90},
        "tasks": [{"gpu": {"point": 0.5, "p50": 0.5, "p90": 0.8}, "gpu_request": {"point": 1, "p50": 1, "p90": 1}}]}}


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_completed_jobs_estimates_against_what_they_measured(kind: str, tmp_path: Path) -> None:
    store: Store = MemoryStore(CLUSTER) if kind == "memory" else store_at(f"sqlite:///{tmp_path / 'state.db'}")
    metrics = Metrics()
    metrics.serve_state(store, Planner(online_policy("liquid", PlacementConfig())))
    measured = {"a": (100.0, 200.0, 400.0), "b": (100.0, 150.0, 120.0), "c": (100.0, 200.0, 50.0)}
    for job_id, (p50, p90, duration) in measured.items():
        run_cycle(store, [Place(job(job_id), PLACE, estimated(job_id, p50, p90))])
        run_cycle(store, [End(job_id, Completion(duration, {"gpu": 0.6}))])
        row = store.job(job_id)
        assert row is not None
        metrics.observe_completion(row)
    assert [r.job_id for r in store.completions(newest=2)] == ["b", "c"]
    found = samples(metrics.scrape(EstimatorHolder(None, "champion")).decode())
    checks = {(dict(labels)["target"], dict(labels)["covered"]): value for (name, labels), value in found.items()
              if name == "gpuplace_prediction_p90_checks_total"}
    assert checks == {("duration", "false"): 1, ("duration", "true"): 2, ("gpu", "true"): 3}
    of_duration = (("target", "duration"),)
    # ln 0.5, ln 1.2 and ln 4 (cumulative buckets)
    buckets = {dict(labels)["le"]: value for (name, labels), value in found.items()
               if name == "gpuplace_prediction_log_error_bucket" and ("target", "duration") in labels}
    assert buckets == {"-2.0": 0, "-1.0": 0, "-0.5": 1, "-0.25": 1, "-0.1": 1, "0.0": 1, "0.1": 1, "0.25": 2,
                       "0.5": 2, "1.0": 2, "2.0": 3, "+Inf": 3}
    assert found[("gpuplace_prediction_log_error_count", (("target", "gpu"),))] == 3
    assert found[("gpuplace_prediction_p90_coverage", of_duration)] == pytest.approx(2 / 3)
    assert found[("gpuplace_prediction_p90_coverage", (("target", "gpu"),))] == 1
    assert found[("gpuplace_prediction_p90_coverage_jobs", of_duration)] == 3 <= RECENT_COMPLETIONS
    store.close()
