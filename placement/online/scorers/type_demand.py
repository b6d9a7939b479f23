"""Scorer ``type-demand``: the GPU types that recent arrivals are restricted to, learned online. An instance
with GPUs that names no GPU type pays, on each machine, the pressure of restricted demand on the free GPUs of
the machine's type:

    pressure(t) = sum over the sets S of types that recent instances were restricted to, with t in S, of
                  (share of the recent GPU demand restricted to S) / (share of the free GPUs that are of S)

(1 where the instances restricted to S ask for S's share of what is free), so an instance that could go
anywhere keeps off the types that restricted ones will need, more so as those fill up. The term does not
apply until some recent instance was restricted, nor to instances without GPUs or restricted themselves.
The recent instances are those of a :class:`~placement.online.shape_mix.ShapeMix`
(``ShapeMix.restricted_demand``) that the policy's fragmentation scorer feeds. The cost is counted in the
fragmentation scorer's steps, one unit of pressure as a whole GPU of expected fragmentation
(``STEPS_PER_PRESSURE``), and ``fgd`` and ``liquid`` weigh it as their fragmentation term: that measure is
local to a machine and cannot see that the free GPUs of a rare type are the only ones some arrivals can use.
"""

from __future__ import annotations

from typing import cast

import numpy as np

from placement.model.layout import MILLI, FloatArray, IntArray, Layout
from placement.online.greedy import Step
from placement.online.scorers.base import Costs
from placement.online.scorers.fragmentation import STEP_MILLI
from placement.online.shape_mix import ShapeMix
from placement.online.type_cost import measures

STEPS_PER_PRESSURE = MILLI / STEP_MILLI
"""The cost of one unit of pressure, in the fragmentation scorer's points (one per 40 milli-GPUs, as FGD's score
counts near zero): about as much as a whole GPU of expected fragmentation (restricted demand asking for all of a
type's share of the free GPUs leaves, in expectation, each of them wanted)."""
PRESSURE_CAP = 100.0
"""The pressure of a set of types with no free GPU left (any larger finite value would do)."""


def type_pressure(layout: Layout, gpu_milli_used: IntArray, demand: dict[tuple[str, ...], int],
                  total_demand: int) -> FloatArray:
    """Per machine, the pressure of ``demand`` (milli-GPUs per set of accepted types, out of ``total_demand``)
    on the free GPUs of its type (see the module docstring); zeros where no demand names a type of it."""
    free = np.bincount(layout.gpu_type[layout.gpu_machine], weights=MILLI - gpu_milli_used,
                       minlength=len(layout.gpu_types))
    result: FloatArray = pressure_by_type(layout, free.astype(np.float64, copy=False), demand,
                                          total_demand)[layout.gpu_type]
    return result


def pressure_by_type(layout: Layout, free: FloatArray, demand: dict[tuple[str, ...], int],
                     total_demand: int) -> FloatArray:
    """:func:`type_pressure` per GPU type of ``layout``, from the free milli-GPUs of each (``free``). Python floats:
    a handful of types, and sums of whole numbers, exact in any order."""
    free_of: list[float] = free.tolist()
    all_free = sum(free_of)
    index = layout.derived.type_index
    per_type = [0.0] * len(layout.gpu_types)
    for types, milli in demand.items():
        present = [index[t] for t in types if t in index]
        if not present or total_demand <= 0:
            continue
        free_share = sum(free_of[k] for k in present) / all_free if all_free > 0 else 0.0
        wanted = milli / total_demand
        pressure = min(wanted / free_share, PRESSURE_CAP) if free_share > 0 else PRESSURE_CAP
        for k in present:
            per_type[k] += pressure
    return np.array(per_type)


class TypeDemand:
    """See the module docstring; ``mix`` is the shape mix whose window it reads."""

    name = "type-demand"
    unit = "share of restricted demand over share of free GPUs on the machine's type, x 25 (fragmentation steps)"

    def __init__(self, mix: ShapeMix) -> None:
        self.mix = mix

    def cost(self, step: Step) -> Costs | None:
        per_type = self._per_type(step)
        if per_type is None:
            return None
        result: FloatArray = per_type[step.working.layout.gpu_type]
        return result

    def local(self, step: Step) -> bool:
        return True  # one pressure per decision (``_per_type``): a machine's cost is its type's

    def cost_at(self, step: Step, machines: IntArray) -> Costs | None:
        per_type = self._per_type(step)
        if per_type is None:
            return None
        result: FloatArray = per_type[step.working.layout.gpu_type[machines]]
        return result

    def _per_type(self, step: Step) -> FloatArray | None:
        """The cost per GPU type, ``None`` where the term does not apply: the pressure on the free GPUs of the
        snapshot the decision started from, so the same for every instance of the job (kept in ``step.memo``,
        the task's). The instances of one gang are not the restricted demand the term is about: with the
        pressure worked out again after each of them, a gang's own GPUs turned its later instances away from
        the type it began on, and a 16-instance gang paid a quarter of its decision for it."""
        found = step.memo.get(self)
        if found is None:
            found = step.memo[self] = (self._pressure(step),)
        kept: FloatArray | None = cast(tuple[FloatArray | None], found)[0]
        return kept

    def _pressure(self, step: Step) -> FloatArray | None:
        task, model = step.job.tasks[step.task_index], step.config.speed
        if task.gpu <= 0 or task.gpu_types or (model is not None and measures(model, step.job.workload_class)):
            return None
        demand = self.mix.restricted_demand()
        if not demand:
            return None
        snapshot = step.working.snapshot
        result: FloatArray = STEPS_PER_PRESSURE * pressure_by_type(snapshot.layout, snapshot.type_free_milli, demand,
                                                                   self.mix.gpu_demand())
        return result
