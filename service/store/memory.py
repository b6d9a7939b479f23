"""The state store in memory, for tests and tools that need no database: the same ops, the same
results, the same job rows as :class:`~service.store.store.SqlStore`, behind a lock."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, overload

from placement import Cluster, ClusterSnapshot
from service.store.changes import Changes, RunningRow
from service.store.codec import EventRow, JobRow, Json, job_row
from service.store.ops import Cancel, Moved, Op, Place, Submit, Written
from service.store.queued import QueueState
from service.store.schema import PENDING, RUNNING


class MemoryStore:
    """A :class:`~service.store.ops.Store` whose rows are dicts; a write that raises changes nothing."""

    fast_commits = True

    def __init__(self, cluster: Cluster) -> None:
        self._state = ClusterSnapshot.empty(cluster)
        self._jobs: dict[str, dict[str, Any]] = {}
        self._completions: dict[str, dict[str, Any]] = {}
        self.spec: str | None = None
        """The cluster spec last loaded through a write, as stored (JSON)."""
        self._queues: str | None = None
        self._events: list[EventRow] = []
        self._pending = 0
        self._lock = threading.RLock()

    def snapshot(self) -> ClusterSnapshot:
        return self._state

    def cached(self) -> ClusterSnapshot:
        return self._state

    def generation(self) -> int:
        return self._state.generation

    def exists(self, job_id: str) -> bool:
        return job_id in self._jobs

    def job(self, job_id: str) -> JobRow | None:
        with self._lock:
            row = self._jobs.get(job_id)
            return None if row is None else self._row(row)

    def completions(self, newest: int | None = None) -> list[JobRow]:
        with self._lock:
            done = sorted(self._completions.values(), key=lambda c: float(c["completed_at"]))
            if newest is not None:
                done = done[max(len(done) - newest, 0):]
            return [self._row(self._jobs[c["job_id"]]) for c in done]

    def queued(self) -> tuple[ClusterSnapshot, QueueState]:
        with self._lock:
            return self._state, self._queue_state()

    def _queue_state(self) -> QueueState:
        rows = [(r["job_id"], r["state"], r["demand"], r["queue"], r["priority"], r["mode"], r["submitted_at"],
                 r["placed_at"], r["p50_s"], r["p90_s"], r.get("requested_policy")) for r in self._jobs.values()
                if r["state"] == PENDING or (r["state"] == RUNNING and r["queue"] is not None)]
        return QueueState.of(rows, self._queues)

    def queue_spec(self) -> Json | None:
        with self._lock:
            return None if self._queues is None else dict(json.loads(self._queues))

    def list_jobs(self, states: Sequence[str], queue: str | None, after: str | None, limit: int) -> list[JobRow]:
        with self._lock:
            rows = sorted((r for r in self._jobs.values() if (not states or r["state"] in states)
                           and (queue is None or r["queue"] == queue) and (after is None or r["job_id"] > after)),
                          key=lambda r: str(r["job_id"]))
            return [self._row(r) for r in rows[:limit]]

    def pending_by_queue(self) -> dict[str, int]:
        with self._lock:
            counts: dict[str, int] = {}
            for r in self._jobs.values():
                if r["state"] == PENDING:
                    counts[r["queue"]] = counts.get(r["queue"], 0) + 1
            return counts

    def events(self, job_id: str, after: int = 0) -> list[EventRow]:
        with self._lock:
            return [e for e in self._events if e.job_id == job_id and e.id > after]

    def close(self) -> None:
        pass

    @overload
    def write(self, ops: Sequence[Op], decided_on: None = None, comes_to: None = None) -> Written: ...

    @overload
    def write(self, ops: Sequence[Op], decided_on: int, comes_to: ClusterSnapshot | None = None) -> Written | Moved: ...

    def write(self, ops: Sequence[Op], decided_on: int | None = None,
              comes_to: ClusterSnapshot | None = None) -> Written | Moved:
        with self._lock:
            base = self._state
            if decided_on is not None and base.generation != decided_on:
                return Moved(base)
            wanted = {op.job.job_id for op in ops if isinstance(op, Place | Submit)}
            pending = {op.job_id for op in ops if isinstance(op, Cancel) and op.job_id in self._jobs
                       and self._jobs[op.job_id]["state"] == PENDING}
            changes = Changes(base, wanted & self._jobs.keys(), decided_on is not None, self._running, time.time(),
                              comes_to, pending, self._queue_state)
            results = [changes.apply(op) for op in ops]
            self._store(changes)
            return Written(results, self._state, self._pending)

    def _running(self) -> list[RunningRow]:
        return [(j, r["demand"], r["allocation"], r["placed_generation"]) for j, r in self._jobs.items()
                if r["state"] == RUNNING]

    def _store(self, changes: Changes) -> None:
        rows = changes.rows
        for row in rows.inserts:
            self._jobs[row["job_id"]] = dict(row)
        for start in rows.starts:
            row = self._jobs[start["starting"]]
            assert row["state"] == PENDING, f"state store out of step: {start['starting']} is not pending"
            row.update(state=RUNNING, allocation=start["placed_at_allocation"], policy=start["placed_by"],
                       placed_generation=start["placed"], placed_at=start["now"], mode=start["as_mode"])
        for requeue in rows.requeues:
            row = self._jobs[requeue["requeuing"]]
            assert row["state"] == RUNNING, f"state store out of step: {requeue['requeuing']} is not running"
            row.update(state=PENDING, allocation="null", ended_generation=requeue["ended"],
                       mode=row.get("submitted_mode") or row["mode"])
        for cancel in rows.cancels:
            row = self._jobs[cancel["cancelling"]]
            assert row["state"] == PENDING, f"state store out of step: {cancel['cancelling']} is not pending"
            row.update(state="cancelled", ended_at=cancel["now"], ended_generation=cancel["ended"])
        for upgrade in rows.upgrades:
            self._jobs[upgrade["upgrading"]].update(mode=upgrade["as_mode"])
        for event in rows.events:
            self._event(event)
        for end in rows.ends:
            row = self._jobs[end["ending"]]
            assert row["state"] == RUNNING, f"state store out of step: {end['ending']} is not running"
            if row["queue"] is not None:
                self._event({"job_id": end["ending"], "generation": end["ended"], "state": end["new_state"],
                             "reason": "ended", "at": end["now"]})
            row.update(state=end["new_state"], ended_at=end["now"], ended_generation=end["ended"])
        if rows.queues is not None:
            self._queues = rows.queues
        self._pending += rows.pending_delta
        for completion in rows.completions:
            self._completions[completion["job_id"]] = dict(completion)
        if rows.spec is not None:
            self.spec = rows.spec
        self._state = changes.after()

    def _event(self, event: dict[str, Any]) -> None:
        self._events.append(EventRow(len(self._events) + 1, **event))

    def _row(self, row: dict[str, Any]) -> JobRow:
        completion = self._completions.get(row["job_id"], {})
        return job_row(SimpleNamespace(**row, duration_s=completion.get("duration_s"), usage=completion.get("usage"),
                                       completed_at=completion.get("completed_at")))
