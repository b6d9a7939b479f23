"""Liquid's network term from measured slowdowns: seconds of a job's run lost per hour of its work when
its next instance goes to each machine.

For an all-reduce job of a profiled class (``placement.model.speed``), or with its own predicted curve
(``Job.sync_curve``, from the hyperparameters it stated), with ``K`` GPU replicas that already
spans ``n`` machines up to distance level ``L``, an instance placed on machine ``m`` makes the span
``n' = n + [m is new]`` and ``L' = max(L, level(m))`` (level 0 on a machine it uses, 1 in a rack it uses,
2 in a domain it uses, 3 elsewhere), and costs

    3600 x (step(K, n', L') - step(K, n, L)) / step(K, 1, 0)      seconds lost per hour of work

with ``step`` the job's iteration time (Pollux's model: its sync curve, the speed model's level
factors). The unit is the point: a machine one second of lost run time per hour dearer weighs as much
as Liquid's whole load term, so locality wins wherever it saves measurable time and packing decides the
rest. The first instance has no span yet; a machine that cannot hold all ``K`` replicas (by its free
GPUs, GPU shares, CPU and memory) is charged the least spread it forces, a second machine in the same
rack, so the job starts where it can stay whole. Jobs with parameter servers, with neither a curve nor a
profiled class, or with one replica get ``None``: the policy then keeps the bandwidth x distance cost of
``placement.model.network``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from placement.filters import RESOURCE_RULES
from placement.filters.base import UNBOUNDED
from placement.filters.chain import room_bound
from placement.model.feasibility import Need
from placement.model.network import NetworkTally
from placement.model.speed import SpeedModel
from placement.online.working import WorkingState

FloatArray = npt.NDArray[np.float64]
SECONDS_PER_HOUR = 3600.0


def spread_cost(model: SpeedModel, network: NetworkTally, working: WorkingState, need: Need) -> FloatArray | None:
    """Seconds lost per hour of work, per candidate machine, for the next instance (of ``need``) of the
    job of ``network`` (see above)."""
    job = network.job
    replicas = sum(t.instances for t in job.tasks if t.gpu > 0)
    known = model.workloads.get(job.workload_class)
    curve = job.sync_curve or (known.sync if known is not None else None)
    if job.has_ps or replicas <= 1 or curve is None:
        return None

    def step(machines: int, level: int) -> float:
        return curve.step_s(replicas, machines, model.network_factor(level))

    fp = network.footprint
    used = int(np.count_nonzero(fp.machine))
    if used == 0:
        alone = step(1, 0)
        least = SECONDS_PER_HOUR * (step(2, 1) - alone) / alone
        result_first: FloatArray = np.where(_room(working, need) >= replicas, 0.0, least)
        return result_first
    widest = 0 if used == 1 else 1 if np.count_nonzero(fp.rack) == 1 else 2 if np.count_nonzero(fp.domain) == 1 \
        else 3

    now, reference = step(used, widest), step(1, 0)
    # cost[new machine?][level of the machine]: a machine already used is level 0 and adds nothing
    cost = np.array([[SECONDS_PER_HOUR * (step(used + new, max(widest, level)) - now) / reference
                      for level in range(4)] for new in (0, 1)])
    level = network.nearest_level()
    result: FloatArray = cost[(level > 0).astype(np.int64), level]
    return result


def _room(working: WorkingState, need: Need) -> npt.NDArray[np.int64]:
    """Instances of ``need`` each machine could still take by what it has free (the filters' room bounds,
    GPU memory aside: a bound, for a heuristic)."""
    room = room_bound(working, need, RESOURCE_RULES)
    return np.full(working.n_machines, UNBOUNDED) if room is None else room
