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

The transaction runs on the driver's cursor, with statements compiled once from the tables:
SQLAlchemy's execution machinery costs more per statement than SQLite takes to run it. On an SQLite
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

_GENERATIONS = sa.select(cluster_state.c.generation, cluster_state.c.cluster_generation,
                         cluster_state.c.pending).where(cluster_state.c.id == 1)
_QUEUED = sa.select(jobs.c.job_id, jobs.c.state, jobs.c.demand, jobs.c.queue, jobs.c.priority, jobs.c.mode,
                    jobs.c.submitted_at, jobs.c.placed_at, jobs.c.p50_s, jobs.c.p90_s, jobs.c.requested_policy
                    ).where(sa.or_(
                        jobs.c.state == PENDING, sa.and_(jobs.c.state == RUNNING, jobs.c.queue.is_not(None))))
_EVENT_COLUMNS = ("job_id", "generation", "state", "reason", "at")
_WITH_COMPLETION = sa.select(jobs, completions.c.duration_s, completions.c.usage, completions.c.completed_at) \
    .outerjoin(completions, completions.c.job_id == jobs.c.job_id)
_STATEMENTS: dict[str, Any] = {
    "generations": _GENERATIONS,
    "generations_locked": _GENERATIONS.with_for_update(),
    "changed": sa.select(jobs.c.job_id, jobs.c.state, jobs.c.allocation, jobs.c.placed_generation).where(sa.or_(
        jobs.c.placed_generation > sa.bindparam("since"), jobs.c.ended_generation > sa.bindparam("since"))),
    "spec": sa.select(cluster_spec.c.cluster).where(cluster_spec.c.id == 1),
    "running": sa.select(jobs.c.job_id, jobs.c.allocation).where(jobs.c.state == RUNNING)
    .order_by(jobs.c.placed_generation),
    "running_jobs": sa.select(jobs.c.job_id, jobs.c.demand, jobs.c.allocation, jobs.c.placed_generation)
    .where(jobs.c.state == RUNNING),
    "insert_job": jobs.insert(),
    "end": jobs.update().where(jobs.c.job_id == sa.bindparam("ending"), jobs.c.state == RUNNING)
    .values(state=sa.bindparam("new_state"), ended_at=sa.bindparam("now"), ended_generation=sa.bindparam("ended")),
    "complete": completions.insert(),
    # a submitted job's end is one of its events; a job placed directly has none
    "end_event": job_events.insert().from_select(list(_EVENT_COLUMNS), sa.select(
        jobs.c.job_id, sa.cast(sa.bindparam("ended"), sa.BigInteger), sa.cast(sa.bindparam("new_state"), sa.String),
        sa.literal("ended"), sa.cast(sa.bindparam("now"), sa.Float)).where(
            jobs.c.job_id == sa.bindparam("ending"), jobs.c.queue.is_not(None))),
    # (bound names differ from the columns they set: SQLAlchemy keeps those for itself)
    "start": jobs.update().where(jobs.c.job_id == sa.bindparam("starting"), jobs.c.state == PENDING).values(
        state=RUNNING, allocation=sa.bindparam("placed_at_allocation"), policy=sa.bindparam("placed_by"),
        placed_generation=sa.bindparam("placed"), placed_at=sa.bindparam("now"), mode=sa.bindparam("as_mode")),
    "requeue": jobs.update().where(jobs.c.job_id == sa.bindparam("requeuing"), jobs.c.state == RUNNING).values(
        state=PENDING, allocation="null", ended_generation=sa.bindparam("ended")),
    "cancel": jobs.update().where(jobs.c.job_id == sa.bindparam("cancelling"), jobs.c.state == PENDING).values(
        state="cancelled", ended_at=sa.bindparam("now"), ended_generation=sa.bindparam("ended")),
    "upgrade": jobs.update().where(jobs.c.job_id == sa.bindparam("upgrading"), jobs.c.state == RUNNING).values(
        mode=sa.bindparam("as_mode")),
    "event": (job_events.insert(), _EVENT_COLUMNS),
    "queued": _QUEUED,
    "queue_spec": sa.select(queue_spec.c.spec).where(queue_spec.c.id == 1),
    "drop_queue_spec": queue_spec.delete().where(queue_spec.c.id == 1),
    "set_queue_spec": queue_spec.insert().values(id=1, spec=sa.bindparam("queues"), loaded_at=sa.bindparam("now")),
    "set_generation": cluster_state.update().where(cluster_state.c.id == 1)
    .values(generation=sa.bindparam("next"), updated_at=sa.bindparam("now"), pending=sa.bindparam("waiting")),
    "set_cluster_generation": cluster_state.update().where(cluster_state.c.id == 1)
    .values(cluster_generation=sa.bindparam("loaded")),
    "set_spec": cluster_spec.update().where(cluster_spec.c.id == 1)
    .values(cluster=sa.bindparam("spec"), loaded_at=sa.bindparam("now")),
}
Statement = tuple[str, dict[str, Any]]


