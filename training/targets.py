"""Which targets each source can teach, and the history keys that carry them."""

from __future__ import annotations

from types import MappingProxyType

from training.features import TargetSpec

_PAI_KEYS = MappingProxyType({
    "user": ("user",),
    "group_user": ("group", "user"),
    "group_user_gpu": ("group", "user", "gpu_key"),
    "app": ("app",),
    "app_gpu": ("app", "gpu_key"),
})
_PAI_DURATION = TargetSpec(
    name="duration", column="duration_s", keys=_PAI_KEYS,
    baseline_chain=("group_user_gpu", "group_user", "user"), depth_key="group_user",
    activity_keys=("user", "group_user", "group_user_gpu"),
)

TARGETS: MappingProxyType[str, MappingProxyType[str, TargetSpec]] = MappingProxyType({
    "pai2020-jobs": MappingProxyType({"duration": _PAI_DURATION}),
    "pai2020": MappingProxyType({"duration": _PAI_DURATION}),
    "philly": MappingProxyType({"duration": TargetSpec(
        name="duration", column="duration_s",
        keys=MappingProxyType({"cluster": ("cluster",), "cluster_size": ("cluster", "size_key")}),
        baseline_chain=("cluster_size", "cluster"), depth_key="cluster_size", activity_keys=("cluster_size",),
    )}),
    "openb2023": MappingProxyType({"duration": TargetSpec(
        name="duration", column="duration_s",
        keys=MappingProxyType({"qos": ("qos",), "qos_size": ("qos", "size_key")}),
        baseline_chain=("qos_size", "qos"), depth_key="qos_size", activity_keys=("qos_size",),
    )}),
    "dlrm2025": MappingProxyType({"bandwidth": TargetSpec(
        name="bandwidth", column="req_net_gbps",
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
