"""A write's ops applied in order to the state as committed: their results, the state after, and the
rows to store. Shared by every store, so that they agree on what an op comes to."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from placement import Allocation, ClusterSnapshot, apply, at_generation, release, violations
from service.codec import OrphanedAllocation, cluster_to_json
from service.store.codec import allocation_of, completion_row, end_row, job_of, placed_row
from service.store.ops import End, Ended, Op, Place, Placed, Reason, Refused, Replace, Replaced, Result
from service.store.schema import EVICTED

RunningRow = tuple[str, str, str, int]
"""A running job as stored: its id, demand, allocation and the generation it was placed at."""


@dataclass
class Rows:
    """The rows a write changes, gathered while its ops are applied, then stored kind by kind: the jobs
    placed (before the ends: a job may be placed and ended in one write), the jobs ended, the
    completions, and a new cluster spec with the generation it was loaded at."""

    now: float
    inserts: list[dict[str, Any]] = field(default_factory=list)
    ends: list[dict[str, Any]] = field(default_factory=list)
    completions: list[dict[str, Any]] = field(default_factory=list)
    spec: str | None = None
    cluster_generation: int | None = None


class State:
    """The state as a write's ops apply, computed only when needed. When the ops were decided ahead of
    the write, their deciders computed the state they come to already (``ahead``): applying each again
    here would double the cost of a placement's snapshot. Until something turns out otherwise, changes
    are only noted (which jobs run, the generation) and ``ahead`` is the state after."""

    def __init__(self, base: ClusterSnapshot, ahead: ClusterSnapshot | None) -> None:
        self._base, self._ahead = base, ahead
        self._noted: list[Allocation | str] = []
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

    def snapshot(self) -> ClusterSnapshot:
        """The state now, computed; from here on each change is applied as it comes."""
        if self._ahead is not None:
            for change in self._noted:
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
    cluster spec is loaded."""

    def __init__(self, base: ClusterSnapshot, known: set[str], trusted: bool, running: Callable[[], list[RunningRow]],
                 now: float, ahead: ClusterSnapshot | None = None) -> None:
        self.state = State(base, ahead if trusted else None)
        self.known, self.trusted, self._running = known, trusted, running
        self.rows = Rows(now)

    def apply(self, op: Op) -> Result:
        if isinstance(op, Place):
            return self._place(op)
        if isinstance(op, End):
            return self._end(op)
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
