"""Scorer ``most-allocated``: the busiest machine first (cost: 1 - allocated share), packing jobs
together (the PAI paper's packing; Kubernetes' MostAllocated)."""

from __future__ import annotations

from placement.model.layout import IntArray
from placement.online.greedy import Step
from placement.online.scorers.base import Costs


class MostAllocated:
    name = "most-allocated"
    unit = "unallocated share of the machine's GPUs (CPU-only machines: CPU), 0..1"

    def cost(self, step: Step) -> Costs | None:
        return 1.0 - step.working.gpu_allocated_share()

    def local(self, step: Step) -> bool:
        return True

    def cost_at(self, step: Step, machines: IntArray) -> Costs | None:
        return 1.0 - step.working.gpu_allocated_share()[machines]
