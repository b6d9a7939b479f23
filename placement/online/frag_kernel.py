"""The fragmentation one instance adds on each of many machines of a few GPUs, compiled (numba): the figures of
:func:`placement.online.frag_measure.added_both`, the same integers and the same choices, at a few microseconds
per machine rather than the tens numpy calls over small arrays take.

A decision needs the cost of its demand on every machine whose state changed since that demand was last asked;
for a rare demand that is tens of machines, and worked out one by one in Python numbers (or in numpy calls over
small arrays) those few decisions set the tail of the decision time. Compiled, one call works them all out.

The measure on a machine of GPU type ``t`` is regrouped by level (:class:`KernelTable`), so that it reads a few
numbers per level rather than one per shape. With ``usable[l]`` the free milli-GPUs of the GPUs whose free share is
at least level ``l``, a shape that fits leaves ``total - usable[l]`` as its fragment and one that does not (or uses
no GPU) ``total``, so::

    sum over shapes of count x frag  =  total x everyone[t]  -  sum over levels of usable[l] x fits[t, l, k, c]

where ``fits[t, l, k, c]`` sums the counts of the GPU shapes of level ``l`` that accept ``t``, ask for at most ``k``
GPUs (the machine's number of GPUs with level ``l`` free, at most ``most[t]``) and at most the ``c``-th smallest of
the CPU asks ``cpus[t]`` (``c`` how many of them the free CPU covers, up to ``ncpus[t]``). The same integers as
shape by shape.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np

from placement.model.feasibility import Need
from placement.model.layout import MILLI, FloatArray, IntArray
from placement.online.frag_measure import NO_GPU, SCORE_POINTS, MachineUsage, ShapeTable

F = TypeVar("F", bound=Callable[..., Any])


def _compiled(function: F) -> F:
    """``function`` compiled on its first call, and cached on disk for the next processes where numba finds a
    writable place (beside this file, else ``NUMBA_CACHE_DIR`` or the user's cache folder); where it finds none (a
    read-only file system), compiled in each process instead."""
    import numba  # the compiler, a quarter of a second to import: only once a kernel is wanted

    try:
        return cast(F, numba.njit(cache=True, nogil=True)(function))
    except RuntimeError:  # numba: "cannot cache function ...: no locator available"
        return cast(F, numba.njit(nogil=True)(function))


_KERNELS = ("_measure", "_step", "_added_on")
"""The compiled functions, callees first: a kernel is compiled against the ones it calls as they are then."""
_compiling = threading.Lock()
_ready = False


def _kernels() -> None:
    """Make the module's kernels the compiled ones, the first time one is wanted (commands and replays with other
    policies never import the compiler)."""
    global _ready
    with _compiling:
        if not _ready:
            for name in _KERNELS:  # the module's names: the kernels look their callees up there when compiled
                globals()[name] = _compiled(globals()[name])
            _ready = True


@dataclass(frozen=True)
class KernelTable:
    """A shape table's per-type sums (the module docstring) as arrays, for :func:`added_on`: one row per GPU type
    index, all over the same CPU asks (those of every GPU shape, not only of the shapes a type accepts) and up to the
    same most GPUs, which gives the same sums (a type's count of shapes fitting in ``c`` cores is the same over either
    list)."""

    levels: IntArray
    everyone: IntArray
    norm: IntArray
    most: IntArray
    cpus: IntArray
    ncpus: IntArray
    fits: IntArray


def kernel_table(table: ShapeTable) -> KernelTable:
    """``table``'s per-type sums as arrays, worked out at once for every type (the mix changes now and then, and a
    decision that meets a new one waits for this: type by type it took 0.4 ms)."""
    types = table.accessible.shape[0]
    gpu_shapes = np.flatnonzero(table.uses_gpu)
    cpus = np.unique(table.cpu[gpu_shapes])
    most = int(table.gpus[gpu_shapes].max(initial=0))
    fits = np.zeros((types, len(table.levels), most + 1, len(cpus) + 1), dtype=np.int64)
    t, k = np.nonzero(table.accessible[:, gpu_shapes])
    shape = gpu_shapes[k]
    # each shape counted where it starts to fit, then summed over more GPUs and more CPU
    np.add.at(fits, (t, table.level_of[shape], table.gpus[shape], np.searchsorted(cpus, table.cpu[shape]) + 1),
              table.counts[shape])
    fits = fits.cumsum(axis=2).cumsum(axis=3)
    everyone = table.accessible.astype(np.int64) @ table.counts
    return KernelTable(table.levels, everyone, table.norm, np.full(types, most, dtype=np.int64),
                       np.repeat(cpus[None, :] if len(cpus) else np.zeros((1, 1), dtype=np.int64), types, axis=0),
                       np.full(types, len(cpus), dtype=np.int64), fits)


def added_on(usage: MachineUsage, machines: IntArray, table: KernelTable, need: Need,
             step_milli: float | None) -> tuple[FloatArray, IntArray]:
    """Per machine of ``machines`` (each of a few GPUs) in ``usage``: the least fragmentation one instance of ``need``
    adds there, exactly (``inf`` where it does not fit), and, for a share, the GPU it goes to (position on the
    machine): the least addition in FGD's score points with ``step_milli`` (exactly without), then the lowest
    index; ``NO_GPU`` for other demands. The kernel reads the usage arrays where they are: gathering the machines'
    rows first (``frag_measure.rows_of``) took longer than the kernel itself."""
    if not _ready:
        _kernels()
    layout = usage.layout
    return _added_on(usage.gpu_milli, usage.gpu_mem, usage.cpu, layout.gpu_first, layout.gpu_count,
                     layout.gpu_mem_cap, layout.cpu_cap, layout.gpu_type, machines, table.levels, table.everyone,
                     table.norm, table.most, table.cpus, table.ncpus, table.fits, need.whole_gpus, need.gpu_milli,
                     need.gpu_mem_mib, float(need.share_mem), need.cpu_milli,
                     -1.0 if step_milli is None else float(step_milli))


def _measure(total: int, count: IntArray, usable: IntArray, cpu: int, t: int, levels: IntArray, everyone: IntArray,
             most: IntArray, cpus: IntArray, ncpus: IntArray, fits: IntArray) -> int:
    """The integer measure of one state of a machine of type ``t`` (the module docstring)."""
    c = 0
    while c < ncpus[t] and cpus[t, c] <= cpu:  # bisect_right over the type's CPU asks
        c += 1
    frag = total * everyone[t]
    for level in range(len(levels)):
        room = usable[level]
        if room:
            k = count[level] if count[level] < most[t] else most[t]
            frag -= room * fits[t, level, k, c]
    return int(frag)


def _step(added: float, step_milli: float) -> float:
    """``frag_measure.score_steps`` of one addition."""
    exponent = min(added / (SCORE_POINTS / 4 * step_milli), 700.0)
    return float(-math.floor(SCORE_POINTS / (1.0 + math.exp(exponent)) + 1e-9))


def _added_on(gpu_used: IntArray, gpu_mem_used: IntArray, cpu_used: IntArray, gpu_first: IntArray,
              gpu_count: IntArray, gpu_mem_cap: IntArray, cpu_cap: IntArray, gpu_type: IntArray, machines: IntArray,
              levels: IntArray, everyone: IntArray, norm: IntArray, most: IntArray, cpus: IntArray, ncpus: IntArray,
              fits: IntArray, whole_gpus: int, gpu_milli: int, gpu_mem_mib: int, share_mem: float, cpu_milli: int,
              step_milli: float) -> tuple[FloatArray, IntArray]:
    rows = len(machines)
    n_levels = len(levels)
    cost = np.full(rows, np.inf)
    chosen = np.full(rows, NO_GPU, dtype=np.int64)
    count = np.zeros(n_levels, dtype=np.int64)
    usable = np.zeros(n_levels, dtype=np.int64)
    after_count = np.zeros(n_levels, dtype=np.int64)
    after_usable = np.zeros(n_levels, dtype=np.int64)
    width = 0
    for r in range(rows):
        width = max(width, gpu_count[machines[r]])
    seen = np.zeros(width + 1, dtype=np.int64)
    share = gpu_milli > 0 and whole_gpus == 0
    for r in range(rows):
        m = machines[r]
        t, first, gpus = gpu_type[m], gpu_first[m], gpu_count[m]
        total = 0
        for level in range(n_levels):
            count[level] = 0
            usable[level] = 0
        whole = 0
        for k in range(gpus):
            f = MILLI - gpu_used[first + k]
            cap = gpu_mem_cap[first + k]
            if f > 0:
                total += f
                for level in range(n_levels):
                    if f >= levels[level]:
                        count[level] += 1
                        usable[level] += f
            if f == MILLI and gpu_mem_used[first + k] == 0 and cap > 0:
                whole += 1
        cpu_free = cpu_cap[m] - cpu_used[m]
        before = _measure(total, count, usable, cpu_free, t, levels, everyone, most, cpus, ncpus, fits)
        cpu_after = cpu_free - cpu_milli
        if share:
            n_seen = 0
            best_exact, best_steps, best_gpu = 0, 0.0, NO_GPU
            for k in range(gpus):
                was = MILLI - gpu_used[first + k]
                cap = gpu_mem_cap[first + k]
                per_gpu = gpu_mem_mib if gpu_mem_mib >= 0 else math.floor(share_mem * cap + 1e-9)
                if was < gpu_milli or cap <= 0 or cap - gpu_mem_used[first + k] < per_gpu:
                    continue
                repeated = False
                for j in range(n_seen):
                    if seen[j] == was:
                        repeated = True
                if repeated:
                    continue
                seen[n_seen] = was
                n_seen += 1
                now = was - gpu_milli
                for level in range(n_levels):
                    lv = levels[level]
                    after_count[level] = count[level] - ((1 if was >= lv else 0) - (1 if now >= lv else 0))
                    after_usable[level] = usable[level] - ((was if was >= lv else 0) - (now if now >= lv else 0))
                grown = _measure(total - gpu_milli, after_count, after_usable, cpu_after, t, levels, everyone, most,
                                 cpus, ncpus, fits) - before
                steps = _step(grown / norm[t], step_milli) if step_milli > 0 else float(grown)
                if n_seen == 1 or grown < best_exact:
                    best_exact = grown
                if n_seen == 1 or steps < best_steps:
                    best_steps, best_gpu = steps, k
            if n_seen:
                cost[r] = best_exact / norm[t]
                chosen[r] = best_gpu
        elif gpu_milli:
            if whole >= whole_gpus:
                for level in range(n_levels):
                    lv = levels[level]
                    after_count[level] = count[level] - whole_gpus * (1 if lv <= MILLI else 0)
                    after_usable[level] = usable[level] - whole_gpus * (MILLI if lv <= MILLI else 0)
                grown = _measure(total - whole_gpus * MILLI, after_count, after_usable, cpu_after, t, levels, everyone,
                                 most, cpus, ncpus, fits) - before
                cost[r] = grown / norm[t]
        else:
            grown = _measure(total, count, usable, cpu_after, t, levels, everyone, most, cpus, ncpus, fits) - before
            cost[r] = grown / norm[t]
    return cost, chosen


def compile_kernels() -> None:
    """Compile the kernels now (or load them from the disk cache), rather than in the first decision that needs
    them: a service calls it as it starts, so that no placement waits about 2 s for the compiler. The arrays are
    read-only, as a snapshot's and a working state's are (numba compiles read-only and writable arrays apart)."""
    _kernels()

    def frozen(*shape: int) -> IntArray:
        array = np.zeros(shape, dtype=np.int64)
        array.flags.writeable = False
        return array

    one = np.zeros(1, dtype=np.int64)
    table = KernelTable(np.array([MILLI], dtype=np.int64), one, one + 1, one, np.zeros((1, 1), dtype=np.int64), one,
                        np.zeros((1, 1, 1, 1), dtype=np.int64))
    for whole, milli in ((0, 500), (1, MILLI)):
        _added_on(frozen(1), frozen(1), frozen(1), frozen(1), frozen(1), frozen(1), frozen(1), frozen(1), one,
                  table.levels, table.everyone, table.norm, table.most, table.cpus, table.ncpus, table.fits, whole,
                  milli, 0, 0.5, 0, 40.0)
