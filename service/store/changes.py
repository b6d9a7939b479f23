"""A write's ops applied in order to the state as committed: their results, the state after, and the
rows to store. Shared by every store, so that they agree on what an op comes to."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from placement import Allocation, ClusterSnapshot, JobMode, Plan, apply, at_generation, release, violations
from service.codec import OrphanedAllocation, allocation_to_json, cluster_to_json
from service.store.codec import (
    allocation_of,
    completion_row,
    dumps,
    end_row,
    event_row,
    job_of,
    pending_row,
    placed_row,
)
from service.store.ops import (
    Cancel,
    Cancelled,
    End,
    Ended,
    Op,
    Place,
    Placed,
    QueuesSet,
    Reason,
    Refused,
    Replace,
    Replaced,
    Result,
    Schedule,
    Scheduled,
    SetQueues,
    Submit,
    Submitted,
)
from service.store.queued import QueueState
from service.store.schema import CANCELLED, EVICTED, PENDING, RUNNING

RunningRow = tuple[str, str, str, int]
"""A running job as stored: its id, demand, allocation and the generation it was placed at."""


@dataclass
class Rows:
    """The rows a write changes, gathered while its ops are applied, then stored kind by kind: the jobs
    placed or submitted (before the ends: a job may be placed and ended in one write), the jobs ended,
    the completions, a new cluster spec with the generation it was loaded at; and for the queue: the
    pending jobs started (before the ends too), sent back to pending, cancelled or upgraded to
    guaranteed, the events of submitted jobs, a new queue configuration, and the change in the number
    of pending jobs."""

    now: float
    inserts: list[dict[str, Any]] = field(default_factory=list)
    ends: list[dict[str, Any]] = field(default_factory=list)
    completions: list[dict[str, Any]] = field(default_factory=list)
    spec: str | None = None
    cluster_generation: int | None = None
    starts: list[dict[str, Any]] = field(default_factory=list)
    requeues: list[dict[str, Any]] = field(default_factory=list)
    cancels: list[dict[str, Any]] = field(default_factory=list)
    upgrades: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    queues: str | None = None
    pending_delta: int = 0

    def changed(self) -> bool:
        return bool(self.inserts or self.ends or self.spec is not None or self.starts or self.requeues
                    or self.cancels or self.queues is not None or self.upgrades)


class State:
    """The state as a write's ops apply, computed only when needed. When the ops were decided ahead of
    the write, their deciders computed the state they come to already (``ahead``): applying each again
    here would double the cost of a placement's snapshot. Until something turns out otherwise, changes
    are only noted (which jobs run, the generation) and ``ahead`` is the state after."""

    def __init__(self, base: ClusterSnapshot, ahead: ClusterSnapshot | None) -> None:
        self._base, self._ahead = base, ahead
        self._noted: list[Allocation | str | None] = []
        self._added: dict[str, Allocation] = {}
        self._gone: set[str] = set()
        self.generation, self.cluster = base.generation, base.cluster

    def holds(self, job_id: str) -> bool:
        """Whether ``job_id`` is running."""
        return job_id in self._added or (job_id in self._base.allocations and job_id not in self._gone)

    def apply(self, allocation: Allocation) -> None:
        if self._ahead is None:
            self._base = apply(self._base, allocation)
        else:
            self._noted.append(allocation)
            self._added[allocation.job_id] = allocation
        self.generation += 1

    def release(self, job_id: str) -> None:
        if self._ahead is None:
            self._base = release(self._base, job_id)
        else:
            self._noted.append(job_id)
            if self._added.pop(job_id, None) is None:
                self._gone.add(job_id)
        self.generation += 1

    def bump(self) -> None:
        """A change the cluster's usage does not show (a job submitted or cancelled, new queues): the
        generation moves all the same, so that a plan decided before it is not written after it."""
        if self._ahead is None:
            self._base = at_generation(self._base, self._base.generation + 1)
        else:
            self._noted.append(None)
        self.generation += 1

    def snapshot(self) -> ClusterSnapshot:
        """The state now, computed; from here on each change is applied as it comes."""
        if self._ahead is not None:
            for change in self._noted:
                if change is None:
                    self._base = at_generation(self._base, self._base.generation + 1)
                else:
                    self._base = release(self._base, change) if isinstance(change, str) else apply(self._base, change)
            self._ahead, self._noted, self._added, self._gone = None, [], {}, set()
        return self._base

    def reset(self, snapshot: ClusterSnapshot) -> None:
        """The state is ``snapshot`` from here on (a new cluster spec)."""
        self._base, self._ahead, self._noted, self._added, self._gone = snapshot, None, [], {}, set()
        self.generation, self.cluster = snapshot.generation, snapshot.cluster

    def after(self) -> ClusterSnapshot:
        """The state after every change: ``ahead`` if each came as decided, else computed."""
        if self._ahead is not None and self._ahead.generation == self.generation:
            return self._ahead
        return self.snapshot()


class Changes:
    """Applies ops one after the other from ``base``, the state as committed, locked for the write.

    ``known``: the job ids among the write's placements that the store holds (running or ended: ids are
    never reused). ``trusted``: ``base`` is the state the ops' decisions were made on, and ``ahead``, if
    given, the state they come to. A placement's decision is kept while the state it meets is the one it
    was made on (the same generation, and every earlier op having come to what its deciders expected);
    from the first op that did not (a job id found taken), and for a placement without a decision, its
    policy decides on the state here. ``running``: the running jobs as stored, read only if a new
    cluster spec is loaded. ``pending``: which of the jobs the write cancels are pending as stored;
    ``queued``: the queues' jobs and configuration as stored, read only by a scheduling pass."""

    def __init__(self, base: ClusterSnapshot, known: set[str], trusted: bool, running: Callable[[], list[RunningRow]],
                 now: float, ahead: ClusterSnapshot | None = None, pending: set[str] | None = None,
                 queued: Callable[[], QueueState] | None = None) -> None:
        self.state = State(base, ahead if trusted else None)
        self.known, self.trusted, self._running = known, trusted, running
        self.pending, self._queued = set(pending or ()), queued
        self.rows = Rows(now)

    def apply(self, op: Op) -> Result:
        if isinstance(op, Place):
            return self._place(op)
        if isinstance(op, End):
            return self._end(op)
        if isinstance(op, Submit):
            return self._submit(op)
        if isinstance(op, Cancel):
            return self._cancel(op)
        if isinstance(op, SetQueues):
            return self._set_queues(op)
        if isinstance(op, Schedule):
            return self._schedule(op)
        return self._replace(op)

    def after(self) -> ClusterSnapshot:
        """The state once every op is applied."""
        return self.state.after()

    def _distrust(self) -> None:
        """An op did not come to what its deciders expected: later decisions are made here."""
        self.trusted = False
        self.state.snapshot()

    def _place(self, op: Place) -> Result:
        job, decision, state = op.job, op.decision, self.state
        if job.job_id in self.known or state.holds(job.job_id):
            if decision is not None and decision.allocation is not None:
                self._distrust()  # later decisions counted on this one's allocation
            return Refused(Reason.EXISTS, f"job {job.job_id!r} already exists (job ids are never reused)")
        if decision is None or not self.trusted or decision.generation != state.generation:
            self._distrust()  # what it decides here, later decisions did not count on
            decision = op.policy(state.snapshot(), job)
        if decision.allocation is None:
            return Refused(Reason.DOES_NOT_FIT, "; ".join(decision.reasons) or f"job {job.job_id!r}: "
                           f"{decision.verdict}", decision)
        self.rows.inserts.append(placed_row(state.cluster, decision, job, op.details, state.generation + 1,
                                            self.rows.now))
        cluster = state.cluster
        state.apply(decision.allocation)
        self.known.add(job.job_id)
        return Placed(decision, cluster)

    def _end(self, op: End) -> Result:
        state = self.state
        if not state.holds(op.job_id):  # the state holds every running job, and only those
            return Refused(Reason.NOT_RUNNING, f"job {op.job_id!r} is not running")
        self.rows.ends.append(end_row(op.job_id, op.state, state.generation + 1, self.rows.now))
        if op.completion is not None:
            self.rows.completions.append(completion_row(op.job_id, op.completion.duration_s, op.completion.usage,
                                                        self.rows.now))
        state.release(op.job_id)
        return Ended(op.job_id, op.state)

    def _replace(self, op: Replace) -> Result:
        stored = {job_id: (demand, allocation, placed) for job_id, demand, allocation, placed in self._running()}
        stored.update({r["job_id"]: (r["demand"], r["allocation"], r["placed_generation"]) for r in self.rows.inserts})
        for ending in self.rows.ends:
            stored.pop(ending["ending"], None)
        cluster = op.cluster
        snapshot, orphans = ClusterSnapshot.empty(cluster), []
        for job_id, (demand, allocation, _) in sorted(stored.items(), key=lambda item: item[1][2]):
            try:
                placed = allocation_of(cluster, job_id, allocation)
                problems = violations(snapshot, job_of(demand), placed)
            except OrphanedAllocation as exc:
                problems = [str(exc)]
            if problems:
                orphans.append((job_id, problems[0]))
            else:
                snapshot = apply(snapshot, placed)
        if orphans and not op.force:
            shown = "; ".join(f"{j}: {p}" for j, p in orphans[:5])
            return Refused(Reason.WOULD_ORPHAN, f"{len(orphans)} running job(s) would not fit the new cluster "
                           f"({shown}); release them first or load it with force")
        generation = self.state.generation + 1
        self.rows.ends += [end_row(job_id, EVICTED, generation, self.rows.now) for job_id, _ in orphans]
        self.rows.spec, self.rows.cluster_generation = json.dumps(cluster_to_json(cluster)), generation
        self._distrust()
        self.state.reset(at_generation(snapshot, generation))
        return Replaced(cluster, tuple(job_id for job_id, _ in orphans), generation)

    def _event(self, job_id: str, state: str, reason: str) -> None:
        self.rows.events.append(event_row(job_id, self.state.generation, state, reason, self.rows.now))

    def _submit(self, op: Submit) -> Result:
        job_id, state = op.job.job_id, self.state
        if job_id in self.known or state.holds(job_id):
            return Refused(Reason.EXISTS, f"job {job_id!r} already exists (job ids are never reused)")
        state.bump()
        self.rows.inserts.append(pending_row(op.job, op.queue, op.mode.value, op.p50_s, op.p90_s, op.details,
                                             state.generation, self.rows.now, op.policy))
        self._event(job_id, PENDING, f"submitted to queue {op.queue!r}")
        self.known.add(job_id)
        self.pending.add(job_id)
        self.rows.pending_delta += 1
        return Submitted(job_id)

    def _cancel(self, op: Cancel) -> Result:
        if op.job_id not in self.pending:
            return Refused(Reason.NOT_PENDING, f"job {op.job_id!r} is not pending")
        self.pending.discard(op.job_id)
        self.state.bump()
        self.rows.cancels.append({"cancelling": op.job_id, "now": self.rows.now, "ended": self.state.generation})
        self._event(op.job_id, CANCELLED, "cancelled")
        self.rows.pending_delta -= 1
        return Cancelled(op.job_id)

    def _set_queues(self, op: SetQueues) -> Result:
        self.state.bump()
        self.rows.queues = dumps(op.spec)
        return QueuesSet(self.state.generation)

    def _schedule(self, op: Schedule) -> Result:
        if self.rows.changed() or self._queued is None:
            raise ValueError("a scheduling pass is written alone, on the queues as stored")
        queued, state = self._queued(), self.state
        plan = op.plan
        if plan is None or not self.trusted or plan.generation != state.generation:
            self._distrust()
            plan = op.decide(state.snapshot(), queued)
        return self._commit(plan, queued)

    def _commit(self, plan: Plan, queued: QueueState) -> Scheduled:
        """``plan``'s preemptions, then its starts, then its upgrades; each job must be as the plan found it."""
        state, rows = self.state, self.rows
        running = {j.job_id for j in queued.running}
        pending = {j.job_id for j in queued.pending}
        for victim in plan.preemptions:
            if victim.job_id not in running or not state.holds(victim.job_id):
                raise RuntimeError(f"a plan preempts {victim.job_id!r}, which is not a running job of a queue")
            state.release(victim.job_id)
            rows.requeues.append({"requeuing": victim.job_id, "ended": state.generation})
            self._event(victim.job_id, PENDING, f"preempted ({victim.reason.value}) for {victim.for_job!r}; "
                                                f"{victim.lost_gpu_s:.0f} GPU-seconds of work lost")
        rows.pending_delta += len(plan.preemptions)
        for start in plan.starts:
            if start.job_id not in pending or state.holds(start.job_id):
                raise RuntimeError(f"a plan starts {start.job_id!r}, which is not pending")
            cluster = state.cluster
            state.apply(start.allocation)
            rows.starts.append({"starting": start.job_id, "now": rows.now, "placed": state.generation,
                                "placed_at_allocation": dumps(allocation_to_json(cluster, start.allocation)),
                                "placed_by": start.decision.policy, "as_mode": start.mode.value})
            borrowing = ", borrowing from its cohort" if start.borrows else ""
            self._event(start.job_id, RUNNING, f"started ({start.mode.value}{borrowing})")
        rows.pending_delta -= len(plan.starts)
        if plan.upgrades:
            state.bump()
            for job_id in plan.upgrades:
                rows.upgrades.append({"upgrading": job_id, "as_mode": JobMode.GUARANTEED.value})
                self._event(job_id, RUNNING, "upgraded to guaranteed: its queue's quota admits it")
        return Scheduled(plan, tuple(s.job_id for s in plan.starts), tuple(p.job_id for p in plan.preemptions))
