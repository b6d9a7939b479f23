"""The immutable cluster snapshot: what is allocated on every GPU and machine, with a generation.

Amounts are kept as integers so that placing and releasing a job restores the exact prior state:
GPU share in milli-GPUs (1000 = one whole GPU), memory in MiB, CPU in milli-cores. Demands are
rounded **up** to these units and capacities **down**, so rounding never over-allocates.

A policy reads a snapshot and returns a decision; :func:`apply` and :func:`release` return new
snapshots (``generation`` + 1); nothing here mutates a snapshot in place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
import numpy.typing as npt
from pyrsistent import pmap
from pyrsistent.typing import PMap

from placement.cluster import Cluster

IntArray = npt.NDArray[np.int64]
MILLI = 1000
MIB_PER_GIB = 1024


def up(amount: float, per_unit: int) -> int:
    """``amount`` in integer units, rounded up (a demand)."""
    return 0 if amount <= 0 else math.ceil(amount * per_unit - 1e-9)


def down(amount: float, per_unit: int) -> int:
    """``amount`` in integer units, rounded down (a capacity)."""
    return max(0, math.floor(amount * per_unit + 1e-9))


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


def _frozen(array: IntArray) -> IntArray:
    array.flags.writeable = False
    return array


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

    @staticmethod
    def empty(cluster: Cluster) -> ClusterSnapshot:
        layout = layout_of(cluster)
        zeros = len(layout.gpu_machine)
        return ClusterSnapshot(cluster, 0, _frozen(np.zeros(zeros, np.int64)), _frozen(np.zeros(zeros, np.int64)),
                               _frozen(np.zeros(len(cluster), np.int64)), _frozen(np.zeros(len(cluster), np.int64)))

    @property
    def layout(self) -> Layout:
        return layout_of(self.cluster)

    @cached_property
    def machine_gpu_milli(self) -> IntArray:
        """Allocated milli-GPUs per machine (derived once per snapshot)."""
        layout = self.layout
        return _frozen(np.bincount(layout.gpu_machine, weights=self.gpu_milli_used,
                                   minlength=len(self.cpu_used)).astype(np.int64))

    @cached_property
    def machine_share(self) -> npt.NDArray[np.float64]:
        """Allocated share of each machine's GPUs, 0..1 (a CPU-only machine: of its CPU)."""
        share = allocated_share(self.layout, self.machine_gpu_milli, self.cpu_used)
        share.flags.writeable = False
        return share

    @cached_property
    def machine_free_whole(self) -> IntArray:
        """Completely free GPUs per machine (no share and no memory taken)."""
        free = (self.gpu_milli_used == 0) & (self.gpu_mem_used == 0)
        counts = np.bincount(self.layout.gpu_machine, weights=free, minlength=len(self.cpu_used))
        return _frozen(counts.astype(np.int64))


@dataclass(frozen=True)
class Layout:
    """Integer capacities of a cluster and where its GPUs are (shared by all its snapshots)."""

    gpu_machine: IntArray
    gpu_mem_cap: IntArray
    gpu_first: IntArray
    gpu_count: IntArray
    cpu_cap: IntArray
    mem_cap: IntArray
    rack: IntArray
    domain: IntArray
    gpu_type: IntArray
    gpu_types: tuple[str, ...]


_LAYOUTS: dict[int, tuple[Cluster, Layout]] = {}