class DriverSql:
    """The store's statements compiled once for the engine's dialect, run on the driver's cursor. Both
    drivers take named parameters as dicts."""

    def __init__(self, engine: Engine) -> None:
        dialect = engine.dialect
        if dialect.paramstyle not in ("named", "pyformat"):
            raise ValueError(f"the state store needs a driver with named parameters, not {dialect.paramstyle!r}")
        self._placeholder = ":{}" if dialect.paramstyle == "named" else "%({})s"
        self.statements: dict[str, Statement] = {}
        for name, given in _STATEMENTS.items():
            statement, keys = given if isinstance(given, tuple) else (given, None)
            done = statement.compile(dialect=dialect, column_keys=list(keys) if keys else None)
            self.statements[name] = str(done), {k: v for k, v in done.params.items() if v is not None}

    def run(self, cursor: Any, name: str, params: dict[str, Any] | None = None) -> Any:
        text, bound = self.statements[name]
        cursor.execute(text, {**bound, **(params or {})})
        return cursor

    def many(self, cursor: Any, name: str, rows: list[dict[str, Any]]) -> int:
        """Run statement ``name`` once per row; the number of rows it changed in all."""
        text, bound = self.statements[name]
        cursor.executemany(text, [{**bound, **row} for row in rows])
        return int(cursor.rowcount)

    def existing(self, cursor: Any, ids: list[str], state: str | None = None) -> set[str]:
        """Which of ``ids`` the jobs table holds (in ``state``, if given)."""
        marks = ", ".join(self._placeholder.format(f"id{k}") for k in range(len(ids)))
        params = {f"id{k}": v for k, v in enumerate(ids)}
        where = ""
        if state is not None:
            where, params["state"] = f" AND state = {self._placeholder.format('state')}", state
        cursor.execute(f"SELECT job_id FROM jobs WHERE job_id IN ({marks}){where}", params)
        return {row[0] for row in cursor.fetchall()}


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
            return int(conn.execute(_GENERATIONS).one()[0])

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
        query = _WITH_COMPLETION
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
            row = conn.execute(_WITH_COMPLETION.where(jobs.c.job_id == job_id)).first()
        return None if row is None else job_row(row)

    def completions(self, newest: int | None = None) -> list[JobRow]:
        """Every completed job with its observed duration and usage (for retraining), oldest first; with
        ``newest``, the ``newest`` most recently ended (read backwards along the index on the generation
        jobs ended at, not by sorting every completion)."""
        if newest is None:
            query = _WITH_COMPLETION.where(completions.c.job_id.is_not(None)).order_by(completions.c.completed_at)
            with self.engine.connect() as conn:
                return [job_row(r) for r in conn.execute(query).all()]
        query = _WITH_COMPLETION.where(jobs.c.state == COMPLETED, completions.c.job_id.is_not(None)) \
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
