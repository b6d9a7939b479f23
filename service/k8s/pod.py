"""A Kubernetes pod as a gpuplace job: GPU demand from resource requests and annotations.

* whole GPUs: the containers' ``nvidia.com/gpu`` limits (or requests), summed;
* a GPU share: annotation ``gpuplace.io/gpu-share`` (0 < share < 1) instead of whole GPUs, with
  ``gpuplace.io/gpu-mem-gib`` for its GPU memory (default: proportional to the share);
* GPU types: annotation ``gpuplace.io/gpu-types``, comma-separated any-of (e.g. ``V100,V100M32``);
* CPU cores and memory: the containers' requests (Kubernetes quantities: ``500m``, ``4Gi``).

Each resource counts as the kubelet and kube-scheduler count it (the pod's effective request): the larger
of the app containers' sum and each init container's own request, plus the pod's ``spec.overhead``.
Sidecars (init containers with ``restartPolicy: Always``) keep running: each adds to the app containers'
sum and to every init container started after it.

The pod is one instance of one worker task; its job id is ``pod-<uid>`` (pod names can be reused,
UIDs are not).
"""

from __future__ import annotations

import math
import re
from typing import Any

from placement import Job, Role, Task
from service.codec import placeable_share

GPU_RESOURCE = "nvidia.com/gpu"
SHARE, GPU_MEM, TYPES = "gpuplace.io/gpu-share", "gpuplace.io/gpu-mem-gib", "gpuplace.io/gpu-types"
_SUFFIX = {"": 1.0, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
           "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50, "Ei": 2.0**60}
_QUANTITY = re.compile(r"^([+]?[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")


class PodError(ValueError):
    """A pod whose resources or annotations cannot be read (the message names the field and value)."""


def quantity(text: str | int | float, field: str) -> float:
    """A Kubernetes resource quantity as a plain number (``500m`` -> 0.5, ``4Gi`` -> 4 x 2^30)."""
    match = _QUANTITY.match(str(text).strip())
    if match is None:
        raise PodError(f"{field}: {text!r} is not a Kubernetes quantity")
    return float(match.group(1)) * _SUFFIX[match.group(2) or ""]


def object_at(value: Any, field: str) -> dict[str, Any]:
    """``value`` if it is a JSON object (absent or null: an empty one); else :class:`PodError` naming ``field``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PodError(f"{field}: expected an object, got {type(value).__name__} {str(value)[:80]!r}")
    return value


def _list_at(value: Any, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise PodError(f"{field}: expected a list, got {type(value).__name__} {str(value)[:80]!r}")
    return value


def pod_uid(pod: dict[str, Any]) -> str:
    meta = object_at(pod.get("metadata"), "Pod.metadata")
    uid = meta.get("uid") or f"{meta.get('namespace', 'default')}-{meta.get('name', '')}"
    return str(uid)


Request = tuple[float, float, float]
"""Whole GPUs, CPU cores, memory GiB."""


def _request(container: Any, where: str) -> Request:
    """What one container asks for: GPUs from its limits (or requests), CPU and memory from its requests."""
    resources = object_at(object_at(container, where).get("resources"), f"{where}.resources")
    limits = object_at(resources.get("limits"), f"{where}.resources.limits")
    requests = object_at(resources.get("requests"), f"{where}.resources.requests")
    gpu_text = limits.get(GPU_RESOURCE, requests.get(GPU_RESOURCE))
    gpus = quantity(gpu_text, f"{where}.resources.limits.{GPU_RESOURCE}") if gpu_text is not None else 0.0
    cpu = quantity(requests["cpu"], f"{where}.resources.requests.cpu") if "cpu" in requests else 0.0
    mem = (quantity(requests["memory"], f"{where}.resources.requests.memory") / 2**30
           if "memory" in requests else 0.0)
    return gpus, cpu, mem


def _plus(a: Request, b: Request) -> Request:
    return a[0] + b[0], a[1] + b[1], a[2] + b[2]


def _most(a: Request, b: Request) -> Request:
    return max(a[0], b[0]), max(a[1], b[1]), max(a[2], b[2])


def effective_request(spec: dict[str, Any]) -> Request:
    """The pod's effective request (the module docstring), per resource."""
    sidecars: Request = (0.0, 0.0, 0.0)
    peak: Request = (0.0, 0.0, 0.0)
    for i, container in enumerate(_list_at(spec.get("initContainers"), "Pod.spec.initContainers")):
        where = f"Pod.spec.initContainers[{i}]"
        asked = _request(container, where)
        if object_at(container, where).get("restartPolicy") == "Always":
            sidecars = _plus(sidecars, asked)
            peak = _most(peak, sidecars)
        else:
            peak = _most(peak, _plus(sidecars, asked))
    apps: Request = sidecars
    for i, container in enumerate(_list_at(spec.get("containers"), "Pod.spec.containers")):
        apps = _plus(apps, _request(container, f"Pod.spec.containers[{i}]"))
    overhead = object_at(spec.get("overhead"), "Pod.spec.overhead")
    extra: Request = (0.0, quantity(overhead["cpu"], "Pod.spec.overhead.cpu") if "cpu" in overhead else 0.0,
                      quantity(overhead["memory"], "Pod.spec.overhead.memory") / 2**30 if "memory" in overhead else 0.0)
    return _plus(_most(peak, apps), extra)


def job_of_pod(pod: Any) -> Job:
    """The job of ``pod`` (a JSON object as the API server sends it); :class:`PodError` naming the field
    that cannot be read."""
    pod = object_at(pod, "Pod")
    meta = object_at(pod.get("metadata"), "Pod.metadata")
    annotations = object_at(meta.get("annotations"), "Pod.metadata.annotations")
    gpus, cpu, mem = effective_request(object_at(pod.get("spec"), "Pod.spec"))
    share = _annotation(annotations, SHARE)
    if share is not None and not 0 < share < 1:
        raise PodError(f"metadata.annotations[{SHARE}]: {share} is not a share between 0 and 1")
    if gpus and not float(gpus).is_integer():
        raise PodError(f"{GPU_RESOURCE}: {gpus} is not a whole number of GPUs")
    types = frozenset(t.strip() for t in str(annotations.get(TYPES, "")).split(",") if t.strip())
    gpu_mem = _annotation(annotations, GPU_MEM)
    task = Task(Role.WORKER, 1, gpu=placeable_share(share) if share is not None else gpus, cpu_cores=cpu, mem_gib=mem,
                gpu_mem_gib=math.nan if gpu_mem is None else gpu_mem, gpu_types=types)
    return Job(f"pod-{pod_uid(pod)}", (task,))


def _annotation(annotations: dict[str, Any], key: str) -> float | None:
    if key not in annotations:
        return None
    try:
        value = float(annotations[key])
    except (TypeError, ValueError) as exc:
        raise PodError(f"metadata.annotations[{key}]: {annotations[key]!r} is not a number") from exc
    if not math.isfinite(value) or value < 0:
        raise PodError(f"metadata.annotations[{key}]: {value} must be finite and >= 0")
    return value
