"""Which targets each source can teach, and the history keys that carry them.

Names say what the label is. ``duration`` is run time. ``gpu``, ``cpu``, ``mem``, ``gpu_mem`` and
``bandwidth`` are **observed usage** per instance (what a job really needs), which only the full PAI
v2020 trace records (sensor table). On the shipped sources the only resource labels are requests, so
their targets are named ``*_request``: what a job will ask for, predicted from history without seeing
its own request (useful to fill a missing field, not to right-size).
"""

from __future__ import annotations

from types import MappingProxyType

from training.features.frames import TargetSpec

Specs = MappingProxyType[str, TargetSpec]

_PAI_KEYS = MappingProxyType({
    "user": ("user",),
    "group_user": ("group", "user"),
    "group_user_gpu": ("group", "user", "gpu_key"),
    "app": ("app",),
    "app_gpu": ("app", "gpu_key"),
})
_PAI_CHAIN = ("group_user_gpu", "group_user", "user")


_PAI_RECENT = (("group_gpu_shape", ("group", "gpu_key", "shape_key")), ("group_gpu", ("group", "gpu_key")),
               ("group", ("group",)))
"""The history rule's keys: a PAI group is one user's recurring job, and its runs on one GPU type with
one request shape (GPUs, CPUs, pods) are the closest kin a job has."""


def _pai(name: str, column: str, activity_keys: tuple[str, ...] = (),
         request_baseline: str | None = None, recent: bool = False) -> TargetSpec:
    return TargetSpec(name=name, column=column, keys=_PAI_KEYS, baseline_chain=_PAI_CHAIN, depth_key="group_user",
                      activity_keys=activity_keys, request_baseline=request_baseline,
                      recent_keys=_PAI_RECENT if recent else ())


_PAI_DURATION = _pai("duration", "duration_s", activity_keys=("user", "group_user", "group_user_gpu"), recent=True)
_PAI_USAGE = {
    "gpu": _pai("gpu", "obs_gpu_util_share", request_baseline="req_gpu"),
    "cpu": _pai("cpu", "obs_cpu_cores", request_baseline="req_cpu_cores"),
    "mem": _pai("mem", "obs_mem_max_gib", request_baseline="req_mem_gib"),
    "gpu_mem": _pai("gpu_mem", "obs_gpu_mem_max_gib"),
    "bandwidth": _pai("bandwidth", "obs_net_gbps"),
}
_OPENB_KEYS = MappingProxyType({"qos": ("qos",), "qos_gpu": ("qos", "gpu_key")})


def _request(name: str, column: str, keys: MappingProxyType[str, tuple[str, ...]], chain: tuple[str, ...],
             depth: str) -> TargetSpec:
    return TargetSpec(name=name, column=column, keys=keys, baseline_chain=chain, depth_key=depth,
                      exclude_requests=(column,), censoring_matters=False)


TARGETS: MappingProxyType[str, Specs] = MappingProxyType({
    "pai2020-jobs": MappingProxyType({
        "duration": _PAI_DURATION,
        "gpu_request": _request("gpu_request", "req_gpu", _PAI_KEYS, _PAI_CHAIN, "group_user"),
        "cpu_request": _request("cpu_request", "req_cpu_cores", _PAI_KEYS, _PAI_CHAIN, "group_user"),
    }),
    "pai2020": MappingProxyType({"duration": _PAI_DURATION, **_PAI_USAGE}),
    "philly": MappingProxyType({"duration": TargetSpec(
        name="duration", column="duration_s",
        keys=MappingProxyType({"cluster": ("cluster",), "cluster_size": ("cluster", "size_key")}),
        baseline_chain=("cluster_size", "cluster"), depth_key="cluster_size", activity_keys=("cluster_size",),
    )}),
    "openb2023": MappingProxyType({
        "duration": TargetSpec(
            name="duration", column="duration_s",
            keys=MappingProxyType({"qos": ("qos",), "qos_size": ("qos", "size_key")}),
            baseline_chain=("qos_size", "qos"), depth_key="qos_size", activity_keys=("qos_size",)),
        "gpu_request": _request("gpu_request", "req_gpu", _OPENB_KEYS, ("qos_gpu", "qos"), "qos"),
        "cpu_request": _request("cpu_request", "req_cpu_cores", _OPENB_KEYS, ("qos_gpu", "qos"), "qos"),
        "mem_request": _request("mem_request", "req_mem_gib", _OPENB_KEYS, ("qos_gpu", "qos"), "qos"),
    }),
    "dlrm2025": MappingProxyType({"bandwidth_request": TargetSpec(
        name="bandwidth_request", column="req_net_gbps",
        keys=MappingProxyType({"app": ("app",), "app_role": ("app", "task_id")}),
        baseline_chain=("app_role", "app"), depth_key="app_role", exclude_requests=("req_net_gbps",),
        censoring_matters=False,
    )}),
})
"""Targets by source; a source without an entry has no label for that target."""


def target_spec(source: str, target: str) -> TargetSpec:
    """The spec of ``target`` for ``source``; ``KeyError`` naming what exists otherwise."""
    if source not in TARGETS:
        raise KeyError(f"no targets are defined for source {source!r}; sources with targets: {', '.join(TARGETS)}")
    if target not in TARGETS[source]:
        raise KeyError(f"source {source!r} has no {target!r} label; it has: {', '.join(TARGETS[source])}")
    return TARGETS[source][target]
