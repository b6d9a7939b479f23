"""The filters, registered by name: the rules a machine must pass to host one more instance.

The order is the order a machine's reason is looked for (the first rule it fails is its reason): the
GPU type, then its GPUs (whole or a share), then CPU, then memory. ``placement.filters.chain`` composes
them; every policy, the batch solvers, the replay and the Kubernetes extender use them through it.
"""

from __future__ import annotations

from placement.filters.base import Filter
from placement.filters.cpu import Cpu
from placement.filters.gpu_share import GpuShare
from placement.filters.gpu_type import GpuType
from placement.filters.memory import Memory
from placement.filters.whole_gpus import WholeGpus

FILTERS: dict[str, Filter] = {f.name: f for f in (GpuType(), WholeGpus(), GpuShare(), Cpu(), Memory())}
GPU_RULES = ("gpu-type", "whole-gpus", "gpu-share")
"""The filters that look at GPUs only."""
RESOURCE_RULES = ("whole-gpus", "gpu-share", "cpu", "memory")
"""The filters that count what a machine has free (all but the GPU type)."""


def filter_named(name: str) -> Filter:
    """The filter called ``name``; ``KeyError`` naming the known ones otherwise."""
    if name not in FILTERS:
        raise KeyError(f"unknown filter {name!r}; known: {', '.join(FILTERS)}")
    return FILTERS[name]
