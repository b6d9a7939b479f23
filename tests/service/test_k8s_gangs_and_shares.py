"""Gangs, GPU shares that reach the pod, and node lists of realistic size, through the extender as
kube-scheduler drives it, on a real server over the PAI cluster.

The harness plays kube-scheduler (``k8s.io/kube-scheduler/extender/v1``'s ``ExtenderArgs``,
``ExtenderFilterResult``, ``HostPriorityList``, ``ExtenderBindingArgs``): it sends the extender only the
pods that ask one of the ``managedResources`` of the deployed configuration (deploy/kubernetes), filters,
prioritizes, picks the best node, and binds on a thread of its own, as kube-scheduler's binding cycles
run beside its scheduling. The Kubernetes API is a local HTTP server holding the pods (SYNTHETIC, in
the shape ``kubectl get pod -o json`` prints) and PodGroups, applying merge patches and Bindings."""

from __future__ import annotations

import copy
import json
import re
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from service.k8s.pod import PodError, pod_demand
from tests.service.conftest import API_KEY, Server, server_env
from tests.service.kube_api import merged
from tests.test_kubernetes_manifests import scheduler_config

KEY = {"X-API-Key": API_KEY}
GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


# the Kubernetes API server


@dataclass
class FakeApi:
    """Pods and PodGroups by (namespace, name); every PATCH and Binding, in order; answers to fail with."""

    pods: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    groups: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)
    fail: dict[str, int] = field(default_factory=dict)
    """HTTP method -> the status to answer PATCHes or POSTs with instead."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def hold(self, pod: dict[str, Any]) -> dict[str, Any]:
        meta = pod["metadata"]
        with self.lock:
            self.pods[(meta["namespace"], meta["name"])] = pod
        return pod

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        with self.lock:
            return copy.deepcopy(self.pods[(namespace, name)])

    def bindings(self) -> list[tuple[str, str]]:
        """(pod path, node) of every Binding created."""
        with self.lock:
            return [(path, body["target"]["name"]) for method, path, body in self.calls
                    if method == "POST" and path.endswith("/binding")]

    def handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> dict[str, Any]:
                loaded: dict[str, Any] = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                return loaded

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                if m := re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)", url.path):
                    with api.lock:
                        pod = api.pods.get((m[1], m[2]))
                    self._answer(200 if pod else 404, pod or {"kind": "Status", "code": 404})
                elif m := re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods", url.path):
                    key, _, value = parse_qs(url.query)["labelSelector"][0].partition("=")
                    with api.lock:
                        items = [p for (ns, _), p in api.pods.items()
                                 if ns == m[1] and (p["metadata"].get("labels") or {}).get(key) == value]
                    self._answer(200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items})
                elif m := re.fullmatch(r"/apis/scheduling\.x-k8s\.io/v1alpha1/namespaces/([^/]+)/podgroups/([^/]+)",
                                       url.path):
                    group = api.groups.get((m[1], m[2]))
                    self._answer(200 if group else 404, group or {"kind": "Status", "code": 404})
                else:
                    self._answer(404, {"kind": "Status", "code": 404})

            def do_PATCH(self) -> None:
                body = self._body()
                m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)", self.path)
                assert m and self.headers["Content-Type"] == "application/merge-patch+json", self.path
                with api.lock:
                    api.calls.append(("PATCH", self.path, body))
                    pod = api.pods.get((m[1], m[2]))
                    if "PATCH" in api.fail:
                        status = api.fail["PATCH"]
                    elif pod is None:
                        status = 404
                    elif body["metadata"].get("uid") != pod["metadata"]["uid"]:
                        status = 409
                    else:
                        api.pods[(m[1], m[2])] = pod = merged(pod, body)
                        status = 200
                self._answer(status, pod if status == 200 else {"kind": "Status", "code": status})

            def do_POST(self) -> None:
                body = self._body()
                m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/binding", self.path)
                assert m, self.path
                with api.lock:
                    api.calls.append(("POST", self.path, body))
                    status = api.fail.get("POST", 201)
                    pod = api.pods.get((m[1], m[2]))
                    if status == 201 and pod is not None:
                        pod["spec"]["nodeName"] = body["target"]["name"]
                self._answer(status, {"kind": "Status", "code": status})

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


@pytest.fixture(scope="module")
def api() -> Iterator[tuple[FakeApi, str]]:
    fake = FakeApi()
    http = ThreadingHTTPServer(("127.0.0.1", 0), fake.handler())
    threading.Thread(target=http.serve_forever, daemon=True).start()
    yield fake, f"http://127.0.0.1:{http.server_address[1]}"
    http.shutdown()


def extender_server(home: Any, api_url: str, **extra: str) -> Server:
    return Server(server_env(home, f"sqlite:///{home / 'state.db'}", GPUPLACE_KUBE_API=api_url,
                             GPUPLACE_KUBE_TOKEN_FILE=str(home / "absent"), **extra))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, api: tuple[FakeApi, str]) -> Iterator[Server]:
    running = extender_server(tmp_path_factory.mktemp("gangs"), api[1]).start()
    yield running
    running.stop()


# objects as kubectl prints them


def kubectl_pod(name: str, uid: str, namespace: str = "ml", limits: dict[str, str] | None = None,
                cpu: str = "4", memory: str = "16Gi", labels: dict[str, str] | None = None,
                annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": "4711",
                     "creationTimestamp": "2026-12-01T10:00:00Z", "generateName": f"{name.rsplit('-', 1)[0]}-",
                     "labels": {"app": "train", **(labels or {})}, "annotations": annotations,
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name.rsplit("-", 1)[0],
                                          "uid": f"owner-{uid}", "controller": True, "blockOwnerDeletion": True}]},
        "spec": {
            "containers": [{
                "name": "main", "image": "registry.example/train:2.3", "imagePullPolicy": "IfNotPresent",
                "command": ["python", "-m", "train"], "env": [{"name": "WORLD_SIZE", "value": "8"}],
                "resources": {"limits": dict(limits or {}),
                              "requests": {"cpu": cpu, "memory": memory, **(limits or {})}},
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                                  "name": "kube-api-access-x", "readOnly": True}]}],
            "dnsPolicy": "ClusterFirst", "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0, "restartPolicy": "Never", "schedulerName": "gpuplace", "securityContext": {},
            "serviceAccount": "default", "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
            "tolerations": [{"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists",
                             "tolerationSeconds": 300},
                            {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}],
            "volumes": [{"name": "kube-api-access-x", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}]},
        "status": {"phase": "Pending", "qosClass": "Burstable", "conditions": [
            {"type": "PodScheduled", "status": "False", "lastProbeTime": None,
             "lastTransitionTime": "2026-12-01T10:00:00Z", "reason": "Unschedulable",
             "message": "0/1897 nodes are available"}]},
    }


def pod_group(namespace: str, name: str, min_member: int, timeout_s: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": min_member}
    if timeout_s is not None:
        spec["scheduleTimeoutSeconds"] = timeout_s
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace, "uid": f"pg-{name}", "generation": 1,
                         "creationTimestamp": "2026-12-01T10:00:00Z"},
            "spec": spec, "status": {"phase": "Pending", "scheduled": 0}}


def kubectl_node(name: str, gpu_type: str, gpus: int, i: int) -> dict[str, Any]:
    """A node as ``kubectl get node -o json`` prints it: GPU feature discovery's and NFD's labels, the
    images the kubelet reports, its conditions (about 20 KB)."""
    features = {f"feature.node.kubernetes.io/cpu-cpuid.{f}": "true" for f in (
        "ADX", "AESNI", "AVX", "AVX2", "AVX512BW", "AVX512CD", "AVX512DQ", "AVX512F", "AVX512VL", "AVX512VNNI",
        "CMPXCHG8", "FMA3", "FXSR", "FXSROPT", "HYPERVISOR", "LAHF", "MOVBE", "MPX", "OSXSAVE", "SYSCALL", "SYSEE",
        "VMX", "X87", "XGETBV1", "XSAVE", "XSAVEC", "XSAVEOPT", "XSAVES")}
    labels = {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
              "node.kubernetes.io/instance-type": f"gpu.{gpus}x{gpu_type.lower()}",
              "topology.kubernetes.io/region": "region-1", "topology.kubernetes.io/zone": f"zone-{i % 3}",
              "nvidia.com/gpu.product": gpu_type, "nvidia.com/gpu.count": str(gpus),
              "nvidia.com/gpu.memory": "16384", "nvidia.com/cuda.driver.major": "550",
              "nvidia.com/cuda.runtime.major": "12", "nvidia.com/gfd.timestamp": "1733040000",
              "gpushare": "true", **features}
    images = [{"names": [f"registry.example/team-{k}/image-{k}@sha256:{(str(i) + str(k) * 64)[:64]}",
                         f"registry.example/team-{k}/image-{k}:v{k}.{i % 10}"],
               "sizeBytes": 1_000_000 * (k + 1)} for k in range(66)]
    conditions = [{"type": t, "status": s, "lastHeartbeatTime": "2026-12-01T10:00:00Z",
                   "lastTransitionTime": "2026-11-01T10:00:00Z", "reason": r, "message": msg}
                  for t, s, r, msg in (("MemoryPressure", "False", "KubeletHasSufficientMemory",
                                        "kubelet has sufficient memory available"),
                                       ("DiskPressure", "False", "KubeletHasNoDiskPressure",
                                        "kubelet has no disk pressure"),
                                       ("PIDPressure", "False", "KubeletHasSufficientPID",
                                        "kubelet has sufficient PID available"),
                                       ("Ready", "True", "KubeletReady", "kubelet is posting ready status"))]
    capacity = {"cpu": "96", "ephemeral-storage": "1966788624Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
                "memory": "791242580Ki", "nvidia.com/gpu": str(gpus), "aliyun.com/gpu-mem": str(16 * gpus),
                "aliyun.com/gpu-count": str(gpus), "pods": "110"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": f"node-uid-{i:08d}", "resourceVersion": str(900000 + i),
                     "creationTimestamp": "2026-11-01T10:00:00Z", "labels": labels,
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                     "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                                     "csi.volume.kubernetes.io/nodeid": json.dumps({"csi.example.com": name}),
                                     "nfd.node.kubernetes.io/feature-labels": ",".join(sorted(features)),
                                     "projectcalico.org/IPv4Address": f"10.{i // 250}.{i % 250}.1/16"}},
        "spec": {"podCIDR": f"192.168.{i % 256}.0/24", "podCIDRs": [f"192.168.{i % 256}.0/24"],
                 "providerID": f"example://region-1/{name}",
                 "taints": [{"effect": "NoSchedule", "key": "nvidia.com/gpu", "value": "present"}]},
        "status": {"addresses": [{"type": "InternalIP", "address": f"10.{i // 250}.{i % 250}.1"},
                                 {"type": "Hostname", "address": name}],
                   "allocatable": {**capacity, "cpu": "95", "memory": "790144852Ki"}, "capacity": capacity,
                   "conditions": conditions, "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                   "images": images,
                   "nodeInfo": {"architecture": "amd64", "bootID": f"boot-{i}", "containerRuntimeVersion": "containerd://1.7.22",
                                "kernelVersion": "5.15.0-122-generic", "kubeProxyVersion": "v1.31.2",
                                "kubeletVersion": "v1.31.2", "machineID": f"machine-{i:032d}",
                                "operatingSystem": "linux", "osImage": "Ubuntu 22.04.5 LTS",
                                "systemUUID": f"uuid-{i}"}},
    }


# kube-scheduler


def managed_resources() -> set[str]:
    return {r["name"] for r in scheduler_config()["extenders"][0]["managedResources"]}


@dataclass
class Outcome:
    """What kube-scheduler made of one pod: whether it called the extender, the filter's answer, the node
    it chose and its bind (a future: the binding cycle runs on its own)."""

    sent: bool
    filtered: dict[str, Any] = field(default_factory=dict)
    node: str | None = None
    bind: Future[dict[str, Any]] | None = None


class KubeScheduler:
    """kube-scheduler's side of the extender protocol (nodeCacheCapable: node names)."""

    def __init__(self, url: str, nodes: list[str]) -> None:
        self.url, self.nodes, self.managed = url, nodes, managed_resources()
        self.binding = ThreadPoolExecutor(max_workers=32)

    def interested(self, pod: dict[str, Any]) -> bool:
        """kube-scheduler's ``IsInterested``: the pod asks one of the managed resources (requests or
        limits, of a container or an init container)."""
        spec = pod["spec"]
        for container in [*spec.get("containers", []), *spec.get("initContainers", [])]:
            resources = container.get("resources") or {}
            asked = {*(resources.get("requests") or {}), *(resources.get("limits") or {})}
            if asked & self.managed:
                return True
        return False

    def schedule(self, pod: dict[str, Any]) -> Outcome:
        if not self.interested(pod):
            return Outcome(sent=False)
        args = {"Pod": pod, "Nodes": None, "NodeNames": self.nodes}
        filtered = httpx.post(f"{self.url}/k8s/extender/filter", json=args, timeout=120).json()
        assert filtered["Error"] == "", filtered["Error"]
        if not filtered["NodeNames"]:
            return Outcome(sent=True, filtered=filtered)
        args["NodeNames"] = filtered["NodeNames"]
        scores = httpx.post(f"{self.url}/k8s/extender/prioritize", json=args, timeout=120).json()
        best = max(scores, key=lambda s: s["Score"])["Host"]  # ties: the first, as the list came
        meta = pod["metadata"]
        binding = {"PodName": meta["name"], "PodNamespace": meta["namespace"], "PodUID": meta["uid"], "Node": best}
        return Outcome(True, filtered, best, self.binding.submit(self.bind, binding))

    def bind(self, binding: dict[str, Any]) -> dict[str, Any]:
        answer: dict[str, Any] = httpx.post(f"{self.url}/k8s/extender/bind", json=binding, headers=KEY,
                                            timeout=300).json()
        return answer


