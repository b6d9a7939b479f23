"""Liquid's GPU-type term from measured speeds: seconds of a job's run lost per hour of its work on each
machine's GPU type, against the fastest type of the cluster for its workload class.

A job of class ``k`` on type ``t`` runs at ``speed(k, t)`` (``placement.speed``, relative to V100), so an
hour of its work takes ``fastest / speed(k, t)`` hours on ``t`` and loses

    3600 x (fastest_k / speed(k, t) - 1)      seconds per hour of work      (0 on the fastest type)

The unit is the network term's (``placement.spread_cost``): both say what the placement costs the job in
time. The term replaces the scarcity tier for the jobs it knows: keeping high-end GPUs free for jobs
that ask for them by type is worth what it makes the others lose, and the tier cannot weigh that. Types
the model does not know (and CPU machines) cost what the slowest known type costs, so an unknown type
is never preferred for being unknown. Jobs of no profiled class get ``None``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from placement.snapshot import Layout
from placement.speed import SpeedModel

FloatArray = npt.NDArray[np.float64]
SECONDS_PER_HOUR = 3600.0
_CACHE: dict[tuple[int, int, str], tuple[Layout, SpeedModel, FloatArray]] = {}
_CACHE_MAX = 1024


def type_cost(model: SpeedModel, layout: Layout, workload: str) -> FloatArray | None:
    """Seconds lost per hour of work on each machine's GPU type (read-only; see above)."""
    if workload not in model.workloads:
        return None
    key = (id(layout), id(model), workload)
    cached = _CACHE.get(key)
    if cached is not None and cached[0] is layout and cached[1] is model:
        return cached[2]
    speeds = np.array([model.speed_of(workload, name) or np.nan for name in layout.gpu_types], dtype=float)
    known = speeds[np.isfinite(speeds)]
    if not len(known):
        per_type = np.zeros(len(layout.gpu_types))
    else:
        per_type = SECONDS_PER_HOUR * (known.max() / np.where(np.isfinite(speeds), speeds, known.min()) - 1.0)
    cost = per_type[layout.gpu_type] if len(per_type) else np.zeros(len(layout.gpu_type))
    cost.flags.writeable = False
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    _CACHE[key] = (layout, model, cost)
    return cost
