"""Reservations: when a waiting job could start, from the running jobs' estimated ends, and where; and the
placements that respect the reservations held (backfilling that never delays a reserved job).

A reservation for job J is found by releasing the guaranteed jobs in order of estimated end
(``started + P50``) from the current snapshot, without the opportunistic jobs (preempted when J is
due), and asking the placement policy after each release until J fits (EASY backfilling, Lifka 1995;
Slurm's backfill scheduler). J's reserved start is that end time; its place is what the policy chose
there, fenced off for every later reservation of the cycle.

A later job B may start now where it does not touch a reserved place (it is placed on the snapshot
with every reserved place fenced off), or anywhere if for each reservation R either B's cautious end
(now + P90) is no later than R's start or R's job still fits its place with B there
(``placement.violations`` on R's forecast with B added). A job whose end is unknown never runs into a
reserved start.

Where the cycle screens (``placement.scheduling.screen``), the policy is not asked where the filters
already answer: a job with no room on the snapshot fits nowhere; a reservation's forecast is followed
release by release and asked about only once the job could fit there (``placement.scheduling.future``);
and the reservation a one-instance job would delay is named without asking where it would go when every
place it could take delays the same one (:func:`_certain_blocker`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence

import numpy as np

from placement.filters.base import usage_of
from placement.filters.chain import chain_for
from placement.model.decision import Decision
from placement.model.demand import Job
from placement.model.feasibility import MANY_GPUS, needs_of
from placement.model.snapshot import MILLI, Allocation, ClusterSnapshot, release
from placement.scheduling.future import Future
from placement.scheduling.jobs import PendingJob
from placement.scheduling.memo import machines_of
from placement.scheduling.plan import Reservation, ReservationKind
from placement.scheduling.state import CycleState, Held

WORKING, FENCED, RESERVING = "working", "fenced", "reserving"
"""The screen's streams: the cycle's working state, it fenced by the reservations, the forecasts reserve() asks."""


def fenced(snapshot: ClusterSnapshot, allocations: Iterable[Allocation]) -> ClusterSnapshot:
    """``snapshot`` with ``allocations``' GPUs, CPU and memory also taken, capped at capacity (a fence, not
    an allocation: it keeps others off, and its owners are not in ``allocations``)."""
    layout, instances = snapshot.layout, [p for allocation in allocations for p in allocation.instances]
    gpu, gpu_mem = snapshot.gpu_milli_used.copy(), snapshot.gpu_mem_used.copy()
    cpu, mem = snapshot.cpu_used.copy(), snapshot.mem_used.copy()
    if sum(len(p.gpus) for p in instances) < MANY_GPUS:
        for p in instances:
            for g in p.gpus:
                gpu[g] += p.gpu_milli
                gpu_mem[g] += p.gpu_mem_mib
            cpu[p.machine] += p.cpu_milli
            mem[p.machine] += p.mem_mib
    else:  # thousands of GPUs, as places on a large node hold: added up in numpy
        held = [len(p.gpus) for p in instances]
        at = np.fromiter((g for p in instances for g in p.gpus), dtype=np.int64, count=sum(held))
        machines = np.array([p.machine for p in instances], dtype=np.int64)
        np.add.at(gpu, at, np.repeat(np.array([p.gpu_milli for p in instances], dtype=np.int64), held))
        np.add.at(gpu_mem, at, np.repeat(np.array([p.gpu_mem_mib for p in instances], dtype=np.int64), held))
        np.add.at(cpu, machines, np.array([p.cpu_milli for p in instances], dtype=np.int64))
        np.add.at(mem, machines, np.array([p.mem_mib for p in instances], dtype=np.int64))
    arrays = (np.minimum(gpu, MILLI), np.minimum(gpu_mem, layout.gpu_mem_cap), np.minimum(cpu, layout.cpu_cap),
              np.minimum(mem, layout.mem_cap))
    for array in arrays:
        array.flags.writeable = False
    return ClusterSnapshot(snapshot.cluster, snapshot.generation, *arrays, snapshot.allocations)


def place_around(state: CycleState, snapshot: ClusterSnapshot, job: Job, end_s: float,
                 futures: Sequence[ClusterSnapshot] | None = None,
                 streams: tuple[str, str] = (WORKING, FENCED),
                 beside: Beside | None = None) -> tuple[Decision, str | None]:
    """``job`` decided on ``snapshot`` so that no reservation is delayed, and the reserved job in its way
    when it fits only by delaying one. ``futures``: each reservation's forecast as this attempt sees it
    (without the running jobs it preempts; the reservations' own by default). ``streams``: the screen's
    streams of ``snapshot`` and of it fenced (``placement.scheduling.screen``). ``beside``: reservation
    ``i``'s forecast with its place taken, or one holding no more (with ``futures`` given; the screen's
    stream of it with it), for :func:`_certain_blocker`."""
    if not state.held:
        return state.decide(snapshot, job, streams[0]), None
    if state.screen is not None and state.screen.fits_nowhere(streams[0], snapshot, job):
        # nor fenced, with less room: the answer is the one on the snapshot, as below once both failed
        return state.screen.unplaced(snapshot, job, state.policy_for(job)), None
    around = state.decide(fenced_by_reservations(state, snapshot), job, streams[1])
    if around.placed:
        return around, None
    if state.screen is not None and (futures is None or beside is not None):
        blocker = _certain_blocker(state, snapshot, job, end_s, streams[0], beside or _beside)
        if blocker is not None:
            return around, blocker
    anywhere = state.decide(snapshot, job, streams[0])
    if anywhere.allocation is None:
        return anywhere, None
    for held, future in zip(state.held, futures if futures is not None else [h.future for h in state.held],
                            strict=True):
        if Held(held.reservation, held.job, future).delayed_by(anywhere.allocation, end_s):
            return around, held.reservation.job_id
    return anywhere, None


def _certain_blocker(state: CycleState, snapshot: ClusterSnapshot, job: Job, end_s: float, stream: str,
                     beside: Beside) -> str | None:
    """The reserved job that a job of one task, which fits ``snapshot`` but not it fenced, would delay
    wherever the policy put it; ``None`` where that is not certain (the policy is then asked where it goes).

    The policies place each instance on some machine the filters pass, and identical instances one after
    the other: they place them all where the machines' exact room for them adds up to as many. On such a
    machine ``m``, the first reservation ``R`` due before the job may end that holds ``m`` is the one
    delayed, if any is: an instance on ``m`` delays no reservation that does not hold ``m``. And it does
    delay ``R`` whatever GPUs it takes there where ``m`` has no room for it beside ``R``'s place in ``R``'s
    forecast (the forecast holds no more than ``snapshot``; every GPU has memory, so the filters' verdict on
    one machine is feasibility's), which it has not where it has none in a forecast holding no more
    (``beside``). So where every machine with room names the same ``R`` that way, ``R`` blocks the job."""
    screen = state.screen
    needs = needs_of(job)
    if screen is None or len(job.tasks) != 1 or not screen.memory_everywhere:
        return None
    need, count = needs[0]
    machines = np.flatnonzero(screen.stream(stream).passing(snapshot, need)).tolist()
    due = [i for i, h in enumerate(state.held) if end_s > h.reservation.at_s]
    if not due or not 0 < len(machines) <= MOST_CANDIDATES:
        return None
    if count > 1:
        chain, usage = chain_for(need), usage_of(snapshot)
        if sum(chain.room_at(usage, m) for m in machines) < count:
            return None
    blocker = None
    for m in machines:
        first = next((i for i in due if m in _held_machines(state, i)), None)
        if first is None or (blocker is not None and first != blocker):
            return None
        key, forecast = beside(state, first)
        if screen.stream(key).passing(forecast, need)[m]:
            return None
        blocker = first
    return None if blocker is None else state.held[blocker].reservation.job_id


MOST_CANDIDATES = 64
"""Machines with room, up to which :func:`_certain_blocker` looks at them one by one."""


def _held_machines(state: CycleState, i: int) -> set[int]:
    """The machines of reservation ``i``'s place (a reservation held keeps its place)."""
    key = ("held-machines", i)
    found = state.probes.get(key)
    if not isinstance(found, set):
        found = state.probes[key] = state.held[i].reservation.allocation.machines()
    return found


def _beside(state: CycleState, i: int) -> tuple[Hashable, ClusterSnapshot]:
    """Reservation ``i``'s forecast with its own place taken (until a start changes the forecast), and the
    screen's stream of it."""
    held = state.held[i]
    key = ("beside", i)
    kept = state.cache.get(key)
    if isinstance(kept, tuple) and kept[0] is held.future:
        found: ClusterSnapshot = kept[1]
        return key, found
    found = fenced(held.future, [held.reservation.allocation])
    state.cache[key] = (held.future, found)
    return key, found


Beside = Callable[[CycleState, int], tuple[Hashable, ClusterSnapshot]]
"""Reservation ``i``'s forecast with its place taken (or one holding no more), and the screen's stream of it."""


def fenced_by_reservations(state: CycleState, snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """``snapshot`` fenced by every reservation held (the last one worked out is kept: the working state's,
    asked about by job after job while nothing changes)."""
    kept = state.cache.get(FENCED)
    if isinstance(kept, tuple) and kept[0] is snapshot:
        found: ClusterSnapshot = kept[1]
        return found
    found = fenced(snapshot, (h.reservation.allocation for h in state.held))
    state.cache[FENCED] = (snapshot, found)
    return found


def totals_cover(snapshot: ClusterSnapshot, job: Job) -> bool:
    """Necessary for ``job`` to fit: the cluster's free GPU share, CPU and memory cover its totals."""
    layout = snapshot.layout
    gpu, cpu, mem = totals_of(job)
    return (gpu <= len(layout.gpu_machine) * MILLI - int(snapshot.gpu_milli_used.sum())
            and cpu <= int(layout.cpu_cap.sum()) - int(snapshot.cpu_used.sum())
            and mem <= int(layout.mem_cap.sum()) - int(snapshot.mem_used.sum()))


def totals_of(job: Job) -> tuple[int, int, int]:
    """What ``job`` takes in all: milli-GPUs (a whole GPU counted in full), milli-cores and MiB."""
    needs = needs_of(job)
    return (sum((MILLI * n.whole_gpus or n.gpu_milli) * k for n, k in needs),
            sum(n.cpu_milli * k for n, k in needs), sum(n.mem_mib * k for n, k in needs))


def reserve(state: CycleState, pending: PendingJob, job: Job, kind: ReservationKind, until_s: float) -> Held | None:
    """A reservation for ``job`` (``pending``'s, GPU types perhaps narrowed by its quota) at the earliest
    estimated end, no later than ``until_s``, after which it fits; ``None`` if there is none."""
    base = state.working
    if state.settings.preemption:
        for job_id in state.opportunistic:
            if job_id in state.running:
                base = release(base, job_id)
    fences = [h.reservation.allocation for h in state.held]
    future = Future(base, fences, job) if state.screen is not None else None
    snapshot = base
    released: list[str] = []
    for end, job_id, tied in _in_end_order(state, until_s):
        released.append(job_id)
        if future is not None:  # the policy is asked only once the job could fit
            future.release(state.allocation_of(job_id))
            if tied or not future.could_fit():
                continue
            snapshot = future.snapshot()
        else:
            snapshot = release(snapshot, job_id)
            if tied:
                continue  # release every job that ends at the same time first
            if not totals_cover(snapshot, job):
                continue
        decision = state.decide(fenced(snapshot, fences), job, RESERVING)
        if decision.allocation is not None:
            overlap = _Overlap(decision.allocation)
            waits_for = tuple(j for j in released if overlap.with_(state.allocation_of(j)))
            reservation = Reservation(pending.job_id, pending.queue, kind, max(end, state.now), decision.allocation,
                                      waits_for)
            return Held(reservation, job, future.snapshot(released) if future is not None else snapshot)
    return None


def _in_end_order(state: CycleState, until_s: float) -> Iterator[tuple[float, str, bool]]:
    """Each guaranteed job holding its place with an estimated end no later than ``until_s``, in order of
    (end, id): its end, its id, and whether the next one ends at the same time. A job without an estimate
    is never expected to end: nothing is reserved behind it.

    The running jobs' ends come sorted (``placement.scheduling.running_index``), those started in this cycle
    from a heap beside; entries no longer in ``ends`` (preempted) are passed over."""
    ends = state.ends
    merged = heapq.merge(state.ending, sorted(state.started_ending)) if state.started_ending else iter(state.ending)
    held = (entry for entry in merged if ends.get(entry[1]) == entry[0])
    after = next(held, None)
    while after is not None and after[0] <= until_s:
        end, job_id = after
        after = next(held, None)
        yield end, job_id, after is not None and after[0] == end


class _Overlap:
    """Whether a running allocation holds GPUs of a reserved one (machines, where the reservation takes no GPU)."""

    def __init__(self, reserved: Allocation) -> None:
        self.gpus = {g for p in reserved.instances for g in p.gpus}
        self.gpu_machines = frozenset(p.machine for p in reserved.instances if p.gpus)
        self.machines = reserved.machines() if any(not p.gpus for p in reserved.instances) else set()

    def with_(self, running: Allocation) -> bool:
        held = machines_of(running)  # most running jobs share no machine with the place: a set test each
        if self.machines and not self.machines.isdisjoint(held):
            return True
        if self.gpu_machines.isdisjoint(held):
            return False
        return any(g in self.gpus for p in running.instances for g in p.gpus)
