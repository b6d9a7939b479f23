"""A mutable scratch copy of a snapshot's usage, for building one decision instance by instance.

``candidates`` answers, for every machine at once (numpy, no Python loop over machines), whether it
can host one more instance of a task now, and if not, why (a reason code per machine); asked again
for the same demand, it recomputes only the machines changed since.
``take`` reserves an instance on a machine: whole GPUs lowest index first; a GPU share on the
fullest GPU that still fits it (best fit, which keeps whole GPUs free for whole-GPU jobs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from placement.demand import Task
from placement.feasibility import Need, need_of
from placement.snapshot import MILLI, ClusterSnapshot, InstancePlacement, Layout, allocated_share

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]

OK, WRONG_TYPE, FEW_GPUS, NO_SHARED_GPU, FEW_CPU, FEW_MEM = range(6)
"""Reason codes per machine, checked in this order."""
FEW_GPUS_PER_MACHINE = 64
"""Up to this many GPUs a machine's GPUs are handled as Python integers (faster than numpy calls);
above it (a "big node" of thousands of GPUs) in numpy."""


def type_mask_of(layout: Layout, types: frozenset[str]) -> BoolArray:
    """Machines of ``layout`` with one of ``types`` (read-only; worked out once per layout and types,
    ``Derived.type_masks``)."""

    def make() -> BoolArray:
        allowed = [i for i, t in enumerate(layout.gpu_types) if t in types]
        mask = np.isin(layout.gpu_type, allowed)
        mask.flags.writeable = False
        return mask

    return layout.derived.type_masks.get(types, make)


@dataclass
class Candidates:
    """Per machine: can it host the instance (``ok``) and the first reason it cannot (``reason``,
    worked out when first read: a job that fits never needs it)."""

    ok: BoolArray
    free_whole: IntArray
    reasons_now: Callable[[], IntArray]
    """Computes the reason codes of every machine from the working state as it is."""
    _reason: IntArray | None = None

    @property
    def reason(self) -> IntArray:
        if self._reason is None:
            self._reason = self.reasons_now()
        return self._reason


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
        self._share = snapshot.machine_share.copy()
        self._touched: list[int] = []  # machines changed by take, in order (for incremental candidates)
        self._cache: dict[tuple[Need, frozenset[str] | None], tuple[int, Candidates]] = {}

    def checkpoint(self) -> tuple[IntArray, ...]:
        """The usage arrays as they are now, for :meth:`restore`."""
        return tuple(a.copy() for a in (self.gpu_milli, self.gpu_mem, self.cpu, self.mem, self.machine_milli,
                                        self.free_whole))

    def restore(self, saved: tuple[IntArray, ...]) -> None:
        """Undo every :meth:`take` since ``saved`` was taken by :meth:`checkpoint`."""
        self.gpu_milli, self.gpu_mem, self.cpu, self.mem, self.machine_milli, self.free_whole = (
            a.copy() for a in saved)
        self._share = allocated_share(self.layout, self.machine_milli, self.cpu)
        self._cache.clear()

    def type_mask(self, task: Task) -> BoolArray:
        """Machines whose GPU type the task accepts (every machine for a task without GPUs)."""
        if task.gpu == 0 or not task.gpu_types:
            return self.layout.derived.all_machines
        return type_mask_of(self.layout, task.gpu_types)

    def candidates(self, task: Task, need: Need | None = None) -> Candidates:
        """Which machines can host one more instance of ``task`` now, and why not.

        Repeated calls for the same demand recompute only the machines changed by :meth:`take` since
        the last call, so the returned object is updated in place and is valid until the next ``take``.
        """
        need = need or need_of(task)
        key = (need, task.gpu_types if task.gpu > 0 and task.gpu_types else None)
        cached = self._cache.get(key)
        if cached is None:
            result = self._candidates(task, need)
        else:
            seen, result = cached
            for m in set(self._touched[seen:]):
                code = self._reason_at(task, need, m)
                result.ok[m], result.free_whole[m] = code == OK, self.free_whole[m]
                if result._reason is not None:
                    result._reason[m] = code
        self._cache[key] = (len(self._touched), result)
        return result

    def _candidates(self, task: Task, need: Need) -> Candidates:
        """:meth:`candidates` computed for every machine at once."""
        gpu_ok, cpu_ok, mem_ok = self._fits(need)
        ok = gpu_ok & cpu_ok & mem_ok
        if task.gpu > 0 and task.gpu_types:
            ok &= self.type_mask(task)
        return Candidates(ok, self.free_whole.copy(), lambda: self._reasons(task, need))

    def _fits(self, need: Need) -> tuple[BoolArray, BoolArray, BoolArray]:
        """Per machine: room for the GPUs, the CPU and the memory of one instance of ``need``."""
        layout = self.layout
        if need.whole_gpus:
            gpu_ok = self.free_whole >= need.whole_gpus
        elif need.gpu_milli:
            fits = self._shared_fits(need)
            gpu_ok = np.bincount(layout.gpu_machine, weights=fits, minlength=self.n_machines) > 0
        else:
            gpu_ok = layout.derived.all_machines
        return gpu_ok, self.cpu + need.cpu_milli <= layout.cpu_cap, self.mem + need.mem_mib <= layout.mem_cap

    def _reasons(self, task: Task, need: Need) -> IntArray:
        """The first failing rule per machine, in the order type, GPU, CPU, memory (later rules written first)."""
        gpu_ok, cpu_ok, mem_ok = self._fits(need)
        reason = np.where(~mem_ok, FEW_MEM, OK)
        reason = np.where(~cpu_ok, FEW_CPU, reason)
        reason = np.where(~gpu_ok, FEW_GPUS if need.whole_gpus else NO_SHARED_GPU, reason)
        return np.where(~self.type_mask(task), WRONG_TYPE, reason).astype(np.int64)

    def _reason_at(self, task: Task, need: Need, machine: int) -> int:
        """The reason code of :meth:`_candidates` for one machine, in scalar arithmetic."""
        layout = self.layout
        if not self.type_mask(task)[machine]:
            return WRONG_TYPE
        if need.whole_gpus and self.free_whole[machine] < need.whole_gpus:
            return FEW_GPUS
        if not need.whole_gpus and need.gpu_milli and self._shared_room(need, machine, 1) == 0:
            return NO_SHARED_GPU
        if self.cpu[machine] + need.cpu_milli > layout.cpu_cap[machine]:
            return FEW_CPU
        if self.mem[machine] + need.mem_mib > layout.mem_cap[machine]:
            return FEW_MEM
        return OK

    def gpus_of(self, machine: int) -> slice:
        """The GPU index range of ``machine``."""
        first = int(self.layout.gpu_first[machine])
        return slice(first, first + int(self.layout.gpu_count[machine]))

    def _shared_fits(self, need: Need) -> BoolArray:
        """Whether a share of ``need`` fits on each GPU of the cluster."""
        cap = self.layout.gpu_mem_cap
        mem_need = need.gpu_mem_mib if need.gpu_mem_mib >= 0 else np.ceil(need.share_mem * cap - 1e-9)
        fits: BoolArray = (self.gpu_milli + need.gpu_milli <= MILLI) & (self.gpu_mem + mem_need <= cap) & (cap > 0)
        return fits

    def _shared_room(self, need: Need, machine: int, enough: int = 1 << 30) -> int:
        """How many shares of ``need`` the GPUs of ``machine`` can still take (counting stops at ``enough``
        on machines with few GPUs; a machine with many is counted in numpy)."""
        span = self.gpus_of(machine)
        if span.stop - span.start > FEW_GPUS_PER_MACHINE:
            caps = self.layout.gpu_mem_cap[span]
            per_gpu = (np.full(len(caps), need.gpu_mem_mib) if need.gpu_mem_mib >= 0
                       else np.ceil(need.share_mem * caps - 1e-9).astype(np.int64))
            by_share = (MILLI - self.gpu_milli[span]) // need.gpu_milli
            by_mem = np.where(per_gpu > 0, (caps - self.gpu_mem[span]) // np.maximum(per_gpu, 1), 1 << 30)
            return int(np.where(caps > 0, np.minimum(by_share, by_mem), 0).clip(min=0).sum())
        room = 0
        for used, mem, cap in zip(self.gpu_milli[span].tolist(), self.gpu_mem[span].tolist(),
                                  self.layout.gpu_mem_cap[span].tolist(), strict=True):
            per_gpu = need.gpu_mem_on(cap)
            if cap > 0:
                room += max(0, min((MILLI - used) // need.gpu_milli,
                                   (cap - mem) // per_gpu if per_gpu > 0 else 1 << 30))
            if room >= enough:
                break
        return room

    def take(self, machine: int, task_index: int, need: Need) -> InstancePlacement:
        """Reserve one instance on ``machine`` (which :meth:`candidates` said can host it)."""
        return self.take_many(machine, task_index, need, 1)[0]

    def take_many(self, machine: int, task_index: int, need: Need, count: int) -> list[InstancePlacement]:
        """Reserve ``count`` instances on ``machine``, one after the other as :meth:`take` would
        (:meth:`room_on` says how many fit). A machine's few GPUs are worked on as Python integers,
        the many GPUs of a large node (``FEW_GPUS_PER_MACHINE``) in numpy."""
        layout = self.layout
        first = int(layout.gpu_first[machine])
        span = slice(first, first + (int(layout.gpu_count[machine]) if need.gpu_milli else 0))
        if span.stop - span.start > FEW_GPUS_PER_MACHINE and need.whole_gpus:
            placed = self._take_large_whole(machine, task_index, need, span, count)
        elif span.stop - span.start > FEW_GPUS_PER_MACHINE:
            placed = self._take_large_shares(machine, task_index, need, span, count)
        else:
            placed = self._take_small(machine, task_index, need, count, span)
        if need.gpu_milli:
            self.machine_milli[machine] += need.gpu_milli * (need.whole_gpus or 1) * count
        self.cpu[machine] += need.cpu_milli * count
        self.mem[machine] += need.mem_mib * count
        gpus = int(layout.gpu_count[machine])
        self._share[machine] = (self.machine_milli[machine] / (gpus * MILLI) if gpus
                                else self.cpu[machine] / max(int(layout.cpu_cap[machine]), 1))
        self._touched.append(machine)
        return placed

    def _take_small(self, machine: int, task_index: int, need: Need, count: int,
                    span: slice) -> list[InstancePlacement]:
        """GPU choice and GPU bookkeeping of :meth:`take_many` on Python integers."""
        placed: list[InstancePlacement] = []
        milli, mem = self.gpu_milli[span].tolist(), self.gpu_mem[span].tolist()
        caps = self.layout.gpu_mem_cap[span].tolist()
        free_whole = int(self.free_whole[machine])
        for _ in range(count):
            chosen: list[int] = []
            gpu_mem = 0
            if need.whole_gpus:
                free = [i for i, (m, g) in enumerate(zip(milli, mem, strict=True)) if m == 0 and g == 0]
                chosen = free[: need.whole_gpus]
                gpu_mem = caps[0]
            elif need.gpu_milli:  # the fullest GPU that fits; ties: lowest index
                best, best_milli = -1, -1
                for i, (m, g, cap) in enumerate(zip(milli, mem, caps, strict=True)):
                    if cap > 0 and m + need.gpu_milli <= MILLI and g + need.gpu_mem_on(cap) <= cap and m > best_milli:
                        best, best_milli = i, m
                chosen = [best]
                gpu_mem = need.gpu_mem_on(caps[best])
            for i in chosen:
                free_whole -= milli[i] == 0 and mem[i] == 0
                milli[i] += need.gpu_milli
                mem[i] += gpu_mem
            placed.append(InstancePlacement(task_index, machine, tuple(span.start + i for i in chosen),
                                            need.gpu_milli if chosen else 0, gpu_mem, need.cpu_milli, need.mem_mib))
        if need.gpu_milli:
            self.gpu_milli[span], self.gpu_mem[span] = milli, mem
            self.free_whole[machine] = free_whole
        return placed

    def _take_large_whole(self, machine: int, task_index: int, need: Need, span: slice,
                          count: int) -> list[InstancePlacement]:
        """Whole GPUs of :meth:`take_many` on a large node: the lowest free ones, ``count`` instances at once."""
        milli, mem = self.gpu_milli[span], self.gpu_mem[span]
        free = np.flatnonzero((milli == 0) & (mem == 0))[: need.whole_gpus * count]
        gpu_mem = int(self.layout.gpu_mem_cap[span.start])
        milli[free] += need.gpu_milli
        mem[free] += gpu_mem
        self.free_whole[machine] -= len(free)
        ids = (free + span.start).tolist()
        return [InstancePlacement(task_index, machine, tuple(ids[k * need.whole_gpus:(k + 1) * need.whole_gpus]),
                                  need.gpu_milli, gpu_mem, need.cpu_milli, need.mem_mib) for k in range(count)]

    def _take_large_shares(self, machine: int, task_index: int, need: Need, span: slice,
                           count: int) -> list[InstancePlacement]:
        """GPU shares of :meth:`take_many` on a large node, in numpy, all at once. One at a time, each
        share goes to the fullest GPU that fits it (ties: lowest index); that GPU only gets fuller, so
        it stays first until full. Hence: GPUs by (fullest, lowest index), each filled in turn."""
        milli, mem, caps = self.gpu_milli[span], self.gpu_mem[span], self.layout.gpu_mem_cap[span]
        per_gpu = (np.full(len(caps), need.gpu_mem_mib) if need.gpu_mem_mib >= 0
                   else np.ceil(need.share_mem * caps - 1e-9).astype(np.int64))
        by_mem = np.where(per_gpu > 0, (caps - mem) // np.maximum(per_gpu, 1), 1 << 30)
        room = np.where(caps > 0, np.minimum((MILLI - milli) // need.gpu_milli, by_mem), 0).clip(min=0)
        usable = np.flatnonzero(room > 0)
        order = usable[np.lexsort((usable, -milli[usable]))]
        enough = int(np.searchsorted(np.cumsum(room[order]), count)) + 1
        gpus = np.repeat(order[:enough], room[order[:enough]])[:count]
        touched = np.unique(gpus)
        self.free_whole[machine] -= int(np.count_nonzero((milli[touched] == 0) & (mem[touched] == 0)))
        np.add.at(milli, gpus, need.gpu_milli)
        np.add.at(mem, gpus, per_gpu[gpus])
        return [InstancePlacement(task_index, machine, (span.start + g,), need.gpu_milli, m, need.cpu_milli,
                                  need.mem_mib) for g, m in zip(gpus.tolist(), per_gpu[gpus].tolist(), strict=True)]

    def room_on(self, machine: int, need: Need) -> int:
        """How many more instances of ``need`` fit on ``machine`` alone (GPUs, CPU, memory)."""
        layout = self.layout
        limits = [1 << 30]
        if need.cpu_milli:
            limits.append(int(layout.cpu_cap[machine] - self.cpu[machine]) // need.cpu_milli)
        if need.mem_mib:
            limits.append(int(layout.mem_cap[machine] - self.mem[machine]) // need.mem_mib)
        if need.whole_gpus:
            limits.append(int(self.free_whole[machine]) // need.whole_gpus)
        elif need.gpu_milli:
            limits.append(self._shared_room(need, machine))
        return max(0, min(limits))

    def gpu_allocated_share(self) -> npt.NDArray[np.float64]:
        """Allocated share of each machine's GPUs (0..1; CPU-only machines by CPU instead).

        Kept up to date by :meth:`take`; read-only for callers.
        """
        return self._share
