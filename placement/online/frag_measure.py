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
gives it; among GPUs that add the same (or, counted in steps, whose additions fall in the same step), the lowest
index, as FGD's scheduler plugin takes them (it was measured against the fullest of them: the same unallocated
shares over seeds 42-51 of the default pod list, within 0.01 points).

The same figures, worked out other ways where those are cheaper: :class:`Measured` keeps what the measure
reads of each machine state and its parts, from which an instance without a share takes a few array
operations; ``placement.online.frag_kernel`` works on machines of a few GPUs, compiled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, cast

import numpy as np
import numpy.typing as npt

from placement.filters.gpu_share import proportional_per_gpu
from placement.model.feasibility import Need
from placement.model.layout import MILLI, BoolArray, FloatArray, IntArray, Layout
from placement.online.shape_mix import Mix

A = TypeVar("A", bound=npt.NDArray[Any])
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
    norm: IntArray
    """Per GPU type, the counts of the shapes that accept it summed, at least 1 (:func:`accepting`)."""

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
                          np.array([s.gpus > 0 for s in mix.shapes], dtype=bool), accessible,
                          np.maximum(accessible.astype(np.int64) @ np.array(mix.counts, dtype=np.int64), 1))


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
    result: IntArray = table.norm[gpu_type]
    return result


def options(rows: Rows, need: Need) -> tuple[IntArray, IntArray, IntArray, IntArray, IntArray]:
    """Every way to place one instance of ``need`` on the rows, as the row, the GPU (``NO_GPU`` for whole
    GPUs, taken lowest index first as the working state does, and CPU only), how many GPUs it takes and the
    free share of each before and after. For a share, GPUs of one row with the same free share change the
    measure alike: only the lowest-indexed of them is an option."""
    free, mem_free, caps = rows.free, rows.mem_free, rows.caps
    if need.gpu_milli and not need.whole_gpus:
        per_gpu = (np.full_like(caps, need.gpu_mem_mib) if need.gpu_mem_mib >= 0
                   else proportional_per_gpu(caps, need.share_mem))
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
    With ``step_milli``, GPUs whose additions get the same FGD score (:func:`score_steps`) count as adding the
    same, so the lowest-indexed of them is taken."""
    tally = Tally.of(rows, table)
    return added_to(rows, tally, measure(tally, table), need, table, step_milli)


def added_to(rows: Rows, tally: Tally, before: IntArray, need: Need, table: ShapeTable,
             step_milli: float | None = None) -> tuple[FloatArray, IntArray]:
    """:func:`added`, given the rows' tallies and their :func:`measure` (which do not depend on ``need``)."""
    best, best_gpu, _ = added_both(rows, tally, before, need, table, step_milli, None)
    return best, best_gpu


def added_both(rows: Rows, tally: Tally, before: IntArray, need: Need, table: ShapeTable, step_milli: float | None,
               then_milli: float | None) -> tuple[FloatArray, IntArray, IntArray]:
    """:func:`added_to` with ``step_milli``, and the GPU it would choose with ``then_milli`` instead (the
    same ways of placing, ranked once more: ``NO_GPU`` where the choice is not a GPU's)."""
    row, gpu, taken, was, now = options(rows, need)
    best = np.full(len(before), np.inf)
    best_gpu = np.full(len(before), NO_GPU, dtype=np.int64)
    then_gpu = best_gpu.copy()
    if not len(row):
        return best, best_gpu, then_gpu
    norm = table.norm[tally.gpu_type[row]]
    after = tally.after(row, taken, was, now, need.cpu_milli, table.levels)
    grown = measure(after, table) - before[row]  # exact: integers
    if need.gpu_milli and not need.whole_gpus:  # several GPUs of a row may take a share: the best of them
        first = _first_per_row(row, gpu, grown if step_milli is None else _steps(grown, norm, step_milli))
        best[row[first]], best_gpu[row[first]] = grown[first] / norm[first], gpu[first]
        if then_milli != step_milli:
            first = _first_per_row(row, gpu, grown if then_milli is None else _steps(grown, norm, then_milli))
        then_gpu[row[first]] = gpu[first]
    else:  # one way per row, rows ascending
        best[row], best_gpu[row], then_gpu[row] = grown / norm, gpu, gpu
    return best, best_gpu, then_gpu


