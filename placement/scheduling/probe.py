"""A necessary condition for preemption to let a job start, cheap next to trying victim after victim.

``find_victims`` takes the candidates cheapest first and asks, after each one gone, whether the job fits
around the reservations (``placement.scheduling.forecast.place_around``): placed on the snapshot fenced
by every reservation, or placed anywhere where it delays no reservation due before it may end. Taking
victims away only frees capacity, so with every candidate gone (the snapshot ``S``) the job has at least
the room any trial gives it. Each way of fitting places the job on the snapshot ``T``: ``S`` where, on
every GPU and machine of a reservation ``R`` due before the job may end, the usage is the larger of
``S``'s and of ``R``'s forecast (without the candidates) with ``R``'s place taken.

* Fenced: the forecast holds no more than ``S`` (it is ``S`` less the jobs that end first, plus the starts
  that leave ``R`` its room), so ``T`` holds no more than ``S`` fenced, and a placement there is one on ``T``.
* Anywhere: a placement on ``S`` that crowds no due ``R`` (``placement.model.feasibility.crowded_by``: the
  capacity of what ``R``'s place holds, with ``R`` and the forecast there) has room on ``T`` everywhere.

So where, for some demand, the machines of ``T`` have room (the filters' count per machine, as in
``placement.scheduling.screen``) for fewer instances than the job has, no trial can succeed and none is
asked of the placement policy (:func:`could_start`). The same holds for the trial with the first ``k``
victims gone and its own ``T``, which only gains room as ``k`` grows: the trials before the first ``k`` whose
``T`` has room cannot succeed, and that ``k`` is found by bisection (:func:`fewest_victims`).

``T`` is taken per GPU, not per machine: on a machine of a thousand GPUs the job may have room now on some
and beside a reservation on others, and fit on neither at once.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from placement.model.demand import Job
from placement.model.layout import frozen
from placement.model.snapshot import Allocation, ClusterSnapshot
from placement.scheduling.forecast import fenced
from placement.scheduling.future import Taken
from placement.scheduling.jobs import RunningJob
from placement.scheduling.state import CycleState, Held

TRIAL_STREAMS = ("trial", "trial-fenced")
"""The screen's streams of a preemption trial's snapshots and of them fenced."""


class _Probe:
    """The snapshots :func:`could_start` reads for one list of candidates on one working state, each worked
    out when first read: the working state without the candidates, it fenced by the reservations held, and
    each reservation's forecast without them, with its own place taken. A reservation held keeps its
    forecast until a job starts, which changes the working state's generation, so the probe lasts as long
    as the generation (reservations are only added meanwhile)."""

    def __init__(self, state: CycleState, candidates: Sequence[RunningJob]) -> None:
        # the reservations' list, not the state: the state keeps the probe, and a probe keeping the state would
        # leave the whole cycle's state to the cyclic collector, whose full passes stall a later cycle
        self.held = state.held
        self.gone = [state.allocation_of(v.job_id) for v in candidates]
        self.snapshot = without(state.working, self.gone, state.probes)
        self._fenced: dict[int, ClusterSnapshot] = {}
        self._futures: dict[int, ClusterSnapshot] = {}
        self._tightest: dict[tuple[int, ...], ClusterSnapshot] = {}

    def fenced(self) -> ClusterSnapshot:
        held = self.held
        found = self._fenced.get(len(held))
        if found is None:
            found = self._fenced[len(held)] = fenced(self.snapshot, (h.reservation.allocation for h in held))
        return found

    def future(self, i: int) -> ClusterSnapshot:
        found = self._futures.get(i)
        if found is None:
            found = self._futures[i] = _beside(self.held[i], self.gone)
        return found

    def tightest(self, due: tuple[int, ...]) -> ClusterSnapshot:
        """``T`` of the module docstring for the reservations ``due``: the snapshot's usage, and each due
        reservation's forecast with its place taken, the larger per GPU and machine (off a reservation's place
        its forecast holds no more than the snapshot, so the larger is the snapshot's there)."""
        found = self._tightest.get(due)
        if found is None:
            found = self._tightest[due] = _larger(self.snapshot, [self.future(i) for i in due])
        return found


def _beside(held: Held, gone: Sequence[Allocation]) -> ClusterSnapshot:
    """Reservation ``held``'s forecast without those of ``gone`` it holds, with its own place taken."""
    kept = [a for a in gone if a.job_id in held.future.allocations]
    return fenced(without(held.future, kept), [held.reservation.allocation])