@pytest.fixture(scope="module")
def cluster(server: Server) -> list[dict[str, Any]]:
    machines: list[dict[str, Any]] = httpx.get(f"{server.url}/v1/cluster").json()["per_machine"]
    return machines


@pytest.fixture(scope="module")
def scheduler(server: Server, cluster: list[dict[str, Any]]) -> KubeScheduler:
    return KubeScheduler(server.url, [m["name"] for m in cluster])


def job(server: Server, job_id: str) -> dict[str, Any]:
    found: dict[str, Any] = httpx.get(f"{server.url}/v1/jobs/{job_id}").json()
    return found


def gang_jobs(server: Server, namespace: str, group: str) -> dict[str, str]:
    """Job id -> state of every placement of the gang."""
    rows = httpx.get(f"{server.url}/v1/jobs", params={"after": "gang:", "limit": 1000}).json()["jobs"]
    return {r["job_id"]: r["state"] for r in rows if r["job_id"].startswith(f"gang:{namespace}:{group}:")}


def members(api: FakeApi, namespace: str, group: str, count: int, **asks: Any) -> list[dict[str, Any]]:
    return [api.hold(kubectl_pod(f"{group}-{i}", f"{group}-uid-{i}", namespace, labels={GROUP_LABEL: group},
                                 **asks)) for i in range(count)]