SCORE_POINTS = 100
"""FGD's node score runs from 0 to this (the Kubernetes scheduler's largest node score)."""


def score_steps(added: FloatArray, step_milli: float) -> FloatArray:
    """FGD's node score where an instance adds ``added`` milli-GPUs of expected fragmentation, negated so that less
    is better: -floor(100 x sigmoid(-added / (25 x ``step_milli``))). Near zero a point is ``step_milli`` (FGD's
    40 milli-GPUs); far from it the points come closer together, so that every machine where an instance would
    strand about 4 GPUs' worth or more scores the same and the tie goes to the first of them in order."""
    exponent = np.minimum(added / (SCORE_POINTS / 4 * step_milli), 700.0)  # exp(700) is finite
    steps: FloatArray = -np.floor(SCORE_POINTS / (1.0 + np.exp(exponent)) + 1e-9)
    return steps


def _steps(grown: IntArray, norm: IntArray, step_milli: float) -> FloatArray:
    return score_steps(grown / norm, step_milli)


def _first_per_row(row: IntArray, gpu: IntArray, key: FloatArray | IntArray) -> IntArray:
    """Per row, the way of placing with the least ``key``, then the lowest GPU."""
    order = np.lexsort((gpu, key, row))
    first: IntArray = order[np.r_[True, row[order][1:] != row[order][:-1]]]
    return first


def with_room(array: A, size: int, fill: object) -> A:
    """``array`` with room for ``size`` entries along its first axis (at least doubled), the new ones ``fill``."""
    if len(array) >= size:
        return array
    more = np.full((max(size, 2 * len(array)) - len(array), *array.shape[1:]), fill, dtype=array.dtype)
    return cast(A, np.concatenate([array, more]))


