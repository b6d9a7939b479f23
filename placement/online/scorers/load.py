"""Scorer ``load``: Liquid's load term. Workers pack onto busy machines (cost 1 - allocated share);
the parameter servers of a job that has them spread (cost: allocated share)."""

from __future__ import annotations

from placement.model.demand import Role
from placement.model.layout import IntArray
from placement.online.greedy import Step
from placement.online.scorers.base import Costs


class Load:
    name = "load"
    unit = "share of the machine's GPUs (CPU-only machines: CPU), 0..1"

    def cost(self, step: Step) -> Costs | None:
        share = step.working.gpu_allocated_share()
        spread = step.job.tasks[step.task_index].role is Role.PS and step.job.has_ps
        return share if spread else 1.0 - share

    def local(self, step: Step) -> bool:
        return True

    def cost_at(self, step: Step, machines: IntArray) -> Costs | None:
        share = step.working.gpu_allocated_share()[machines]
        spread = step.job.tasks[step.task_index].role is Role.PS and step.job.has_ps
        return share if spread else 1.0 - share
