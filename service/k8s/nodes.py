"""Kubernetes nodes as gpuplace machines, and the cluster they make.

A node is a machine named as the node, with its allocatable CPU, memory and ``nvidia.com/gpu`` (what
kube-scheduler lets pods have, not the node's capacity). Its GPU type is the value of the label
``GPUPLACE_KUBE_GPU_TYPE_LABEL`` (default ``nvidia.com/gpu.product``, which NVIDIA's GPU feature
discovery sets, e.g. ``Tesla-V100-SXM2-16GB``); the memory of one GPU is the label
``nvidia.com/gpu.memory`` (MiB, also GPU feature discovery's), else gpuplace's table for a type it knows
(``V100``, ``T4``, ...). A node without GPUs is a CPU-only machine. Its rack is the label
``topology.gpuplace.io/rack``, else the node's hostname (``kubernetes.io/hostname``), else its name; its
domain the label ``topology.kubernetes.io/zone``, else ``default``. A rack named in two zones becomes one
rack per zone (``<zone>/<rack>``), as a rack is in one domain.

A node that cannot be read (a quantity that is not one, GPUs without a type, a type gpuplace does not
know without ``nvidia.com/gpu.memory``) raises :class:`NodeError` naming the field.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from placement import CPU_ONLY, Cluster, Machine, Topology
from service.k8s.pod import GPU_RESOURCE, PodError, object_at, quantity

CLUSTER_NAME = "kubernetes"
RACK_LABEL = "topology.gpuplace.io/rack"
HOSTNAME_LABEL = "kubernetes.io/hostname"
ZONE_LABEL = "topology.kubernetes.io/zone"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
DEFAULT_DOMAIN = "default"


class NodeError(ValueError):
    """A node that cannot be read as a machine (the message names the node and the field)."""


@dataclass(frozen=True)
class NodeSpec:
    """What gpuplace takes of a node: the machine, and the rack and zone it stands in."""

    machine: Machine
    rack: str
    domain: str


def node_name(node: Any) -> str:
    """The node's name; :class:`NodeError` if it has none."""
    try:
        name = object_at(object_at(node, "Node").get("metadata"), "Node.metadata").get("name")
    except PodError as exc:
        raise NodeError(str(exc)) from exc
    if not isinstance(name, str) or not name:
        raise NodeError(f"Node.metadata.name: expected a name, got {str(name)[:80]!r}")
    return name


def node_spec(node: Any, gpu_type_label: str) -> NodeSpec:
    """The machine of ``node`` (a JSON object as the API server sends it) and its place."""
    name = node_name(node)
    try:
        return _spec(name, node, gpu_type_label)
    except (PodError, ValueError) as exc:
        raise NodeError(f"node {name}: {exc}") from exc


def _spec(name: str, node: dict[str, Any], gpu_type_label: str) -> NodeSpec:
    labels = object_at(object_at(node.get("metadata"), "metadata").get("labels"), "metadata.labels")
    allocatable = object_at(object_at(node.get("status"), "status").get("allocatable"), "status.allocatable")

    def amount(resource: str) -> float:
        value = allocatable.get(resource)
        return 0.0 if value is None else quantity(value, f"status.allocatable[{resource}]")

    gpus = amount(GPU_RESOURCE)
    if not gpus.is_integer():
        raise NodeError(f"status.allocatable[{GPU_RESOURCE}]: {gpus} is not a whole number of GPUs")
    gpu_mem = math.nan
    if gpus:
        gpu_type = _label(labels, gpu_type_label)
        if not gpu_type:
            raise NodeError(f"{int(gpus)} {GPU_RESOURCE} but no label {gpu_type_label} to give their type "
                            "(GPUPLACE_KUBE_GPU_TYPE_LABEL)")
        memory = _label(labels, GPU_MEMORY_LABEL)
        if memory:
            gpu_mem = quantity(memory, f"metadata.labels[{GPU_MEMORY_LABEL}]") / 1024
    else:
        gpu_type = CPU_ONLY
    machine = Machine(name, gpu_type, int(gpus), amount("cpu"), amount("memory") / 2**30, gpu_mem)
    rack = _label(labels, RACK_LABEL) or _label(labels, HOSTNAME_LABEL) or name
    return NodeSpec(machine, rack, _label(labels, ZONE_LABEL) or DEFAULT_DOMAIN)


def _label(labels: dict[str, Any], key: str) -> str:
    value = labels.get(key)
    if value is not None and not isinstance(value, str):
        raise NodeError(f"metadata.labels[{key}]: expected a string, got {str(value)[:80]!r}")
    return (value or "").strip()


def cluster_of(specs: Iterable[NodeSpec]) -> Cluster:
    """The cluster of the nodes ``specs``, in name order, with their racks and domains."""
    specs = sorted(specs, key=lambda s: s.machine.name)
    zones: defaultdict[str, set[str]] = defaultdict(set)
    for spec in specs:
        zones[spec.rack].add(spec.domain)

    def rack_of(spec: NodeSpec) -> str:
        return spec.rack if len(zones[spec.rack]) == 1 else f"{spec.domain}/{spec.rack}"

    machine_racks = tuple((s.machine.name, rack_of(s)) for s in specs)
    rack_domains = tuple(dict.fromkeys((rack_of(s), s.domain) for s in specs))
    return Cluster(CLUSTER_NAME, tuple(s.machine for s in specs), Topology(machine_racks, rack_domains))
