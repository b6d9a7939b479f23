"""The fragmentation of machines for a mix of instance shapes (FGD, Weng et al., ATC'23), and what placing
one more instance adds to it, for every machine (rows of numpy arrays).

For one machine and one typical shape ``s`` (``placement.online.shape_mix``), in milli-GPUs:

    frag_s = sum of the free shares of the GPUs whose free share is below s's per-GPU share,
             when the machine can host s (at least s.gpus GPUs have s's share free, and s's CPU is free);
    frag_s = every free milli-GPU of the machine, otherwise (s cannot use any of it there). A
             CPU-only shape uses no GPU: every free milli-GPU counts.

    fragmentation = sum over the typical shapes s that accept the machine's GPU type of weight_s x frag_s,
                    weight_s = count_s / (sum of the counts of the shapes that accept that type)

(worked out as the integer sum of count_s x frag_s, then divided: machines in the same state tie exactly).
Unlike FGD, a shape restricted to other GPU types takes no part on a machine: FGD counts all of the
machine's free GPUs as that shape's fragment, so filling a machine of a type that many restricted shapes
refuse lowers the measure most, and the pods that could go anywhere fill first the rare types that
restricted pods need (on the default pod list with a third of the GPU pods restricted to one type,
``placement.sim.derived_pods``, seed 42: 7.04% of the GPUs unallocated at 100% arrived against 6.00% for
first fit). Without restricted shapes the two measures are the same.

As in FGD, a shape's GPU memory and memory are not part of the measure. Placing an instance changes the
machine it goes to: ``added`` gives, per machine, the least fragmentation any way of placing it there
adds (for a share: on each GPU it fits; whole GPUs: the free ones; CPU only: the CPU), and which GPU
gives it; among GPUs that add the same, the fullest, then the lowest index (or, counted in steps, among
GPUs whose additions fall in the same step: the fullest).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from placement.model.feasibility import Need
from placement.model.layout import MILLI, BoolArray, FloatArray, IntArray, Layout
from placement.online.shape_mix import Mix

NO_GPU = -1
"""A row's free share where the machine has no such GPU (rows are as wide as the widest machine)."""


@dataclass(frozen=True)
class ShapeTable:
    """A mix's shapes as arrays over one layout's GPU types. ``levels``: the distinct per-GPU shares of
    the GPU shapes, ascending; ``level_of``: each shape's (0 for CPU-only ones); ``counts``: how many
    recent instances had it (``total`` in all); ``accessible[t, s]``: a machine of type ``t`` is one
    shape ``s`` accepts."""

    levels: IntArray
    level_of: IntArray
    gpus: IntArray
    cpu: IntArray
    counts: IntArray
    total: int
    uses_gpu: BoolArray
    accessible: BoolArray

    @staticmethod
    def of(mix: Mix, layout: Layout) -> ShapeTable:
        levels = sorted({s.gpu_milli for s in mix.shapes if s.gpus}) or [MILLI]
        accessible = np.array([[not s.gpu_types or t in s.gpu_types for s in mix.shapes]
                               for t in layout.gpu_types], dtype=bool).reshape(len(layout.gpu_types), len(mix.shapes))
        return ShapeTable(np.array(levels, dtype=np.int64),
                          np.array([levels.index(s.gpu_milli) if s.gpus else 0 for s in mix.shapes], dtype=np.int64),
                          np.array([s.gpus for s in mix.shapes], dtype=np.int64),
                          np.array([s.cpu_milli for s in mix.shapes], dtype=np.int64),
                          np.array(mix.counts, dtype=np.int64), max(sum(mix.counts), 1),
                          np.array([s.gpus > 0 for s in mix.shapes], dtype=bool), accessible)


class MachineUsage(Protocol):
    """What is allocated per GPU and per machine (a snapshot's usage, a working state, a scratch copy)."""

    @property
    def layout(self) -> Layout: ...

    @property
    def gpu_milli(self) -> IntArray: ...

    @property
    def gpu_mem(self) -> IntArray: ...

    @property
    def cpu(self) -> IntArray: ...


