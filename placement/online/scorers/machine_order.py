"""Scorer ``machine-order``: every machine alike, so the first one in cluster order that fits wins
(ties go to the lowest machine index)."""

from __future__ import annotations

import numpy as np

from placement.model.layout import IntArray
from placement.online.greedy import Step
from placement.online.scorers.base import Costs


class MachineOrder:
    name = "machine-order"
    unit = "none (0 everywhere)"

    def cost(self, step: Step) -> Costs | None:
        return np.zeros(step.working.n_machines)

    def local(self, step: Step) -> bool:
        return True

    def cost_at(self, step: Step, machines: IntArray) -> Costs | None:
        return np.zeros(len(machines))
