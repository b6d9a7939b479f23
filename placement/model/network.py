"""Network cost of a job's placement, as in Liquid (TPDS'22): bandwidth x distance.

Distance levels between two instances (``placement.model.topology``): 0 same machine, 1 same rack,
2 same domain, 3 across domains, each with a configurable cost (``DEFAULT_DISTANCE_COST``: 0 / 1 / 4 / 40).

* Parameter-server jobs: each worker sends its bandwidth b_w evenly to the n_ps parameter servers, so
  a (ps, worker) pair carries b_w / n_ps Gbit/s and costs (b_w / n_ps) x cost(level).
* All-reduce jobs (no parameter server): an instance costs b x cost(level to the nearest instance
  already placed), i.e. the job pays for every machine, rack and domain it adds to its span.

:class:`NetworkTally` is the one implementation of these rules. It keeps per-machine, per-rack and
per-domain sums of what a job has placed, so that the increment of the next instance is
:meth:`NetworkTally.increment_at` for one machine (Python scalars) and :meth:`NetworkTally.increment`
for every machine at once (a few vector operations, for the online policies' scores).
:func:`network_cost` replays a complete placement through the tally: the batch objective, the score
breakdown of a decision and the batch solvers' plans all use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from placement.model.demand import Job, Role
from placement.model.layout import Layout, Places
from placement.model.snapshot import InstancePlacement
from placement.model.topology import DEFAULT_DISTANCE_COST

FloatArray = npt.NDArray[np.float64]


class _Sums:
    """An amount per machine, with its rack, domain and cluster totals.

    Kept in dictionaries (a job touches few machines); the arrays over all machines, racks and domains
    that :meth:`by_level` needs are made when first read and kept up to date from then on.
    """

    def __init__(self, places: Places) -> None:
        self.places = places
        self.by_machine: dict[int, float] = {}
        self.by_rack: dict[int, float] = {}
        self.by_domain: dict[int, float] = {}
        self.total = 0.0
        self._arrays: tuple[FloatArray, FloatArray, FloatArray] | None = None

    def add(self, machine: int, amount: float) -> None:
        rack, domain = self.places.rack_of[machine], self.places.domain_of[machine]
        self.by_machine[machine] = self.by_machine.get(machine, 0.0) + amount
        self.by_rack[rack] = self.by_rack.get(rack, 0.0) + amount
        self.by_domain[domain] = self.by_domain.get(domain, 0.0) + amount
        self.total += amount
        if self._arrays is not None:
            at_machine, at_rack, at_domain = self._arrays
            at_machine[machine] += amount
            at_rack[rack] += amount
            at_domain[domain] += amount

    def arrays(self) -> tuple[FloatArray, FloatArray, FloatArray]:
        """The sums per machine, per rack and per domain, over all of them (read-only)."""
        if self._arrays is not None:
            return self._arrays
        if not self.by_machine:
            return self.places.zeros  # shared and read-only until the first add
        made = tuple(zeros.copy() for zeros in self.places.zeros)
        for array, sums in zip(made, (self.by_machine, self.by_rack, self.by_domain), strict=True):
            array[list(sums)] = list(sums.values())
        self._arrays = made[0], made[1], made[2]
        return self._arrays

    @property
    def machine(self) -> FloatArray:
        return self.arrays()[0]

    @property
    def rack(self) -> FloatArray:
        return self.arrays()[1]

    @property
    def domain(self) -> FloatArray:
        return self.arrays()[2]

    def at(self, machine: int, cost: Sequence[float]) -> float:
        """:meth:`by_level` for one machine, in O(1)."""
        here = self.by_machine.get(machine, 0.0)
        rack = self.by_rack.get(self.places.rack_of[machine], 0.0)
        domain = self.by_domain.get(self.places.domain_of[machine], 0.0)
        elsewhere = self.total - domain
        return float(cost[0] * here + cost[1] * (rack - here) + cost[2] * (domain - rack) + cost[3] * elsewhere)

    def by_level(self, cost: Sequence[float]) -> FloatArray:
        """For every candidate machine: sum over placed amounts of amount x cost(level)."""
        at_machine, at_rack, at_domain = self.arrays()
        rack, domain = at_rack[self.places.rack], at_domain[self.places.domain]
        in_rack = rack - at_machine
        in_domain = domain - rack
        elsewhere = self.total - domain
        result: FloatArray = cost[0] * at_machine + cost[1] * in_rack + cost[2] * in_domain + cost[3] * elsewhere
        return result


class NetworkTally:
    """What a job has placed so far, and the network-cost increment of its next instance anywhere.

    ``layout`` says where the machines are: a cluster's :class:`~placement.model.layout.Layout`, or
    :class:`~placement.model.layout.Places` made from racks and domains given as lists.
    """

    def __init__(self, job: Job, layout: Layout | Places, cost: Sequence[float] = DEFAULT_DISTANCE_COST) -> None:
        self.job = job
        self.places = layout if isinstance(layout, Places) else layout.derived.places
        self.cost = tuple(cost)
        self.n_ps = sum(t.instances for t in job.tasks if t.role is Role.PS)
        self.ps = _Sums(self.places)         # placed parameter servers (count)
        self.workers = _Sums(self.places)    # placed workers' per-PS traffic, Gbit/s
        self.footprint = _Sums(self.places)  # all-reduce: where the job already is (1 per machine used)
        self.total = 0.0
        self._level: npt.NDArray[np.int64] | None = None
        """All-reduce: :meth:`nearest_level`, once asked for, kept up to date by :meth:`record_at`."""
        self._records: list[tuple[int, bool, bool] | None] = []
        """Per instance recorded: the machine it added to the footprint (-1 if none) and whether its rack and its
        domain were new to the job; ``None`` where the increments of every machine changed (:meth:`changed_since`)."""

    def increment(self, task_index: int) -> FloatArray:
        """Network cost added by placing one instance of the task on each machine."""
        task = self.job.tasks[task_index]
        if self.n_ps:
            if task.role is Role.PS:
                return self.workers.by_level(self.cost)
            return (task.bandwidth_gbps / self.n_ps) * self.ps.by_level(self.cost)
        if self.footprint.total == 0:
            return np.zeros(len(self.places.rack_of))
        level = self.nearest_level()
        return task.bandwidth_gbps * np.asarray(self.cost)[level]

    def increment_on(self, task_index: int, machines: npt.NDArray[np.int64]) -> FloatArray:
        """``increment(task_index)[machines]``, worked out for those machines alone where it can be."""
        task = self.job.tasks[task_index]
        if self.n_ps:
            return self.increment(task_index)[machines]
        if self.footprint.total == 0:
            return np.zeros(len(machines))
        return task.bandwidth_gbps * np.asarray(self.cost)[self.nearest_level()[machines]]

    def mark(self) -> int:
        """A point to ask :meth:`changed_since` from."""
        return len(self._records)

    def changed_since(self, mark: int) -> npt.NDArray[np.int64] | None:
        """The machines whose :meth:`increment` (for any task) may have changed since ``mark``; ``None`` where it
        may have changed everywhere (the first instance of an all-reduce job; any instance of a job with
        parameter servers, whose costs count the instances placed anywhere)."""
        records = self._records[mark:]
        parts = []
        for record in records:
            if record is None:
                return None
            if record[0] >= 0:
                parts.append(self._reached(*record))
        return parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def _reached(self, machine: int, new_rack: bool, new_domain: bool) -> npt.NDArray[np.int64]:
        """The machines whose nearest level a first instance on ``machine`` changes: the machine, and its rack's
        and its domain's machines where those were new to the job."""
        places = self.places
        parts = [np.array([machine])]
        if new_rack:
            parts.append(places.rack_members[places.rack_of[machine]])
        if new_domain:
            parts.append(places.domain_members[places.domain_of[machine]])
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def increment_at(self, task_index: int, machine: int) -> float:
        """:meth:`increment` for one machine, in O(1)."""
        task = self.job.tasks[task_index]
        if self.n_ps:
            if task.role is Role.PS:
                return self.workers.at(machine, self.cost)
            return (task.bandwidth_gbps / self.n_ps) * self.ps.at(machine, self.cost)
        fp = self.footprint  # 1 per machine used: a machine, rack or domain in it is one the job uses
        if fp.total == 0:
            return 0.0
        if machine in fp.by_machine:
            level = 0
        elif self.places.rack_of[machine] in fp.by_rack:
            level = 1
        else:
            level = 2 if self.places.domain_of[machine] in fp.by_domain else 3
        return task.bandwidth_gbps * self.cost[level]

    def nearest_level(self) -> npt.NDArray[np.int64]:
        """All-reduce: per machine, the distance level to the nearest machine the job already uses (read-only,
        valid until the next record)."""
        if self._level is None:
            self._level = self._levels(None)
        return self._level

    def _levels(self, machines: npt.NDArray[np.int64] | None) -> npt.NDArray[np.int64]:
        """:meth:`nearest_level` worked out from the footprint, for every machine or for ``machines``."""
        at_machine, at_rack, at_domain = self.footprint.arrays()
        places = self.places
        if machines is not None:
            at_machine, rack, domain = at_machine[machines], places.rack[machines], places.domain[machines]
        else:
            rack, domain = places.rack, places.domain
        # nested: on the machine implies in its rack implies in its domain
        level: npt.NDArray[np.int64] = 3 - ((at_machine > 0).astype(np.int64) + (at_rack[rack] > 0)
                                            + (at_domain[domain] > 0))
        return level

    def record_many(self, task_index: int, machine: int, count: int) -> None:
        """``count`` instances of task ``task_index`` placed on ``machine`` one after the other, each at the cost
        :meth:`increment_at` gives it then, as :meth:`record_at` books them. After the first, an all-reduce job's
        next ones land on a machine it uses: the same increment each, nothing new in its footprint, so they are
        booked without asking again (a policy places a task's instances on one machine many at a time)."""
        if count <= 0:
            return
        self.record_at(task_index, machine, self.increment_at(task_index, machine))
        if self.n_ps:  # every instance moves the sums the next one's cost is read from
            for _ in range(count - 1):
                self.record_at(task_index, machine, self.increment_at(task_index, machine))
            return
        added = self.job.tasks[task_index].bandwidth_gbps * self.cost[0]
        for _ in range(count - 1):  # added one at a time: the same total, to the last bit, as one by one
            self.total += added
        self._records.extend([(-1, False, False)] * (count - 1))

    def record_at(self, task_index: int, machine: int, added_cost: float) -> None:
        """Book an instance of task ``task_index`` placed on ``machine``, at the cost :meth:`increment_at` gave it."""
        self.total += added_cost
        if self.n_ps:
            task = self.job.tasks[task_index]
            if task.role is Role.PS:
                self.ps.add(machine, 1.0)
            else:
                self.workers.add(machine, task.bandwidth_gbps / self.n_ps)
            self._records.append(None)
        elif machine not in self.footprint.by_machine:
            fp, places = self.footprint, self.places
            first = fp.total == 0
            record = (machine, places.rack_of[machine] not in fp.by_rack, places.domain_of[machine] not in fp.by_domain)
            fp.add(machine, 1.0)
            self._records.append(None if first else record)
            if self._level is not None:
                if first:
                    self._level = None
                elif record[1] or record[2]:
                    reached = self._reached(*record)
                    self._level[reached] = self._levels(reached)
                else:  # on a machine of a rack the job uses already: only the machine is nearer now
                    self._level[machine] = 0
        else:
            self._records.append((-1, False, False))


def network_cost(job: Job, instances: Iterable[tuple[int, int]], layout: Layout | Places,
                 cost: Sequence[float] = DEFAULT_DISTANCE_COST) -> float:
    """Network cost of a complete placement: ``instances`` are (task index, machine) pairs, placed in
    the given order (all-reduce jobs pay by that order; for parameter-server jobs it does not matter)."""
    placed = list(instances)
    if len(placed) < 2:  # no peer to talk to
        return 0.0
    tally = NetworkTally(job, layout, cost)
    if tally.n_ps:  # pairwise: order does not matter; add PS first so each worker sees them all
        placed.sort(key=lambda pair: job.tasks[pair[0]].role is not Role.PS)
    increment_at, record_at = tally.increment_at, tally.record_at
    for task_index, machine in placed:
        record_at(task_index, machine, increment_at(task_index, machine))
    return tally.total


def placement_cost(job: Job, layout: Layout, placements: Sequence[InstancePlacement],
                   cost: Sequence[float] = DEFAULT_DISTANCE_COST) -> float:
    """:func:`network_cost` of placed instances (in the given order)."""
    return network_cost(job, ((p.task, p.machine) for p in placements), layout, cost)
