"""The resources a quota counts, and what a job or a cluster amounts to in them.

A resource is named by a key: ``gpus`` (GPUs of any type, a share of a GPU counting as its fraction),
``gpus:<TYPE>`` (GPUs of one type), ``cpu_cores`` and ``mem_gib``. Amounts are plain floats in those
units; a job's GPUs by type are known only once it is placed (from the machines of its allocation).
"""

from __future__ import annotations

from collections.abc import Mapping

from placement.model.cluster import Cluster
from placement.model.demand import Job
from placement.model.snapshot import Allocation, Layout

GPUS = "gpus"
CPU_CORES = "cpu_cores"
MEM_GIB = "mem_gib"
TYPE_PREFIX = "gpus:"
EPSILON = 1e-9
"""Slack on quota comparisons: amounts are sums of floats (0.1 + 0.2 GPUs)."""

Amounts = Mapping[str, float]


def gpu_type_key(gpu_type: str) -> str:
    """The resource key of the GPUs of ``gpu_type``."""
    return TYPE_PREFIX + gpu_type


def demand_of(job: Job, allocation: Allocation | None = None, layout: Layout | None = None) -> dict[str, float]:
    """What ``job`` counts against a quota: GPUs, CPU cores and memory; with its ``allocation`` on a
    cluster of ``layout``, also its GPUs per type (an instance's GPUs count for its machine's type)."""
    amounts = {GPUS: job.gpus, CPU_CORES: sum(t.cpu_cores * t.instances for t in job.tasks),
               MEM_GIB: sum(t.mem_gib * t.instances for t in job.tasks)}
    if allocation is not None and layout is not None:
        for p in allocation.instances:
            gpu = job.tasks[p.task].gpu
            if gpu > 0:
                key = gpu_type_key(layout.gpu_types[int(layout.gpu_type[p.machine])])
                amounts[key] = amounts.get(key, 0.0) + gpu
    return amounts


def capacity_of(cluster: Cluster) -> dict[str, float]:
    """The whole cluster in the same keys: what all guarantees together may not exceed."""
    amounts = {GPUS: float(cluster.total_gpus), CPU_CORES: sum(m.cpu_cores for m in cluster.machines),
               MEM_GIB: sum(m.mem_gib for m in cluster.machines)}
    amounts.update({gpu_type_key(t): float(n) for t, n in cluster.gpus_by_type().items()})
    return amounts
