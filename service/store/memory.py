"""The state store in memory, for tests and tools that need no database: the same ops, the same
results, the same job rows as :class:`~service.store.store.SqlStore`, behind a lock."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, overload

from placement import Cluster, ClusterSnapshot
from service.store.changes import Changes, RunningRow
from service.store.codec import JobRow, job_row
from service.store.ops import Moved, Op, Place, Written
from service.store.schema import RUNNING


class MemoryStore:
    """A :class:`~service.store.ops.Store` whose rows are dicts; a write that raises changes nothing."""

    fast_commits = True

    def __init__(self, cluster: Cluster) -> None:
        self._state = ClusterSnapshot.empty(cluster)
        self._jobs: dict[str, dict[str, Any]] = {}
        self._completions: dict[str, dict[str, Any]] = {}
        self.spec: str | None = None
        """The cluster spec last loaded through a write, as stored (JSON)."""
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

    def completions(self) -> list[JobRow]:
        with self._lock:
            done = sorted(self._completions.values(), key=lambda c: float(c["completed_at"]))
            return [self._row(self._jobs[c["job_id"]]) for c in done]

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
            wanted = {op.job.job_id for op in ops if isinstance(op, Place)}
            changes = Changes(base, wanted & self._jobs.keys(), decided_on is not None, self._running, time.time(),
                              comes_to)
            results = [changes.apply(op) for op in ops]
            self._store(changes)
            return Written(results, self._state)

    def _running(self) -> list[RunningRow]:
        return [(j, r["demand"], r["allocation"], r["placed_generation"]) for j, r in self._jobs.items()
                if r["state"] == RUNNING]

    def _store(self, changes: Changes) -> None:
        rows = changes.rows
        for row in rows.inserts:
            self._jobs[row["job_id"]] = dict(row)
        for end in rows.ends:
            row = self._jobs[end["ending"]]
            assert row["state"] == RUNNING, f"state store out of step: {end['ending']} is not running"
            row.update(state=end["new_state"], ended_at=end["now"], ended_generation=end["ended"])
        for completion in rows.completions:
            self._completions[completion["job_id"]] = dict(completion)
        if rows.spec is not None:
            self.spec = rows.spec
        self._state = changes.after()

    def _row(self, row: dict[str, Any]) -> JobRow:
        completion = self._completions.get(row["job_id"], {})
        return job_row(SimpleNamespace(**row, duration_s=completion.get("duration_s"), usage=completion.get("usage"),
                                       completed_at=completion.get("completed_at")))
