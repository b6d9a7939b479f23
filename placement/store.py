"""Committing decisions: optimistic concurrency on the snapshot generation, and idempotent release.

A policy decides on a snapshot; :meth:`MemoryStore.commit` accepts the decision only if the store is
still at that snapshot's generation (nobody committed in between), so two decisions made on the same
snapshot can never both take the same GPU. :func:`place_and_commit` re-reads and retries on conflict.
The service keeps the same contract in a database (``service``); this store keeps it in memory.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from placement.decision import Decision
from placement.demand import Job
from placement.feasibility import violations
from placement.policies import OnlinePolicy
from placement.snapshot import ClusterSnapshot, apply, release


class CommitStatus(StrEnum):
    COMMITTED = "committed"
    CONFLICT = "conflict"
    """The store moved on since the decision's snapshot: decide again on a fresh one."""
    NOT_PLACED = "not-placed"


class StateStore(Protocol):
    def snapshot(self) -> ClusterSnapshot: ...

    def commit(self, decision: Decision, job: Job) -> CommitStatus: ...

    def release(self, job_id: str) -> bool: ...


@dataclass
class MemoryStore:
    """The current snapshot behind a lock."""

    current: ClusterSnapshot

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def snapshot(self) -> ClusterSnapshot:
        with self._lock:
            return self.current

    def commit(self, decision: Decision, job: Job) -> CommitStatus:
        if decision.allocation is None:
            return CommitStatus.NOT_PLACED
        with self._lock:
            if decision.generation != self.current.generation:
                return CommitStatus.CONFLICT
            problems = violations(self.current, job, decision.allocation)
            if problems:  # same generation means same state: only a bug gets here
                raise RuntimeError(f"refusing an infeasible allocation of {job.job_id}: {problems}")
            self.current = apply(self.current, decision.allocation)
            return CommitStatus.COMMITTED

    def release(self, job_id: str) -> bool:
        """Free ``job_id``'s resources; ``False`` (and no change) if it holds none."""
        with self._lock:
            after = release(self.current, job_id)
            changed = after is not self.current
            self.current = after
            return changed


def place_and_commit(store: StateStore, policy: OnlinePolicy, job: Job, attempts: int = 8,
                     commit: Callable[[Decision, Job], CommitStatus] | None = None) -> tuple[Decision, bool]:
    """Decide on a fresh snapshot and commit (``store.commit``, or ``commit`` for a store that keeps
    more with the decision); on a conflict decide again (at most ``attempts`` times).

    Returns the last decision and whether it was committed.
    """
    decision: Decision | None = None
    for _ in range(attempts):
        decision = policy(store.snapshot(), job)
        status = (commit or store.commit)(decision, job)
        if status is not CommitStatus.CONFLICT:
            return decision, status is CommitStatus.COMMITTED
    assert decision is not None
    return decision, False
