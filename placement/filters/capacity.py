"""The filters' rules summed per machine: what the batch models (GGA, CP-SAT) count instances against.

Rows, per machine: free whole GPUs (filter ``whole-gpus``); spare milli-GPUs and spare GPU memory (MiB)
of its GPUs with memory (``gpu-share``; an instance of whole GPUs takes 1000 milli and all the memory of
each); free milli-cores (``cpu``); free MiB (``memory``). Summing over a machine's GPUs relaxes the
share rule, which needs the share and its memory on one GPU: a model counting against these sums
checks or repairs the GPU choice afterwards. The GPU type (``gpu-type``) is a mask, not a sum.
"""

from __future__ import annotations

import numpy as np

from placement.filters.base import Usage
from placement.model.feasibility import Need
from placement.model.layout import MILLI, IntArray

WHOLE_GPUS, GPU_MILLI, GPU_MEM, CPU, MEM = range(5)
ROWS = 5


def spare_rows(usage: Usage) -> IntArray:
    """Per machine, what each row has spare now (``ROWS`` x machines)."""
    layout, n = usage.layout, len(usage.layout.cpu_cap)
    spare_milli = np.where(layout.gpu_mem_cap > 0, MILLI - usage.gpu_milli, 0)
    spare_mem = layout.gpu_mem_cap - usage.gpu_mem
    per_gpu = [np.bincount(layout.gpu_machine, weights=w, minlength=n) for w in (spare_milli, spare_mem)]
    spare: IntArray = np.stack([usage.free_whole, *per_gpu, layout.cpu_cap - usage.cpu, layout.mem_cap - usage.mem])
    return spare.astype(np.int64)


def use_of(need: Need, gpu_mem_cap: int) -> tuple[int, ...]:
    """What one instance of ``need`` takes of each row on a machine whose GPUs have ``gpu_mem_cap`` MiB."""
    if need.whole_gpus:
        gpu_mem = need.whole_gpus * gpu_mem_cap
    else:
        gpu_mem = need.gpu_mem_on(gpu_mem_cap) if need.gpu_milli else 0
    return need.whole_gpus, need.whole_gpus * MILLI or need.gpu_milli, gpu_mem, need.cpu_milli, need.mem_mib
