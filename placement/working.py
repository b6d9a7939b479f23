"""A mutable scratch copy of a snapshot's usage, for building one decision instance by instance.

``candidates`` answers, for every machine at once (numpy, no Python loop over machines), whether it
can host one more instance of a task now, and if not, why (a reason code per machine).
``take`` reserves an instance on a machine: whole GPUs lowest index first; a GPU share on the
fullest GPU that still fits it (best fit, which keeps whole GPUs free for whole-GPU jobs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from placement.demand import Task
from placement.feasibility import Need, need_of
from placement.snapshot import MILLI, ClusterSnapshot, InstancePlacement, Layout

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

OK, WRONG_TYPE, FEW_GPUS, NO_SHARED_GPU, FEW_CPU, FEW_MEM = range(6)
"""Reason codes per machine, checked in this order."""


_TYPE_MASKS: dict[tuple[int, frozenset[str]], BoolArray] = {}
_ALL: dict[int, BoolArray] = {}


def type_mask_of(layout: Layout, types: frozenset[str]) -> BoolArray:
    """Machines of ``layout`` with one of ``types`` (cached: layouts live as long as their cluster)."""
    key = (id(layout), types)
    if key not in _TYPE_MASKS:
        allowed = [i for i, t in enumerate(layout.gpu_types) if t in types]
        mask = np.isin(layout.gpu_type, allowed)
        mask.flags.writeable = False
        _TYPE_MASKS[key] = mask
    return _TYPE_MASKS[key]


def _all_machines(n: int) -> BoolArray:
    if n not in _ALL:
        mask = np.ones(n, dtype=bool)
        mask.flags.writeable = False
        _ALL[n] = mask
    return _ALL[n]


@dataclass
class Candidates:
    """Per machine: can it host the instance (``ok``) and the first reason it cannot (``reason``)."""

    ok: BoolArray
    reason: IntArray
    free_whole: IntArray


class WorkingState:
    """Usage arrays copied from ``snapshot``, changed by :meth:`take` while a decision is built."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot
        self.layout = snapshot.layout
        self.gpu_milli = snapshot.gpu_milli_used.copy()
        self.gpu_mem = snapshot.gpu_mem_used.copy()
        self.cpu = snapshot.cpu_used.copy()
        self.mem = snapshot.mem_used.copy()
        self.machine_milli = snapshot.machine_gpu_milli.copy()
        self.free_whole = snapshot.machine_free_whole.copy()
        self.n_machines = len(self.cpu)

    def type_mask(self, task: Task) -> BoolArray:
        """Machines whose GPU type the task accepts (every machine for a task without GPUs)."""
        if task.gpu == 0 or not task.gpu_types:
            return _all_machines(self.n_machines)
        return type_mask_of(self.layout, task.gpu_types)

    def candidates(self, task: Task, need: Need | None = None) -> Candidates:
        need = need or need_of(task)
        n = self.n_machines
        layout = self.layout
        free_whole = self.free_whole.copy()
        if need.whole_gpus:
            gpu_ok = free_whole >= need.whole_gpus
        elif need.gpu_milli:
            fits = self._shared_fits(need)
            gpu_ok = np.bincount(layout.gpu_machine, weights=fits, minlength=n) > 0
        else:
            gpu_ok = np.ones(n, dtype=bool)
        cpu_ok = self.cpu + need.cpu_milli <= layout.cpu_cap
        mem_ok = self.mem + need.mem_mib <= layout.mem_cap
        type_ok = self.type_mask(task)
        gpu_code = FEW_GPUS if need.whole_gpus else NO_SHARED_GPU
        # the first failing rule, in the order type, GPU, CPU, memory (later rules written first)
        reason = np.where(~mem_ok, FEW_MEM, OK)
        reason = np.where(~cpu_ok, FEW_CPU, reason)
        reason = np.where(~gpu_ok, gpu_code, reason)
        reason = np.where(~type_ok, WRONG_TYPE, reason).astype(np.int64)
        return Candidates(reason == OK, reason, free_whole)

    def _shared_fits(self, need: Need) -> BoolArray:
        cap = self.layout.gpu_mem_cap
        mem_need = need.gpu_mem_mib if need.gpu_mem_mib >= 0 else np.ceil(need.share_mem * cap - 1e-9)
        fits: BoolArray = (self.gpu_milli + need.gpu_milli <= MILLI) & (self.gpu_mem + mem_need <= cap) & (cap > 0)
        return fits

    def take(self, machine: int, task_index: int, need: Need) -> InstancePlacement:
        """Reserve one instance on ``machine`` (which :meth:`candidates` said can host it)."""
        layout = self.layout
        first = int(layout.gpu_first[machine])
        count = int(layout.gpu_count[machine]) if need.gpu_milli else 0
        gpus = np.arange(first, first + count)
        chosen: tuple[int, ...] = ()
        gpu_mem = 0
        if need.whole_gpus:
            free = gpus[(self.gpu_milli[gpus] == 0) & (self.gpu_mem[gpus] == 0)]
            chosen = tuple(int(g) for g in free[: need.whole_gpus])
            gpu_mem = int(layout.gpu_mem_cap[first])
        elif need.gpu_milli:
            fits = gpus[self._shared_fits(need)[gpus]]
            best = fits[np.argmax(self.gpu_milli[fits])]  # fullest GPU that fits; ties: lowest index
            chosen = (int(best),)
            gpu_mem = need.gpu_mem_on(int(layout.gpu_mem_cap[best]))
        for g in chosen:
            if self.gpu_milli[g] == 0 and self.gpu_mem[g] == 0:
                self.free_whole[machine] -= 1
            self.gpu_milli[g] += need.gpu_milli
            self.gpu_mem[g] += gpu_mem
        self.machine_milli[machine] += need.gpu_milli * len(chosen)
        self.cpu[machine] += need.cpu_milli
        self.mem[machine] += need.mem_mib
        return InstancePlacement(task_index, machine, chosen, need.gpu_milli if chosen else 0, gpu_mem,
                                 need.cpu_milli, need.mem_mib)

    def room_on(self, machine: int, need: Need) -> int:
        """How many more instances of ``need`` fit on ``machine`` alone (GPUs, CPU, memory)."""
        layout = self.layout
        limits = [1 << 30]
        if need.cpu_milli:
            limits.append(int(layout.cpu_cap[machine] - self.cpu[machine]) // need.cpu_milli)
        if need.mem_mib:
            limits.append(int(layout.mem_cap[machine] - self.mem[machine]) // need.mem_mib)
        first, count = int(layout.gpu_first[machine]), int(layout.gpu_count[machine])
        gpus = slice(first, first + count)
        if need.whole_gpus:
            free = int(np.count_nonzero((self.gpu_milli[gpus] == 0) & (self.gpu_mem[gpus] == 0)))
            limits.append(free // need.whole_gpus)
        elif need.gpu_milli:
            caps = layout.gpu_mem_cap[gpus]
            per_gpu_mem = (np.full(len(caps), need.gpu_mem_mib) if need.gpu_mem_mib >= 0
                           else np.ceil(need.share_mem * caps - 1e-9).astype(np.int64))
            by_share = (MILLI - self.gpu_milli[gpus]) // need.gpu_milli
            by_mem = np.where(per_gpu_mem > 0, (caps - self.gpu_mem[gpus]) // np.maximum(per_gpu_mem, 1), 1 << 30)
            limits.append(int(np.minimum(by_share, by_mem).clip(min=0).sum()))
        return max(0, min(limits))

    def gpu_allocated_share(self) -> npt.NDArray[np.float64]:
        """Allocated share of each machine's GPUs (0..1; CPU-only machines by CPU instead)."""
        return allocated_share(self.layout, self.machine_milli, self.cpu)


def allocated_share(layout: Layout, machine_milli: IntArray, cpu_used: IntArray) -> npt.NDArray[np.float64]:
    """Allocated share of each machine's GPUs (0..1); a CPU-only machine counts its CPU instead."""
    total = layout.gpu_count * MILLI
    cpu_share = cpu_used / np.maximum(layout.cpu_cap, 1)
    share: npt.NDArray[np.float64] = np.where(total > 0, machine_milli / np.maximum(total, 1), cpu_share)
    return share