# tests


def test_the_deployed_scheduler_sends_the_share_resource_and_not_a_pod_asking_none() -> None:
    harness = KubeScheduler("http://unused", [])
    shares = kubectl_pod("s-0", "s0", limits={"aliyun.com/gpu-mem": "8"})
    annotated = kubectl_pod("s-1", "s1", annotations={"gpuplace.io/gpu-share": "0.5"})
    assert {"nvidia.com/gpu", "aliyun.com/gpu-mem"} <= harness.managed
    assert harness.interested(shares) and not harness.interested(annotated)


def test_a_share_of_gpu_memory_is_the_share_of_the_gpu_it_lands_on() -> None:
    demand = pod_demand(kubectl_pod("m-0", "m0", limits={"aliyun.com/gpu-mem": "8"}, cpu="2", memory="8Gi"))
    assert demand.per_node and demand.shares_gpu and demand.shared_gib == 8
    on_16, on_32, on_8 = (demand.job(memory).tasks[0] for memory in (16.0, 32.0, 8.0))
    assert (on_16.gpu, on_32.gpu, on_8.gpu) == (0.5, 0.25, 1.0) and on_16.gpu_mem_gib == 8
    assert demand.misfit(4.0) == "asks 8 GiB of one GPU's memory (aliyun.com/gpu-mem); the node's GPUs have 4 GiB"
    with pytest.raises(PodError, match="depends on the memory of the node's GPUs"):
        demand.job()
    told = pod_demand(kubectl_pod("m-1", "m1", limits={"aliyun.com/gpu-mem": "8"},
                                  annotations={"gpuplace.io/gpu-share": "0.1"}))
    assert not told.per_node and told.job().tasks[0].gpu == 0.1 and told.job().tasks[0].gpu_mem_gib == 8
    with pytest.raises(PodError, match="not a whole number"):
        pod_demand(kubectl_pod("m-2", "m2", limits={"aliyun.com/gpu-mem": "500m"}))


