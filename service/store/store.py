"""The state store on a real database (SQLAlchemy): SQLite in WAL mode by default, PostgreSQL by URL.

Reads: :meth:`SqlStore.snapshot` is the state as committed. Each process keeps the snapshot of the
generation it last saw; when the database's generation differs (another process wrote), it catches
up: it applies the jobs placed and releases the jobs ended since (``placed_generation`` /
``ended_generation``, both indexed), and reloads every running job only if the cluster spec was
replaced since (``cluster_generation``).

One write path, :meth:`SqlStore.write`: a transaction that locks the generation row (on SQLite, the
database), catches up to the state as committed, applies the ops in order (:mod:`.changes`), stores
the rows they change with one statement per kind of row, moves the generation once, and commits. If
the ops were decided on a generation the database has moved on from, it writes nothing and hands
back the state to decide on again (:class:`~service.store.ops.Moved`). A write is acknowledged only
after its transaction commits.

The transaction runs on the driver's cursor, with statements compiled once from the tables
(:mod:`.statements`): SQLAlchemy's execution machinery costs more per statement than SQLite takes to
run it. On an SQLite
file it runs on a connection the store keeps for it, with no pool checkout, events or transaction
objects between, which cost several times the database work itself (figures in ``docs/service.md``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, overload

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from placement import Cluster, ClusterSnapshot, apply, at_generation, load_cluster, release
from service.codec import cluster_from_json, cluster_to_json
from service.settings import Settings
from service.store.changes import Changes, RunningRow
from service.store.codec import EventRow, JobRow, Json, allocation_of, job_row
from service.store.ops import Cancel, Moved, Op, Place, Schedule, Submit, Written
from service.store.queued import QueueState
from service.store.schema import (
    COMPLETED,
    PENDING,
    RUNNING,
    cluster_spec,
    cluster_state,
    completions,
    job_events,
    jobs,
    migrate,
    queue_spec,
)
from service.store.sqlite import WalCheckpoints, WritersQueue, sqlite_engine, sqlite_file
from service.store.statements import GENERATIONS, WITH_COMPLETION, DriverSql


def make_engine(url: str) -> Engine:
    """An engine for ``url`` (SQLite: :func:`~service.store.sqlite.sqlite_engine`)."""
    if url.startswith("sqlite"):
        return sqlite_engine(url)
    return sa.create_engine(url, pool_pre_ping=True, pool_size=8, max_overflow=8)


def open_store(settings: Settings) -> SqlStore:
    """The store at the configured database; an empty database gets the configured cluster."""
    return SqlStore(make_engine(settings.resolved_database_url()),
                    lambda: load_cluster(settings.cluster, settings.topology or None))


class SqlStore:
    """The state store of the service (see module docstring); a :class:`~service.store.ops.Store`."""

    def __init__(self, engine: Engine, default_cluster: Callable[[], Cluster]) -> None:
        self.engine = engine
        self.fast_commits = engine.dialect.name == "sqlite"
        self._sql = DriverSql(engine)
        self._writers = WritersQueue(engine)
        migrate(engine, self._writers)
        self.checkpoints = WalCheckpoints(engine)
        self._lock = threading.RLock()
        # the write transaction's own connection to an SQLite file (:meth:`_transaction`)
        self._own_fairy = engine.raw_connection() if sqlite_file(engine) else None
        self._own: Any = self._own_fairy.driver_connection if self._own_fairy is not None else None
        with self._writers, engine.begin() as conn:
            now = time.time()
            if conn.execute(sa.select(cluster_state.c.id)).first() is None:
                conn.execute(cluster_state.insert().values(id=1, generation=0, updated_at=now))
            if conn.execute(sa.select(cluster_spec.c.id)).first() is None:
                conn.execute(cluster_spec.insert().values(
                    id=1, cluster=json.dumps(cluster_to_json(default_cluster())), loaded_at=now))
        with self._reading() as cursor:
            generation, _, _ = self._sql.run(cursor, "generations").fetchone()
            self._cache = self._load_in(cursor, int(generation))

    def close(self) -> None:
        """Stop the background work (a last WAL checkpoint on SQLite) and give back the write
        transaction's own connection; the store can still be read and written (through the pool)."""
        with self._lock:
            if self._own_fairy is not None:
                self._own_fairy.close()
                self._own_fairy = self._own = None
        self.checkpoints.stop()

    # reading -------------------------------------------------------------------------------------

    def generation(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(GENERATIONS).one()[0])

    def snapshot(self) -> ClusterSnapshot:
        """The current snapshot (caught up if another process wrote since this one last looked)."""
        with self._lock, self._reading() as cursor:
            generation, cluster_generation, _ = self._sql.run(cursor, "generations").fetchone()
            self._cache = self._state_at(cursor, int(generation), int(cluster_generation))
            return self._cache

    def queued(self) -> tuple[ClusterSnapshot, QueueState]:
        """The state as committed, then the queues' jobs and configuration (see ``Store.queued``)."""
        with self._lock, self._reading() as cursor:
            generation, cluster_generation, _ = self._sql.run(cursor, "generations").fetchone()
            self._cache = self._state_at(cursor, int(generation), int(cluster_generation))
            return self._cache, self._queue_state(cursor)

    def _queue_state(self, cursor: Any) -> QueueState:
        rows = self._sql.run(cursor, "queued").fetchall()
        spec = self._sql.run(cursor, "queue_spec").fetchone()
        return QueueState.of(rows, None if spec is None else spec[0])

    def queue_spec(self) -> Json | None:
        with self.engine.connect() as conn:
            spec = conn.execute(sa.select(queue_spec.c.spec).where(queue_spec.c.id == 1)).scalar()
        return None if spec is None else dict(json.loads(spec))

    def list_jobs(self, states: Sequence[str], queue: str | None, after: str | None, limit: int) -> list[JobRow]:
        query = WITH_COMPLETION
        if states:
            query = query.where(jobs.c.state.in_(list(states)))
        if queue is not None:
            query = query.where(jobs.c.queue == queue)
        if after is not None:
            query = query.where(jobs.c.job_id > after)
        with self.engine.connect() as conn:
            return [job_row(r) for r in conn.execute(query.order_by(jobs.c.job_id).limit(limit)).all()]

    def pending_by_queue(self) -> dict[str, int]:
        query = sa.select(jobs.c.queue, sa.func.count()).where(jobs.c.state == PENDING).group_by(jobs.c.queue)
        with self.engine.connect() as conn:
            return {str(q): int(n) for q, n in conn.execute(query).all()}

    def events(self, job_id: str, after: int = 0) -> list[EventRow]:
        query = sa.select(job_events).where(job_events.c.job_id == job_id, job_events.c.id > after) \
            .order_by(job_events.c.id)
        with self.engine.connect() as conn:
            return [EventRow(int(r.id), r.job_id, int(r.generation), r.state, r.reason, float(r.at))
                    for r in conn.execute(query).all()]

    def cached(self) -> ClusterSnapshot:
        """The snapshot this process last saw (no database read)."""
        return self._cache

    def exists(self, job_id: str) -> bool:
        with self.engine.connect() as conn:
            return conn.execute(sa.select(jobs.c.job_id).where(jobs.c.job_id == job_id)).first() is not None

    def job(self, job_id: str) -> JobRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(WITH_COMPLETION.where(jobs.c.job_id == job_id)).first()
        return None if row is None else job_row(row)

    def completions(self, newest: int | None = None) -> list[JobRow]:
        """Every completed job with its observed duration and usage (for retraining), oldest first; with
        ``newest``, the ``newest`` most recently ended (read backwards along the index on the generation
        jobs ended at, not by sorting every completion)."""
        if newest is None:
            query = WITH_COMPLETION.where(completions.c.job_id.is_not(None)).order_by(completions.c.completed_at)
            with self.engine.connect() as conn:
                return [job_row(r) for r in conn.execute(query).all()]
        query = WITH_COMPLETION.where(jobs.c.state == COMPLETED, completions.c.job_id.is_not(None)) \
            .order_by(jobs.c.ended_generation.desc(), completions.c.completed_at.desc()).limit(newest)
        with self.engine.connect() as conn:
            return [job_row(r) for r in reversed(conn.execute(query).all())]

    @contextmanager
    def _reading(self) -> Iterator[Any]:
        with self.engine.connect() as conn:
            cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
            try:
                yield cursor
            finally:
                cursor.close()

    def _state_at(self, cursor: Any, generation: int, cluster_generation: int) -> ClusterSnapshot:
        """The state at ``generation``, read on ``cursor``: the snapshot this process holds, caught up with
        the jobs other processes placed or ended since; loaded in full if the cluster spec changed since."""
        held = self._cache
        if held.generation == generation:
            return held
        if cluster_generation > held.generation or generation < held.generation:
            return self._load_in(cursor, generation)
        base, since = held, held.generation
        for job_id, state, allocation, placed in self._sql.run(cursor, "changed", {"since": since}).fetchall():
            running = job_id in base.allocations
            if state == RUNNING and running and placed > since:  # preempted and started again since
                base, running = release(base, job_id), False
            if state == RUNNING and not running:
                base = apply(base, allocation_of(base.cluster, job_id, allocation))
            elif state != RUNNING and running:
                base = release(base, job_id)
        return at_generation(base, generation)

    def _load_in(self, cursor: Any, generation: int) -> ClusterSnapshot:
        cluster = cluster_from_json(json.loads(self._sql.run(cursor, "spec").fetchone()[0]))
        snapshot = ClusterSnapshot.empty(cluster)
        for job_id, allocation in self._sql.run(cursor, "running").fetchall():
            snapshot = apply(snapshot, allocation_of(cluster, job_id, allocation))
        return at_generation(snapshot, generation)

    # writing -------------------------------------------------------------------------------------

    @overload
    def write(self, ops: Sequence[Op], decided_on: None = None, comes_to: None = None) -> Written: ...

    @overload
    def write(self, ops: Sequence[Op], decided_on: int, comes_to: ClusterSnapshot | None = None) -> Written | Moved: ...

    def write(self, ops: Sequence[Op], decided_on: int | None = None,
              comes_to: ClusterSnapshot | None = None) -> Written | Moved:
        """Apply ``ops`` in one transaction (see :meth:`service.store.ops.Store.write`)."""
        with self._lock:
            with self._transaction() as cursor:
                generation, cluster_generation, pending = self._sql.run(cursor, "generations_locked").fetchone()
                base = self._state_at(cursor, int(generation), int(cluster_generation))
                if decided_on is not None and base.generation != decided_on:
                    outcome: Written | Moved = Moved(base)
                else:
                    outcome = self._apply(cursor, base, ops, decided_on is not None, comes_to, int(pending))
            self._cache = outcome.snapshot  # once committed
        return outcome

    def _apply(self, cursor: Any, base: ClusterSnapshot, ops: Sequence[Op], trusted: bool,
               ahead: ClusterSnapshot | None, pending: int) -> Written:
        sql = self._sql
        wanted = [op.job.job_id for op in ops if isinstance(op, Place | Submit)]
        cancelling = [op.job_id for op in ops if isinstance(op, Cancel)]

        def running() -> list[RunningRow]:
            return [tuple(row) for row in sql.run(cursor, "running_jobs").fetchall()]

        changes = Changes(base, sql.existing(cursor, wanted) if wanted else set(), trusted, running, time.time(),
                          ahead, sql.existing(cursor, cancelling, PENDING) if cancelling else set(),
                          (lambda: self._queue_state(cursor)) if any(isinstance(op, Schedule) for op in ops) else None)
        results = [changes.apply(op) for op in ops]
        rows, after = changes.rows, changes.after()
        if rows.inserts:
            sql.many(cursor, "insert_job", rows.inserts)
        for name, changed in (("start", rows.starts), ("requeue", rows.requeues), ("cancel", rows.cancels),
                              ("upgrade", rows.upgrades)):
            # a row not as the write found it: the state and the jobs table disagree, store nothing
            if changed and sql.many(cursor, name, changed) != len(changed):
                raise RuntimeError(f"state store out of step: {len(changed)} job(s) to {name}, fewer found as expected")
        if rows.events:
            sql.many(cursor, "event", rows.events)
        if rows.ends:
            sql.many(cursor, "end_event", rows.ends)
            ended = sql.many(cursor, "end", rows.ends)
            if ended != len(rows.ends):  # the snapshot and the jobs table disagree: store nothing
                raise RuntimeError(f"state store out of step: {len(rows.ends)} running job(s) to end, "
                                   f"{ended} found running in the database")
        if rows.queues is not None:
            sql.run(cursor, "drop_queue_spec")
            sql.run(cursor, "set_queue_spec", {"queues": rows.queues, "now": rows.now})
        if rows.completions:
            sql.many(cursor, "complete", rows.completions)
        if rows.spec is not None:
            sql.run(cursor, "set_spec", {"spec": rows.spec, "now": rows.now})
            sql.run(cursor, "set_cluster_generation", {"loaded": rows.cluster_generation})
        pending += rows.pending_delta
        if after.generation != base.generation:
            sql.run(cursor, "set_generation", {"next": after.generation, "now": rows.now, "waiting": pending})
        return Written(results, after, pending)

    @contextmanager
    def _transaction(self) -> Iterator[Any]:
        """A driver cursor in a write transaction (writers of one SQLite file queue for it), committed
        if the block ends without an exception."""
        own = self._own
        if own is None:
            with self._writers, self.engine.begin() as conn:
                cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
                try:
                    yield cursor
                finally:
                    cursor.close()
            return
        with self._writers:
            cursor = own.cursor()
            try:
                cursor.execute("BEGIN IMMEDIATE")
                yield cursor
                own.commit()
            except BaseException:
                own.rollback()
                raise
            finally:
                cursor.close()
