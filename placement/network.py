"""Network cost of a job's placement, as in Liquid (TPDS'22): bandwidth x distance.

Distance levels between two instances (``placement.topology``): 0 same machine, 1 same rack,
2 same domain, 3 across domains, each with a configurable cost (default 0 / 1 / 4 / 40).

* Parameter-server jobs: each worker sends its bandwidth b_w evenly to the n_ps parameter servers, so
  a (ps, worker) pair carries b_w / n_ps Gbit/s and costs (b_w / n_ps) x cost(level).
* All-reduce jobs (no parameter server): an instance costs b x cost(level to the nearest instance
  already placed), i.e. the job pays for every machine, rack and domain it adds to its span.

:class:`NetworkTally` keeps per-machine, per-rack and per-domain sums of what is placed, so the
increment of every candidate machine is a few vector operations, not a loop over placed peers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from placement.demand import Job, Role
from placement.snapshot import InstancePlacement, Layout

FloatArray = npt.NDArray[np.float64]
DEFAULT_DISTANCE_COST = (0.0, 1.0, 4.0, 40.0)


_ZEROS: dict[int, tuple[Layout, tuple[FloatArray, FloatArray, FloatArray]]] = {}


def _zeros(layout: Layout) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Read-only zero sums per machine, rack and domain of ``layout`` (cached per layout)."""
    cached = _ZEROS.get(id(layout))
    if cached is None or cached[0] is not layout:
        arrays = (np.zeros(len(layout.cpu_cap)), np.zeros(int(layout.rack.max()) + 1 if len(layout.rack) else 0),
                  np.zeros(int(layout.domain.max()) + 1 if len(layout.domain) else 0))
        for array in arrays:
            array.flags.writeable = False
        cached = _ZEROS[id(layout)] = (layout, arrays)
    return cached[1]


class _Sums:
    """An amount per machine, with its rack, domain and cluster totals."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.machine, self.rack, self.domain = _zeros(layout)  # shared and read-only until the first add
        self.total = 0.0
        self._own = False

    def add(self, machine: int, amount: float) -> None:
        if not self._own:
            self.machine, self.rack, self.domain = self.machine.copy(), self.rack.copy(), self.domain.copy()
            self._own = True
        self.machine[machine] += amount
        self.rack[self.layout.rack[machine]] += amount
        self.domain[self.layout.domain[machine]] += amount
        self.total += amount

    def at(self, machine: int, cost: Sequence[float]) -> float:
        """:meth:`by_level` for one machine, in O(1)."""
        rack, domain = self.rack[self.layout.rack[machine]], self.domain[self.layout.domain[machine]]
        here = self.machine[machine]
        elsewhere = self.total - domain
        return float(cost[0] * here + cost[1] * (rack - here) + cost[2] * (domain - rack) + cost[3] * elsewhere)

    def by_level(self, cost: Sequence[float]) -> FloatArray:
        """For every candidate machine: sum over placed amounts of amount x cost(level)."""
        at_machine = self.machine
        in_rack = self.rack[self.layout.rack] - at_machine
        in_domain = self.domain[self.layout.domain] - self.rack[self.layout.rack]
        elsewhere = self.total - self.domain[self.layout.domain]
        result: FloatArray = cost[0] * at_machine + cost[1] * in_rack + cost[2] * in_domain + cost[3] * elsewhere
        return result


class NetworkTally:
    """What a job has placed so far, and the network-cost increment of its next instance anywhere."""

    def __init__(self, job: Job, layout: Layout, cost: Sequence[float] = DEFAULT_DISTANCE_COST) -> None:
        self.job = job
        self.layout = layout
        self.cost = tuple(cost)
        self.n_ps = sum(t.instances for t in job.tasks if t.role is Role.PS)
        self.ps = _Sums(layout)        # placed parameter servers (count)
        self.workers = _Sums(layout)   # placed workers' per-PS traffic, Gbit/s
        self.footprint = _Sums(layout)  # all-reduce: where the job already is (1 per machine used)
        self.total = 0.0

    def increment(self, task_index: int) -> FloatArray:
        """Network cost added by placing one instance of the task on each machine."""
        task = self.job.tasks[task_index]
        if self.n_ps:
            if task.role is Role.PS:
                return self.workers.by_level(self.cost)
            return (task.bandwidth_gbps / self.n_ps) * self.ps.by_level(self.cost)
        if self.footprint.total == 0:
            return np.zeros(len(self.layout.cpu_cap))
        level = self.nearest_level()
        return task.bandwidth_gbps * np.asarray(self.cost)[level]

    def increment_at(self, task_index: int, machine: int) -> float:
        """:meth:`increment` for one machine, in O(1)."""
        task = self.job.tasks[task_index]
        if self.n_ps:
            if task.role is Role.PS:
                return self.workers.at(machine, self.cost)
            return (task.bandwidth_gbps / self.n_ps) * self.ps.at(machine, self.cost)
        fp = self.footprint
        if fp.total == 0:
            return 0.0
        if fp.machine[machine] > 0:
            level = 0
        elif fp.rack[self.layout.rack[machine]] > 0:
            level = 1
        else:
            level = 2 if fp.domain[self.layout.domain[machine]] > 0 else 3
        return task.bandwidth_gbps * self.cost[level]

    def nearest_level(self) -> npt.NDArray[np.int64]:
        """All-reduce: per machine, the distance level to the nearest machine the job already uses."""
        fp = self.footprint
        # nested: on the machine implies in its rack implies in its domain
        level: npt.NDArray[np.int64] = 3 - ((fp.machine > 0).astype(np.int64) + (fp.rack[self.layout.rack] > 0)
                                            + (fp.domain[self.layout.domain] > 0))
        return level

    def record(self, placement: InstancePlacement, added_cost: float) -> None:
        task = self.job.tasks[placement.task]
        self.total += added_cost
        if self.n_ps:
            if task.role is Role.PS:
                self.ps.add(placement.machine, 1.0)
            else:
                self.workers.add(placement.machine, task.bandwidth_gbps / self.n_ps)
        elif self.footprint.machine[placement.machine] == 0:
            self.footprint.add(placement.machine, 1.0)


def placement_cost(job: Job, layout: Layout, placements: Sequence[InstancePlacement],
                   cost: Sequence[float] = DEFAULT_DISTANCE_COST) -> float:
    """Network cost of a complete placement, by the rules above (placed in the given order)."""
    tally = NetworkTally(job, layout, cost)
    if tally.n_ps:  # pairwise: order does not matter; add PS first so each worker sees them all
        placements = sorted(placements, key=lambda p: job.tasks[p.task].role is not Role.PS)
    for p in placements:
        tally.record(p, tally.increment_at(p.task, p.machine))
    return tally.total
