"""Scorer ``type-cost``: Liquid's GPU-type term from measured speeds, the seconds of its run a job loses
per hour of work on each machine's GPU type against the cluster's fastest for it
(``placement.online.type_cost``). Applies to instances with GPUs of a job whose class the configuration's
job-performance model knows."""

from __future__ import annotations

from placement.model.layout import IntArray
from placement.online.greedy import Step
from placement.online.scorers.base import Costs
from placement.online.type_cost import type_cost


class TypeCost:
    name = "type-cost"
    unit = "seconds lost per hour of work"

    def cost(self, step: Step) -> Costs | None:
        model = step.config.speed
        if model is None or step.job.tasks[step.task_index].gpu <= 0:
            return None
        return type_cost(model, step.working.layout, step.job.workload_class)

    def local(self, step: Step) -> bool:
        return True

    def cost_at(self, step: Step, machines: IntArray) -> Costs | None:
        costs = self.cost(step)
        return None if costs is None else costs[machines]