@dataclass(frozen=True)
class Rows:
    """Machine states, one per row: per GPU the free share (``NO_GPU`` past the machine's GPUs), free
    GPU memory and memory capacity (MiB); the free CPU (milli-cores) and the GPU type index."""

    free: IntArray
    mem_free: IntArray
    caps: IntArray
    cpu_free: IntArray
    gpu_type: IntArray


def rows_of(usage: MachineUsage, machines: IntArray) -> Rows:
    """The states of ``machines`` in ``usage``."""
    layout = usage.layout
    counts = layout.gpu_count[machines]
    width = max(int(counts.max()) if len(counts) else 0, 1)
    slot = np.arange(width)
    present = slot[None, :] < counts[:, None]
    gpu = np.where(present, layout.gpu_first[machines][:, None] + slot[None, :], 0)
    caps = np.where(present, layout.gpu_mem_cap[gpu], 0) if len(layout.gpu_mem_cap) else np.zeros_like(gpu)
    used = usage.gpu_milli[gpu] if len(usage.gpu_milli) else np.zeros_like(gpu)
    mem = usage.gpu_mem[gpu] if len(usage.gpu_mem) else np.zeros_like(gpu)
    return Rows(np.where(present, MILLI - used, NO_GPU), np.where(present, caps - mem, 0), caps,
                layout.cpu_cap[machines] - usage.cpu[machines], layout.gpu_type[machines])


@dataclass(frozen=True)
class Tally:
    """What the measure reads of each row, per level ``L`` of a :class:`ShapeTable`: ``count[:, L]``, the GPUs
    with at least that share free; ``below[:, L]``, the free share of the others; ``total``, all free share.
    Placing an instance changes these by what it takes from one GPU (:func:`added`), so the measure after a
    placement is worked out without copying the machine: on a machine of thousands of GPUs, as cheaply as on
    one of eight."""

    total: IntArray
    count: IntArray
    below: IntArray
    cpu_free: IntArray
    gpu_type: IntArray

    @staticmethod
    def of(rows: Rows, table: ShapeTable) -> Tally:
        free = rows.free
        total = np.where(free > 0, free, 0).sum(axis=1)
        at_least = free[:, :, None] >= table.levels[None, None, :]
        below = total[:, None] - np.where(at_least, free[:, :, None], 0).sum(axis=1)
        return Tally(total, at_least.sum(axis=1), below, rows.cpu_free, rows.gpu_type)

    def after(self, row: IntArray, taken: IntArray, was: IntArray, now: IntArray, cpu_milli: int,
              levels: IntArray) -> Tally:
        """The tallies of ``row`` after, on each, ``taken`` GPUs went from ``was`` free share to ``now``
        (none where ``taken`` is 0) and ``cpu_milli`` of its CPU was taken."""
        was_at, now_at = was[:, None] >= levels[None, :], now[:, None] >= levels[None, :]
        per_gpu_count = was_at.astype(np.int64) - now_at
        # a GPU's free share leaves ``below`` at levels it reached and enters it at levels it no longer reaches
        per_gpu_below = (was - now)[:, None] - np.where(was_at, was[:, None], 0) + np.where(now_at, now[:, None], 0)
        return Tally(self.total[row] - taken * (was - now), self.count[row] - taken[:, None] * per_gpu_count,
                     self.below[row] - taken[:, None] * per_gpu_below, self.cpu_free[row] - cpu_milli,
                     self.gpu_type[row])


def fragmentation(rows: Rows, table: ShapeTable) -> IntArray:
    """Expected milli-GPUs of each row that the mix's shapes could not use, times :func:`accepting` (the
    module docstring)."""
    return measure(Tally.of(rows, table), table)