def test_a_gang_of_8_is_placed_whole_and_each_member_bound_to_its_planned_node(
        api: tuple[FakeApi, str], server: Server, scheduler: KubeScheduler, cluster: list[dict[str, Any]]) -> None:
    fake, _ = api
    fake.groups[("ml", "train")] = pod_group("ml", "train", 8)
    pods = members(fake, "ml", "train", 8, limits={"nvidia.com/gpu": "4"},
                   annotations={"gpuplace.io/gpu-types": "V100"})
    outcomes = [scheduler.schedule(pods[0])]
    (job_id,) = gang_jobs(server, "ml", "train")  # the first member's filter placed the whole gang
    plan = [p["machine"] for p in job(server, job_id)["allocation"]["instances"]]
    assert len(plan) == 8 and outcomes[0].filtered["NodeNames"] == [plan[0]]  # its instance's node only
    for pod in pods[1:7]:
        outcomes.append(scheduler.schedule(pod))
    # each member filtered had an instance set aside, whether its bind has arrived yet or not
    assert Counter(o.node for o in outcomes) == Counter(plan[:7])
    assert fake.bindings() == []  # seven binds held: the gang is not whole yet
    # a bind to a node outside the plan is refused at once, with the plan's free nodes named
    elsewhere = next(m["name"] for m in cluster if m["gpu_type"] == "V100" and m["name"] not in plan)
    wrong = scheduler.bind({"PodName": "train-7", "PodNamespace": "ml", "PodUID": "train-uid-7", "Node": elsewhere})
    assert f"node {elsewhere} is not in gang ml/train's plan" in wrong["Error"]
    outcomes.append(scheduler.schedule(pods[7]))
    assert [o.bind.result(timeout=300) for o in outcomes if o.bind] == [{"Error": ""}] * 8
    bound = dict(fake.bindings())
    assert len(bound) == 8
    stored = job(server, job_id)
    assert stored["state"] == "running" and stored["details"]["gang"]["size"] == 8
    instances = stored["allocation"]["instances"]
    for outcome, pod in zip(outcomes, pods, strict=True):
        held = fake.pod("ml", pod["metadata"]["name"])
        annotations = held["metadata"]["annotations"]
        assert annotations["gpuplace.io/job"] == job_id
        planned = instances[int(annotations["gpuplace.io/gang-instance"])]["machine"]
        assert outcome.node == planned == held["spec"]["nodeName"]
    assert sorted(int(fake.pod("ml", p["metadata"]["name"])["metadata"]["annotations"]["gpuplace.io/gang-instance"])
                  for p in pods) == list(range(8))
    assert Counter(bound.values()) == Counter(plan)


