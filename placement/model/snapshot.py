"""The immutable cluster snapshot: what is allocated on every GPU and machine, with a generation.

Amounts are kept as integers (units in ``placement.model.layout``) so that placing and releasing a job
restores the exact prior state: GPU share in milli-GPUs (1000 = one whole GPU), memory in MiB, CPU in
milli-cores. Demands are rounded **up** to these units and capacities **down**, so rounding never
over-allocates.

A policy reads a snapshot and returns a decision; :func:`apply` and :func:`release` return new
snapshots (``generation`` + 1); nothing here mutates a snapshot in place.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace
from typing import TypeVar, cast

import numpy as np
import numpy.typing as npt
from pyrsistent import pmap
from pyrsistent.typing import PMap

from placement.model.cluster import Cluster
from placement.model.layout import MIB_PER_GIB, MILLI, IntArray, Layout, Table, down, frozen, up

__all__ = ["MIB_PER_GIB", "MILLI", "Allocation", "ClusterSnapshot", "InstancePlacement", "IntArray", "Layout",
           "allocated_share", "apply", "at_generation", "down", "empty_snapshot", "layout_of", "release", "up"]


@dataclass(frozen=True)
class InstancePlacement:
    """Where one instance runs and what it holds there (integer units)."""

    task: int
    machine: int
    gpus: tuple[int, ...]
    gpu_milli: int
    gpu_mem_mib: int
    cpu_milli: int
    mem_mib: int


@dataclass(frozen=True)
class Allocation:
    """Every instance of one job: the unit committed and released together."""

    job_id: str
    instances: tuple[InstancePlacement, ...]

    def machines(self) -> set[int]:
        return {p.machine for p in self.instances}


T = TypeVar("T")
KEPT = 512
"""Values :meth:`ClusterSnapshot.remember` keeps per snapshot (the table is emptied when full). A scheduling cycle
asks one snapshot about a few hundred demands, one to three values each (their candidates; for a gang its room;
why one is short of room, ``placement.online.greedy``): with 64 the table was emptied several times a cycle and
the same values worked out again."""


class _PerMachine:
    """What is derived from one snapshot's usage: per-machine sums, each worked out when first read (or
    carried over from the snapshot it was made from), and the values kept by ``ClusterSnapshot.remember``."""

    __slots__ = ("free_whole", "gpu_milli", "kept", "share", "state_ids", "type_free")

    def __init__(self) -> None:
        self.gpu_milli: IntArray | None = None
        self.free_whole: IntArray | None = None
        self.share: npt.NDArray[np.float64] | None = None
        self.type_free: npt.NDArray[np.float64] | None = None
        self.kept: Table[Hashable, object] | None = None
        self.state_ids: tuple[int, IntArray] | None = None
        """The ids of the machines' states, with the epoch of the layout's ids they belong to."""


@dataclass(frozen=True)
class ClusterSnapshot:
    """Allocation state of ``cluster`` at ``generation``; GPU ``g`` sits on machine ``gpu_machine[g]``."""

    cluster: Cluster
    generation: int
    gpu_milli_used: IntArray
    gpu_mem_used: IntArray
    cpu_used: IntArray
    mem_used: IntArray
    allocations: PMap[str, Allocation] = field(default_factory=pmap)
    """Live allocations by job id: a persistent map, so a new snapshot shares it instead of copying."""
    _per_machine: _PerMachine = field(default_factory=_PerMachine, init=False, repr=False, compare=False)

    @staticmethod
    def empty(cluster: Cluster) -> ClusterSnapshot:
        layout = cluster.layout
        zeros = len(layout.gpu_machine)
        return ClusterSnapshot(cluster, 0, frozen(np.zeros(zeros, np.int64)), frozen(np.zeros(zeros, np.int64)),
                               frozen(np.zeros(len(cluster), np.int64)), frozen(np.zeros(len(cluster), np.int64)))

    @property
    def layout(self) -> Layout:
        return self.cluster.layout

    def remember(self, key: Hashable, make: Callable[[], T]) -> T:
        """``make()``, kept with the snapshot under ``key``: a snapshot never changes, so what is worked out
        from its usage holds as long as it lives (at most ``KEPT`` values; the caller must not change them)."""
        sums = self._per_machine
        if sums.kept is None:
            sums.kept = Table(KEPT)
        return cast(T, sums.kept.get(key, make))

    def state_ids(self, near: ClusterSnapshot | None = None) -> IntArray:
        """Per machine, the id of its state (``placement.model.states``; read-only): carried from the snapshot this
        one was made from, else worked out from ``near``'s (another snapshot of the cluster) on the machines whose
        usage differs, else on every machine."""
        registry, sums = self.layout.derived.state_ids, self._per_machine
        if sums.state_ids is not None and sums.state_ids[0] == registry.epoch:
            return sums.state_ids[1]
        kept = near._per_machine.state_ids if near is not None and near.layout is self.layout else None
        if near is not None and kept is not None and kept[0] == registry.epoch:
            gpus = np.flatnonzero((near.gpu_milli_used != self.gpu_milli_used)
                                  | (near.gpu_mem_used != self.gpu_mem_used))
            changed = np.union1d(self.layout.gpu_machine[gpus], np.flatnonzero(near.cpu_used != self.cpu_used))
            ids = kept[1].copy()
        else:
            changed, ids = np.arange(len(self.cpu_used)), np.zeros(len(self.cpu_used), dtype=np.int64)
        if len(changed):
            ids[changed] = registry.of(self.gpu_milli_used, self.gpu_mem_used, self.cpu_used, changed)
        sums.state_ids = (registry.epoch, frozen(ids))
        return sums.state_ids[1]

    @property
    def machine_gpu_milli(self) -> IntArray:
        """Allocated milli-GPUs per machine (derived once per snapshot)."""
        sums = self._per_machine
        if sums.gpu_milli is None:
            sums.gpu_milli = frozen(self.layout.per_machine(self.gpu_milli_used))
        return sums.gpu_milli

    @property
    def machine_share(self) -> npt.NDArray[np.float64]:
        """Allocated share of each machine's GPUs, 0..1 (a CPU-only machine: of its CPU)."""
        sums = self._per_machine
        if sums.share is None:
            sums.share = frozen(allocated_share(self.layout, self.machine_gpu_milli, self.cpu_used))
        return sums.share

    @property
    def type_free_milli(self) -> npt.NDArray[np.float64]:
        """Free milli-GPUs per GPU type (indexed as ``layout.gpu_types``), as whole numbers in floats."""
        sums = self._per_machine
        if sums.type_free is None:
            layout = self.layout
            free = np.bincount(layout.gpu_type[layout.gpu_machine], weights=MILLI - self.gpu_milli_used,
                               minlength=len(layout.gpu_types))
            sums.type_free = frozen(free.astype(np.float64, copy=False))
        return sums.type_free

    @property
    def machine_free_whole(self) -> IntArray:
        """Completely free GPUs per machine (no share and no memory taken)."""
        sums = self._per_machine
        if sums.free_whole is None:
            sums.free_whole = frozen(self.layout.per_machine((self.gpu_milli_used == 0) & (self.gpu_mem_used == 0)))
        return sums.free_whole