class Measured:
    """Per machine state (by an id the caller gives it): its :class:`Tally` and how many of its GPUs are whole and
    free, and under one shape table its :func:`measure` and the parts of it that an instance without a share
    changes, so that :func:`added` for such an instance takes a few operations on what is kept:

    * ``hosted[s]``: the state hosts shape ``s`` (its type accepts it); ``weighted[s]``: ``s``'s count there
      (0 where its type refuses ``s``); ``lost[s]``: what ``s`` would add, weighted, if the state no longer hosted it
      (its free share at least ``s``'s level); ``margin[s]``: GPUs with ``s``'s share free beyond ``s``'s GPUs;
      ``unhosted``: the counts of the shapes accepted and not hosted, summed.

    Placing an instance of ``k`` whole GPUs (``k`` = 0: none) and ``c`` milli-cores takes ``k`` GPUs from the count
    at every level and ``k`` x 1000 from the total, and ``c`` from the free CPU: a shape still hosted adds nothing,
    one hosted no more adds its ``lost`` less ``k`` x 1000 x its count, one not hosted ``k`` x 1000 x its count
    less (:meth:`added_whole`). The tallies hold while the table's levels do, the rest while the table does."""

    def __init__(self, table: ShapeTable) -> None:
        self.table = table
        levels, shapes = len(table.levels), len(table.counts)
        def none(*shape: int) -> IntArray:
            return np.zeros((0, *shape), dtype=np.int64)

        self.total, self.cpu_free, self.gpu_type, self.whole = none(), none(), none(), none()
        self.count, self.below = none(levels), none(levels)
        self.tallied: BoolArray = np.zeros(0, dtype=bool)
        self.before, self.unhosted = none(), none()
        self.hosted: BoolArray = np.zeros((0, shapes), dtype=bool)
        self.weighted, self.lost, self.margin = none(shapes), none(shapes), none(shapes)
        self.measured: BoolArray = np.zeros(0, dtype=bool)

    def retable(self, table: ShapeTable) -> Measured:
        """What is kept under ``table`` instead: the tallies if its levels are the same, else nothing."""
        if not np.array_equal(table.levels, self.table.levels):
            return Measured(table)
        kept = Measured(table)
        kept.total, kept.cpu_free, kept.gpu_type, kept.whole = self.total, self.cpu_free, self.gpu_type, self.whole
        kept.count, kept.below, kept.tallied = self.count, self.below, self.tallied
        return kept

    def fit(self, size: int) -> None:
        """Make room for ``size`` states."""
        if len(self.tallied) >= size and len(self.measured) >= size:
            return
        self.total, self.cpu_free, self.gpu_type, self.whole, self.count, self.below = (
            with_room(a, size, 0)
            for a in (self.total, self.cpu_free, self.gpu_type, self.whole, self.count, self.below))
        self.before, self.unhosted, self.weighted, self.lost, self.margin = (
            with_room(a, size, 0) for a in (self.before, self.unhosted, self.weighted, self.lost, self.margin))
        self.hosted = with_room(self.hosted, size, False)
        self.tallied, self.measured = with_room(self.tallied, size, False), with_room(self.measured, size, False)

    def prepare(self, usage: MachineUsage, machines: IntArray, ids: IntArray) -> None:
        """Work out what is not kept yet for the states ``ids`` (distinct) of ``machines`` in ``usage``."""
        new = np.flatnonzero(~self.tallied[ids])
        if len(new):
            at, rows = ids[new], rows_of(usage, machines[new])
            tally = Tally.of(rows, self.table)
            self.total[at], self.count[at], self.below[at] = tally.total, tally.count, tally.below
            self.cpu_free[at], self.gpu_type[at] = rows.cpu_free, rows.gpu_type
            self.whole[at] = ((rows.free == MILLI) & (rows.mem_free == rows.caps) & (rows.caps > 0)).sum(axis=1)
            self.tallied[at] = True
        stale = ids[~self.measured[ids]]
        if not len(stale):
            return
        table, level = self.table, self.table.level_of
        total, count, below = self.total[stale], self.count[stale][:, level], self.below[stale][:, level]
        weighted = table.accessible[self.gpu_type[stale]] * table.counts
        hosted = table.uses_gpu & (count >= table.gpus) & (self.cpu_free[stale][:, None] >= table.cpu)
        self.before[stale] = (np.where(hosted, below, total[:, None]) * weighted).sum(axis=1)
        self.hosted[stale], self.weighted[stale], self.margin[stale] = hosted, weighted, count - table.gpus
        self.lost[stale] = np.where(hosted, weighted * (total[:, None] - below), 0)
        self.unhosted[stale] = np.where(hosted, 0, weighted).sum(axis=1)
        self.measured[stale] = True

    def tally(self, ids: IntArray) -> Tally:
        return Tally(self.total[ids], self.count[ids], self.below[ids], self.cpu_free[ids], self.gpu_type[ids])

    def added_whole(self, ids: IntArray, whole_gpus: int, cpu_milli: int) -> tuple[IntArray, BoolArray]:
        """For an instance of ``whole_gpus`` whole GPUs (0: none) and ``cpu_milli``: per state, the fragmentation it
        adds (times the type's :func:`accepting`, as ``measure``) and whether it fits there."""
        table, taken = self.table, whole_gpus * MILLI
        still = table.uses_gpu & (self.margin[ids] >= whole_gpus) & (self.cpu_free[ids][:, None] - cpu_milli
                                                                     >= table.cpu)
        lost = self.lost[ids]
        if taken:
            lost = lost - taken * np.where(self.hosted[ids], self.weighted[ids], 0)
        grown: IntArray = np.where(still, 0, lost).sum(axis=1) - taken * self.unhosted[ids]
        fits: BoolArray = self.whole[ids] >= whole_gpus
        return grown, fits
