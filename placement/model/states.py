"""Machine states by id, one registry per layout (``Derived.state_ids``): what depends on a machine's state alone
is worked out once per state and kept by its id (``placement.online.scorers.fragmentation``), whichever machine
is in it, whichever snapshot or decision it is met in, whichever policy object meets it.

A machine's state is what the fragmentation measure reads of it: per GPU the free share, the free GPU memory and
the memory capacity, and the machine's free CPU and GPU type. Two machines in the same state share an id. States
are told apart by a 128-bit hash (two sums of the state's numbers, each weighted by 64-bit random numbers, modulo
2**64): two different states share one with a chance below 2**-88, as the numbers of a state differ by less
than 2**21. Each snapshot keeps the ids of its machines (``ClusterSnapshot.state_ids``), carried from the snapshot
it was made from by the machines an allocation changed.
"""

from __future__ import annotations

import threading

import numpy as np
import numpy.typing as npt

from placement.model.layout import MILLI, IntArray, Layout

STATE_LIMIT = 4096
"""States given an id before the ids are forgotten and given afresh (:meth:`StateIds.forget`)."""
FEW_GPUS = 64
"""A machine of more GPUs is hashed alone: the rows of the others are not widened to its GPUs."""
FEW_MACHINES = 8
"""Up to this many machines are hashed in Python (:meth:`StateIds._of_few`), more at once in numpy."""
_SEED = 0x5EED5
_MASK = (1 << 64) - 1


class StateIds:
    """The ids of the machine states of one layout met so far (see the module docstring)."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.width = max(int(layout.gpu_count.max()) if len(layout.gpu_count) else 0, 1)
        self.weights = np.random.default_rng(_SEED).integers(0, np.iinfo(np.uint64).max, size=(3 * self.width + 2, 2),
                                                              dtype=np.uint64, endpoint=True)
        """Per number of a state (each GPU's free share + 1, free memory and capacity; free CPU; GPU type), its
        weight in each of the two sums: a GPU a machine does not have counts 0 in each, whatever its weight."""
        self._weight_lists = (self.weights[:, 0].tolist(), self.weights[:, 1].tolist())
        """The weights as Python ints, for hashing a few machines without numpy's per-call cost."""
        self.ids: dict[int, int] = {}
        self.epoch = 0
        """How many times the ids were forgotten: what was kept by id under another epoch no longer holds."""
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.ids)

    def forget(self) -> None:
        """Give ids afresh from now on (once more than ``STATE_LIMIT`` states were met)."""
        with self._lock:
            self.ids, self.epoch = {}, self.epoch + 1

    def of(self, gpu_milli: IntArray, gpu_mem: IntArray, cpu: IntArray, machines: IntArray) -> IntArray:
        """The ids of the states of ``machines`` in the usage ``gpu_milli``, ``gpu_mem`` (per GPU) and ``cpu`` (per
        machine); a state not met yet gets a new id."""
        if len(machines) == 0:  # an allocation with no instance changes no machine
            return np.zeros(0, dtype=np.int64)
        counts = self.layout.gpu_count[machines]
        if len(machines) <= FEW_MACHINES and int(counts.max()) <= FEW_GPUS:
            return self._of_few(gpu_milli, gpu_mem, cpu, machines)
        large = counts > FEW_GPUS
        sums = np.zeros((len(machines), 2), dtype=np.uint64)
        groups = [np.arange(len(machines))] if not large.any() else \
            [np.flatnonzero(~large), *(np.array([k]) for k in np.flatnonzero(large).tolist())]
        for pick in groups:
            if len(pick):
                sums[pick] = self._sums(gpu_milli, gpu_mem, cpu, machines[pick])
        # each distinct hash once: a cluster's machines share a few hundred states
        order = np.lexsort((sums[:, 1], sums[:, 0]))
        ranked = sums[order]
        starts = np.flatnonzero(np.r_[True, (ranked[1:] != ranked[:-1]).any(axis=1)])
        group = np.empty(len(machines), dtype=np.int64)
        group[order] = np.cumsum(np.r_[True, (ranked[1:] != ranked[:-1]).any(axis=1)]) - 1
        ids = self.ids
        with self._lock:
            found = [ids.setdefault(high << 64 | low, len(ids)) for high, low in ranked[starts].tolist()]
        result: IntArray = np.array(found, dtype=np.int64)[group]
        return result

    def _of_few(self, gpu_milli: IntArray, gpu_mem: IntArray, cpu: IntArray, machines: IntArray) -> IntArray:
        """:meth:`of` for a few machines (a commit, a decision's takes), in Python ints: the same sums modulo
        2**64 as :meth:`_sums`, where numpy's cost per call would outweigh the work (a machine of 8 GPUs)."""
        layout, w = self.layout, self.width
        w0, w1 = self._weight_lists
        keys = []
        for m in machines.tolist():
            count, first = int(layout.gpu_count[m]), int(layout.gpu_first[m])
            free_cpu, kind = int(layout.cpu_cap[m] - cpu[m]), int(layout.gpu_type[m])
            s0, s1 = free_cpu * w0[3 * w] + kind * w0[3 * w + 1], free_cpu * w1[3 * w] + kind * w1[3 * w + 1]
            if count:
                used = gpu_milli[first:first + count].tolist()
                caps = layout.gpu_mem_cap[first:first + count].tolist()
                mem = gpu_mem[first:first + count].tolist()
                for j in range(count):
                    free, cap = MILLI + 1 - used[j], caps[j]
                    mem_free = cap - mem[j]
                    s0 += free * w0[j] + mem_free * w0[w + j] + cap * w0[2 * w + j]
                    s1 += free * w1[j] + mem_free * w1[w + j] + cap * w1[2 * w + j]
            keys.append((s0 & _MASK) << 64 | (s1 & _MASK))  # as in :meth:`of`: first sum high
        ids = self.ids
        with self._lock:
            found = [ids.setdefault(key, len(ids)) for key in keys]
        return np.array(found, dtype=np.int64)

    def _sums(self, gpu_milli: IntArray, gpu_mem: IntArray, cpu: IntArray,
              machines: IntArray) -> npt.NDArray[np.uint64]:
        layout = self.layout
        counts = layout.gpu_count[machines]
        width, w, weights = max(int(counts.max()) if len(counts) else 0, 1), self.width, self.weights
        slot = np.arange(width)
        present = slot[None, :] < counts[:, None]
        gpu = np.where(present, layout.gpu_first[machines][:, None] + slot[None, :], 0)
        caps = np.where(present, layout.gpu_mem_cap[gpu], 0) if len(layout.gpu_mem_cap) else np.zeros_like(gpu)
        free = np.where(present, MILLI + 1 - gpu_milli[gpu], 0) if len(gpu_milli) else np.zeros_like(gpu)
        mem_free = np.where(present, caps - gpu_mem[gpu], 0) if len(gpu_mem) else np.zeros_like(gpu)
        u64: type[np.uint64] = np.uint64
        sums: npt.NDArray[np.uint64] = (free.astype(u64) @ weights[:width]
                                        + mem_free.astype(u64) @ weights[w:w + width]
                                        + caps.astype(u64) @ weights[2 * w:2 * w + width]
                                        + (layout.cpu_cap[machines] - cpu[machines]).astype(u64)[:, None]
                                        * weights[3 * w]
                                        + layout.gpu_type[machines].astype(u64)[:, None] * weights[3 * w + 1])
        return sums