def layout_of(cluster: Cluster) -> Layout:
    """The integer layout of ``cluster`` (``Cluster.layout``)."""
    return cluster.layout


def empty_snapshot(cluster: Cluster) -> ClusterSnapshot:
    """The snapshot of ``cluster`` with nothing allocated (made once per cluster): what a job could get at best."""
    derived = cluster.layout.derived
    if derived.empty_snapshot is None:
        derived.empty_snapshot = ClusterSnapshot.empty(cluster)
    return derived.empty_snapshot


def apply(snapshot: ClusterSnapshot, allocation: Allocation) -> ClusterSnapshot:
    """A new snapshot with ``allocation`` added (no checks: run the feasibility checker first)."""
    if allocation.job_id in snapshot.allocations:
        raise ValueError(f"job {allocation.job_id!r} is already allocated")
    return _with(snapshot, allocation, +1, snapshot.allocations.set(allocation.job_id, allocation))


def release(snapshot: ClusterSnapshot, job_id: str) -> ClusterSnapshot:
    """A new snapshot without ``job_id``'s allocation; the same snapshot if it holds none (idempotent)."""
    allocation = snapshot.allocations.get(job_id)
    if allocation is None:
        return snapshot
    return _with(snapshot, allocation, -1, snapshot.allocations.discard(job_id))


