"""Following the Kubernetes cluster (``GPUPLACE_KUBE_FOLLOW``): a real ``gpuplace serve`` lists and watches
the nodes and pods of a local API server that speaks the list-and-watch protocol (``kube_api``; no
kube-apiserver runs on these machines), with nodes and pods as ``kubectl get -o json`` prints them.

One server follows one API server for the module; each test works on nodes and pods of its own, and
several end by checking that the whole state has converged on what the API server holds."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.service.conftest import API_KEY, REPO, Server, free_port, server_env
from tests.service.kube_api import FakeKubeApi
from tests.service.kube_objects import node, pod

KEY = {"X-API-Key": API_KEY}
DEADLINE_S = 180.0
UNREADABLE_NODES: set[str] = set()
"""Nodes the tests made unreadable: not machines of the cluster."""


def until(check: Callable[[], Any], what: str, timeout_s: float = DEADLINE_S) -> Any:
    """``check()``'s first truthy answer, asked until the deadline (on a loaded machine a change takes a
    while to be followed); fails naming ``what`` with the last answer."""
    deadline, answer = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        answer = check()
        if answer:
            return answer
        time.sleep(0.2)
    pytest.fail(f"not within {timeout_s:.0f} s: {what} (last: {answer!r})")


@pytest.fixture(scope="module")
def api() -> Iterator[FakeKubeApi]:
    running = FakeKubeApi().start()
    running.put("nodes", node("base-1", rack="rack-1"))
    yield running
    running.stop()


def follower_env(home: Path, api_url: str) -> dict[str, str]:
    return server_env(home, f"sqlite:///{home / 'state.db'}", GPUPLACE_KUBE_API=api_url, GPUPLACE_KUBE_FOLLOW="true",
                      GPUPLACE_KUBE_TOKEN_FILE=str(home / "absent"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, api: FakeKubeApi) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("follow")
    running = Server(follower_env(home, api.url)).start()
    until(lambda: "base-1" in machines(running), "the first node is the cluster")
    yield running
    running.stop()


def machines(server: Server) -> dict[str, dict[str, Any]]:
    cluster = httpx.get(f"{server.url}/v1/cluster", timeout=30).json()
    return {m["name"]: m for m in cluster["per_machine"]}


def job(server: Server, spec: dict[str, Any]) -> dict[str, Any]:
    reply = httpx.get(f"{server.url}/v1/jobs/pod-{spec['metadata']['uid']}", timeout=30)
    return reply.json() if reply.status_code == 200 else {"state": None}


def state_of(server: Server, spec: dict[str, Any]) -> str | None:
    return job(server, spec)["state"]


def running_pods(server: Server) -> set[str]:
    found, after = set(), None
    while True:
        page = httpx.get(f"{server.url}/v1/jobs", params={"state": "running", "limit": 500,
                                                           **({"after": after} if after else {})}, timeout=30).json()
        found |= {j["job_id"] for j in page["jobs"] if j["job_id"].startswith(("pod-", "gang:"))}
        if page["next"] is None:
            return found
        after = page["next"]


def converged(server: Server, api: FakeKubeApi) -> bool:
    """The cluster is the API server's readable nodes, and the running jobs of pods are those of its bound,
    live pods (a gang member's: its gang's)."""
    nodes = set(api.objects["nodes"]) - UNREADABLE_NODES
    bound = {p["metadata"]["annotations"].get("gpuplace.io/job", f"pod-{p['metadata']['uid']}")
             for p in api.objects["pods"].values()
             if p["spec"].get("nodeName") and p["status"]["phase"] not in ("Succeeded", "Failed")}
    return set(machines(server)) == nodes and running_pods(server) == bound


def following(server: Server) -> str:
    state: str = httpx.get(f"{server.url}/readyz", timeout=30).json()["kubernetes"]
    return state if state.startswith("following") else ""


def test_nodes_appear_with_their_gpu_types_and_racks(server: Server, api: FakeKubeApi) -> None:
    api.put("nodes", node("v100-1", rack="rack-7", zone="zone-b"))
    api.put("nodes", node("a100-1", gpus=4, product="NVIDIA-A100-SXM4-80GB", gpu_memory="81920", cpu="63500m",
                          memory="515000000Ki"))
    api.put("nodes", node("t4-1", gpus=1, product="T4", gpu_memory=None))  # a type gpuplace knows
    api.put("nodes", node("cpu-1", gpus=0))
    seen = until(lambda: (m := machines(server)).keys() >= {"v100-1", "a100-1", "t4-1", "cpu-1"} and m,
                 "the four nodes are machines")
    assert (seen["v100-1"]["gpu_type"], seen["v100-1"]["gpus"], seen["v100-1"]["rack"]) == (
        "Tesla-V100-SXM2-16GB", 8, "rack-7")
    assert seen["v100-1"]["cpu_cores"] == pytest.approx(95.9)
    assert seen["v100-1"]["mem_gib"] == pytest.approx(394758220 / 2**20)
    assert (seen["a100-1"]["gpu_type"], seen["a100-1"]["gpus"], seen["a100-1"]["rack"]) == (
        "NVIDIA-A100-SXM4-80GB", 4, "a100-1")  # no rack label: its hostname
    assert (seen["t4-1"]["gpu_type"], seen["cpu-1"]["gpu_type"], seen["cpu-1"]["gpus"]) == ("T4", "CPU", 0)
    api.put("nodes", node("v100-1", gpus=6, rack="rack-7", zone="zone-b"))  # two GPUs taken out of service
    until(lambda: machines(server)["v100-1"]["gpus"] == 6, "the node's new allocatable GPUs")
    until(lambda: following(server), "the follower says it follows")
    until(lambda: converged(server, api), "the state is the API server's")


def test_a_pod_bound_through_the_extender_then_deleted_gives_every_gpu_back(server: Server,
                                                                            api: FakeKubeApi) -> None:
    api.put("nodes", node("bind-1"))
    until(lambda: "bind-1" in machines(server), "the node is a machine")
    spec = api.put("pods", pod("trainer-0", gpus=4, scheduler="gpuplace"))
    meta = spec["metadata"]
    answer = httpx.post(f"{server.url}/k8s/extender/bind", headers=KEY, timeout=30, json={
        "PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": "bind-1"}).json()
    assert answer == {"Error": ""}
    assert api.get("pods", "team-a/trainer-0")["spec"]["nodeName"] == "bind-1"
    assert machines(server)["bind-1"]["gpus_allocated"] == 4
    api.delete("pods", "team-a/trainer-0")
    until(lambda: state_of(server, spec) == "released", "the deleted pod's reservation is released")
    assert machines(server)["bind-1"]["gpus_allocated"] == 0 and machines(server)["bind-1"]["cpu_cores_allocated"] == 0
    until(lambda: converged(server, api), "the state is the API server's")


def test_a_pod_bound_by_another_scheduler_is_counted_until_it_ends(server: Server, api: FakeKubeApi) -> None:
    api.put("nodes", node("other-1", gpus=8))
    until(lambda: "other-1" in machines(server), "the node is a machine")
    # its GPU type annotation is not the node's: the pod is where it is, and is counted there
    spec = api.put("pods", pod("etl-0", gpus=3, cpu="6", node_name="other-1",
                               annotations={"gpuplace.io/gpu-types": "A10"}))
    until(lambda: state_of(server, spec) == "running", "the bound pod is counted")
    instance = job(server, spec)["allocation"]["instances"][0]
    assert instance["machine"] == "other-1" and len(instance["gpus"]) == 3
    assert (machines(server)["other-1"]["gpus_allocated"], machines(server)["other-1"]["cpu_cores_allocated"]) == (3, 6)
    filtered = httpx.post(f"{server.url}/k8s/extender/filter", timeout=30, json={
        "Pod": pod("big-0", gpus=6), "NodeNames": ["other-1"]}).json()
    assert filtered["NodeNames"] == [] and "other-1" in filtered["FailedNodes"]  # capacity stays true
    api.put("pods", {**spec, "status": {**spec["status"], "phase": "Succeeded"}})
    until(lambda: state_of(server, spec) == "released", "the pod that succeeded is released")
    assert machines(server)["other-1"]["gpus_allocated"] == 0
    until(lambda: converged(server, api), "the state is the API server's")


def test_a_bound_share_of_gpu_memory_is_counted_on_its_nodes_gpus(server: Server, api: FakeKubeApi) -> None:
    api.put("nodes", node("share-1", gpus=2, product="T4", gpu_memory="16384"))
    until(lambda: "share-1" in machines(server), "the node is a machine")
    spec = api.put("pods", pod("infer-0", gpus=0, gpu_mem_gib=8, node_name="share-1"))
    until(lambda: state_of(server, spec) == "running", "the bound pod is counted")
    instance = job(server, spec)["allocation"]["instances"][0]
    assert (instance["machine"], instance["gpu_milli"], instance["gpu_mem_mib"]) == ("share-1", 500, 8 * 1024)
    api.delete("pods", "team-a/infer-0")
    until(lambda: state_of(server, spec) == "released", "the deleted pod's reservation is released")


def bound_gang(server: Server, api: FakeKubeApi, group: str) -> tuple[list[dict[str, Any]], str]:
    """A gang of two pods (``gpuplace.io/gang-size``) placed and bound through the extender: its members and
    its job."""
    members = [api.put("pods", pod(f"{group}-{i}", gpus=2, scheduler="gpuplace",
                                   labels={"scheduling.x-k8s.io/pod-group": group},
                                   annotations={"gpuplace.io/gang-size": "2"})) for i in range(2)]

    def bind(member: dict[str, Any]) -> dict[str, Any]:
        meta = member["metadata"]
        nodes = httpx.post(f"{server.url}/k8s/extender/filter", timeout=60, json={
            "Pod": member, "NodeNames": sorted(machines(server))}).json()["NodeNames"]
        answer: dict[str, Any] = httpx.post(f"{server.url}/k8s/extender/bind", headers=KEY, timeout=300, json={
            "PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": nodes[0]}).json()
        return answer

    with ThreadPoolExecutor(2) as binds:  # a member's bind is held until every member's is asked
        answers = list(binds.map(bind, members))
    assert answers == [{"Error": ""}, {"Error": ""}]
    gang: str = api.get("pods", f"team-a/{group}-0")["metadata"]["annotations"]["gpuplace.io/job"]
    assert gang.startswith(f"gang:team-a:{group}:")
    return [api.get("pods", f"team-a/{m['metadata']['name']}") for m in members], gang


def gang_state(server: Server, gang: str) -> str:
    state: str = httpx.get(f"{server.url}/v1/jobs/{gang}", timeout=30).json()["state"]
    return state


def test_a_gang_is_counted_by_its_job_and_released_with_its_last_member(server: Server, api: FakeKubeApi) -> None:
    api.put("nodes", node("gang-1", gpus=8))
    until(lambda: "gang-1" in machines(server), "the node is a machine")
    members, gang = bound_gang(server, api, "gang-w")
    until(lambda: converged(server, api), "the state is the API server's")
    assert [state_of(server, m) for m in members] == [None, None]  # counted by the gang's job, not twice
    api.delete("pods", "team-a/gang-w-0")
    marker = api.put("pods", pod("gang-marker", gpus=1, node_name="gang-1"))  # followed after the deletion
    until(lambda: state_of(server, marker) == "running", "the pod after the deletion is counted")
    assert state_of(server, members[1]) is None  # its bind followed as well: still counted by the gang alone
    assert gang_state(server, gang) == "running"  # one member lives
    api.delete("pods", "team-a/gang-w-1")
    api.delete("pods", "team-a/gang-marker")
    until(lambda: gang_state(server, gang) == "released", "the gang's reservation is released with its last member")
    until(lambda: converged(server, api), "the state is the API server's")


def test_a_gang_whose_members_all_ended_unseen_is_released_at_the_next_list(server: Server,
                                                                           api: FakeKubeApi) -> None:
    api.put("nodes", node("gang-2", gpus=8))
    until(lambda: "gang-2" in machines(server), "the node is a machine")
    members, gang = bound_gang(server, api, "gang-x")
    until(lambda: converged(server, api), "the state is the API server's")
    lists = api.lists["pods"]
    with api.outage(error_event_for=("pods",)):
        for member in members:
            api.put("pods", {**member, "status": {**member["status"], "phase": "Failed"}})
    until(lambda: api.lists["pods"] > lists, "a new list")
    until(lambda: gang_state(server, gang) == "released", "the gang's reservation is released")
    until(lambda: converged(server, api), "the state is the API server's")


def test_a_node_removed_with_pods_on_it_releases_them(server: Server, api: FakeKubeApi) -> None:
    api.put("nodes", node("doomed-1", gpus=4))
    until(lambda: "doomed-1" in machines(server), "the node is a machine")
    specs = [api.put("pods", pod(f"doomed-job-{i}", gpus=2, node_name="doomed-1")) for i in range(2)]
    until(lambda: all(state_of(server, s) == "running" for s in specs), "both pods are counted")
    api.delete("nodes", "doomed-1")
    until(lambda: "doomed-1" not in machines(server), "the node is no machine any more")
    assert [state_of(server, s) for s in specs] == ["released", "released"]
    for s in specs:  # the pod garbage collector deletes them later: nothing changes
        api.delete("pods", f"team-a/{s['metadata']['name']}")
    until(lambda: converged(server, api), "the state is the API server's")


@pytest.mark.parametrize("told", ["an ERROR event", "an HTTP 410"])
def test_a_410_mid_watch_then_a_relist_converges(server: Server, api: FakeKubeApi, told: str) -> None:
    """The watches' history is compacted while changes are held back: either each open watch gets an
    ERROR event with code 410, or it is closed and its resumption, from the version it had seen, is an
    HTTP 410. Either way the follower lists again and comes to the API server's state."""
    tag = told.split()[-1].lower()
    api.put("nodes", node(f"gap-{tag}-1", gpus=8))
    until(lambda: f"gap-{tag}-1" in machines(server), "the node is a machine")
    first, ended = (api.put("pods", pod(f"gap-{tag}-{i}", node_name=f"gap-{tag}-1")) for i in range(2))
    until(lambda: state_of(server, first) == state_of(server, ended) == "running", "the pods are counted")
    lists, gone = dict(api.lists), sum(api.gone.values())
    with api.outage(error_event_for=("nodes", "pods") if told == "an ERROR event" else ()):  # none streamed
        api.delete("pods", f"team-a/gap-{tag}-0")
        api.put("pods", {**ended, "status": {**ended["status"], "phase": "Failed"}})
        api.put("nodes", node(f"gap-{tag}-2", gpus=4, rack=f"rack-{tag}"))
        late = api.put("pods", pod(f"gap-{tag}-2", gpus=4, node_name=f"gap-{tag}-2"))
        api.put("nodes", node(f"gap-{tag}-1", gpus=8, rack=f"rack-{tag}"))
    until(lambda: sum(api.gone.values()) > gone, "a watch was told its version is gone")
    until(lambda: api.lists["nodes"] > lists["nodes"] and api.lists["pods"] > lists["pods"], "a new list")
    until(lambda: converged(server, api), "the state is the API server's")
    assert (state_of(server, first), state_of(server, ended), state_of(server, late)) == (
        "released", "released", "running")
    assert machines(server)[f"gap-{tag}-1"]["rack"] == machines(server)[f"gap-{tag}-2"]["rack"] == f"rack-{tag}"
    until(lambda: following(server), "the follower says it follows")


