"""A Kubernetes pod as a gpuplace job: GPU demand from resource requests and annotations.

* whole GPUs: the containers' ``nvidia.com/gpu`` limits (or requests), summed;
* a GPU share, either
  * the extended resource ``aliyun.com/gpu-mem`` (Alibaba's gpushare device plugin, GiB of ONE GPU's
    memory): the share is that memory over the memory of one GPU of the node it lands on (8 GiB on a
    16 GiB GPU: 0.5), so it is known per node (:attr:`PodDemand.per_node`); or
  * annotation ``gpuplace.io/gpu-share`` (0 < share < 1) instead of whole GPUs, with
    ``gpuplace.io/gpu-mem-gib`` for its GPU memory (default: proportional to the share). With both,
    the annotation gives the share and the resource the memory;
* GPU types: annotation ``gpuplace.io/gpu-types``, comma-separated any-of (e.g. ``V100,V100M32``);
* CPU cores and memory: the containers' requests (Kubernetes quantities: ``500m``, ``4Gi``).

Each resource counts as the kubelet and kube-scheduler count it (the pod's effective request): the larger
of the app containers' sum and each init container's own request, plus the pod's ``spec.overhead``.
Sidecars (init containers with ``restartPolicy: Always``) keep running: each adds to the app containers'
sum and to every init container started after it.

The pod is one instance of one worker task; its job id is ``pod-<uid>`` (pod names can be reused,
UIDs are not). A pod of a gang (label ``scheduling.x-k8s.io/pod-group``, :func:`gang_of`) is one
instance of its gang's job (``service.k8s.gang``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from placement import Job, Role, Task
from service.codec import placeable_share

GPU_RESOURCE = "nvidia.com/gpu"
SHARE_RESOURCE = "aliyun.com/gpu-mem"
"""GPU memory of one GPU, GiB: the resource of Alibaba's gpushare device plugin (``--memory-unit=GiB``)."""
SHARE, GPU_MEM, TYPES = "gpuplace.io/gpu-share", "gpuplace.io/gpu-mem-gib", "gpuplace.io/gpu-types"
GANG_LABEL = "scheduling.x-k8s.io/pod-group"
"""The coscheduling plugin's label: the name of the pod's PodGroup (same namespace)."""
GANG_SIZE = "gpuplace.io/gang-size"
"""Annotation: the gang's size where no PodGroup is read (it takes precedence over one)."""
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
_Asked = tuple[float, ...]
"""Whole GPUs, CPU cores, memory GiB, GiB of the share resource."""


def _extended(text: Any, field: str) -> float:
    """An extended resource's quantity: a whole number (Kubernetes allows no other)."""
    value = quantity(text, field)
    if not float(value).is_integer():
        raise PodError(f"{field}: {text!r} is not a whole number (an extended resource)")
    return value


def _request(container: Any, where: str) -> _Asked:
    """What one container asks for: GPUs and GPU memory from its limits (or requests), CPU and memory from
    its requests."""
    resources = object_at(object_at(container, where).get("resources"), f"{where}.resources")
    limits = object_at(resources.get("limits"), f"{where}.resources.limits")
    requests = object_at(resources.get("requests"), f"{where}.resources.requests")
    gpu_text = limits.get(GPU_RESOURCE, requests.get(GPU_RESOURCE))
    gpus = quantity(gpu_text, f"{where}.resources.limits.{GPU_RESOURCE}") if gpu_text is not None else 0.0
    share_text = limits.get(SHARE_RESOURCE, requests.get(SHARE_RESOURCE))
    shared = _extended(share_text, f"{where}.resources.limits.{SHARE_RESOURCE}") if share_text is not None else 0.0
    cpu = quantity(requests["cpu"], f"{where}.resources.requests.cpu") if "cpu" in requests else 0.0
    mem = (quantity(requests["memory"], f"{where}.resources.requests.memory") / 2**30
           if "memory" in requests else 0.0)
    return gpus, cpu, mem, shared


def _plus(a: _Asked, b: _Asked) -> _Asked:
    return tuple(x + y for x, y in zip(a, b, strict=True))


def _most(a: _Asked, b: _Asked) -> _Asked:
    return tuple(max(x, y) for x, y in zip(a, b, strict=True))


def _effective(spec: dict[str, Any]) -> _Asked:
    nothing: _Asked = (0.0, 0.0, 0.0, 0.0)
    sidecars, peak = nothing, nothing
    for i, container in enumerate(_list_at(spec.get("initContainers"), "Pod.spec.initContainers")):
        where = f"Pod.spec.initContainers[{i}]"
        asked = _request(container, where)
        if object_at(container, where).get("restartPolicy") == "Always":
            sidecars = _plus(sidecars, asked)
            peak = _most(peak, sidecars)
        else:
            peak = _most(peak, _plus(sidecars, asked))
    apps = sidecars
    for i, container in enumerate(_list_at(spec.get("containers"), "Pod.spec.containers")):
        apps = _plus(apps, _request(container, f"Pod.spec.containers[{i}]"))
    overhead = object_at(spec.get("overhead"), "Pod.spec.overhead")
    extra: _Asked = (0.0, quantity(overhead["cpu"], "Pod.spec.overhead.cpu") if "cpu" in overhead else 0.0,
                     quantity(overhead["memory"], "Pod.spec.overhead.memory") / 2**30
                     if "memory" in overhead else 0.0, 0.0)
    return _plus(_most(peak, apps), extra)


def effective_request(spec: dict[str, Any]) -> Request:
    """The pod's effective request (the module docstring), per resource."""
    gpus, cpu, mem, _ = _effective(spec)
    return gpus, cpu, mem


