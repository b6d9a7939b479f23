"""The forecast a reservation is looked for on: the cycle's state as the running jobs end one after the
other (``placement.scheduling.forecast.reserve``), for one job.

Each end changes a few machines, and the placement policy is asked only once the job could fit: its
totals are free, and for each of its demands the machines, fenced by the reservations already held,
have room for as many instances as it has (the filters' count per machine, as in
``placement.scheduling.screen``). So the usage is changed in place, the fenced usage and the room kept
machine by machine, and a snapshot is made only when the policy is asked.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

import numpy as np

from placement.filters.base import UNBOUNDED, SnapshotUsage
from placement.filters.chain import Chain, chain_for, room_bound
from placement.filters.gpu_type import type_mask_of
from placement.model.demand import Job
from placement.model.feasibility import Need, needs_of
from placement.model.layout import IntArray, Layout, frozen
from placement.model.snapshot import MILLI, Allocation, ClusterSnapshot

T = TypeVar("T")


class _Fenced:
    """The usage plus what the fences take, capped at capacity, per GPU and machine (filters read it)."""

    def __init__(self, layout: Layout, arrays: tuple[IntArray, IntArray, IntArray, IntArray],
                 free_whole: IntArray) -> None:
        self.layout = layout
        self.gpu_milli, self.gpu_mem, self.cpu, self.mem = arrays
        self.free_whole = free_whole

    def remember(self, key: Hashable, make: Callable[[], T]) -> T:
        return make()  # changes as jobs end: nothing is kept


class Future:
    """A snapshot of ``base`` as running jobs end (:meth:`release`), with the room ``job`` has on it fenced
    by ``fences``. Only the machines the job could use at all (by GPU type, and GPUs at all where it asks for
    some) are followed one by one; the totals count every release; a snapshot is made by taking every
    released allocation off the base at once."""

    def __init__(self, base: ClusterSnapshot, fences: Sequence[Allocation], job: Job) -> None:
        self.base, self.layout, self.gone = base, base.layout, 0
        self.taken = Taken(())
        """Every released allocation, gathered as they come."""
        self._made: tuple[int, tuple[IntArray, IntArray, IntArray, IntArray]] | None = None
        layout = self.layout
        self.arrays = (base.gpu_milli_used, base.gpu_mem_used, base.cpu_used, base.mem_used)
        # what changed, by index, over the base's arrays on the machines followed, and what the fences take:
        # a release changes a few entries, one at a time, where numpy's per-item cost would dominate
        self.used: tuple[dict[int, int], ...] = ({}, {}, {}, {})
        self.fence: tuple[dict[int, int], ...] = ({}, {}, {}, {})
        for allocation in fences:
            for p in allocation.instances:
                for g in p.gpus:
                    self.fence[0][g] = self.fence[0].get(g, 0) + p.gpu_milli
                    self.fence[1][g] = self.fence[1].get(g, 0) + p.gpu_mem_mib
                self.fence[2][p.machine] = self.fence[2].get(p.machine, 0) + p.cpu_milli
                self.fence[3][p.machine] = self.fence[3].get(p.machine, 0) + p.mem_mib
        self.caps = (None, layout.gpu_mem_cap, layout.cpu_cap, layout.mem_cap)
        fenced = [a.copy() for a in self.arrays]
        for k, taken in enumerate(self.fence):
            if taken:
                at = np.fromiter(taken, dtype=np.int64, count=len(taken))
                cap = self.caps[k]
                fenced[k][at] = np.minimum(fenced[k][at] + np.fromiter(taken.values(), np.int64, len(taken)),
                                           MILLI if cap is None else cap[at])
        start = ClusterSnapshot(base.cluster, base.generation, frozen(fenced[0].copy()), frozen(fenced[1].copy()),
                                frozen(fenced[2].copy()), frozen(fenced[3].copy()), base.allocations)
        self.view = _Fenced(layout, (fenced[0], fenced[1], fenced[2], fenced[3]), start.machine_free_whole.copy())
        self.free = [len(layout.gpu_machine) * MILLI - int(self.arrays[0].sum()),
                     int(layout.cpu_cap.sum()) - int(self.arrays[2].sum()),
                     int(layout.mem_cap.sum()) - int(self.arrays[3].sum())]
        needs = needs_of(job)
        self.wanted = (sum((MILLI * n.whole_gpus or n.gpu_milli) * k for n, k in needs),
                       sum(n.cpu_milli * k for n, k in needs), sum(n.mem_mib * k for n, k in needs))
        usage = SnapshotUsage(start)
        self.rooms = [_Room(need, count, usage) for need, count in needs]
        followed = np.zeros(len(layout.cpu_cap), dtype=bool)
        for need, _ in needs:  # machines of a type it does not take, or without GPUs where it needs some, never host it
            can = type_mask_of(layout, need.gpu_types) if need.gpu_types else np.ones(len(followed), dtype=bool)
            followed |= can & (layout.gpu_count > 0) if need.gpu_milli else can
        self.followed: list[bool] = followed.tolist()
        self.stale: set[int] = set()
        """Machines released on since the rooms were last brought up to date (when the totals first allow it)."""

    def release(self, allocation: Allocation) -> None:
        """The job holding ``allocation`` ended."""
        self.gone += 1
        self.taken.add(allocation)
        view, free, arrays, caps, followed = self.view, self.free, self.arrays, self.caps, self.followed
        (milli, gpu_mem, cpu, mem), (f_milli, f_gpu_mem, f_cpu, f_mem) = self.used, self.fence
        machines = set()
        for p in allocation.instances:
            m = p.machine
            free[0] += p.gpu_milli * len(p.gpus)
            free[1] += p.cpu_milli
            free[2] += p.mem_mib
            if not followed[m]:
                continue
            machines.add(m)  # each entry taken off its usage, then fenced and capped again
            for g in p.gpus:
                was = view.gpu_milli[g] == 0 and view.gpu_mem[g] == 0
                left = milli[g] = milli.get(g, int(arrays[0][g])) - p.gpu_milli
                view.gpu_milli[g] = now_milli = min(left + f_milli.get(g, 0), MILLI)
                left = gpu_mem[g] = gpu_mem.get(g, int(arrays[1][g])) - p.gpu_mem_mib
                view.gpu_mem[g] = now_mem = min(left + f_gpu_mem.get(g, 0), int(caps[1][g]))
                view.free_whole[m] += int(now_milli == 0 and now_mem == 0) - int(was)
            left = cpu[m] = cpu.get(m, int(arrays[2][m])) - p.cpu_milli
            view.cpu[m] = min(left + f_cpu.get(m, 0), int(caps[2][m]))
            left = mem[m] = mem.get(m, int(arrays[3][m])) - p.mem_mib
            view.mem[m] = min(left + f_mem.get(m, 0), int(caps[3][m]))
        self.stale |= machines

    def could_fit(self) -> bool:
        """Whether the job could fit now (``False``: it cannot): its totals are free, and the machines fenced
        have room for each of its demands' instances. The rooms are brought up to date only once the totals
        are free: while they are not, releases only add up (on a machine of a thousand GPUs, working out its
        room for a share costs a pass over them)."""
        if not all(w <= f for w, f in zip(self.wanted, self.free, strict=True)):
            return False
        if self.stale:
            for room in self.rooms:
                room.update(self.view, self.stale)
            self.stale = set()
        return all(r.enough() for r in self.rooms)

    def snapshot(self, released: Sequence[str] | None = None) -> ClusterSnapshot:
        """The snapshot as it is now (unfenced); its allocations map is the base's, without ``released`` where
        given (the placement policies read only the usage, and ask only that the job placed is not in it)."""
        allocations = self.base.allocations
        if released is not None:
            evolver = allocations.evolver()
            for job_id in released:
                del evolver[job_id]
            allocations = evolver.persistent()
        if self._made is None or self._made[0] != self.gone:  # made once per state: asked, then held
            arrays = [a.copy() for a in self.arrays]
            self.taken.take_from(arrays)
            self._made = (self.gone, (frozen(arrays[0]), frozen(arrays[1]), frozen(arrays[2]), frozen(arrays[3])))
        gpu, gpu_mem, cpu, mem = self._made[1]
        return ClusterSnapshot(self.base.cluster, self.base.generation + self.gone, gpu, gpu_mem, cpu, mem, allocations)


class Taken:
    """What some allocations take, as index and amount arrays: per GPU its share and memory, per machine its
    CPU and memory; each allocation's worked out once while it lives (the same running jobs are released,
    and taken as victims, cycle after cycle)."""

    def __init__(self, allocations: Sequence[Allocation]) -> None:
        self.parts = [_arrays_of(a) for a in allocations]

    def add(self, allocation: Allocation) -> None:
        self.parts.append(_arrays_of(allocation))

    def take_from(self, arrays: Sequence[IntArray]) -> None:
        """Take it off usage ``arrays`` (GPU share, GPU memory, CPU, memory), in place."""
        if not self.parts:
            return
        gpus, milli, gpu_mem, machines, cpu, mem = (np.concatenate([p[k] for p in self.parts]) for k in range(6))
        for array, at, amounts in zip(arrays, (gpus, gpus, machines, machines), (milli, gpu_mem, cpu, mem),
                                      strict=True):
            np.subtract.at(array, at, amounts)


_Arrays = tuple[IntArray, IntArray, IntArray, IntArray, IntArray, IntArray]
_arrays: dict[str, tuple[Allocation, _Arrays]] = {}
MOST_ALLOCATIONS = 65_536
"""Allocations whose arrays are kept before the table is emptied."""


def _arrays_of(allocation: Allocation) -> _Arrays:
    """``allocation``'s GPUs, their share and memory, its instances' machines, their CPU and memory."""
    found = _arrays.get(allocation.job_id)
    if found is not None and found[0] is allocation:
        return found[1]
    per_gpu = [(g, p.gpu_milli, p.gpu_mem_mib) for p in allocation.instances for g in p.gpus]
    per_machine = [(p.machine, p.cpu_milli, p.mem_mib) for p in allocation.instances]
    gpu = np.array(per_gpu, dtype=np.int64).reshape(-1, 3)
    machine = np.array(per_machine, dtype=np.int64).reshape(-1, 3)
    made = (gpu[:, 0], gpu[:, 1], gpu[:, 2], machine[:, 0], machine[:, 1], machine[:, 2])
    if len(_arrays) >= MOST_ALLOCATIONS:
        _arrays.clear()
    _arrays[allocation.job_id] = (allocation, made)
    return made


class _Room:
    """How many instances of one demand the machines take, at most, per machine and in all."""

    def __init__(self, need: Need, count: int, usage: SnapshotUsage) -> None:
        self.chain: Chain = chain_for(need)
        self.count = count
        passing = self.chain.passing(usage)
        bound = room_bound(usage, need, (f.name for _, f in self.chain.coded))
        self.room = np.where(passing, UNBOUNDED if bound is None else np.minimum(bound, UNBOUNDED), 0)
        self.total = int(self.room.sum())

    def update(self, view: _Fenced, machines: set[int]) -> None:
        for m in machines:  # exact for one machine: still at most the bound
            now = self.chain.room_at(view, m) if self.chain.passes_at(view, m) else 0
            self.total += now - int(self.room[m])
            self.room[m] = now

    def enough(self) -> bool:
        return self.total >= self.count