def layout_of(cluster: Cluster) -> Layout:
    """The (cached) integer layout of ``cluster``."""
    cached = _LAYOUTS.get(id(cluster))
    if cached is not None and cached[0] is cluster:
        return cached[1]
    caps = cluster.capacity_arrays()
    gpus = np.asarray(caps.gpus, dtype=np.int64)
    first = np.concatenate([[0], np.cumsum(gpus)[:-1]]).astype(np.int64)
    layout = Layout(
        gpu_machine=_frozen(np.repeat(np.arange(len(gpus), dtype=np.int64), gpus)),
        gpu_mem_cap=_frozen(np.repeat([down(m, MIB_PER_GIB) for m in caps.gpu_mem_gib], gpus).astype(np.int64)),
        gpu_first=_frozen(first),
        gpu_count=_frozen(gpus.copy()),
        cpu_cap=_frozen(np.array([down(c, MILLI) for c in caps.cpu_cores], dtype=np.int64)),
        mem_cap=_frozen(np.array([down(m, MIB_PER_GIB) for m in caps.mem_gib], dtype=np.int64)),
        rack=caps.rack_index, domain=caps.domain_index, gpu_type=caps.gpu_type_index, gpu_types=caps.gpu_types,
    )
    _LAYOUTS[id(cluster)] = (cluster, layout)
    return layout


_EMPTY: dict[int, ClusterSnapshot] = {}


def empty_snapshot(cluster: Cluster) -> ClusterSnapshot:
    """The (cached) snapshot of ``cluster`` with nothing allocated: what a job could get at best."""
    cached = _EMPTY.get(id(cluster))
    if cached is None or cached.cluster is not cluster:
        cached = _EMPTY[id(cluster)] = ClusterSnapshot.empty(cluster)
    return cached


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
    for p in allocation.instances:
        for g in p.gpus:
            gpu_milli[g] += sign * p.gpu_milli
            gpu_mem[g] += sign * p.gpu_mem_mib
        cpu[p.machine] += sign * p.cpu_milli
        mem[p.machine] += sign * p.mem_mib
    child = ClusterSnapshot(snapshot.cluster, snapshot.generation + 1, _frozen(gpu_milli), _frozen(gpu_mem),
                            _frozen(cpu), _frozen(mem), allocations)
    _carry_derived(snapshot, child, {p.machine for p in allocation.instances})
    return child


_DERIVED = ("machine_gpu_milli", "machine_free_whole", "machine_share")


def _carry_derived(parent: ClusterSnapshot, child: ClusterSnapshot, machines: set[int]) -> None:
    """Give ``child`` the per-machine arrays ``parent`` has derived, recomputed on ``machines`` only
    (the only ones that differ), instead of deriving them again over the whole cluster."""
    known = parent.__dict__
    if any(name not in known for name in _DERIVED):
        return
    layout = child.layout
    milli, free, share = (known[name].copy() for name in _DERIVED)
    for m in machines:
        first, count = int(layout.gpu_first[m]), int(layout.gpu_count[m])
        if count:
            used = child.gpu_milli_used[first:first + count].tolist()
            mem = child.gpu_mem_used[first:first + count].tolist()
            milli[m] = sum(used)
            free[m] = sum(u == 0 and g == 0 for u, g in zip(used, mem, strict=True))
            share[m] = sum(used) / (count * MILLI)
        else:
            share[m] = child.cpu_used[m] / max(int(layout.cpu_cap[m]), 1)
    # cached_property keeps its value in the instance dict, which a frozen dataclass leaves writable
    child.__dict__.update(zip(_DERIVED, (_frozen(milli), _frozen(free), _frozen(share)), strict=True))


def at_generation(snapshot: ClusterSnapshot, generation: int) -> ClusterSnapshot:
    """``snapshot`` relabelled with ``generation`` (the same usage), keeping what it has derived."""
    if snapshot.generation == generation:
        return snapshot
    moved = replace(snapshot, generation=generation)
    moved.__dict__.update({name: snapshot.__dict__[name] for name in _DERIVED if name in snapshot.__dict__})
    return moved


def allocated_share(layout: Layout, machine_milli: IntArray, cpu_used: IntArray) -> npt.NDArray[np.float64]:
    """Allocated share of each machine's GPUs (0..1); a CPU-only machine counts its CPU instead."""
    total = layout.gpu_count * MILLI
    cpu_share = cpu_used / np.maximum(layout.cpu_cap, 1)
    share: npt.NDArray[np.float64] = np.where(total > 0, machine_milli / np.maximum(total, 1), cpu_share)
    return share
