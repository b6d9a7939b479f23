"""Nodes and pods as ``kubectl get -o json`` prints them: status, managed fields, owner references, the
service-account volume, and some null fields."""

from __future__ import annotations

import uuid
from typing import Any

STAMP = "2025-03-04T09:12:41Z"


def _managed(manager: str, fields: dict[str, Any], subresource: str | None = None) -> dict[str, Any]:
    entry = {"apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": fields, "manager": manager,
             "operation": "Update", "time": STAMP}
    return {**entry, "subresource": subresource} if subresource else entry


def node(name: str, gpus: int = 8, product: str | None = "Tesla-V100-SXM2-16GB", gpu_memory: str | None = "16384",
         cpu: str = "95900m", memory: str = "394758220Ki", rack: str | None = None,
         zone: str = "zone-a") -> dict[str, Any]:
    labels = {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/instance-type": "p3.16xlarge",
              "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name,
              "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "p3.16xlarge",
              "topology.kubernetes.io/region": "region-1", "topology.kubernetes.io/zone": zone}
    if gpus:
        labels |= {"nvidia.com/gpu.count": str(gpus), "nvidia.com/gpu.present": "true",
                   "nvidia.com/cuda.driver.major": "550"}
        if product is not None:
            labels["nvidia.com/gpu.product"] = product
        if gpu_memory is not None:
            labels["nvidia.com/gpu.memory"] = gpu_memory
    if rack is not None:
        labels["topology.gpuplace.io/rack"] = rack
    allocatable = {"cpu": cpu, "ephemeral-storage": "95491281146", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
                   "memory": memory, "pods": "110", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
    capacity = {**allocatable, "cpu": "96", "ephemeral-storage": "103609856Ki", "memory": "395884620Ki"}
    condition = {"lastHeartbeatTime": STAMP, "lastTransitionTime": STAMP}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                            "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
            "creationTimestamp": STAMP, "deletionTimestamp": None, "labels": labels,
            "managedFields": [
                _managed("kubelet", {"f:metadata": {"f:annotations": {".": {}}, "f:labels": {".": {}}}}),
                _managed("kubelet", {"f:status": {"f:allocatable": {"f:cpu": {}}, "f:conditions": {}}}, "status"),
                _managed("gpu-feature-discovery", {"f:metadata": {"f:labels": {"f:nvidia.com/gpu.product": {}}}})],
            "name": name, "resourceVersion": "1", "uid": str(uuid.uuid4())},
        "spec": {"podCIDR": "10.244.3.0/24", "podCIDRs": ["10.244.3.0/24"],
                 "providerID": f"aws:///{zone}/i-0{uuid.uuid4().hex[:16]}", "taints": None},
        "status": {
            "addresses": [{"address": "10.0.3.17", "type": "InternalIP"}, {"address": name, "type": "Hostname"}],
            "allocatable": allocatable, "capacity": capacity,
            "conditions": [
                {**condition, "message": "kubelet has sufficient memory available",
                 "reason": "KubeletHasSufficientMemory", "status": "False", "type": "MemoryPressure"},
                {**condition, "message": "kubelet is posting ready status", "reason": "KubeletReady",
                 "status": "True", "type": "Ready"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "images": [{"names": ["nvcr.io/nvidia/pytorch:24.01-py3"], "sizeBytes": 9876543210}],
            "nodeInfo": {"architecture": "amd64", "bootID": str(uuid.uuid4()),
                         "containerRuntimeVersion": "containerd://1.7.13", "kernelVersion": "5.15.0-1052-aws",
                         "kubeProxyVersion": "v1.29.3", "kubeletVersion": "v1.29.3", "machineID": uuid.uuid4().hex,
                         "operatingSystem": "linux", "osImage": "Ubuntu 22.04.4 LTS", "systemUUID": str(uuid.uuid4())},
            "config": None}}


def pod(name: str, gpus: int = 2, cpu: str = "4", memory: str = "16Gi", node_name: str | None = None,
        phase: str = "Running", scheduler: str = "default-scheduler", namespace: str = "team-a",
        annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
        gpu_mem_gib: int = 0) -> dict[str, Any]:
    """A pod of a Job's controller; bound to ``node_name`` (and ``phase``) if given, else pending;
    ``gpu_mem_gib``: GiB of one GPU's memory (``aliyun.com/gpu-mem``) rather than whole GPUs."""
    uid = str(uuid.uuid4())
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    if gpu_mem_gib:
        limits = {"aliyun.com/gpu-mem": str(gpu_mem_gib)}
    container = {
        "command": ["torchrun", "--nproc-per-node=2", "train.py"], "env": [{"name": "NCCL_DEBUG", "value": "WARN"}],
        "image": "nvcr.io/nvidia/pytorch:24.01-py3", "imagePullPolicy": "IfNotPresent", "name": "trainer",
        "resources": {"limits": {**limits, "memory": memory}, "requests": {**limits, "cpu": cpu, "memory": memory}},
        "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
        "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "name": "kube-api-access",
                          "readOnly": True}]}
    spec: dict[str, Any] = {
        "containers": [container], "dnsPolicy": "ClusterFirst", "enableServiceLinks": True, "nodeSelector": None,
        "preemptionPolicy": "PreemptLowerPriority", "priority": 0, "restartPolicy": "Never",
        "schedulerName": scheduler, "securityContext": {}, "serviceAccount": "default",
        "serviceAccountName": "default", "terminationGracePeriodSeconds": 30,
        "tolerations": [{"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists",
                         "tolerationSeconds": 300}],
        "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}}]}}]}
    status: dict[str, Any] = {"phase": "Pending", "qosClass": "Burstable"}
    if node_name is not None:
        spec["nodeName"] = node_name
        status = {"conditions": [{"lastProbeTime": None, "lastTransitionTime": STAMP, "status": "True",
                                  "type": "PodScheduled"}],
                  "containerStatuses": [{"containerID": f"containerd://{uuid.uuid4().hex}",
                                         "image": "nvcr.io/nvidia/pytorch:24.01-py3", "imageID": "", "lastState": {},
                                         "name": "trainer", "ready": phase == "Running", "restartCount": 0,
                                         "started": phase == "Running", "state": {"running": {"startedAt": STAMP}}}],
                  "hostIP": "10.0.3.17", "phase": phase, "podIP": "10.244.3.21", "qosClass": "Burstable",
                  "startTime": STAMP}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "annotations": annotations or {}, "creationTimestamp": STAMP, "generateName": f"{name[:-2]}-",
            "labels": {"batch.kubernetes.io/job-name": name, "job-name": name, **(labels or {})},
            "managedFields": [_managed("kube-controller-manager", {"f:metadata": {"f:generateName": {}}}),
                              _managed("kubelet", {"f:status": {"f:phase": {}}}, "status")],
            "name": name, "namespace": namespace,
            "ownerReferences": [{"apiVersion": "batch/v1", "blockOwnerDeletion": True, "controller": True,
                                 "kind": "Job", "name": name, "uid": str(uuid.uuid4())}],
            "resourceVersion": "1", "uid": uid},
        "spec": spec, "status": status}