def _larger(snapshot: ClusterSnapshot, others: Sequence[ClusterSnapshot]) -> ClusterSnapshot:
    """``snapshot`` with, per GPU and machine, the largest usage of it and ``others`` (``snapshot`` if none)."""
    if not others:
        return snapshot
    arrays = [snapshot.gpu_milli_used, snapshot.gpu_mem_used, snapshot.cpu_used, snapshot.mem_used]
    for other in others:
        arrays = [np.maximum(a, b) for a, b in zip(arrays, (other.gpu_milli_used, other.gpu_mem_used, other.cpu_used,
                                                            other.mem_used), strict=True)]
    return ClusterSnapshot(snapshot.cluster, snapshot.generation, frozen(arrays[0]), frozen(arrays[1]),
                           frozen(arrays[2]), frozen(arrays[3]), snapshot.allocations)


def could_start(state: CycleState, key: Hashable, job: Job, end_s: float,
                candidates: Sequence[RunningJob]) -> bool:
    """Whether preempting some of ``candidates`` could let ``job`` start now around the reservations
    (``False``: no trial of ``find_victims`` can succeed). ``key`` names the candidates (with the working
    state's generation) and the screen's streams to use."""
    screen = state.screen
    assert screen is not None  # only asked where the cycle screens
    probe = state.probes.get((key, state.working.generation))
    if not isinstance(probe, _Probe):
        probe = state.probes[(key, state.working.generation)] = _Probe(state, candidates)
    if screen.fits_nowhere((key, "S"), probe.snapshot, job):
        return False
    if not state.held or not screen.fits_nowhere((key, "fenced"), probe.fenced(), job):
        return True
    due = tuple(i for i, h in enumerate(state.held) if end_s > h.reservation.at_s)
    return not screen.fits_nowhere((key, "tightest"), probe.tightest(due), job)


def fewest_victims(state: CycleState, key: Hashable, job: Job, end_s: float, victims: Sequence[RunningJob],
                   all_have_room: bool = False) -> int | None:
    """How many of ``victims``, taken in order, must be gone before a trial can succeed: the fewest whose ``T``
    (module docstring) has room for the job; ``None`` where even all of them leave it none. ``key`` names the
    screen's stream for these snapshots; ``all_have_room``: the caller knows that all of them leave room (they
    are the candidates :func:`could_start` passed)."""
    screen = state.screen
    assert screen is not None  # only asked where the cycle screens
    gone = [state.allocation_of(v.job_id) for v in victims]
    due = [h for h in state.held if end_s > h.reservation.at_s]

    def room(k: int) -> bool:
        taken = gone[:k]
        return not screen.fits_nowhere(key, _larger(without(state.working, taken), [_beside(h, taken) for h in due]),
                                       job)

    if not gone or not (all_have_room or room(len(gone))):
        return None
    low, high = 1, len(gone)  # room(high) holds; bisect for the first k where it does
    while low < high:
        middle = (low + high) // 2
        if room(middle):
            high = middle
        else:
            low = middle + 1
    return low


def without(snapshot: ClusterSnapshot, allocations: Sequence[Allocation],
            kept: dict[Hashable, object] | None = None) -> ClusterSnapshot:
    """``snapshot``'s usage less ``allocations`` (each held there): a probe for the filters, which read the
    usage alone; its ``allocations`` map is left as it was. ``kept``: where to keep what the allocations
    take, gathered into arrays, for the next call with the same ones."""
    key = ("gathered", tuple(a.job_id for a in allocations))
    found = kept.get(key) if kept is not None else None
    taken = found if isinstance(found, Taken) else Taken(allocations)
    if kept is not None:
        kept[key] = taken
    arrays = [snapshot.gpu_milli_used.copy(), snapshot.gpu_mem_used.copy(), snapshot.cpu_used.copy(),
              snapshot.mem_used.copy()]
    taken.take_from(arrays)
    assert all(int(a.min(initial=0)) >= 0 for a in arrays), "an allocation taken away that was not held"
    return ClusterSnapshot(snapshot.cluster, snapshot.generation, frozen(arrays[0]), frozen(arrays[1]),
                           frozen(arrays[2]), frozen(arrays[3]), snapshot.allocations)
