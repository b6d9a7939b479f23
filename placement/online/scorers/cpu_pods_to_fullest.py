"""Scorer ``cpu-pods-to-fullest``: for an instance without GPUs, the machine whose most used resource (the
allocated share of its GPUs or of its CPU, whichever is higher) is fullest; it does not apply to an instance
with GPUs.

The fragmentation score (``fragmentation``) leaves many machines alike for a CPU-only pod: every machine whose
GPUs are all taken adds none, and FGD's score steps are coarse. The first of them in cluster order may be one
whose free GPUs need the CPU the pod takes; the fullest is, most often, one whose GPUs no later pod can use.
Weighted far below a score step, it breaks those ties only (docs/placement.md has the figures).
"""

from __future__ import annotations

import numpy as np

from placement.model.layout import IntArray
from placement.model.snapshot import cpu_share
from placement.online.greedy import Step
from placement.online.scorers.base import Costs


class CpuPodsToFullest:
    name = "cpu-pods-to-fullest"
    unit = "unallocated share of the machine's most used resource (GPUs or CPU), 0..1; CPU-only instances only"

    def cost(self, step: Step) -> Costs | None:
        if _has_gpus(step):
            return None
        working = step.working
        return 1.0 - np.maximum(working.gpu_allocated_share(), cpu_share(working.cpu, working.layout.cpu_cap))

    def local(self, step: Step) -> bool:
        return True

    def cost_at(self, step: Step, machines: IntArray) -> Costs | None:
        if _has_gpus(step):
            return None
        working = step.working
        cpu = cpu_share(working.cpu[machines], working.layout.cpu_cap[machines])
        return 1.0 - np.maximum(working.gpu_allocated_share()[machines], cpu)


def _has_gpus(step: Step) -> bool:
    return bool(step.need.whole_gpus or step.need.gpu_milli)
