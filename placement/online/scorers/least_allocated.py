"""Scorer ``least-allocated``: the least allocated machine first (cost: allocated share), spreading
load (the PAI paper's load balancing; Kubernetes' LeastAllocated)."""

from __future__ import annotations

from placement.model.layout import IntArray
from placement.online.greedy import Step
from placement.online.scorers.base import Costs


class LeastAllocated:
    name = "least-allocated"
    unit = "allocated share of the machine's GPUs (CPU-only machines: CPU), 0..1"

    def cost(self, step: Step) -> Costs | None:
        return step.working.gpu_allocated_share()

    def local(self, step: Step) -> bool:
        return True

    def cost_at(self, step: Step, machines: IntArray) -> Costs | None:
        return step.working.gpu_allocated_share()[machines]
