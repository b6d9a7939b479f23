"""GPU types known to gpuplace and the memory of one GPU of each type.

Sources: vendor data sheets for the named parts. Two rows are assumptions, stated here once:

* ``MISC`` (PAI v2020) means "older generations, e.g. NVIDIA Tesla K40m, K80, M60". Their memory per
  GPU is 12 GB (K40m), 12 GB per die (K80) and 8 GB per die (M60). gpuplace assumes the smallest,
  8 GiB, so it never promises GPU memory a MISC machine may not have.
* ``G1``, ``G2``, ``G3`` (openb v2023) are undisclosed internal GPU codes. gpuplace assumes 16 GiB,
  the memory of the other data-centre GPUs of the same cluster (T4, P100, V100M16).

A deployment that knows better overrides the table (``gpu_mem_gib`` on each machine).
"""

from __future__ import annotations

from types import MappingProxyType

GPU_MEM_GIB = MappingProxyType(
    {
        "MISC": 8.0,
        "P100": 16.0,
        "T4": 16.0,
        "V100": 16.0,
        "V100M16": 16.0,
        "V100M32": 32.0,
        "A10": 24.0,
        "G1": 16.0,
        "G2": 16.0,
        "G3": 16.0,
    }
)
"""Memory of one GPU, GiB, by GPU type."""

CPU_ONLY = "CPU"
"""The type name PAI uses for machines (and jobs) without GPUs."""

KNOWN_TYPES: frozenset[str] = frozenset(GPU_MEM_GIB) | {CPU_ONLY}


def gpu_mem_gib(gpu_type: str) -> float:
    """Memory of one GPU of ``gpu_type``, GiB (0 for CPU-only); ``KeyError`` for an unknown type."""
    if gpu_type == CPU_ONLY:
        return 0.0
    return GPU_MEM_GIB[gpu_type]
