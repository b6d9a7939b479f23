"""Scorer ``tier``: the PAI paper's reserving: jobs of at least ``PlacementConfig.big_job_gpus`` GPUs
go to the highest-tier machines (cost: minus the tier), smaller ones to the lowest (cost: the tier)."""

from __future__ import annotations

from placement.model.layout import IntArray
from placement.online.greedy import Step, machine_tiers
from placement.online.scorers.base import Costs


class Tier:
    name = "tier"
    unit = "GPU tier (higher: scarcer, more capable)"

    def cost(self, step: Step) -> Costs | None:
        tier = machine_tiers(step.config, step.working.layout)
        return -tier if step.job.gpus >= step.config.big_job_gpus else tier

    def local(self, step: Step) -> bool:
        return True

    def cost_at(self, step: Step, machines: IntArray) -> Costs | None:
        tier = machine_tiers(step.config, step.working.layout)[machines]
        return -tier if step.job.gpus >= step.config.big_job_gpus else tier