def test_a_gang_that_cannot_be_placed_whole_binds_nobody(api: tuple[FakeApi, str], server: Server,
                                                         scheduler: KubeScheduler,
                                                         cluster: list[dict[str, Any]]) -> None:
    fake, _ = api
    v100 = sum(1 for m in cluster if m["gpu_type"] == "V100" and m["gpus"] == 8)
    size = v100 + 1  # each member fits a V100 node alone; all of them do not fit the V100 nodes
    before = len(fake.bindings())
    pods = [fake.hold(kubectl_pod(f"wide-{i}", f"wide-uid-{i}", limits={"nvidia.com/gpu": "8"},
                                  labels={GROUP_LABEL: "wide"},
                                  annotations={"gpuplace.io/gang-size": str(size), "gpuplace.io/gpu-types": "V100"}))
            for i in range(size)]
    for pod in pods[:3]:  # kube-scheduler would go on trying each: every answer is the same
        outcome = scheduler.schedule(pod)
        assert outcome.sent and outcome.bind is None
        reasons = set(outcome.filtered["FailedAndUnresolvableNodes"].values())
        assert len(reasons) == 1 and f"gang ml/wide ({size} pods) cannot be placed whole" in reasons.pop()
    assert gang_jobs(server, "ml", "wide") == {} and len(fake.bindings()) == before


