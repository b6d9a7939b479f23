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

With thousands waiting, most jobs cannot start, and many ask for the same: a cycle decides the jobs of one
class (queue, shape, priority, and between which reservations' times they may end) once while nothing
changes, tells the others of the class the same (``placement.scheduling.memo``), and does not ask the
placement policy for placements the filters already rule out (``placement.scheduling.screen``,
``placement.scheduling.probe``). :func:`plan_cycle` with ``shortcuts=False`` decides every job from
scratch, asking the policy each time: the same plan, for any policy whose placements depend on the
snapshot and the job's shape alone (a learning policy, which learns from the jobs it is asked about, is
asked about fewer).
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import replace

from placement.model.decision import Decision, Verdict
from placement.model.demand import Job
from placement.model.snapshot import Allocation, ClusterSnapshot
from placement.online.policies import OnlinePolicy
from placement.scheduling.forecast import place_around, reserve
from placement.scheduling.jobs import JobMode, PendingJob, RunningJob
from placement.scheduling.memo import Facts, Outcome, facts_of, forget_others, in_order, shape_key, told
from placement.scheduling.opportunistic import place_opportunistic, upgrade
from placement.scheduling.plan import Plan, ReservationKind, WaitReason
from placement.scheduling.preemption import find_victims
from placement.scheduling.queues import QueueSet
from placement.scheduling.resources import TYPE_PREFIX, demand_of, gpu_type_key
from placement.scheduling.screen import NO_SCORE
from placement.scheduling.settings import SchedulingSettings
from placement.scheduling.state import CycleState

Turn = tuple[int, float, int, float, str]
"""When a queue's head goes (``_turn``)."""


def schedule(snapshot: ClusterSnapshot, pending: Sequence[PendingJob], running: Sequence[RunningJob],
             queues: QueueSet, now: float, placement_policy: OnlinePolicy,
             settings: SchedulingSettings | None = None, policies: Mapping[str, OnlinePolicy] | None = None) -> Plan:
    """The plan for this moment: which pending jobs start now and where, whom to preempt, which places to
    reserve, and why every other pending job waits.

    ``running`` are the jobs the scheduler started, each holding its allocation in ``snapshot`` (other
    allocations are left alone, never preempted); ``placement_policy`` decides where a job goes
    (``placement.online_policy(name)``; with ``explain=False`` a job that does not fit gets no reasons), but a
    pending job that names a policy (``PendingJob.policy``) is placed by that one of ``policies``.
    ``ValueError`` for inconsistent input: a running job without an allocation, a pending job that is
    allocated or listed twice, or that names a policy ``policies`` lacks.
    """
    return plan_cycle(snapshot, pending, running, queues, now, placement_policy, settings, policies=policies)


def plan_cycle(snapshot: ClusterSnapshot, pending: Sequence[PendingJob], running: Sequence[RunningJob],
               queues: QueueSet, now: float, placement_policy: OnlinePolicy,
               settings: SchedulingSettings | None = None, *, shortcuts: bool = True,
               policies: Mapping[str, OnlinePolicy] | None = None) -> Plan:
    """:func:`schedule`; ``shortcuts=False`` decides every job from scratch (the module docstring)."""
    state = CycleState.begin(snapshot, running, queues, now, placement_policy, settings or SchedulingSettings(),
                             shortcuts)
    try:
        _check_pending(state.allocated, pending)
        _name_policies(state, pending, policies or {})
        known: list[PendingJob] = []
        guaranteed: dict[str, list[PendingJob]] = {}
        opportunistic: list[PendingJob] = []
        for job in pending:  # one pass: thousands wait
            if job.queue not in queues.queues:
                state.wait(job, WaitReason.UNKNOWN_QUEUE, (f"queues: {', '.join(queues.queues)}",))
                continue
            known.append(job)
            if job.mode is JobMode.GUARANTEED:
                guaranteed.setdefault(job.queue, []).append(job)
            else:
                opportunistic.append(job)
        late = _guaranteed(state, guaranteed)
        place_opportunistic(state, opportunistic + late)
        upgrade(state, known)
        return state.plan()
    finally:
        if state.screen is not None:
            state.screen.close()
        forget_others(pending, running)