def test_a_malformed_object_is_skipped(server: Server, api: FakeKubeApi) -> None:
    api.put("nodes", node("good-1", gpus=2))
    until(lambda: "good-1" in machines(server), "the node is a machine")
    UNREADABLE_NODES.update({"bad-cpu", "no-type"})
    api.put("nodes", node("bad-cpu", cpu="lots"))
    api.put("nodes", node("no-type", product=None))
    broken = api.put("pods", pod("broken-0", cpu="many", node_name="good-1"))
    nameless = pod("nameless-0", node_name="good-1")
    del nameless["metadata"]["uid"]
    api.put("pods", nameless)
    counted = api.put("pods", pod("after-0", gpus=1, node_name="good-1"))
    api.put("nodes", node("after-bad", gpus=2))
    api.put("nodes", node("good-1", gpus=2, cpu="lots"))  # unreadable now: its last readable state stays
    until(lambda: "after-bad" in machines(server) and state_of(server, counted) == "running",
          "what came after the malformed objects is followed")
    assert machines(server).keys().isdisjoint({"bad-cpu", "no-type"})
    assert state_of(server, broken) is None and machines(server)["good-1"]["gpus_allocated"] == 1
    log = server.stderr()
    assert "bad-cpu" in log and "no label nvidia.com/gpu.product" in log and "'many'" in log
    api.put("nodes", node("good-1", gpus=2))
    for name in ("broken-0", "nameless-0", "after-0"):
        api.delete("pods", f"team-a/{name}")
    for name in ("bad-cpu", "no-type"):
        api.delete("nodes", name)
    until(lambda: converged(server, api), "the state is the API server's")
    until(lambda: following(server), "the follower says it follows")


def test_the_follower_waits_for_the_api_server_with_a_growing_pause(tmp_path: Path) -> None:
    port = free_port()
    lonely = Server(follower_env(tmp_path, f"http://127.0.0.1:{port}")).start()
    try:
        ready = until(lambda: (r := httpx.get(f"{lonely.url}/readyz", timeout=30).json())["kubernetes"].startswith(
            "retrying in 2 s") and r, "the follower retries, after a longer pause")
        assert ready["status"] == "degraded" and "ConnectError" in ready["kubernetes"]
        late = FakeKubeApi(port).start()
        try:
            late.put("nodes", node("late-1", gpus=2))
            until(lambda: set(machines(lonely)) == {"late-1"}, "the node of the API server that came up")
            until(lambda: following(lonely), "the follower says it follows")
        finally:
            late.stop()
    finally:
        lonely.stop()


def test_serve_refuses_to_follow_from_several_workers(tmp_path: Path) -> None:
    env = follower_env(tmp_path, "http://127.0.0.1:9")
    out = subprocess.run([sys.executable, "-m", "service.cli", "serve", "--workers", "2"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "GPUPLACE_KUBE_FOLLOW runs in one process: use --workers 1" in out.stderr