def test_a_share_pod_is_filtered_bound_and_told_its_gpu(api: tuple[FakeApi, str], server: Server,
                                                        scheduler: KubeScheduler) -> None:
    fake, _ = api
    pod = fake.hold(kubectl_pod("infer-0", "share-uid-0", limits={"aliyun.com/gpu-mem": "8"}, cpu="2", memory="8Gi",
                                annotations={"gpuplace.io/gpu-types": "V100M32"}))
    outcome = scheduler.schedule(pod)
    assert outcome.sent and outcome.bind is not None and outcome.bind.result(timeout=300) == {"Error": ""}
    stored = job(server, "pod-share-uid-0")
    (instance,) = stored["allocation"]["instances"]
    assert instance["machine"] == outcome.node and len(instance["gpus"]) == 1
    assert instance["gpu_milli"] == 250 and instance["gpu_mem_mib"] == 8 * 1024  # 8 of a V100M32's 32 GiB
    calls = [(method, path) for method, path, _ in fake.calls if "/pods/infer-0" in path]
    assert calls == [("PATCH", "/api/v1/namespaces/ml/pods/infer-0"),
                     ("POST", "/api/v1/namespaces/ml/pods/infer-0/binding")]  # annotated before it is bound
    annotations = fake.pod("ml", "infer-0")["metadata"]["annotations"]
    assert annotations["ALIYUN_COM_GPU_MEM_IDX"] == annotations["gpuplace.io/gpu-index"] == str(instance["gpus"][0])
    assert annotations["ALIYUN_COM_GPU_MEM_POD"] == "8" and annotations["ALIYUN_COM_GPU_MEM_ASSIGNED"] == "false"
    assert annotations["ALIYUN_COM_GPU_MEM_ASSUME_TIME"].isdigit()
    # the same ask on a 16 GiB GPU is half of it
    half = fake.hold(kubectl_pod("infer-1", "share-uid-1", limits={"aliyun.com/gpu-mem": "8"}, cpu="2", memory="8Gi",
                                 annotations={"gpuplace.io/gpu-types": "T4"}))
    assert scheduler.schedule(half).bind.result(timeout=300) == {"Error": ""}  # type: ignore[union-attr]
    assert job(server, "pod-share-uid-1")["allocation"]["instances"][0]["gpu_milli"] == 500
    # a share asked by annotation alone asks no managed resource: kube-scheduler never sends it
    assert not scheduler.schedule(fake.hold(kubectl_pod("infer-2", "share-uid-2", annotations={
        "gpuplace.io/gpu-share": "0.5"}))).sent


