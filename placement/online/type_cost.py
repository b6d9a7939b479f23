"""Liquid's GPU-type term from measured speeds: seconds of a job's run lost per hour of its work on each
machine's GPU type, against the fastest type of the cluster for its workload class.

A job of class ``k`` on type ``t`` runs at ``speed(k, t)`` (``placement.model.speed``, relative to V100), so an
hour of its work takes ``fastest / speed(k, t)`` hours on ``t`` and loses

    3600 x (fastest_k / speed(k, t) - 1)      seconds per hour of work      (0 on the fastest type)

The unit is the network term's (``placement.online.spread_cost``): both say what the placement costs the job in
time. The term replaces the scarcity tier for the jobs it knows: keeping high-end GPUs free for jobs
that ask for them by type is worth what it makes the others lose, and the tier cannot weigh that. Types
the model does not know (and CPU machines) cost what the slowest known type costs, so an unknown type
is never preferred for being unknown. Jobs of no profiled class get ``None``.

The costs depend on the layout and on the speed of each of its GPU types for the workload, so they are
kept with the layout (``Derived.type_costs``) by those speeds.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from placement.model.snapshot import Layout
from placement.model.speed import SpeedModel

FloatArray = npt.NDArray[np.float64]
SECONDS_PER_HOUR = 3600.0


def measures(model: SpeedModel, workload: str) -> bool:
    """Whether ``model`` knows the speed of ``workload`` on GPU types (else :func:`type_cost` is ``None``)."""
    return workload in model.workloads


def type_cost(model: SpeedModel, layout: Layout, workload: str) -> FloatArray | None:
    """Seconds lost per hour of work on each machine's GPU type (read-only; see above)."""
    if not measures(model, workload):
        return None
    by_type = model.speeds_on(workload, layout.gpu_types)
    return layout.derived.type_costs.get(by_type, lambda: _per_machine(layout, by_type))


def _per_machine(layout: Layout, by_type: tuple[float | None, ...]) -> FloatArray:
    speeds = np.array([speed or np.nan for speed in by_type], dtype=float)
    known = speeds[np.isfinite(speeds)]
    if not len(known):
        per_type = np.zeros(len(layout.gpu_types))
    else:
        per_type = SECONDS_PER_HOUR * (known.max() / np.where(np.isfinite(speeds), speeds, known.min()) - 1.0)
    cost: FloatArray = per_type[layout.gpu_type] if len(per_type) else np.zeros(len(layout.gpu_type))
    cost.flags.writeable = False
    return cost
