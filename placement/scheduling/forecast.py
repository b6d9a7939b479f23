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
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from placement.model.decision import Decision
from placement.model.demand import Job
from placement.model.feasibility import need_of
from placement.model.snapshot import MILLI, Allocation, ClusterSnapshot, release
from placement.scheduling.jobs import JobMode, PendingJob
from placement.scheduling.plan import Reservation, ReservationKind
from placement.scheduling.state import CycleState, Held


def fenced(snapshot: ClusterSnapshot, allocations: Iterable[Allocation]) -> ClusterSnapshot:
    """``snapshot`` with ``allocations``' GPUs, CPU and memory also taken, capped at capacity (a fence, not
    an allocation: it keeps others off, and its owners are not in ``allocations``)."""
    layout = snapshot.layout
    gpu, gpu_mem = snapshot.gpu_milli_used.copy(), snapshot.gpu_mem_used.copy()
    cpu, mem = snapshot.cpu_used.copy(), snapshot.mem_used.copy()
    for allocation in allocations:
        for p in allocation.instances:
            for g in p.gpus:
                gpu[g] += p.gpu_milli
                gpu_mem[g] += p.gpu_mem_mib
            cpu[p.machine] += p.cpu_milli
            mem[p.machine] += p.mem_mib
    arrays = (np.minimum(gpu, MILLI), np.minimum(gpu_mem, layout.gpu_mem_cap), np.minimum(cpu, layout.cpu_cap),
              np.minimum(mem, layout.mem_cap))
    for array in arrays:
        array.flags.writeable = False
    return ClusterSnapshot(snapshot.cluster, snapshot.generation, *arrays, snapshot.allocations)


def place_around(state: CycleState, snapshot: ClusterSnapshot, job: Job, end_s: float,
                 released: Iterable[str] = ()) -> tuple[Decision, str | None]:
    """``job`` decided on ``snapshot`` so that no reservation is delayed, and the reserved job in its way
    when it fits only by delaying one (``released``: running jobs gone in this attempt, by preemption)."""
    if not state.held:
        return state.place(snapshot, job), None
    around = state.place(fenced(snapshot, (h.reservation.allocation for h in state.held)), job)
    if around.placed:
        return around, None
    anywhere = state.place(snapshot, job)
    if anywhere.allocation is None:
        return anywhere, None
    gone = tuple(released)
    for held in state.held:
        future = held.future
        for job_id in gone:
            future = release(future, job_id)
        if Held(held.reservation, held.job, future).delayed_by(anywhere.allocation, end_s):
            return around, held.reservation.job_id
    return anywhere, None


def totals_cover(snapshot: ClusterSnapshot, job: Job) -> bool:
    """Necessary for ``job`` to fit: the cluster's free GPU share, CPU and memory cover its totals."""
    layout = snapshot.layout
    needs = [(need_of(t), t.instances) for t in job.tasks]
    gpu = sum((MILLI * n.whole_gpus or n.gpu_milli) * k for n, k in needs)
    cpu = sum(n.cpu_milli * k for n, k in needs)
    mem = sum(n.mem_mib * k for n, k in needs)
    return (gpu <= len(layout.gpu_machine) * MILLI - int(snapshot.gpu_milli_used.sum())
            and cpu <= int(layout.cpu_cap.sum()) - int(snapshot.cpu_used.sum())
            and mem <= int(layout.mem_cap.sum()) - int(snapshot.mem_used.sum()))


def reserve(state: CycleState, pending: PendingJob, job: Job, kind: ReservationKind, until_s: float) -> Held | None:
    """A reservation for ``job`` (``pending``'s, GPU types perhaps narrowed by its quota) at the earliest
    estimated end, no later than ``until_s``, after which it fits; ``None`` if there is none."""
    future = state.working
    if state.settings.preemption:
        for job_id, running in state.running.items():
            if running.mode is JobMode.OPPORTUNISTIC:
                future = release(future, job_id)
    fences = [h.reservation.allocation for h in state.held]
    # a job without an estimate is never expected to end: nothing is reserved behind it
    ending = sorted((end, job_id) for job_id, end in state.ends.items() if end <= until_s and math.isfinite(end))
    released: list[str] = []
    for i, (end, job_id) in enumerate(ending):
        future = release(future, job_id)
        released.append(job_id)
        if i + 1 < len(ending) and ending[i + 1][0] == end:
            continue  # release every job that ends at the same time first
        if not totals_cover(future, job):
            continue
        decision = state.place(fenced(future, fences), job)
        if decision.allocation is not None:
            waits_for = tuple(j for j in released if _overlap(state.working.allocations[j], decision.allocation))
            reservation = Reservation(pending.job_id, pending.queue, kind, max(end, state.now), decision.allocation,
                                      waits_for)
            return Held(reservation, job, future)
    return None


def _overlap(running: Allocation, reserved: Allocation) -> bool:
    """Whether ``running`` holds GPUs of ``reserved`` (machines, where the reservation takes no GPU)."""
    gpus = {g for p in reserved.instances for g in p.gpus}
    if any(not p.gpus for p in reserved.instances) and running.machines() & reserved.machines():
        return True
    return any(g in gpus for p in running.instances for g in p.gpus)