def _with(snapshot: ClusterSnapshot, allocation: Allocation, sign: int,
          allocations: PMap[str, Allocation]) -> ClusterSnapshot:
    gpu_milli, gpu_mem = snapshot.gpu_milli_used.copy(), snapshot.gpu_mem_used.copy()
    cpu, mem = snapshot.cpu_used.copy(), snapshot.mem_used.copy()
    instances = allocation.instances
    machines, total = _amounts_by_machine(allocation)
    held = _held_gpus(allocation, total)
    freed: dict[int, int] = {}
    if held is None:
        freed = _add_on_gpus(snapshot.layout, gpu_milli, gpu_mem, allocation, sign)
    else:
        ids, per = held
        np.add.at(gpu_milli, ids, sign * np.repeat(np.array([p.gpu_milli for p in instances], np.int64), per))
        np.add.at(gpu_mem, ids, sign * np.repeat(np.array([p.gpu_mem_mib for p in instances], np.int64), per))
    for machine, (cpu_milli, mem_mib, _) in machines.items():
        cpu[machine] += sign * cpu_milli
        mem[machine] += sign * mem_mib
    child = ClusterSnapshot(snapshot.cluster, snapshot.generation + 1, frozen(gpu_milli), frozen(gpu_mem),
                            frozen(cpu), frozen(mem), allocations)
    _carry_derived(snapshot, child, sign, held, machines, freed)
    return child


def _add_on_gpus(layout: Layout, gpu_milli: IntArray, gpu_mem: IntArray, allocation: Allocation,
                 sign: int) -> dict[int, int]:
    """Add (``sign``) what ``allocation`` holds to the GPUs' usage ``gpu_milli`` and ``gpu_mem`` (copies to change), one
    GPU at a time as Python integers; returns per machine how many of its GPUs became completely free (negative:
    were taken), read off the values as they change (summed over instances sharing a GPU, the changes add up to
    the GPU's whole change), so that the derived sums need not read the GPUs again."""
    milli_at, mem_at, machine_of = gpu_milli.item, gpu_mem.item, layout.gpu_machine.item
    freed: dict[int, int] = {}
    for p in allocation.instances:
        milli_add, mem_add = sign * p.gpu_milli, sign * p.gpu_mem_mib
        for g in p.gpus:
            was_milli, was_mem = milli_at(g), mem_at(g)
            now_milli, now_mem = was_milli + milli_add, was_mem + mem_add
            gpu_milli[g], gpu_mem[g] = now_milli, now_mem
            change = (now_milli == 0 and now_mem == 0) - (was_milli == 0 and was_mem == 0)
            if change:
                machine = machine_of(g)
                freed[machine] = freed.get(machine, 0) + change
    return freed