def measure(tally: Tally, table: ShapeTable) -> IntArray:
    """:func:`fragmentation` from each row's :class:`Tally`."""
    accepts = table.accessible[tally.gpu_type]
    level = table.level_of
    hosts = (table.uses_gpu[None, :] & (tally.count[:, level] >= table.gpus[None, :])
             & (tally.cpu_free[:, None] >= table.cpu[None, :]))
    per_shape = np.where(accepts, np.where(hosts, tally.below[:, level], tally.total[:, None]), 0)
    result: IntArray = per_shape @ table.counts
    return result


def accepting(gpu_type: IntArray, table: ShapeTable) -> IntArray:
    """Per GPU type index, the sum of the counts of the shapes that accept it (at least 1): what
    :func:`fragmentation` is divided by, on a machine of that type, to give milli-GPUs."""
    result: IntArray = np.maximum(table.accessible[gpu_type].astype(np.int64) @ table.counts, 1)
    return result


def options(rows: Rows, need: Need) -> tuple[IntArray, IntArray, IntArray, IntArray, IntArray]:
    """Every way to place one instance of ``need`` on the rows, as the row, the GPU (``NO_GPU`` for whole
    GPUs, taken lowest index first as the working state does, and CPU only), how many GPUs it takes and the
    free share of each before and after. For a share, GPUs of one row with the same free share change the
    measure alike: only the lowest-indexed of them is an option."""
    free, mem_free, caps = rows.free, rows.mem_free, rows.caps
    if need.gpu_milli and not need.whole_gpus:
        per_gpu = (np.full_like(caps, need.gpu_mem_mib) if need.gpu_mem_mib >= 0
                   else np.ceil(need.share_mem * caps - 1e-9).astype(np.int64))
        row, gpu = np.nonzero((free >= need.gpu_milli) & (caps > 0) & (mem_free >= per_gpu))
        was = free[row, gpu]
        _, first = np.unique(row * (MILLI + 1) + was, return_index=True)  # row-major: the lowest GPU first
        row, gpu, was = row[first], gpu[first], was[first]
        return row, gpu, np.ones(len(row), dtype=np.int64), was, was - need.gpu_milli
    if need.gpu_milli:
        whole = (free == MILLI) & (mem_free == caps) & (caps > 0)
        row = np.flatnonzero(whole.sum(axis=1) >= need.whole_gpus)
        taken = np.full(len(row), need.whole_gpus, dtype=np.int64)
        none = np.zeros(len(row), dtype=np.int64)
        return row, np.full(len(row), NO_GPU, dtype=np.int64), taken, none + MILLI, none
    row = np.arange(len(free))
    none = np.zeros(len(row), dtype=np.int64)
    return row, np.full(len(row), NO_GPU, dtype=np.int64), none, none, none


def added(rows: Rows, need: Need, table: ShapeTable, step_milli: float | None = None) -> tuple[FloatArray, IntArray]:
    """Per row, the least fragmentation placing one instance of ``need`` adds (``inf`` where it cannot be
    placed) and the GPU that gives it (``NO_GPU`` where the choice is not a GPU's); see the module docstring.
    With ``step_milli``, GPUs whose additions fall in the same step of that many milli-GPUs (rounded down)
    count as adding the same, so the fullest of them is taken."""
    tally = Tally.of(rows, table)
    before = measure(tally, table)
    row, gpu, taken, was, now = options(rows, need)
    best = np.full(len(before), np.inf)
    best_gpu = np.full(len(before), NO_GPU, dtype=np.int64)
    if not len(row):
        return best, best_gpu
    norm = accepting(tally.gpu_type[row], table)
    after = tally.after(row, taken, was, now, need.cpu_milli, table.levels)
    grown = measure(after, table) - before[row]  # exact: integers
    key = grown if step_milli is None else np.floor(grown / norm / step_milli + 1e-9)
    fuller = np.where(gpu == NO_GPU, 0, was)  # prefer the fullest GPU among those that add the same
    order = np.lexsort((gpu, fuller, key, row))
    first = order[np.r_[True, row[order][1:] != row[order][:-1]]]
    best[row[first]], best_gpu[row[first]] = grown[first] / norm[first], gpu[first]
    return best, best_gpu