def test_a_share_too_large_for_a_nodes_gpus_is_unresolvable_there(server: Server,
                                                                   cluster: list[dict[str, Any]]) -> None:
    misc = next(m["name"] for m in cluster if m["gpu_type"] == "MISC")
    v100m32 = next(m["name"] for m in cluster if m["gpu_type"] == "V100M32")
    cpu = next(m["name"] for m in cluster if m["gpus"] == 0)
    args = {"Pod": kubectl_pod("big-0", "big-0", limits={"aliyun.com/gpu-mem": "12"}), "Nodes": None,
            "NodeNames": [misc, v100m32, cpu]}
    answer = httpx.post(f"{server.url}/k8s/extender/filter", json=args).json()
    assert answer["NodeNames"] == [v100m32]
    assert "node's GPUs have 8 GiB" in answer["FailedAndUnresolvableNodes"][misc]
    assert "no GPUs" in answer["FailedAndUnresolvableNodes"][cpu]


def test_a_failed_annotation_patch_releases_the_reservation(api: tuple[FakeApi, str], server: Server,
                                                            scheduler: KubeScheduler) -> None:
    fake, _ = api
    pod = fake.hold(kubectl_pod("infer-9", "share-uid-9", limits={"aliyun.com/gpu-mem": "4"}))
    bindings = len(fake.bindings())
    fake.fail["PATCH"] = 500
    try:
        outcome = scheduler.schedule(pod)
        assert outcome.bind is not None
        answer = outcome.bind.result(timeout=300)
    finally:
        del fake.fail["PATCH"]
    assert "writing the annotations of ml/infer-9" in answer["Error"]
    assert job(server, "pod-share-uid-9")["state"] == "released" and len(fake.bindings()) == bindings


def test_a_gang_whose_members_stop_arriving_releases_its_reservation(api: tuple[FakeApi, str], server: Server,
                                                                     scheduler: KubeScheduler) -> None:
    fake, _ = api
    fake.groups[("ml", "stall")] = pod_group("ml", "stall", 4, timeout_s=2)
    pods = members(fake, "ml", "stall", 4, limits={"nvidia.com/gpu": "2"})
    bindings = len(fake.bindings())
    early = [scheduler.schedule(pod) for pod in pods[:2]]  # the other two never come
    answers = [o.bind.result(timeout=300)["Error"] for o in early if o.bind]
    released = gang_jobs(server, "ml", "stall")
    assert len(answers) == 2 and released and set(released.values()) == {"released"}
    for answer in answers:
        assert re.search(r"[12] of 4 members arrived within 2 s; its reservation gang:ml:stall:\w+ is released",
                         answer), answer
    assert len(fake.bindings()) == bindings  # nobody bound
    # the PodGroup waits longer now and kube-scheduler tries all four again: the gang is placed anew, bound whole
    fake.groups[("ml", "stall")] = pod_group("ml", "stall", 4)
    again = [scheduler.schedule(pod) for pod in pods]
    assert [o.bind.result(timeout=300) for o in again if o.bind] == [{"Error": ""}] * 4
    after = gang_jobs(server, "ml", "stall")
    assert sorted(after.values()) == ["released"] * len(released) + ["running"]


