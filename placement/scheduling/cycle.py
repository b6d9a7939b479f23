"""One scheduling cycle: :func:`schedule` turns the cluster's state, the pending and running jobs and the
queues into a :class:`~placement.scheduling.plan.Plan`. A pure function: no I/O, no clock (``now`` is a
parameter), the same answer for the same input, for the service and the replay alike.

1. Guaranteed jobs, queue by queue in each queue's order. The next job offered is the head of the queue
   that goes first by (within its guarantee before borrowing; among borrowers the smallest borrowed
   dominant share after the job, ``placement.scheduling.quota``; higher priority; earlier submit; id).
   A job within quota is placed around the reservations held (``placement.scheduling.forecast``); if it
   does not fit, it may preempt (``placement.scheduling.preemption``); if it still cannot start, its
   queue's first such job gets a reservation (``head``) and any other one whose place frees within the
   pre-scheduling horizon a ``prescheduled`` one. Jobs over quota wait; they may still preempt
   lower-priority jobs of their own queue.
2. Opportunistic jobs, and guaranteed jobs that have waited over quota (or behind a reservation) longer
   than ``opportunistic_after_s``: placed on what is left, outside any quota, round robin over queues.
   They are preempted before anything else, so they never delay a guaranteed job.
3. Running opportunistic jobs of queues with nobody waiting become guaranteed where the quota allows.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import replace

from placement.model.decision import Decision, Verdict
from placement.model.demand import Job
from placement.model.snapshot import ClusterSnapshot
from placement.online.policies import OnlinePolicy
from placement.scheduling.forecast import place_around, reserve
from placement.scheduling.jobs import JobMode, PendingJob, RunningJob
from placement.scheduling.orders import queue_order
from placement.scheduling.plan import Plan, ReservationKind, WaitReason
from placement.scheduling.preemption import find_victims
from placement.scheduling.queues import QueueSet
from placement.scheduling.resources import TYPE_PREFIX, demand_of, gpu_type_key
from placement.scheduling.settings import SchedulingSettings
from placement.scheduling.state import CycleState


def schedule(snapshot: ClusterSnapshot, pending: Sequence[PendingJob], running: Sequence[RunningJob],
             queues: QueueSet, now: float, placement_policy: OnlinePolicy,
             settings: SchedulingSettings | None = None) -> Plan:
    """The plan for this moment: which pending jobs start now and where, whom to preempt, which places to
    reserve, and why every other pending job waits.

    ``running`` are the jobs the scheduler started, each holding its allocation in ``snapshot`` (other
    allocations are left alone, never preempted); ``placement_policy`` decides where a job goes
    (``placement.online_policy(name)``; with ``explain=False`` a job that does not fit gets no reasons).
    ``ValueError`` for inconsistent input: a running job without an allocation, a pending job that is
    allocated or listed twice.
    """
    state = CycleState.begin(snapshot, running, queues, now, placement_policy, settings or SchedulingSettings())
    seen: set[str] = set()
    for job in pending:
        if job.job_id in seen or job.job_id in snapshot.allocations:
            raise ValueError(f"pending job {job.job_id!r} is listed twice or already allocated")
        seen.add(job.job_id)
    known = [j for j in pending if j.queue in queues]
    for job in pending:
        if job.queue not in queues:
            state.wait(job, WaitReason.UNKNOWN_QUEUE, (f"queues: {', '.join(queues.queues)}",))
    late = _guaranteed(state, [j for j in known if j.mode is JobMode.GUARANTEED])
    _opportunistic(state, [j for j in known if j.mode is JobMode.OPPORTUNISTIC] + late)
    _upgrade(state, known)
    return state.plan()


def _guaranteed(state: CycleState, jobs: list[PendingJob]) -> list[PendingJob]:
    """Decide every guaranteed job; returns those that may try opportunistically."""
    lines: dict[str, deque[PendingJob]] = {}
    for name in sorted({j.queue for j in jobs}):
        lines[name] = deque(queue_order(state.queues[name].order)([j for j in jobs if j.queue == name]))
    heads_reserved: set[str] = set()
    late = []
    while lines:
        name = min(lines, key=lambda q: _turn(state, lines[q][0]))
        job = lines[name].popleft()
        if not lines[name]:
            del lines[name]
        reason = _decide(state, job, heads_reserved)
        patient = state.now - job.submit_s >= state.settings.opportunistic_after_s
        if patient and reason in (WaitReason.OVER_QUOTA, WaitReason.WOULD_DELAY_RESERVATION):
            late.append(job)
    return late


def _turn(state: CycleState, job: PendingJob) -> tuple[int, float, int, float, str]:
    demand = demand_of(job.job)
    if state.book.within_guarantee(job.queue, demand):
        return (0, 0.0, -job.priority, job.submit_s, job.job_id)
    return (1, state.book.borrowed_share(job.queue, demand), -job.priority, job.submit_s, job.job_id)


def _decide(state: CycleState, pending: PendingJob, heads_reserved: set[str]) -> WaitReason | None:
    """Start ``pending`` if it can, else record why it waits (and return that reason)."""
    job, problems = _within_types(state, pending)
    end_s = state.now + (pending.estimate.cautious_s if not math.isnan(pending.estimate.cautious_s) else math.inf)
    admission = state.book.admission(pending.queue, demand_of(pending.job))
    if job is not None and admission.admitted:
        decision, blocker = _place(state, job, end_s)
        if decision.allocation is not None:
            exact = state.book.admission(pending.queue, demand_of(job, decision.allocation, state.working.layout))
            if exact.admitted:
                state.start(pending, decision, JobMode.GUARANTEED, exact.borrows)
                return None
            problems = exact.problems
        elif decision.verdict is Verdict.CAN_NEVER_FIT:
            state.wait(pending, WaitReason.CAN_NEVER_FIT, decision.reasons)
            return WaitReason.CAN_NEVER_FIT
    else:
        problems = admission.problems + problems
        decision, blocker = Decision(pending.job_id, "", Verdict.UNSCHEDULABLE_NOW, state.working.generation), None
    victims = find_victims(state, pending, job or pending.job, end_s) if state.settings.preemption else None
    if victims is not None:
        for victim, why in victims.chosen:
            state.preempt(victim, why, pending.job_id)
        state.start(pending, victims.decision, JobMode.GUARANTEED, victims.borrows)
        return None
    if problems:
        state.wait(pending, WaitReason.OVER_QUOTA, problems)
        return WaitReason.OVER_QUOTA
    if blocker is not None:
        state.wait(pending, WaitReason.WOULD_DELAY_RESERVATION, (f"it would still run when {blocker} is due",))
        return WaitReason.WOULD_DELAY_RESERVATION
    return _reserve_or_wait(state, pending, job or pending.job, decision, heads_reserved)


def _reserve_or_wait(state: CycleState, pending: PendingJob, job: Job, decision: Decision,
                     heads_reserved: set[str]) -> WaitReason:
    """A reservation for the first job of its queue that waits for capacity, or for any job whose place
    frees within the pre-scheduling horizon; else it waits with the placement's reasons."""
    settings = state.settings
    head = settings.reserve_heads and pending.queue not in heads_reserved
    heads_reserved.add(pending.queue)
    held = None
    if len(state.held) < settings.max_reservations and (head or settings.prescheduling_horizon_s > 0):
        kind = ReservationKind.HEAD if head else ReservationKind.PRESCHEDULED
        held = reserve(state, pending, job, kind, math.inf if head else state.now + settings.prescheduling_horizon_s)
    if held is None:
        state.wait(pending, WaitReason.DOES_NOT_FIT_NOW, decision.reasons)
        return WaitReason.DOES_NOT_FIT_NOW
    state.held.append(held)
    at = held.reservation.at_s
    waits = ", ".join(held.reservation.waits_for) or "nobody"
    state.wait(pending, WaitReason.RESERVED, (f"reserved from {at:g} s, after {waits}", *decision.reasons), at)
    return WaitReason.RESERVED


