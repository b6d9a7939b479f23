"""A snapshot's usage as one decision changes it, instance by instance (copied at the first change).

``candidates`` answers, for every machine at once (numpy, no Python loop over machines), whether it
can host one more instance of a demand now, and if not, which filter it fails first (a code per
machine, ``placement.filters.chain``); asked again for the same demand, it recomputes only the
machines changed since. ``take`` reserves an instance on a machine: whole GPUs lowest index first; a
GPU share on the fullest GPU that still fits it (best fit, which keeps whole GPUs free for whole-GPU
jobs).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from placement.filters import gpu_share
from placement.filters.chain import OK, Chain, chain_for
from placement.filters.gpu_share import fitting_gpus, share_mem, share_mem_per_gpu, share_room_per_gpu
from placement.model.feasibility import Need
from placement.model.snapshot import MILLI, ClusterSnapshot, InstancePlacement, allocated_share

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
T = TypeVar("T")


class Candidates:
    """Per machine: can it host the instance (``ok``) and the code of the first filter it fails
    (``reason``, worked out when first read: a job that fits never needs it).

    A view of what the working state keeps for the demand: the state holds no reference to it, so a state,
    which refers to its arrays and kept masks only, is freed as soon as its decision is done rather than by
    the cyclic collector (which, with a state per decision left for it, set the p99 of large gangs)."""

    __slots__ = ("_kept", "_working", "free_whole", "ok")

    def __init__(self, ok: BoolArray, free_whole: IntArray, kept: _Kept, working: WorkingState) -> None:
        self.ok, self.free_whole, self._kept, self._working = ok, free_whole, kept, working

    @property
    def reason(self) -> IntArray:
        kept = self._kept
        if kept.reason is None:
            working = self._working
            kept.reason = (kept.chain.codes(kept.masks, working.n_machines) if working.changes == kept.changes
                           else kept.chain.first_failing(working))
        return kept.reason


@dataclass
class _Kept:
    """What the candidates of one demand are read from, and how many takes they have seen: per machine whether
    it passes and its free whole GPUs, the filters' masks as of ``changes`` (the codes while the usage is
    unchanged) and the codes once read (kept up to date from then on)."""

    seen: int
    ok: BoolArray
    free_whole: IntArray
    chain: Chain
    masks: list[BoolArray]
    changes: int
    reason: IntArray | None = None


class WorkingState:
    """Usage arrays of ``snapshot``, changed by :meth:`take` while a decision is built.

    Until the first take the arrays are the snapshot's own (read-only): most decisions look at every
    machine and change one or two, and what is worked out from the unchanged usage is kept with the
    snapshot (:meth:`remember`) for the next decision on it."""

    def __init__(self, snapshot: ClusterSnapshot) -> None:
        self.snapshot = snapshot
        self.layout = snapshot.layout
        self.gpu_milli = snapshot.gpu_milli_used
        self.gpu_mem = snapshot.gpu_mem_used
        self.cpu = snapshot.cpu_used
        self.mem = snapshot.mem_used
        self.machine_milli = snapshot.machine_gpu_milli
        self.free_whole = snapshot.machine_free_whole
        self.n_machines = len(self.cpu)
        self._share = snapshot.machine_share
        self._owned = False
        """Whether the arrays are this state's copies (after the first take or restore)."""
        self._touched: list[int] = []  # machines changed by take, in order (for incremental candidates)
        self._changes = 0
        """Takes and restores so far: filter masks worked out at one count hold while it stays."""
        self._cache: dict[Need, _Kept] = {}
        self._last: tuple[Need, _Kept] | None = None

    def _own(self) -> None:
        """Copy the snapshot's arrays before the first change."""
        if self._owned:
            return
        self.gpu_milli, self.gpu_mem = self.gpu_milli.copy(), self.gpu_mem.copy()
        self.cpu, self.mem = self.cpu.copy(), self.mem.copy()
        self.machine_milli, self.free_whole = self.machine_milli.copy(), self.free_whole.copy()
        self._share = self._share.copy()
        self._owned = True

    @property
    def changes(self) -> int:
        """Takes and restores so far."""
        return self._changes

    def touched(self) -> list[int]:
        """Every machine :meth:`take` changed, in order, repeats included (read-only): the usage differs from
        the snapshot's on these machines at most."""
        return self._touched

    def remember(self, key: Hashable, make: Callable[[], T]) -> T:
        """``make()``, kept with the snapshot while the usage is still the snapshot's; afterwards nothing is
        kept, as every take changes the usage."""
        return self.snapshot.remember(key, make) if not self._owned else make()

    def checkpoint(self) -> tuple[IntArray, ...]:
        """The usage arrays as they are now, for :meth:`restore`."""
        return tuple(a.copy() for a in (self.gpu_milli, self.gpu_mem, self.cpu, self.mem, self.machine_milli,
                                        self.free_whole))

    def restore(self, saved: tuple[IntArray, ...]) -> None:
        """Undo every :meth:`take` since ``saved`` was taken by :meth:`checkpoint`."""
        self.gpu_milli, self.gpu_mem, self.cpu, self.mem, self.machine_milli, self.free_whole = (
            a.copy() for a in saved)
        self._share = allocated_share(self.layout, self.machine_milli, self.cpu)
        self._owned = True
        self._cache.clear()
        self._last = None
        self._changes += 1

    def candidates(self, need: Need) -> Candidates:
        """Which machines can host one more instance of ``need`` now, and why not.

        Repeated calls for the same demand recompute only the machines changed by :meth:`take` since
        the last call, so the returned object is updated in place and is valid until the next ``take``.
        """
        last = self._last  # the same demand as the last call, step after step of a task: no hashing
        cached = last[1] if last is not None and last[0] is need else self._cache.get(need)
        if cached is None:
            chain = chain_for(need)
            passing, masks = self.remember(("candidates", need), lambda: chain.masks(self))
            ok = passing.copy() if not self._owned else passing
            cached = self._cache[need] = _Kept(len(self._touched), ok, self.free_whole.copy(), chain, masks,
                                               self._changes)
        else:
            chain = cached.chain
            for m in set(self._touched[cached.seen:]):
                code = chain.first_failing_at(self, m)
                cached.ok[m], cached.free_whole[m] = code == OK, self.free_whole[m]
                if cached.reason is not None:
                    cached.reason[m] = code
            cached.seen = len(self._touched)
        self._last = (need, cached)
        return Candidates(cached.ok, cached.free_whole, cached, self)

    def fits(self, need: Need, machine: int) -> bool:
        """Whether ``machine`` can host one more instance of ``need`` now: ``candidates(need).ok[machine]``,
        worked out for that machine alone."""
        return chain_for(need).passes_at(self, machine)

    def take(self, machine: int, task_index: int, need: Need) -> InstancePlacement:
        """Reserve one instance on ``machine`` (which :meth:`candidates` said can host it)."""
        return self.take_many(machine, task_index, need, 1)[0]

    def take_many(self, machine: int, task_index: int, need: Need, count: int,
                  keep: bool = True) -> list[InstancePlacement]:
        """Reserve ``count`` instances on ``machine``, one after the other as :meth:`take` would
        (:meth:`room_on` says how many fit). A machine's few GPUs are worked on as Python integers,
        the many GPUs of a large node (``gpu_share.FEW_GPUS_PER_MACHINE``) in numpy. ``keep=False``: the
        instances only, the usage left as it is (for the last take of a decision)."""
        if keep:
            self._own()
        layout = self.layout
        first, gpus = layout.gpu_first.item(machine), layout.gpu_count.item(machine)
        span = slice(first, first + (gpus if need.gpu_milli else 0))
        large = span.stop - span.start > gpu_share.FEW_GPUS_PER_MACHINE
        if large and need.whole_gpus:
            placed = self._take_large_whole(machine, task_index, need, span, count, keep)
        elif large:
            placed = self._take_large_shares(machine, task_index, need, span, count, keep)
        else:
            placed = self._take_small(machine, task_index, need, count, span, keep)
        if not keep:
            return placed
        self._held_on(machine, need.gpu_milli * (need.whole_gpus or 1) * count, need.cpu_milli * count,
                      need.mem_mib * count)
        return placed

    def _held_on(self, machine: int, gpu_milli: int, cpu_milli: int, mem_mib: int) -> None:
        """The machine's totals once instances there took these amounts (their GPUs already counted)."""
        layout = self.layout
        milli = self.machine_milli.item(machine) + gpu_milli  # Python integers: a few numbers of one machine
        self.machine_milli[machine] = milli
        cpu = self.cpu.item(machine) + cpu_milli
        self.cpu[machine] = cpu
        self.mem[machine] += mem_mib
        gpus = layout.gpu_count.item(machine)
        self._share[machine] = milli / (gpus * MILLI) if gpus else cpu / max(layout.cpu_cap.item(machine), 1)
        self._touched.append(machine)
        self._changes += 1

    def _take_small(self, machine: int, task_index: int, need: Need, count: int,
                    span: slice, keep: bool) -> list[InstancePlacement]:
        """GPU choice and GPU bookkeeping of :meth:`take_many` on Python integers."""
        gpus = span.stop - span.start
        if need.whole_gpus and need.whole_gpus * count <= gpus == self.free_whole.item(machine):
            return self._take_free_machine(machine, task_index, need, count, span, keep)
        placed: list[InstancePlacement] = []
        milli, mem = self.gpu_milli[span].tolist(), self.gpu_mem[span].tolist()
        caps = self.layout.gpu_mem_cap[span].tolist()
        free_whole = self.free_whole.item(machine)
        for _ in range(count):
            chosen: list[int] = []
            gpu_mem = 0
            if need.whole_gpus:
                free = [i for i, (m, g) in enumerate(zip(milli, mem, strict=True)) if m == 0 and g == 0]
                chosen = free[: need.whole_gpus]
                gpu_mem = caps[0]
            elif need.gpu_milli:  # the fullest GPU that fits; ties: lowest index
                best = max(fitting_gpus(milli, mem, caps, need), key=lambda i: (milli[i], -i))
                chosen = [best]
                gpu_mem = need.gpu_mem_on(caps[best])
            for i in chosen:
                free_whole -= milli[i] == 0 and mem[i] == 0
                milli[i] += need.gpu_milli
                mem[i] += gpu_mem
            placed.append(InstancePlacement(task_index, machine, tuple(span.start + i for i in chosen),
                                            need.gpu_milli if chosen else 0, gpu_mem, need.cpu_milli, need.mem_mib))
        if need.gpu_milli and keep:
            self.gpu_milli[span], self.gpu_mem[span] = milli, mem
            self.free_whole[machine] = free_whole
        return placed

    def _take_free_machine(self, machine: int, task_index: int, need: Need, count: int, span: slice,
                           keep: bool) -> list[InstancePlacement]:
        """Whole GPUs of :meth:`_take_small` on a machine none of whose GPUs is in use: the lowest free ones are its
        first ones, so nothing is searched (a gang of whole machines takes one such machine per instance)."""
        whole, first = need.whole_gpus, span.start
        gpu_mem = self.layout.gpu_mem_cap.item(first)
        if keep:
            taken = slice(first, first + whole * count)
            self.gpu_milli[taken] = need.gpu_milli  # free GPUs: what they hold is the instance's
            self.gpu_mem[taken] = gpu_mem
            self.free_whole[machine] -= whole * count
        return [InstancePlacement(task_index, machine, tuple(range(first + k * whole, first + (k + 1) * whole)),
                                  need.gpu_milli, gpu_mem, need.cpu_milli, need.mem_mib) for k in range(count)]

    def _take_large_whole(self, machine: int, task_index: int, need: Need, span: slice,
                          count: int, keep: bool) -> list[InstancePlacement]:
        """Whole GPUs of :meth:`take_many` on a large node: the lowest free ones, ``count`` instances at once."""
        milli, mem = self.gpu_milli[span], self.gpu_mem[span]
        free = np.flatnonzero((milli == 0) & (mem == 0))[: need.whole_gpus * count]
        gpu_mem = int(self.layout.gpu_mem_cap[span.start])
        if keep:
            milli[free] += need.gpu_milli
            mem[free] += gpu_mem
            self.free_whole[machine] -= len(free)
        ids = (free + span.start).tolist()
        return [InstancePlacement(task_index, machine, tuple(ids[k * need.whole_gpus:(k + 1) * need.whole_gpus]),
                                  need.gpu_milli, gpu_mem, need.cpu_milli, need.mem_mib) for k in range(count)]

    def _take_large_shares(self, machine: int, task_index: int, need: Need, span: slice,
                           count: int, keep: bool) -> list[InstancePlacement]:
        """GPU shares of :meth:`take_many` on a large node, in numpy, all at once. One at a time, each
        share goes to the fullest GPU that fits it (ties: lowest index); that GPU only gets fuller, so
        it stays first until full. Hence: GPUs by (fullest, lowest index), each filled in turn."""
        if count == 1:
            return self._take_one_share(machine, task_index, need, span, keep)
        milli, mem, caps = self.gpu_milli[span], self.gpu_mem[span], self.layout.gpu_mem_cap[span]
        if not keep:
            milli, mem = milli.copy(), mem.copy()
        per_gpu = share_mem_per_gpu(self.layout, need, span)
        room = share_room_per_gpu(milli, mem, caps, need, per_gpu)
        usable = np.flatnonzero(room > 0)  # ascending: a stable order by fullness keeps the lowest first
        order = usable[np.argsort(-milli[usable], kind="stable")]
        touched = order[:int(np.searchsorted(np.cumsum(room[order]), count)) + 1]
        taken = room[touched]  # each filled in turn, the last only as far as the count goes
        excess = int(taken.sum()) - count
        if excess > 0:
            taken[-1] -= excess
        if keep:
            self.free_whole[machine] -= int(np.count_nonzero((milli[touched] == 0) & (mem[touched] == 0)))
        milli[touched] += taken * need.gpu_milli  # each GPU once: no unbuffered adds
        mem[touched] += taken * per_gpu[touched]
        gpus = np.repeat(touched, taken).tolist()
        held = per_gpu[touched].tolist()
        return [InstancePlacement(task_index, machine, (span.start + g,), need.gpu_milli, m, need.cpu_milli,
                                  need.mem_mib) for g, m in zip(gpus, np.repeat(held, taken).tolist(), strict=True)]

    def _take_one_share(self, machine: int, task_index: int, need: Need, span: slice,
                        keep: bool) -> list[InstancePlacement]:
        """One share of :meth:`_take_large_shares`: the fullest GPU that fits it, the first among equals (``argmax``
        finds the first), booked as Python integers: a few array operations over the node, not a dozen."""
        milli, mem, caps = self.gpu_milli[span], self.gpu_mem[span], self.layout.gpu_mem_cap[span]
        per_gpu = share_mem(self.layout, need)
        per_gpu = per_gpu if isinstance(per_gpu, int) else per_gpu[span]
        fits = (milli <= MILLI - need.gpu_milli) & (mem + per_gpu <= caps) & (caps > 0)
        best = int(np.argmax(np.where(fits, milli, -1)))
        if not fits.item(best):
            return []
        gpu_mem = per_gpu if isinstance(per_gpu, int) else per_gpu.item(best)
        if keep:
            used, held = milli.item(best), mem.item(best)
            if used == 0 and held == 0:
                self.free_whole[machine] -= 1
            milli[best], mem[best] = used + need.gpu_milli, held + gpu_mem
        return [InstancePlacement(task_index, machine, (span.start + best,), need.gpu_milli, gpu_mem, need.cpu_milli,
                                  need.mem_mib)]

    def put(self, placement: InstancePlacement) -> None:
        """Hold ``placement`` where it says (its GPUs as given, not chosen here), as :meth:`take` would have."""
        self._own()
        machine = placement.machine
        for g in placement.gpus:
            if self.gpu_milli.item(g) == 0 and self.gpu_mem.item(g) == 0:
                self.free_whole[machine] -= 1
            self.gpu_milli[g] += placement.gpu_milli
            self.gpu_mem[g] += placement.gpu_mem_mib
        self._held_on(machine, placement.gpu_milli * len(placement.gpus), placement.cpu_milli, placement.mem_mib)

    def room_on(self, machine: int, need: Need) -> int:
        """How many more instances of ``need`` fit on ``machine`` alone (by every filter)."""
        return chain_for(need).room_at(self, machine)

    def gpu_allocated_share(self) -> npt.NDArray[np.float64]:
        """Allocated share of each machine's GPUs (0..1; CPU-only machines by CPU instead).

        Kept up to date by :meth:`take`; read-only for callers.
        """
        return self._share