def _check_pending(allocated: dict[str, Allocation], pending: Sequence[PendingJob]) -> None:
    """``ValueError`` naming the first pending job listed twice or already allocated (``allocated``: the
    snapshot's allocations; sets first, the error's search only when there is one)."""
    ids = {j.job.job_id for j in pending}
    if len(ids) == len(pending) and ids.isdisjoint(allocated):
        return
    seen: set[str] = set()
    for job in pending:
        if job.job_id in seen or job.job_id in allocated:
            raise ValueError(f"pending job {job.job_id!r} is listed twice or already allocated")
        seen.add(job.job_id)


def _name_policies(state: CycleState, pending: Sequence[PendingJob], policies: Mapping[str, OnlinePolicy]) -> None:
    """Note which pending jobs name a policy of their own; ``ValueError`` naming a job whose policy is unknown."""
    named = {j.job_id: j.policy for j in pending if j.policy is not None}
    if not named:
        return
    missing = next(((job_id, name) for job_id, name in named.items() if name not in policies), None)
    if missing is not None:
        raise ValueError(f"pending job {missing[0]!r} names the placement policy {missing[1]!r}, which the cycle "
                         f"was not given (given: {', '.join(sorted(policies)) or 'none'})")
    state.policies, state.policy_of = policies, named


def _guaranteed(state: CycleState, jobs: dict[str, list[PendingJob]]) -> list[PendingJob]:
    """Decide every guaranteed job (``jobs`` by queue); returns those that may try opportunistically.

    The queue whose head goes first is found among all heads; its jobs then go one after the other while
    each next head still goes before every other queue's (which do not move while the book does not)."""
    lines: dict[str, list[Facts]] = {}
    for name in sorted(jobs):
        lines[name] = in_order(name, state.queues[name].order, [facts_of(j) for j in jobs[name]])
    taken = dict.fromkeys(lines, 0)
    heads_reserved: set[str] = set()
    late: list[PendingJob] = []
    shares: dict[tuple[int, str, int], tuple[int, float]] = {}
    turns = {name: _turn(state, line[0], shares) for name, line in lines.items()}
    patience = state.settings.opportunistic_after_s
    while turns:
        name = min(turns, key=turns.__getitem__)
        others = [turn for queue, turn in turns.items() if queue != name]
        bound = min(others) if others else None
        line, i, book_version = lines[name], taken[name], state.book.version
        # the queue's shares while the book stays, and the bound in two parts: no turn made per job to compare
        queue_shares: dict[int, tuple[int, float]] = {}
        parts = (bound[:2], bound[2:]) if bound is not None else None
        while True:
            facts = line[i]
            i += 1
            reason = _decide(state, facts, heads_reserved)
            if reason in _LATE:
                # one sum for both: the time it is late from is then always after a time it is not late at
                patient_until = facts.pending.submit_s + patience
                if state.now >= patient_until:
                    late.append(facts.pending)
                elif patient_until < state.patience_ends:  # a pass then may start it opportunistically: wake one
                    state.patience_ends = patient_until
            if state.book.version != book_version:  # every head's turn may have moved
                taken[name] = i
                turns = {n: _turn(state, lines[n][taken[n]], shares) for n in turns if taken[n] < len(lines[n])}
                break
            if i == len(line):
                taken[name] = i
                del turns[name]
                break
            facts = line[i]
            share = queue_shares.get(facts.shape)
            if share is None:
                share = queue_shares[facts.shape] = _share(state, facts, shares)
            if parts is not None and (share, facts.turn) > parts:
                taken[name] = i
                turns[name] = share + facts.turn
                break
    return late


_LATE = (WaitReason.OVER_QUOTA, WaitReason.WOULD_DELAY_RESERVATION)
"""The waits after which a patient guaranteed job may start opportunistically."""


def _turn(state: CycleState, facts: Facts, shares: dict[tuple[int, str, int], tuple[int, float]]) -> Turn:
    """When a job goes, heads of the queues compared: within its guarantee first, else by the borrowed share
    it would have (:func:`_share`); then priority, submit time, id."""
    return _share(state, facts, shares) + facts.turn


