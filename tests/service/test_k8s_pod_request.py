"""A pod's effective request as Kubernetes counts it: init containers, sidecars and overhead. The pods are
SYNTHETIC, written in the shape ``kubectl get pod -o json`` prints (status, managedFields, null fields)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from service.k8s.pod import PodError, effective_request, job_of_pod


def container(name: str, cpu: str | None = None, memory: str | None = None, gpus: str | None = None,
              **extra: Any) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    limits = {"nvidia.com/gpu": gpus} if gpus is not None else {}
    if gpus is not None:
        requests["nvidia.com/gpu"] = gpus
    return {"name": name, "image": f"registry.example/{name}:1.0", "imagePullPolicy": "IfNotPresent",
            "resources": {"requests": requests, "limits": limits} if requests or limits else {},
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                              "name": "kube-api-access-x", "readOnly": True}], **extra}


def kubectl_pod(containers: list[dict[str, Any]], init: list[dict[str, Any]] | None = None,
                overhead: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": containers, "dnsPolicy": "ClusterFirst", "enableServiceLinks": True, "nodeName": None,
        "preemptionPolicy": "PreemptLowerPriority", "priority": 0, "restartPolicy": "Never",
        "schedulerName": "gpuplace", "securityContext": {}, "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [{"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists",
                         "tolerationSeconds": 300}],
        "volumes": [{"name": "kube-api-access-x", "projected": {"defaultMode": 420, "sources": []}}],
    }
    if init is not None:
        spec["initContainers"] = init
    if overhead is not None:
        spec["overhead"] = overhead
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "train-0", "namespace": "ml", "uid": "3f1c2a9e-0000-4000-8000-000000000001",
                     "resourceVersion": "81234", "creationTimestamp": "2026-12-01T10:00:00Z",
                     "labels": {"app": "train"}, "annotations": None,
                     "managedFields": [{"apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}},
                                        "manager": "kubectl-create", "operation": "Update",
                                        "time": "2026-12-01T10:00:00Z"}]},
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": "Burstable",
                   "conditions": [{"type": "PodScheduled", "status": "False", "lastProbeTime": None,
                                   "lastTransitionTime": "2026-12-01T10:00:00Z", "reason": "Unschedulable"}]},
    }


def test_app_containers_add_up() -> None:
    pod = kubectl_pod([container("train", "4", "16Gi", "2"), container("logger", "500m", "512Mi")])
    assert effective_request(pod["spec"]) == (2.0, 4.5, 16.5)
    task = job_of_pod(pod).tasks[0]
    assert (task.gpu, task.cpu_cores, task.mem_gib) == (2.0, 4.5, 16.5)


def test_an_init_container_larger_than_the_app_sets_the_request() -> None:
    # init: 8 cores, 2 GiB, runs alone before the app (4 cores, 16 GiB): max per resource -> 8 cores, 16 GiB
    pod = kubectl_pod([container("train", "4", "16Gi", "1")], init=[container("unpack", "8", "2Gi")])
    assert effective_request(pod["spec"]) == (1.0, 8.0, 16.0)


def test_an_init_container_with_gpus_counts_even_when_the_app_asks_fewer() -> None:
    pod = kubectl_pod([container("serve", "1", "1Gi", "1")], init=[container("warmup", "1", "1Gi", "4")])
    assert effective_request(pod["spec"])[0] == 4.0


def test_sidecars_run_beside_the_app_and_later_init_containers() -> None:
    # sidecar (restartPolicy Always): 1 core, 1 GiB; then an init container of 6 cores runs beside it (7),
    # then the app (4 cores, 8 GiB) beside it (5 cores, 9 GiB): max -> 7 cores, 9 GiB
    sidecar = container("proxy", "1", "1Gi", restartPolicy="Always")
    pod = kubectl_pod([container("train", "4", "8Gi")], init=[sidecar, container("fetch", "6", "1Gi")])
    assert effective_request(pod["spec"]) == (0.0, 7.0, 9.0)
    # an init container before the sidecar does not run beside it
    pod = kubectl_pod([container("train", "4", "8Gi")], init=[container("fetch", "6", "1Gi"), sidecar])
    assert effective_request(pod["spec"]) == (0.0, 6.0, 9.0)


def test_overhead_is_added() -> None:
    pod = kubectl_pod([container("train", "4", "16Gi", "1")], init=[container("unpack", "8", "2Gi")],
                      overhead={"cpu": "250m", "memory": "120Mi"})
    gpus, cpu, mem = effective_request(pod["spec"])
    assert (gpus, cpu) == (1.0, 8.25) and mem == pytest.approx(16 + 120 / 1024)


@pytest.mark.parametrize(("change", "named"), [
    (lambda p: p["spec"].__setitem__("initContainers", {"name": "x"}), "Pod.spec.initContainers: expected a list"),
    (lambda p: p["spec"]["initContainers"].__setitem__(0, 5), "Pod.spec.initContainers[0]: expected an object"),
    (lambda p: p["spec"]["initContainers"][0]["resources"]["requests"].__setitem__("cpu", "lots"),
     "Pod.spec.initContainers[0].resources.requests.cpu: 'lots' is not a Kubernetes quantity"),
    (lambda p: p["spec"].__setitem__("overhead", {"memory": "1 GB"}),
     "Pod.spec.overhead.memory: '1 GB' is not a Kubernetes quantity"),
])
def test_unreadable_init_containers_and_overhead_are_named(change: Any, named: str) -> None:
    pod = copy.deepcopy(kubectl_pod([container("train", "4", "16Gi", "1")], init=[container("unpack", "8", "2Gi")]))
    change(pod)
    with pytest.raises(PodError, match=named.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        job_of_pod(pod)