def _carry_derived(parent: ClusterSnapshot, child: ClusterSnapshot, sign: int, held: tuple[IntArray, list[int]] | None,
                   machines: dict[int, tuple[int, int, int]], freed: dict[int, int]) -> None:
    """Give ``child`` the sums per machine and per GPU type ``parent`` has derived, changed by one allocation alone
    (``sign``: added or taken; ``held``: its GPUs where many, ``machines``: its amounts per machine, ``freed``: per
    machine the change in completely free GPUs, where its GPUs were few): O(GPUs the allocation holds), where summing
    its machines again would cost O(GPUs of those machines) (on one big node, every GPU of the cluster, on every start
    and end of a replay)."""
    known, sums, layout = parent._per_machine, child._per_machine, child.layout
    registry = layout.derived.state_ids if known.state_ids is not None else None
    if registry is not None and known.state_ids is not None and known.state_ids[0] == registry.epoch:
        changed = np.array(sorted(machines), dtype=np.int64)
        ids = known.state_ids[1].copy()
        ids[changed] = registry.of(child.gpu_milli_used, child.gpu_mem_used, child.cpu_used, changed)
        sums.state_ids = (registry.epoch, frozen(ids))
    if known.type_free is not None:
        type_free = known.type_free.copy()
        for machine, (_, _, gpu_milli) in machines.items():
            type_free[layout.gpu_type.item(machine)] -= sign * gpu_milli
        sums.type_free = frozen(type_free)
    if known.gpu_milli is None or known.free_whole is None or known.share is None:
        return
    milli, free, share = known.gpu_milli.copy(), known.free_whole.copy(), known.share.copy()
    for machine, (_, _, gpu_milli) in machines.items():
        milli[machine] += sign * gpu_milli
    if held is None:
        for machine, change in freed.items():  # worked out as the GPUs were added to
            free[machine] += change
    else:
        ids = np.unique(held[0])
        was = (parent.gpu_milli_used[ids] == 0) & (parent.gpu_mem_used[ids] == 0)
        now = (child.gpu_milli_used[ids] == 0) & (child.gpu_mem_used[ids] == 0)
        np.add.at(free, layout.gpu_machine[ids], now.astype(np.int64) - was.astype(np.int64))
    for m in machines:
        count = layout.gpu_count.item(m)
        share[m] = milli.item(m) / (count * MILLI) if count else child.cpu_used.item(m) / max(layout.cpu_cap.item(m), 1)
    sums.gpu_milli, sums.free_whole, sums.share = frozen(milli), frozen(free), frozen(share)


MANY_HELD = 32
"""From this many GPUs an allocation holds, a snapshot adds and takes them in numpy (below, one by one is faster)."""


def _amounts_by_machine(allocation: Allocation) -> tuple[dict[int, tuple[int, int, int]], int]:
    """Per machine ``allocation`` holds, its CPU, memory and milli-GPUs there (added as Python integers: one
    update of each array per machine, not per instance); and how many GPUs it holds in all."""
    sums: dict[int, tuple[int, int, int]] = {}
    held = 0
    for p in allocation.instances:
        gpus = len(p.gpus)
        held += gpus
        cpu, mem, milli = sums.get(p.machine, (0, 0, 0))
        sums[p.machine] = (cpu + p.cpu_milli, mem + p.mem_mib, milli + p.gpu_milli * gpus)
    return sums, held


def _held_gpus(allocation: Allocation, total: int) -> tuple[IntArray, list[int]] | None:
    """The GPUs ``allocation`` holds (``total`` of them), in order, and how many each instance holds, where they are
    many; else ``None``."""
    if total < MANY_HELD:
        return None
    per = [len(p.gpus) for p in allocation.instances]
    return np.fromiter((g for p in allocation.instances for g in p.gpus), np.int64, total), per


def at_generation(snapshot: ClusterSnapshot, generation: int) -> ClusterSnapshot:
    """``snapshot`` relabelled with ``generation`` (the same usage), keeping what it has derived."""
    if snapshot.generation == generation:
        return snapshot
    moved = replace(snapshot, generation=generation)
    known, sums = snapshot._per_machine, moved._per_machine
    sums.gpu_milli, sums.free_whole, sums.share = known.gpu_milli, known.free_whole, known.share
    # the same usage: what was worked out from it holds
    sums.type_free, sums.kept, sums.state_ids = known.type_free, known.kept, known.state_ids
    return moved


def cpu_share(cpu_used: IntArray, cpu_cap: IntArray) -> npt.NDArray[np.float64]:
    """Allocated share of each machine's CPU (0..1; a machine without CPU counts as empty)."""
    share: npt.NDArray[np.float64] = cpu_used / np.maximum(cpu_cap, 1)
    return share


def allocated_share(layout: Layout, machine_milli: IntArray, cpu_used: IntArray) -> npt.NDArray[np.float64]:
    """Allocated share of each machine's GPUs (0..1); a CPU-only machine counts its CPU instead."""
    total = layout.gpu_count * MILLI
    cpu = cpu_share(cpu_used, layout.cpu_cap)
    share: npt.NDArray[np.float64] = np.where(total > 0, machine_milli / np.maximum(total, 1), cpu)
    return share