@dataclass(frozen=True)
class PodDemand:
    """What a pod asks for, before the node it lands on is known."""

    job_id: str
    gpus: float
    """Whole GPUs (0 for a share)."""
    cpu_cores: float
    mem_gib: float
    share: float | None
    """The ``gpuplace.io/gpu-share`` annotation, if given."""
    gpu_mem_gib: float | None
    """GPU memory per GPU used: ``aliyun.com/gpu-mem``, else the ``gpuplace.io/gpu-mem-gib`` annotation."""
    shared_gib: float
    """``aliyun.com/gpu-mem`` (0: not asked)."""
    gpu_types: frozenset[str]

    @property
    def per_node(self) -> bool:
        """The share is the node's to say: GPU memory asked with no share given."""
        return self.shared_gib > 0 and self.share is None

    @property
    def shares_gpu(self) -> bool:
        return self.share is not None or self.shared_gib > 0

    def misfit(self, gpu_mem_of_gpu: float) -> str | None:
        """Why no GPU of ``gpu_mem_of_gpu`` GiB can hold the pod's share, or ``None``."""
        if self.shared_gib and gpu_mem_of_gpu <= 0:
            return "the node has no GPUs"
        if self.shared_gib > gpu_mem_of_gpu:
            return (f"asks {self.shared_gib:g} GiB of one GPU's memory ({SHARE_RESOURCE}); the node's GPUs have "
                    f"{gpu_mem_of_gpu:g} GiB")
        return None

    def job(self, gpu_mem_of_gpu: float = math.nan, instances: int = 1, job_id: str | None = None) -> Job:
        """The pod's job (``instances`` of it: a gang's); for a :attr:`per_node` demand, on GPUs of
        ``gpu_mem_of_gpu`` GiB (:class:`PodError` if not given, or too small: :meth:`misfit`)."""
        if self.per_node:
            if math.isnan(gpu_mem_of_gpu):
                raise PodError(f"{SHARE_RESOURCE}: {self.shared_gib:g} GiB of one GPU: its share depends on the "
                               "memory of the node's GPUs")
            problem = self.misfit(gpu_mem_of_gpu)
            if problem is not None:
                raise PodError(problem)
            fraction = self.shared_gib / gpu_mem_of_gpu
            gpu = 1.0 if fraction >= 1 else placeable_share(fraction)
        elif self.share is not None:
            gpu = placeable_share(self.share)
        else:
            gpu = self.gpus
        task = Task(Role.WORKER, instances, gpu=gpu, cpu_cores=self.cpu_cores, mem_gib=self.mem_gib,
                    gpu_mem_gib=math.nan if self.gpu_mem_gib is None else self.gpu_mem_gib, gpu_types=self.gpu_types)
        return Job(job_id or self.job_id, (task,))


def pod_demand(pod: Any) -> PodDemand:
    """What ``pod`` (a JSON object as the API server sends it) asks for; :class:`PodError` naming the
    field that cannot be read."""
    pod = object_at(pod, "Pod")
    meta = object_at(pod.get("metadata"), "Pod.metadata")
    annotations = object_at(meta.get("annotations"), "Pod.metadata.annotations")
    gpus, cpu, mem, shared = _effective(object_at(pod.get("spec"), "Pod.spec"))
    share = _annotation(annotations, SHARE)
    if share is not None and not 0 < share < 1:
        raise PodError(f"metadata.annotations[{SHARE}]: {share} is not a share between 0 and 1")
    if gpus and not float(gpus).is_integer():
        raise PodError(f"{GPU_RESOURCE}: {gpus} is not a whole number of GPUs")
    if gpus and shared:
        raise PodError(f"Pod.spec: asks both {GPU_RESOURCE} ({gpus:g}) and {SHARE_RESOURCE} ({shared:g} GiB): "
                       "whole GPUs or GPU memory of one, not both")
    types = frozenset(t.strip() for t in str(annotations.get(TYPES, "")).split(",") if t.strip())
    gpu_mem = shared or _annotation(annotations, GPU_MEM)
    return PodDemand(f"pod-{pod_uid(pod)}", 0.0 if share is not None or shared else gpus, cpu, mem, share,
                     gpu_mem, shared, types)


def job_of_pod(pod: Any, gpu_mem_of_gpu: float = math.nan) -> Job:
    """The job of ``pod`` (a JSON object as the API server sends it), its share on GPUs of
    ``gpu_mem_of_gpu`` GiB where it asks GPU memory (:attr:`PodDemand.per_node`); :class:`PodError`
    naming the field that cannot be read."""
    return pod_demand(pod).job(gpu_mem_of_gpu)


def gang_of(pod: Any) -> tuple[str, str] | None:
    """The pod's gang, ``(namespace, pod group)``, if it has the coscheduling label."""
    meta = object_at(object_at(pod, "Pod").get("metadata"), "Pod.metadata")
    group = object_at(meta.get("labels"), "Pod.metadata.labels").get(GANG_LABEL)
    if group is None:
        return None
    if not isinstance(group, str) or not group:
        raise PodError(f"Pod.metadata.labels[{GANG_LABEL}]: {str(group)[:80]!r} is not a pod group name")
    return str(meta.get("namespace") or "default"), group


def gang_size(pod: Any) -> int | None:
    """The ``gpuplace.io/gang-size`` annotation, if given."""
    meta = object_at(object_at(pod, "Pod").get("metadata"), "Pod.metadata")
    size = _annotation(object_at(meta.get("annotations"), "Pod.metadata.annotations"), GANG_SIZE)
    if size is None:
        return None
    if not size.is_integer() or size < 1:
        raise PodError(f"metadata.annotations[{GANG_SIZE}]: {size:g} is not a whole number of pods >= 1")
    return int(size)


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