def _place(state: CycleState, job: Job, end_s: float) -> tuple[Decision, str | None]:
    """``place_around`` the reservations, remembering failures: an identical job fails the same way."""
    key = (tuple(repr(t) for t in job.tasks), state.working.generation, len(state.held))
    failed = state.failed.get(key)
    if failed is not None:
        return replace(failed, job_id=job.job_id), None
    decision, blocker = place_around(state, state.working, job, end_s)
    if decision.allocation is None and blocker is None:
        state.failed[key] = decision
    return decision, blocker


def _within_types(state: CycleState, pending: PendingJob) -> tuple[Job | None, tuple[str, ...]]:
    """``pending``'s job with each GPU task's types narrowed to those its queue's quota still admits
    (``None`` and why when none is left); the job itself when its queue sets no quota per GPU type."""
    queue = state.queues[pending.queue]
    job = pending.job
    if not any(k.startswith(TYPE_PREFIX) for k in queue.guarantee) or job.gpus <= 0:
        return job, ()
    types = state.working.cluster.gpus_by_type()
    allowed = {k[len(TYPE_PREFIX):] for k in state.book.allowed_types(pending.queue, job.gpus,
                                                                      [gpu_type_key(t) for t in types])}
    tasks = []
    for task in job.tasks:
        wanted = task.gpu_types or frozenset(types)
        if task.gpu > 0 and not wanted <= allowed:
            if not wanted & allowed:
                return None, (f"no GPU type it may run on ({', '.join(sorted(wanted))}) has quota left "
                              f"for {job.gpus:g} GPUs",)
            task = replace(task, gpu_types=frozenset(wanted & allowed))
        tasks.append(task)
    return replace(job, tasks=tuple(tasks)), ()


def _opportunistic(state: CycleState, jobs: list[PendingJob]) -> None:
    """Place opportunistic jobs on what is left, round robin over queues (each in its order)."""
    lines = [deque(queue_order(state.queues[name].order)([j for j in jobs if j.queue == name]))
             for name in sorted({j.queue for j in jobs})]
    while lines:
        for line in list(lines):
            job = line.popleft()
            if not line:
                lines.remove(line)
            decision = state.place(state.working, job.job)
            if decision.allocation is not None:
                state.start(job, decision, JobMode.OPPORTUNISTIC)
            elif job.mode is JobMode.OPPORTUNISTIC:
                reason = WaitReason.CAN_NEVER_FIT if decision.verdict is Verdict.CAN_NEVER_FIT \
                    else WaitReason.DOES_NOT_FIT_NOW
                state.wait(job, reason, decision.reasons)


def _upgrade(state: CycleState, pending: Sequence[PendingJob]) -> None:
    """Running opportunistic jobs count as guaranteed once their queue's quota admits them and nobody of
    their queue waits as guaranteed (AntMan's upgrade)."""
    mode_of = {j.job_id: j.mode for j in pending}
    busy = {w.queue for w in state.waiting.values() if mode_of.get(w.job_id) is JobMode.GUARANTEED}
    for job in sorted(state.running.values(), key=lambda j: (j.started_s, j.job_id)):
        if job.mode is not JobMode.OPPORTUNISTIC or job.queue not in state.queues or job.queue in busy:
            continue
        demand = demand_of(job.job, state.working.allocations[job.job_id], state.working.layout)
        if state.book.admission(job.queue, demand).admitted:
            state.book.add(job.queue, demand)
            state.counted.add(job.job_id)
            state.upgrades.append(job.job_id)