def _share(state: CycleState, facts: Facts, shares: dict[tuple[int, str, int], tuple[int, float]]) -> tuple[int, float]:
    """The first two parts of the job's turn: (0, 0.0) within its queue's guarantee, else (1, the borrowed share
    it would have); ``shares`` keeps them per book state and job shape."""
    queue = facts.pending.queue
    key = (state.book.version, queue, facts.shape)
    found = shares.get(key)
    if found is None:
        demand = facts.demand
        found = shares[key] = ((0, 0.0) if state.book.within_guarantee(queue, demand)
                               else (1, state.book.borrowed_share(queue, demand)))
    return found


def _decide(state: CycleState, facts: Facts, heads_reserved: set[str]) -> WaitReason | None:
    """Start the job if it can, else record why it waits (and return that reason): decided anew, or, where
    the cycle screens, as the last job of its class on the same state was."""
    pending = facts.pending
    if state.screen is None:
        return _decide_anew(state, pending, heads_reserved)
    version = state.version
    outcomes = state.outcomes
    if outcomes.version != version:
        outcomes.start(version, sorted(h.reservation.at_s for h in state.held))
    # whether a reservation could be delayed depends on the job's end only through which are due before it
    key = (pending.queue, facts.shape, bisect_left(outcomes.due, state.now + facts.cautious_s))
    known = outcomes.known.get(key)
    if known is not None:
        job_id = facts.turn[2]
        state.waiting[job_id] = told(job_id, pending.queue, known.reason, known.details, known.at_s)
        return known.reason
    reason = _decide_anew(state, pending, heads_reserved)
    if reason is not None and state.version == version:
        waits = state.waiting[pending.job_id]
        outcomes.known[key] = Outcome(waits.reason, waits.details, waits.reservation_at_s)
    return reason


def _decide_anew(state: CycleState, pending: PendingJob, heads_reserved: set[str]) -> WaitReason | None:
    job, problems = _within_types(state, pending)
    facts = facts_of(pending)
    end_s = state.now + facts.cautious_s
    key = (state.book.version, pending.queue, facts.shape)  # the same demand on the same book: the same answer
    admission = state.admissions.get(key)
    if admission is None:
        admission = state.admissions[key] = state.book.admission(pending.queue, facts.demand)
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
        decision = Decision(pending.job_id, "", Verdict.UNSCHEDULABLE_NOW, state.working.generation, score=NO_SCORE)
        blocker = None
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
    # Not a change later decisions see: a job of the same class would have come here first and taken the
    # head's try; another may take a prescheduled try only where the head's, without a horizon, failed.
    heads_reserved.add(pending.queue)
    held = None
    if len(state.held) < settings.max_reservations and (head or settings.prescheduling_horizon_s > 0):
        kind = ReservationKind.HEAD if head else ReservationKind.PRESCHEDULED
        held = reserve(state, pending, job, kind, math.inf if head else state.now + settings.prescheduling_horizon_s)
    if held is None:
        state.wait(pending, WaitReason.DOES_NOT_FIT_NOW, decision.reasons)
        return WaitReason.DOES_NOT_FIT_NOW
    state.hold(held)
    at = held.reservation.at_s
    waits = ", ".join(held.reservation.waits_for) or "nobody"
    state.wait(pending, WaitReason.RESERVED, (f"reserved from {at:g} s, after {waits}", *decision.reasons), at)
    return WaitReason.RESERVED


def _place(state: CycleState, job: Job, end_s: float) -> tuple[Decision, str | None]:
    """``place_around`` the reservations, remembering failures: an identical job fails the same way."""
    key = (shape_key(job), state.policy_of.get(job.job_id), state.working.generation, len(state.held))
    failed = state.failed.get(key)
    if failed is not None:  # screened, the failure's job id is not read: kept as it is
        return (failed if state.screen is not None else replace(failed, job_id=job.job_id)), None
    decision, blocker = place_around(state, state.working, job, end_s)
    if decision.allocation is None and blocker is None:
        state.failed[key] = decision
    return decision, blocker


def _within_types(state: CycleState, pending: PendingJob) -> tuple[Job | None, tuple[str, ...]]:
    """``pending``'s job with each GPU task's types narrowed to those its queue's quota still admits
    (``None`` and why when none is left); the job itself when its queue sets no quota per GPU type."""
    job = pending.job
    typed = state.typed.get(pending.queue)
    if typed is None:
        guarantee = state.queues[pending.queue].guarantee
        typed = state.typed[pending.queue] = any(k.startswith(TYPE_PREFIX) for k in guarantee)
    if not typed or job.gpus <= 0:
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
