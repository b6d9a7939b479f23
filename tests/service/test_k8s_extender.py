"""The Kubernetes scheduler extender, spoken to as kube-scheduler would (Go field names), on a real
uvicorn server over the PAI cluster: on the API's port (bind with an API key) and on the extender's
own HTTPS listener (a client certificate instead; certificates from a throwaway CA). Bind's call to
the Kubernetes API goes to a local HTTP server that records it (no kube-apiserver on these machines)."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
import trustme

from service.k8s.pod import PodError, job_of_pod, quantity
from tests.service.conftest import API_KEY, REPO, Server, free_port, server_env

KEY = {"X-API-Key": API_KEY}


class Recorder(BaseHTTPRequestHandler):
    """The Kubernetes API's pods (``held``, by path) and the Bindings posted to it (``calls``)."""

    calls: ClassVar[list[tuple[str, dict[str, Any]]]] = []
    held: ClassVar[dict[str, dict[str, Any]]] = {}
    status = 201

    def do_GET(self) -> None:
        pod = Recorder.held.get(self.path)
        self.send_response(200 if pod is not None else 404)
        self.end_headers()
        self.wfile.write(json.dumps(pod or {"kind": "Status", "reason": "NotFound"}).encode())

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Recorder.calls.append((self.path, body))
        self.send_response(Recorder.status)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def apiserver() -> Iterator[str]:
    http = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{http.server_address[1]}"
    http.shutdown()


@dataclass
class Pki:
    """A throwaway CA, the listener's certificate and kube-scheduler's client certificate, as files."""

    folder: Path
    ca: trustme.CA

    def __post_init__(self) -> None:
        self.ca.cert_pem.write_to_path(str(self.folder / "ca.pem"))
        listener = self.ca.issue_cert("127.0.0.1", "localhost")
        listener.private_key_pem.write_to_path(str(self.folder / "listener.key"))
        listener.cert_chain_pems[0].write_to_path(str(self.folder / "listener.pem"))

    def env(self, port: int) -> dict[str, str]:
        return {"GPUPLACE_EXTENDER_PORT": str(port), "GPUPLACE_EXTENDER_TLS_CERT": str(self.folder / "listener.pem"),
                "GPUPLACE_EXTENDER_TLS_KEY": str(self.folder / "listener.key"),
                "GPUPLACE_EXTENDER_CLIENT_CA": str(self.folder / "ca.pem")}

    def client(self, signed_by: trustme.CA | None) -> httpx.Client:
        """An HTTPS client trusting the listener; with a client certificate of ``signed_by`` if given."""
        context = ssl.create_default_context(cafile=str(self.folder / "ca.pem"))
        if signed_by is not None:
            signed_by.issue_cert("kube-scheduler").configure_cert(context)
        return httpx.Client(verify=context, timeout=10.0)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"), trustme.CA())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, apiserver: str, pki: Pki) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("k8s")
    running = Server(server_env(home, f"sqlite:///{home / 'state.db'}", GPUPLACE_KUBE_API=apiserver,
                                GPUPLACE_KUBE_TOKEN_FILE=str(home / "absent"), **pki.env(free_port()))).start()
    yield running
    running.stop()


def extender_url(server: Server) -> str:
    return f"https://127.0.0.1:{server.env['GPUPLACE_EXTENDER_PORT']}/k8s/extender"


def pod(uid: str, gpus: int | None = 2, annotations: dict[str, str] | None = None, cpu: str = "4",
        name: str | None = None) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus is not None else {}
    return {"metadata": {"name": name or uid, "namespace": "team-a", "uid": uid, "annotations": annotations or {}},
            "spec": {"containers": [{"name": "main", "resources": {"limits": limits,
                                                                   "requests": {"cpu": cpu, "memory": "8Gi"}}}]}}


