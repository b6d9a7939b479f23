"""Scorer ``network``: Liquid's network term, what placing the instance on each machine adds to its
job's communication cost.

The bandwidth x distance increment of ``placement.model.network`` (Gbit/s x distance cost); with a
job-performance model in the configuration, or the job's own iteration-time curve, the measured
seconds lost to spread per hour of its work (``placement.online.spread_cost``) for the jobs those cover.
"""

from __future__ import annotations

from placement.model.layout import IntArray
from placement.model.speed import NO_PROFILES
from placement.online.greedy import Step
from placement.online.scorers.base import Costs
from placement.online.spread_cost import spread_cost


class Network:
    name = "network"
    unit = "Gbit/s x distance cost, or seconds lost per hour of work"

    def cost(self, step: Step) -> Costs | None:
        config = step.config
        measured = spread_cost(config.speed or NO_PROFILES, step.network, step.working, step.need) \
            if config.speed is not None or step.job.sync_curve is not None else None
        return step.network.increment(step.task_index) if measured is None else measured

    def local(self, step: Step) -> bool:
        # the measured cost follows the job's span: an instance anywhere changes it everywhere
        return step.config.speed is None and step.job.sync_curve is None

    def cost_at(self, step: Step, machines: IntArray) -> Costs | None:
        return step.network.increment_on(step.task_index, machines)