def test_a_member_asking_otherwise_than_its_gang_is_refused(api: tuple[FakeApi, str], server: Server,
                                                            scheduler: KubeScheduler) -> None:
    fake, _ = api
    fake.groups[("ml", "odd")] = pod_group("ml", "odd", 2)
    first, odd, last = members(fake, "ml", "odd", 3, limits={"nvidia.com/gpu": "1"})
    odd["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"
    held = scheduler.schedule(first)
    refused = scheduler.schedule(odd)
    reasons = refused.filtered["FailedAndUnresolvableNodes"].values()
    assert refused.bind is None and reasons
    assert all("asks 2 GPU" in r and "members of a gang must ask the same" in r for r in reasons)
    completing = scheduler.schedule(last)
    assert [o.bind.result(timeout=300) for o in (held, completing) if o.bind] == [{"Error": ""}] * 2


def test_the_extender_takes_a_list_of_1000_nodes_as_kubectl_prints_them(server: Server,
                                                                       cluster: list[dict[str, Any]]) -> None:
    gpu = [m for m in cluster if m["gpus"]][:1000]
    nodes: dict[str, Any] = {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
             "items": [kubectl_node(m["name"], m["gpu_type"], m["gpus"], i) for i, m in enumerate(gpu)]}
    args = {"Pod": kubectl_pod("one-0", "list-uid-0", limits={"nvidia.com/gpu": "1"}), "Nodes": nodes,
            "NodeNames": None}
    body = json.dumps(args).encode()
    assert len(body) > 1_000_000 * 15  # 1,000 nodes of about 20 KB: far above the API's own limit
    filtered = httpx.post(f"{server.url}/k8s/extender/filter", content=body, timeout=300,
                          headers={"Content-Type": "application/json"})
    assert filtered.status_code == 200, filtered.text[:300]
    answer = filtered.json()
    passing = answer["Nodes"]["items"]
    assert answer["Error"] == "" and answer["NodeNames"] is None and len(passing) > 900
    assert passing[0] == nodes["items"][[m["name"] for m in gpu].index(passing[0]["metadata"]["name"])]
    scores = httpx.post(f"{server.url}/k8s/extender/prioritize", content=body, timeout=300,
                        headers={"Content-Type": "application/json"})
    assert scores.status_code == 200 and [s["Host"] for s in scores.json()] == [m["name"] for m in gpu]
    # the rest of the API keeps its own limit
    other = httpx.post(f"{server.url}/v1/predict", content=body, headers={**KEY, "Content-Type": "application/json"})
    assert other.status_code == 413 and "limit 1000000 bytes" in other.text


def test_a_restart_in_the_middle_of_a_gang(tmp_path: Any, api: tuple[FakeApi, str]) -> None:
    """Three of four members held when the server is killed: their binds fail, kube-scheduler queues them
    again; the restarted server adopts the reservation from the store, and the gang completes on it."""
    fake, url = api
    fake.groups[("ml", "restart")] = pod_group("ml", "restart", 4)
    pods = members(fake, "ml", "restart", 4, limits={"nvidia.com/gpu": "8"}, annotations={
        "gpuplace.io/gpu-types": "V100M32"})
    running = extender_server(tmp_path, url).start()
    try:
        nodes = [m["name"] for m in httpx.get(f"{running.url}/v1/cluster").json()["per_machine"]]
        scheduler = KubeScheduler(running.url, nodes)
        held = [scheduler.schedule(pod) for pod in pods[:3]]
        (job_id,) = gang_jobs(running, "ml", "restart")
        plan = Counter(p["machine"] for p in job(running, job_id)["allocation"]["instances"])
        running.kill()
        for outcome in held:
            assert outcome.bind is not None
            with pytest.raises(httpx.TransportError):
                outcome.bind.result(timeout=300)
        assert not [b for b in fake.bindings() if "/pods/restart-" in b[0]]
        running.start()
        assert gang_jobs(running, "ml", "restart") == {job_id: "running"}
        again = [scheduler.schedule(pod) for pod in pods]
        assert [o.bind.result(timeout=300) for o in again if o.bind] == [{"Error": ""}] * 4
        assert Counter(node for path, node in fake.bindings() if "/pods/restart-" in path) == plan
        assert gang_jobs(running, "ml", "restart") == {job_id: "running"}
    finally:
        running.stop()