def held(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec``, now a pod the API server holds."""
    meta = spec["metadata"]
    Recorder.held[f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"] = spec
    return spec


def machines_of(server: Server, gpu_type: str, min_gpus: int = 2) -> list[str]:
    cluster = httpx.get(f"{server.url}/v1/cluster").json()
    return [m["name"] for m in cluster["per_machine"] if m["gpu_type"] == gpu_type and m["gpus"] >= min_gpus]


def test_quantities_and_pod_mapping() -> None:
    assert quantity("500m", "cpu") == 0.5 and quantity("4Gi", "memory") == 4 * 2**30 and quantity("1e3", "x") == 1000
    job = job_of_pod(pod("u0", annotations={"gpuplace.io/gpu-types": "V100, V100M32"}))
    task = job.tasks[0]
    assert job.job_id == "pod-u0" and task.gpu == 2 and task.cpu_cores == 4 and task.mem_gib == 8
    assert task.gpu_types == frozenset({"V100", "V100M32"})
    shared = job_of_pod(pod("u1", gpus=None, annotations={"gpuplace.io/gpu-share": "0.25"})).tasks[0]
    assert shared.gpu == 0.25
    tiny = job_of_pod(pod("u4", gpus=None, annotations={"gpuplace.io/gpu-share": "1e-13"})).tasks[0]
    assert tiny.gpu == 0.001  # placement's smallest share: one that rounded to none could not be placed
    with pytest.raises(PodError, match=r"requests.cpu: 'lots'"):
        job_of_pod(pod("u2", cpu="lots"))
    with pytest.raises(PodError, match="gpu-share"):
        job_of_pod(pod("u3", annotations={"gpuplace.io/gpu-share": "1.5"}))


def test_filter_with_node_names(server: Server) -> None:
    v100, t4 = machines_of(server, "V100")[0], machines_of(server, "T4")[0]
    args = {"Pod": pod("f1", annotations={"gpuplace.io/gpu-types": "V100"}), "Nodes": None,
            "NodeNames": [v100, t4, "not-ours"]}
    result = httpx.post(f"{server.url}/k8s/extender/filter", json=args).json()
    assert result["Error"] == "" and result["NodeNames"] == [v100] and result["Nodes"] is None
    assert "not in ['V100']" in result["FailedAndUnresolvableNodes"][t4]
    assert "not a machine" in result["FailedAndUnresolvableNodes"]["not-ours"]


def test_filter_with_a_node_list_and_a_pod_too_big_for_any_node(server: Server) -> None:
    names = machines_of(server, "T4")[:3]
    nodes = {"kind": "NodeList", "items": [{"metadata": {"name": n}} for n in names]}
    fits = httpx.post(f"{server.url}/k8s/extender/filter",
                      json={"Pod": pod("f2", gpus=1), "Nodes": nodes, "NodeNames": None}).json()
    assert [n["metadata"]["name"] for n in fits["Nodes"]["items"]] == names and fits["NodeNames"] is None
    huge = httpx.post(f"{server.url}/k8s/extender/filter",
                      json={"Pod": pod("f3", gpus=16), "Nodes": None, "NodeNames": names}).json()
    assert huge["NodeNames"] == [] and all("even with nothing running" in r
                                           for r in huge["FailedAndUnresolvableNodes"].values())
    bad = httpx.post(f"{server.url}/k8s/extender/filter",
                     json={"Pod": pod("f4", cpu="x"), "Nodes": None, "NodeNames": names})
    assert bad.status_code == 200 and "requests.cpu" in bad.json()["Error"]


def test_prioritize_scores_between_0_and_10(server: Server) -> None:
    names = [*machines_of(server, "V100")[:4], "not-ours"]
    scores = httpx.post(f"{server.url}/k8s/extender/prioritize",
                        json={"Pod": pod("p1", gpus=1), "Nodes": None, "NodeNames": names}).json()
    assert [s["Host"] for s in scores] == names
    assert all(0 <= s["Score"] <= 10 for s in scores) and scores[-1]["Score"] == 0
    assert max(s["Score"] for s in scores) == 10


def test_bind_reserves_then_creates_the_binding(server: Server) -> None:
    node = machines_of(server, "V100")[1]
    httpx.post(f"{server.url}/k8s/extender/filter", json={"Pod": held(pod("b1", name="trainer-0")),
                                                          "NodeNames": [node]})
    Recorder.calls.clear()
    answer = httpx.post(f"{server.url}/k8s/extender/bind", headers=KEY, json={
        "PodName": "trainer-0", "PodNamespace": "team-a", "PodUID": "b1", "Node": node}).json()
    assert answer == {"Error": ""}
    path, body = Recorder.calls[-1]
    assert path == "/api/v1/namespaces/team-a/pods/trainer-0/binding"
    assert body["kind"] == "Binding" and body["target"] == {"apiVersion": "v1", "kind": "Node", "name": node}
    stored = httpx.get(f"{server.url}/v1/jobs/pod-b1").json()
    assert stored["state"] == "running" and stored["allocation"]["instances"][0]["machine"] == node
    assert len(stored["allocation"]["instances"][0]["gpus"]) == 2


def test_bind_releases_the_reservation_when_the_api_refuses(server: Server) -> None:
    node = machines_of(server, "V100")[2]
    httpx.post(f"{server.url}/k8s/extender/filter", json={"Pod": held(pod("b2")), "NodeNames": [node]})
    Recorder.status = 500
    try:
        answer = httpx.post(f"{server.url}/k8s/extender/bind", headers=KEY, json={
            "PodName": "b2", "PodNamespace": "team-a", "PodUID": "b2", "Node": node}).json()
    finally:
        Recorder.status = 201
    assert "failed" in answer["Error"]
    assert httpx.get(f"{server.url}/v1/jobs/pod-b2").json()["state"] == "released"
    unknown = httpx.post(f"{server.url}/k8s/extender/bind", headers=KEY, json={
        "PodName": "ghost", "PodNamespace": "team-a", "PodUID": "ghost", "Node": node}).json()
    assert "reading pod team-a/ghost from the Kubernetes API failed" in unknown["Error"]
    assert httpx.get(f"{server.url}/v1/jobs/pod-ghost").status_code == 404


def test_bind_takes_the_demand_of_the_pod_the_api_server_holds(server: Server) -> None:
    """Filter is unauthenticated: whatever a caller said there, bind reserves what the pod asks for."""
    node = machines_of(server, "V100", min_gpus=8)[0]
    held(pod("t1", gpus=1))
    for gpus in (1, 8):  # a second caller's filter with the same uid and a larger demand
        httpx.post(f"{server.url}/k8s/extender/filter", json={"Pod": pod("t1", gpus=gpus), "NodeNames": [node]})
    for i in range(50):  # and a flood of other pods: nothing is remembered that bind depends on
        httpx.post(f"{server.url}/k8s/extender/filter", json={"Pod": pod(f"flood-{i}"), "NodeNames": [node]})
    answer = httpx.post(f"{server.url}/k8s/extender/bind", headers=KEY, json={
        "PodName": "t1", "PodNamespace": "team-a", "PodUID": "t1", "Node": node}).json()
    assert answer == {"Error": ""}
    gpus = httpx.get(f"{server.url}/v1/jobs/pod-t1").json()["allocation"]["instances"][0]["gpus"]
    assert len(gpus) == 1


def test_bind_refuses_a_pod_the_api_server_holds_under_another_uid(server: Server) -> None:
    node = machines_of(server, "V100")[5]
    held(pod("u-new", name="reborn"))
    answer = httpx.post(f"{server.url}/k8s/extender/bind", headers=KEY, json={
        "PodName": "reborn", "PodNamespace": "team-a", "PodUID": "u-old", "Node": node}).json()
    assert "has uid 'u-new', not 'u-old'" in answer["Error"]
    assert httpx.get(f"{server.url}/v1/jobs/pod-u-old").status_code == 404


def test_bind_on_the_api_port_needs_an_api_key(server: Server) -> None:
    node = machines_of(server, "V100")[3]
    httpx.post(f"{server.url}/k8s/extender/filter", json={"Pod": pod("k1"), "NodeNames": [node]})
    bind = {"PodName": "k1", "PodNamespace": "team-a", "PodUID": "k1", "Node": node}
    missing = httpx.post(f"{server.url}/k8s/extender/bind", json=bind)
    wrong = httpx.post(f"{server.url}/k8s/extender/bind", json=bind, headers={"X-API-Key": "guess"})
    assert missing.status_code == 401 and wrong.status_code == 403
    assert httpx.get(f"{server.url}/v1/jobs/pod-k1").status_code == 404  # nothing reserved


def test_the_extender_listener_takes_certified_calls_without_a_key(server: Server, pki: Pki) -> None:
    node = machines_of(server, "V100")[4]
    with pki.client(signed_by=pki.ca) as scheduler:
        fits = scheduler.post(f"{extender_url(server)}/filter", json={"Pod": held(pod("c1", name="worker-0")),
                                                                      "NodeNames": [node]}).json()
        assert fits["Error"] == "" and fits["NodeNames"] == [node]
        Recorder.calls.clear()
        bound = scheduler.post(f"{extender_url(server)}/bind", json={
            "PodName": "worker-0", "PodNamespace": "team-a", "PodUID": "c1", "Node": node})
        assert bound.status_code == 200 and bound.json() == {"Error": ""}
        assert Recorder.calls[-1][0] == "/api/v1/namespaces/team-a/pods/worker-0/binding"
        other = scheduler.post(extender_url(server).replace("/k8s/extender", "/v1/place"), json={})
        assert other.status_code == 404 and "only /k8s/extender/" in other.json()["detail"]
    assert httpx.get(f"{server.url}/v1/jobs/pod-c1").json()["state"] == "running"


@pytest.mark.parametrize("who", ["no certificate", "another CA"])
def test_the_extender_listener_refuses_a_client_without_the_cas_certificate(server: Server, pki: Pki,
                                                                            who: str) -> None:
    with (pki.client(signed_by=None if who == "no certificate" else trustme.CA()) as stranger,
          pytest.raises(httpx.TransportError)):
        stranger.post(f"{extender_url(server)}/filter", json={"Pod": pod("s1"), "NodeNames": []})


def test_serve_refuses_an_extender_listener_it_cannot_start(tmp_path: Path, pki: Pki) -> None:
    env = server_env(tmp_path, f"sqlite:///{tmp_path / 'state.db'}",
                     **{**pki.env(free_port()), "GPUPLACE_EXTENDER_CLIENT_CA": str(tmp_path / "missing-ca.pem")})
    out = subprocess.run([sys.executable, "-m", "service.cli", "serve", "--workers", "2"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "--workers 1" in out.stderr and f"GPUPLACE_EXTENDER_CLIENT_CA: no such file: {tmp_path}" in out.stderr
