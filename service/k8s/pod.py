"""A Kubernetes pod as a gpuplace job: GPU demand from resource requests and annotations.

* whole GPUs: the containers' ``nvidia.com/gpu`` limits (or requests), summed;
* a GPU share: annotation ``gpuplace.io/gpu-share`` (0 < share < 1) instead of whole GPUs, with
  ``gpuplace.io/gpu-mem-gib`` for its GPU memory (default: proportional to the share);
* GPU types: annotation ``gpuplace.io/gpu-types``, comma-separated any-of (e.g. ``V100,V100M32``);
* CPU cores and memory: the containers' requests, summed (Kubernetes quantities: ``500m``, ``4Gi``).

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


def job_of_pod(pod: Any) -> Job:
    """The job of ``pod`` (a JSON object as the API server sends it); :class:`PodError` naming the field
    that cannot be read."""
    pod = object_at(pod, "Pod")
    meta = object_at(pod.get("metadata"), "Pod.metadata")
    annotations = object_at(meta.get("annotations"), "Pod.metadata.annotations")
    containers = _list_at(object_at(pod.get("spec"), "Pod.spec").get("containers"), "Pod.spec.containers")
    gpus = cpu = mem = 0.0
    for i, container in enumerate(containers):
        where = f"Pod.spec.containers[{i}].resources"
        resources = object_at(object_at(container, f"Pod.spec.containers[{i}]").get("resources"), where)
        limits = object_at(resources.get("limits"), f"{where}.limits")
        requests = object_at(resources.get("requests"), f"{where}.requests")
        gpu_text = limits.get(GPU_RESOURCE, requests.get(GPU_RESOURCE))
        gpus += quantity(gpu_text, f"{where}.limits.{GPU_RESOURCE}") if gpu_text is not None else 0.0
        cpu += quantity(requests["cpu"], f"{where}.requests.cpu") if "cpu" in requests else 0.0
        mem += quantity(requests["memory"], f"{where}.requests.memory") / 2**30 if "memory" in requests else 0.0
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
