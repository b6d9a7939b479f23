"""What a cycle does once every guaranteed job is decided (``placement.scheduling.cycle``, steps 2 and 3).

2. Opportunistic jobs, and guaranteed jobs that have waited over quota (or behind a reservation) long
   enough, are placed on what is left, outside any quota, round robin over queues (each in its order), as
   AntMan runs them on idle GPUs: preempted before anything else, they never delay a guaranteed job.
3. Running opportunistic jobs count as guaranteed once their queue's quota admits them and nobody of their
   queue waits as guaranteed (AntMan's upgrade).

Where the cycle screens, a placement that failed for a job shape is not asked again while the working
state stays the same (one that succeeds changes it).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from placement.model.decision import Decision, Verdict
from placement.scheduling.forecast import WORKING
from placement.scheduling.jobs import JobMode, PendingJob
from placement.scheduling.memo import shape_key
from placement.scheduling.orders import queue_order
from placement.scheduling.plan import WaitReason
from placement.scheduling.resources import demand_of
from placement.scheduling.state import CycleState


def place_opportunistic(state: CycleState, jobs: list[PendingJob]) -> None:
    """Place opportunistic jobs on what is left, round robin over queues (each in its order)."""
    lines = [deque(queue_order(state.queues[name].order)([j for j in jobs if j.queue == name]))
             for name in sorted({j.queue for j in jobs})]
    failed: dict[tuple[tuple[str, ...], str | None, int], Decision] = {}
    while lines:
        for line in list(lines):
            job = line.popleft()
            if not line:
                lines.remove(line)
            key = (shape_key(job.job), job.policy, state.working.generation)
            decision = failed.get(key) if state.screen is not None else None
            if decision is None:
                decision = state.decide(state.working, job.job, WORKING)
            if decision.allocation is not None:
                state.start(job, decision, JobMode.OPPORTUNISTIC)
                continue
            failed[key] = decision
            if job.mode is JobMode.OPPORTUNISTIC:
                reason = WaitReason.CAN_NEVER_FIT if decision.verdict is Verdict.CAN_NEVER_FIT \
                    else WaitReason.DOES_NOT_FIT_NOW
                state.wait(job, reason, decision.reasons)


def upgrade(state: CycleState, pending: Sequence[PendingJob]) -> None:
    """Running opportunistic jobs count as guaranteed once their queue's quota admits them and nobody of
    their queue waits as guaranteed (AntMan's upgrade)."""
    if not state.opportunistic:
        return
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
