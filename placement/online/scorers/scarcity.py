"""Scorer ``scarcity``: keeps scarce, high-end GPUs for the jobs that ask for them. An instance with GPUs
of a job that names no GPU type pays the tier of the machine's GPU type scaled to 0..1
(``placement.online.greedy.machine_scarcity``), unless the measured type cost (scorer ``type-cost``) weighs
the type for it instead."""

from __future__ import annotations

from placement.model.layout import IntArray
from placement.online.greedy import Step, machine_scarcity
from placement.online.scorers.base import Costs
from placement.online.type_cost import measures


class Scarcity:
    name = "scarcity"
    unit = "GPU tier / highest tier, 0..1"

    def cost(self, step: Step) -> Costs | None:
        task, model = step.job.tasks[step.task_index], step.config.speed
        if task.gpu <= 0 or task.gpu_types or (model is not None and measures(model, step.job.workload_class)):
            return None
        return machine_scarcity(step.config, step.working.layout)

    def local(self, step: Step) -> bool:
        return True

    def cost_at(self, step: Step, machines: IntArray) -> Costs | None:
        costs = self.cost(step)
        return None if costs is None else costs[machines]
