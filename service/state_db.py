"""Cluster state in a real database (SQLAlchemy): SQLite in WAL mode by default, PostgreSQL by URL.

Tables: ``cluster_state`` (one row: the state generation, moved by every change), ``cluster_spec``
(one row: the cluster spec, written only when a spec is loaded), ``jobs`` (every job
placed: its demand, its allocation, its state ``running`` / ``released`` / ``completed`` /
``evicted``, the estimate it was placed with) and ``completions`` (observed duration and usage of
completed jobs, kept for retraining).

Two ways to write, both safe across processes sharing one database; a placement is acknowledged
only after its transaction commits, and every change moves the generation.

* :meth:`SqlStore.apply_ops` (the service's writer): lock the generation row, decide and store a batch
  of placements and releases on the state as committed, move the generation once.
* :meth:`SqlStore.commit` (a decision made elsewhere, e.g. the Kubernetes bind): optimistic; a decision
  made on generation g is committed by ``UPDATE cluster_state SET generation = g + 1 WHERE generation
  = g`` in the same transaction as the job's row. If another writer moved the generation, the update
  touches no row, the transaction rolls back and the caller decides again on a fresh snapshot.

Each process keeps the snapshot of the generation it last saw. When the database's generation differs
(another process wrote), it catches up: it applies the jobs placed and releases the jobs ended since
(``placed_generation`` / ``ended_generation``, both indexed), and reloads every running job only if
the cluster spec was replaced since (``cluster_generation``). Writers of one SQLite file queue on a
file lock, so that several processes take turns without SQLite's sleep-and-retry.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import sqlalchemy as sa
from pydantic_core import to_json
from sqlalchemy.engine import Connection, Engine

from placement.cluster import Cluster
from placement.cluster_io import load_cluster
from placement.decision import Decision
from placement.demand import Job
from placement.feasibility import violations
from placement.policies import OnlinePolicy
from placement.snapshot import ClusterSnapshot, apply, at_generation, release
from placement.store import CommitStatus
from service.codec import (
    Json,
    OrphanedAllocation,
    allocation_from_json,
    allocation_to_json,
    cluster_from_json,
    cluster_to_json,
    job_from_json,
    job_to_json,
)
from service.settings import Settings

metadata = sa.MetaData()
cluster_state = sa.Table(
    "cluster_state", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("generation", sa.BigInteger, nullable=False),
    sa.Column("cluster_generation", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("updated_at", sa.Float, nullable=False),
)
# The spec has a row of its own: to change one column SQLite rebuilds the whole record, and the PAI
# cluster's spec is 325 kB. A loop of generation updates took 0.6 ms a transaction with the spec in the
# same row, against 0.05 ms without; and a commit that reads the generation no longer walks the spec.
cluster_spec = sa.Table(
    "cluster_spec", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("cluster", sa.Text, nullable=False),
    sa.Column("loaded_at", sa.Float, nullable=False),
)
jobs = sa.Table(
    "jobs", metadata,
    sa.Column("job_id", sa.String(128), primary_key=True),
    sa.Column("state", sa.String(16), nullable=False, index=True),
    sa.Column("demand", sa.Text, nullable=False),
    sa.Column("allocation", sa.Text, nullable=False),
    sa.Column("policy", sa.String(32), nullable=False),
    sa.Column("details", sa.Text, nullable=False),
    sa.Column("placed_generation", sa.BigInteger, nullable=False, index=True),
    sa.Column("placed_at", sa.Float, nullable=False),
    sa.Column("ended_at", sa.Float),
    sa.Column("ended_generation", sa.BigInteger, index=True),
)
completions = sa.Table(
    "completions", metadata,
    sa.Column("job_id", sa.String(128), sa.ForeignKey("jobs.job_id"), primary_key=True),
    sa.Column("duration_s", sa.Float, nullable=False),
    sa.Column("usage", sa.Text, nullable=False),
    sa.Column("completed_at", sa.Float, nullable=False),
)
RUNNING, RELEASED, COMPLETED, EVICTED = "running", "released", "completed", "evicted"

# statements of the hot path, built once (building SQLAlchemy expressions per call costs more than
# SQLite takes to run them)
log = logging.getLogger(__name__)
CHECKPOINT_EVERY_S = 0.25
"""How often the log of an SQLite state database is copied back (at 600 commits/s, a few MB each time)."""

_GENERATION = sa.select(cluster_state.c.generation).where(cluster_state.c.id == 1)
_GENERATIONS = sa.select(cluster_state.c.generation, cluster_state.c.cluster_generation).where(
    cluster_state.c.id == 1)
_GENERATIONS_LOCKED = _GENERATIONS.with_for_update()
_CHANGED = sa.select(jobs.c.job_id, jobs.c.state, jobs.c.allocation).where(
    sa.or_(jobs.c.placed_generation > sa.bindparam("since"), jobs.c.ended_generation > sa.bindparam("since")))
_EXISTS = sa.select(jobs.c.job_id).where(jobs.c.job_id == sa.bindparam("job_id"))
_MOVE = (cluster_state.update()
         .where(cluster_state.c.id == 1, cluster_state.c.generation == sa.bindparam("decided"))
         .values(generation=sa.bindparam("next"), updated_at=sa.bindparam("now")))
_SET_GENERATION = (cluster_state.update().where(cluster_state.c.id == 1)
                   .values(generation=sa.bindparam("next"), updated_at=sa.bindparam("now")))
_INSERT_JOB = jobs.insert()
_COMPLETE = completions.insert()
_END = (jobs.update().where(jobs.c.job_id == sa.bindparam("ending"), jobs.c.state == RUNNING)
        .values(state=sa.bindparam("new_state"), ended_at=sa.bindparam("now"),
                ended_generation=sa.bindparam("ended")))


class _DriverSql:
    """The group commit's statements compiled once for the engine's dialect and run on the driver's cursor.

    SQLAlchemy's execution machinery costs more per statement than SQLite takes to run it: one
    transaction that places a job and releases another took 0.64 ms through ``Connection.execute``
    and 0.23 ms through the driver. The statements are still built from the tables above, so the two
    paths cannot disagree on the schema. Both drivers take named parameters as dicts."""

    def __init__(self, engine: Engine) -> None:
        dialect = engine.dialect
        if dialect.paramstyle not in ("named", "pyformat"):
            raise ValueError(f"the state store needs a driver with named parameters, not {dialect.paramstyle!r}")
        self._placeholder = ":{}" if dialect.paramstyle == "named" else "%({})s"

        def compiled(statement: sa.sql.expression.ClauseElement) -> tuple[str, dict[str, Any]]:
            done = statement.compile(dialect=dialect)
            return str(done), {k: v for k, v in done.params.items() if v is not None}

        self.generations_locked = compiled(_GENERATIONS_LOCKED)
        self.insert_job = compiled(_INSERT_JOB)
        self.end = compiled(_END)
        self.complete = compiled(_COMPLETE)
        self.set_generation = compiled(_SET_GENERATION)

    def existing(self, cursor: Any, ids: list[str]) -> set[str]:
        """Which of ``ids`` the jobs table holds."""
        marks = ", ".join(self._placeholder.format(f"id{k}") for k in range(len(ids)))
        cursor.execute(f"SELECT job_id FROM jobs WHERE job_id IN ({marks})", {f"id{k}": v for k, v in enumerate(ids)})
        return {row[0] for row in cursor.fetchall()}

    @staticmethod
    def one(cursor: Any, statement: tuple[str, dict[str, Any]], params: dict[str, Any] | None = None) -> Any:
        cursor.execute(statement[0], {**statement[1], **(params or {})})
        return cursor

    @staticmethod
    def many(cursor: Any, statement: tuple[str, dict[str, Any]], rows: list[dict[str, Any]]) -> int:
        """Run ``statement`` once per row; the number of rows it changed in all."""
        cursor.executemany(statement[0], [{**statement[1], **row} for row in rows])
        return int(cursor.rowcount)


def _sqlite_file(engine: Engine) -> str | None:
    """The path of the engine's SQLite database file; ``None`` for other databases and in memory."""
    database = engine.url.database if engine.dialect.name == "sqlite" else None
    return database if database and database != ":memory:" else None


class WalCheckpoints:
    """Copies an SQLite database's write-ahead log back into the database file every ``every_s``
    seconds, in a thread of its own (a passive checkpoint: it waits for no reader or writer).

    SQLite's default is that the commit that takes the log past 1,000 pages checkpoints it, with two
    fsyncs, in the committing thread, which for the service is its event loop, and every request
    waits. Measured over 10,000 group commits of place and release through the app in process: the
    slowest 0.1% took 13.6-14.3 ms that way, 2.2 ms with this thread, at the same mean (0.76 ms).
    The driver releases the GIL while it checkpoints, so the loop goes on serving. No-op for other
    databases and in memory."""

    def __init__(self, engine: Engine, every_s: float = CHECKPOINT_EVERY_S) -> None:
        database = _sqlite_file(engine)
        # a weak reference: a store dropped without ``close()`` takes its engine, and this thread, with it
        self._engine, self.every_s = weakref.ref(engine), every_s
        self.runs = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if database:
            self._thread = threading.Thread(target=self._loop, name="sqlite-checkpoints", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s) and self._engine() is not None:
            try:
                self.checkpoint()
            except Exception as exc:  # the next pass tries again; the log only grows meanwhile
                log.warning("WAL checkpoint failed", extra={"error": str(exc)})

    def checkpoint(self, mode: str = "PASSIVE") -> tuple[int, int, int]:
        """One checkpoint: (busy, frames in the log, frames copied back), as SQLite reports them."""
        engine = self._engine()
        if engine is None:
            return 0, 0, 0
        raw = engine.raw_connection()
        try:
            cursor = raw.cursor()
            busy, frames, copied = cursor.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
            cursor.close()
        finally:
            raw.close()
        self.runs += 1
        return int(busy), int(frames), int(copied)

    def stop(self) -> None:
        """Stop the thread, after a last checkpoint of everything committed."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=30)
        self._thread = None
        self.checkpoint()


class _WritersQueue:
    """Writers of one SQLite file queue on an advisory file lock (``<database>-writers.lock``) before
    they begin: SQLite's own busy handler makes a writer that finds the database locked sleep and retry
    (1, 2, 5, 10 ms and longer), which turned two service processes into half the throughput of one.
    The kernel wakes the next one the moment the lock is free. No-op for other databases and in memory."""

    def __init__(self, engine: Engine) -> None:
        database = _sqlite_file(engine)
        self._path = f"{database}-writers.lock" if database else None
        self._fd: int | None = None

    def __enter__(self) -> None:
        if self._path is None:
            return
        if self._fd is None:
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *_: object) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)


def _create_schema(engine: Engine, writers: _WritersQueue) -> None:
    """Create the tables, and bring a database made by an earlier version up to them: the columns that
    say at which generation the cluster spec was loaded and a job ended (what lets a process catch up
    with another's writes instead of reloading every running job), their indexes, and the spec in a
    table of its own. Processes that start together take turns: on SQLite by the writers' lock, on
    PostgreSQL by an advisory lock."""
    with writers, engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7142)")  # held until this transaction ends
        metadata.create_all(conn)
        for table, column in (("cluster_state", "cluster_generation"), ("jobs", "ended_generation")):
            if column not in {c["name"] for c in sa.inspect(conn).get_columns(table)}:
                default = " NOT NULL DEFAULT 0" if column == "cluster_generation" else ""
                conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN {column} BIGINT{default}")
        if "cluster" in {c["name"] for c in sa.inspect(conn).get_columns("cluster_state")}:  # the spec moves out
            conn.exec_driver_sql("INSERT INTO cluster_spec (id, cluster, loaded_at) SELECT id, cluster, updated_at "
                                 "FROM cluster_state WHERE id = 1 AND NOT EXISTS (SELECT 1 FROM cluster_spec)")
            conn.exec_driver_sql("ALTER TABLE cluster_state DROP COLUMN cluster")
        for index in jobs.indexes:
            index.create(conn, checkfirst=True)


class _Conflict(Exception):
    """Raised inside a transaction to roll it back: the generation moved."""


class JobExists(ValueError):
    """A job id that the database already holds (ids are never reused)."""


class LiveAllocations(ValueError):
    """A new cluster spec would orphan running jobs (and ``force`` was not given)."""


@dataclass(frozen=True)
class PlaceOp:
    """Decide ``job`` with ``policy`` on the state as it is inside the transaction, and store it if placed.

    The decision is made on that very state, so the policy's own feasibility check (every online
    policy raises on an infeasible allocation of its own) is the check; it is not made twice."""

    job: Job
    policy: OnlinePolicy
    details: Json | None = None


@dataclass(frozen=True)
class EndOp:
    """End a running job: ``released``, or ``completed`` with its observed ``(duration_s, usage)``."""

    job_id: str
    state: str = "released"
    completion: tuple[float, Json] | None = None


@dataclass(frozen=True)
class Placed:
    """What a :class:`PlaceOp` came to: the decision, whether it was stored, the cluster it names."""

    decision: Decision
    committed: bool
    cluster: Cluster


OpResult = Placed | bool | Exception


@dataclass(frozen=True)
class JobRow:
    job_id: str
    state: str
    demand: Json
    allocation: Json
    policy: str
    details: Json
    placed_generation: int
    placed_at: float
    ended_at: float | None
    completion: Json | None


def open_store(settings: Settings) -> SqlStore:
    """The store at the configured database; an empty database gets the configured cluster."""
    return SqlStore(make_engine(settings.resolved_database_url()),
                    lambda: load_cluster(settings.cluster, settings.topology or None))


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL, NORMAL sync (durable against a process crash) and a
    busy timeout, and ``BEGIN IMMEDIATE`` transactions so that writers queue instead of deadlocking.
    Its connections never checkpoint the WAL on commit: :class:`WalCheckpoints` does, in a thread."""
    if not url.startswith("sqlite"):
        return sa.create_engine(url, pool_pre_ping=True, pool_size=8, max_overflow=8)
    # named parameters, as PostgreSQL's driver takes them: the group commit's driver SQL passes dicts to both
    engine = sa.create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, paramstyle="named")

    @sa.event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: Any, _: Any) -> None:
        dbapi_connection.isolation_level = None  # transactions are begun explicitly below
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA wal_autocheckpoint=0")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @sa.event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


class SqlStore:
    """The state store of the service (see module docstring)."""

    def __init__(self, engine: Engine, default_cluster: Callable[[], Cluster]) -> None:
        self.engine = engine
        self._sql = _DriverSql(engine)
        self._writers = _WritersQueue(engine)
        _create_schema(engine, self._writers)
        self.checkpoints = WalCheckpoints(engine)
        self._lock = threading.RLock()
        # the group commit's own connection to an SQLite file (:meth:`_apply_on_own_connection`)
        self._own_fairy = engine.raw_connection() if _sqlite_file(engine) else None
        self._own: Any = self._own_fairy.driver_connection if self._own_fairy is not None else None
        with self._write() as conn:
            now = time.time()
            if conn.execute(sa.select(cluster_state.c.id)).first() is None:
                conn.execute(cluster_state.insert().values(id=1, generation=0, updated_at=now))
            if conn.execute(sa.select(cluster_spec.c.id)).first() is None:
                conn.execute(cluster_spec.insert().values(
                    id=1, cluster=json.dumps(cluster_to_json(default_cluster())), loaded_at=now))
        self._cache = self._load()

    def close(self) -> None:
        """Stop the background work (a last WAL checkpoint on SQLite) and give back the group commit's
        own connection; the store can still be read and written (the general way)."""
        with self._lock:
            if self._own_fairy is not None:
                self._own_fairy.close()
                self._own_fairy = self._own = None
        self.checkpoints.stop()

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        with self._writers, self.engine.begin() as conn:
            yield conn

    # reading -------------------------------------------------------------------------------------

    def generation(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(_GENERATION).scalar_one())

    def snapshot(self) -> ClusterSnapshot:
        """The current snapshot (caught up if another process wrote since this one last looked)."""
        with self._lock:
            with self.engine.connect() as conn:
                generation, cluster_generation = conn.execute(_GENERATIONS).one()
                self._cache = self._state_at(conn, int(generation), int(cluster_generation))
            return self._cache

    def cached(self) -> ClusterSnapshot:
        """The snapshot this process last saw (no database read), e.g. to name machines of a decision."""
        return self._cache

    def _load(self) -> ClusterSnapshot:
        with self.engine.connect() as conn:
            return self._load_in(conn, int(conn.execute(_GENERATION).scalar_one()))

    def exists(self, job_id: str) -> bool:
        with self.engine.connect() as conn:
            return conn.execute(_EXISTS, {"job_id": job_id}).first() is not None

    def job(self, job_id: str) -> JobRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(_WITH_COMPLETION.where(jobs.c.job_id == job_id)).first()
        return None if row is None else _job_row(row)

    def completions(self) -> list[JobRow]:
        """Every completed job with its observed duration and usage (for retraining), oldest first."""
        query = _WITH_COMPLETION.where(completions.c.job_id.is_not(None)).order_by(completions.c.completed_at)
        with self.engine.connect() as conn:
            return [_job_row(r) for r in conn.execute(query).all()]

    def feedback(self) -> list[dict[str, Any]]:
        """Completed jobs as :func:`training.feedback.feedback_table` takes them: the task records each
        was estimated with, when it was placed, its observed duration and usage, the GPU type it ran on."""
        cluster = self.cached().cluster
        types = {m.name: m.gpu_type for m in cluster.machines}
        found = []
        for row in self.completions():
            assert row.completion is not None
            on = {types.get(str(i["machine"])) for i in row.allocation.get("instances", []) if i.get("gpus")}
            found.append({"job_id": row.job_id, "records": row.details.get("records", []), "placed_at": row.placed_at,
                          "duration_s": row.completion["duration_s"], "usage": row.completion["usage"],
                          "gpu_type": on.pop() if len(on) == 1 else None})
        return found

    # writing -------------------------------------------------------------------------------------

    def commit(self, decision: Decision, job: Job, details: Json | None = None) -> CommitStatus:
        """Store ``decision`` if the database is still at its generation (see module docstring)."""
        if decision.allocation is None:
            return CommitStatus.NOT_PLACED
        with self._lock:
            try:
                with self._write() as conn:
                    base = self._commit_in(conn, decision, job, details)
            except _Conflict:
                return CommitStatus.CONFLICT
            self._cache = apply(base, decision.allocation)  # base is at decision.generation: apply moves it one on
            return CommitStatus.COMMITTED

    def _commit_in(self, conn: Connection, decision: Decision, job: Job, details: Json | None) -> ClusterSnapshot:
        """The writes of :meth:`commit`; returns the snapshot the decision was checked against."""
        assert decision.allocation is not None
        moved = conn.execute(_MOVE, {"decided": decision.generation, "next": decision.generation + 1,
                                     "now": time.time()})
        if moved.rowcount != 1:
            raise _Conflict
        if conn.execute(_EXISTS, {"job_id": job.job_id}).first() is not None:
            raise JobExists(f"job {job.job_id!r} already exists (job ids are never reused)")
        base = self._cache if self._cache.generation == decision.generation else None
        if base is None:  # decided on a snapshot this process no longer holds: check against the database
            base = self._load_in(conn, decision.generation)
        problems = violations(base, job, decision.allocation)
        if problems:
            raise RuntimeError(f"refusing an infeasible allocation of {job.job_id}: {problems}")
        _insert_job(conn, base.cluster, decision, job, details, decision.generation + 1, time.time())
        return base

    def commit_many(self, decided: list[tuple[Decision, Job, Json | None]]) -> list[bool]:
        """Store several decisions (a batch, each with its details) in one transaction, in order. Each is
        checked against the state as it is now, with the earlier ones applied: one that no longer fits
        (the state moved since it was decided) is left out. Returns, per decision, whether it was stored."""
        stored: list[bool] = []
        with self._lock:
            with self._write() as conn:
                base = self._batch_in(conn, decided, stored)
            self._cache = base
        return stored

    def _batch_in(self, conn: Connection, decided: list[tuple[Decision, Job, Json | None]],
                  stored: list[bool]) -> ClusterSnapshot:
        base = self._locked_state(conn)
        now = time.time()
        for decision, job, details in decided:
            ok = (decision.allocation is not None and not violations(base, job, decision.allocation)
                  and conn.execute(_EXISTS, {"job_id": job.job_id}).first() is None)
            if ok and decision.allocation is not None:
                base = apply(base, decision.allocation)
                _insert_job(conn, base.cluster, decision, job, details, base.generation, now)
            stored.append(ok)
        conn.execute(_SET_GENERATION, {"next": base.generation, "now": now})
        return base

    def apply_ops(self, ops: list[PlaceOp | EndOp]) -> list[OpResult]:
        """Run ``ops`` in order in one transaction (group commit) and return, per op, a :class:`Placed`,
        whether an :class:`EndOp` ended its job, or the exception that op alone came to (``JobExists``,
        a policy error). The generation is locked for the whole transaction, so every decision is made
        on the state as committed, with the earlier ops of the batch applied: no conflict, no retry.
        A database error fails the whole batch (nothing of it is stored) and is raised.

        The ops are decided in memory first (the locked snapshot holds exactly the running jobs), then
        written with one statement per kind of row (executemany)."""
        with self._lock:
            if self._own is not None:
                done = self._apply_on_own_connection(ops)
                if done is not None:
                    return done
            with self._write() as conn:
                cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
                generation, cluster_generation = self._sql.one(cursor, self._sql.generations_locked).fetchone()
                results, base = self._decide_and_write(
                    cursor, self._state_at(conn, int(generation), int(cluster_generation)), ops)
                cursor.close()
            self._cache = base  # once committed
        return results

    def _apply_on_own_connection(self, ops: list[PlaceOp | EndOp]) -> list[OpResult] | None:
        """:meth:`apply_ops` on the store's own SQLite connection, with no SQLAlchemy between: its
        connection checkout, events and transaction objects cost 0.19 ms a transaction, the database
        work itself 0.03 ms. ``None`` (nothing written) if another process wrote since this one last
        looked: catching up takes the general path."""
        own, sql = self._own, self._sql
        assert own is not None
        with self._writers:
            cursor = own.cursor()
            try:
                cursor.execute("BEGIN IMMEDIATE")
                generation, _ = sql.one(cursor, sql.generations_locked).fetchone()
                if int(generation) != self._cache.generation:
                    own.rollback()
                    return None
                results, base = self._decide_and_write(cursor, self._cache, ops)
                own.commit()
            except BaseException:
                own.rollback()
                raise
            finally:
                cursor.close()
        self._cache = base
        return results

    def _decide_and_write(self, cursor: Any, base: ClusterSnapshot,
                          ops: list[PlaceOp | EndOp]) -> tuple[list[OpResult], ClusterSnapshot]:
        """Decide ``ops`` in order from ``base`` (the locked state as committed) and write what they
        change in the transaction of ``cursor``: the results, and the state once it commits."""
        sql, results = self._sql, []
        generation = base.generation
        wanted = [op.job.job_id for op in ops if isinstance(op, PlaceOp)]
        known = sql.existing(cursor, wanted) if wanted else set()
        writes = _Writes(time.time())
        for op in ops:
            result: OpResult
            if isinstance(op, PlaceOp):
                base, result = self._place_in(base, op, known, writes)
                if isinstance(result, Placed) and result.committed:
                    known.add(op.job.job_id)
            else:
                base, result = self._end_in(base, op, writes)
            results.append(result)
        writes.run(sql, cursor)
        if base.generation != generation:
            sql.one(cursor, sql.set_generation, {"next": base.generation, "now": writes.now})
        return results, base

    def _locked_state(self, conn: Connection) -> ClusterSnapshot:
        """The state as committed, its generation locked until ``conn``'s transaction ends (the snapshot
        this process holds if the database is still at its generation)."""
        generation, cluster_generation = conn.execute(_GENERATIONS_LOCKED).one()
        return self._state_at(conn, int(generation), int(cluster_generation))

    def _state_at(self, conn: Connection, generation: int, cluster_generation: int) -> ClusterSnapshot:
        """The state at ``generation``, read on ``conn``: the snapshot this process holds, caught up with
        the jobs other processes placed or ended since; loaded in full if the cluster spec changed since."""
        held = self._cache
        if held.generation == generation:
            return held
        if cluster_generation > held.generation or generation < held.generation:
            return self._load_in(conn, generation)
        base = held
        for job_id, state, allocation in conn.execute(_CHANGED, {"since": held.generation}).all():
            running = job_id in base.allocations
            if state == RUNNING and not running:
                base = apply(base, allocation_from_json(base.cluster, job_id, json.loads(allocation)))
            elif state != RUNNING and running:
                base = release(base, job_id)
        return at_generation(base, generation)

    @staticmethod
    def _place_in(base: ClusterSnapshot, op: PlaceOp, known: set[str],
                  writes: _Writes) -> tuple[ClusterSnapshot, OpResult]:
        job = op.job
        if job.job_id in known or job.job_id in base.allocations:
            return base, JobExists(f"job {job.job_id!r} already exists (job ids are never reused)")
        try:
            decision = op.policy(base, job)
        except Exception as exc:  # this job's alone: the others of the batch go on
            return base, exc
        if decision.allocation is None:
            return base, Placed(decision, False, base.cluster)
        try:
            row = _job_row_of(base.cluster, decision, job, op.details, base.generation + 1, writes.now)
        except (TypeError, ValueError) as exc:  # details that cannot be stored: this job's alone
            return base, exc
        writes.inserts.append(row)
        return apply(base, decision.allocation), Placed(decision, True, base.cluster)

    @staticmethod
    def _end_in(base: ClusterSnapshot, op: EndOp, writes: _Writes) -> tuple[ClusterSnapshot, OpResult]:
        if op.job_id not in base.allocations:  # the locked snapshot holds every running job, and only those
            return base, False
        writes.ends.append({"ending": op.job_id, "new_state": op.state, "now": writes.now,
                            "ended": base.generation + 1})
        if op.completion is not None:
            writes.completions.append({"job_id": op.job_id, "duration_s": op.completion[0],
                                       "usage": json.dumps(op.completion[1]), "completed_at": writes.now})
        return release(base, op.job_id), True

    def _load_in(self, conn: Connection, generation: int) -> ClusterSnapshot:
        state = conn.execute(sa.select(cluster_spec.c.cluster).where(cluster_spec.c.id == 1)).scalar_one()
        cluster = cluster_from_json(json.loads(state))
        snapshot = ClusterSnapshot.empty(cluster)
        for job_id, allocation in conn.execute(sa.select(jobs.c.job_id, jobs.c.allocation)
                                               .where(jobs.c.state == RUNNING)
                                               .order_by(jobs.c.placed_generation)).all():
            snapshot = apply(snapshot, allocation_from_json(cluster, job_id, json.loads(allocation)))
        return replace(snapshot, generation=generation)

    def release(self, job_id: str) -> bool:
        """Free a running job's resources; ``False`` (no change) if it is not running (idempotent)."""
        return self._end(job_id, RELEASED, None)

    def complete(self, job_id: str, duration_s: float, usage: Json) -> bool:
        """Free a running job and store what it really used; ``False`` if it is not running."""
        return self._end(job_id, COMPLETED, (duration_s, usage))

    def _end(self, job_id: str, state: str, completion: tuple[float, Json] | None) -> bool:
        return self.apply_ops([EndOp(job_id, state, completion)])[0] is True

    def replace_cluster(self, cluster: Cluster, force: bool = False) -> list[str]:
        """Load a new cluster spec. Running jobs must fit it as they are (same machine names, GPUs and
        capacity); if some would not, refuse (``LiveAllocations``) unless ``force``, which evicts them.
        Returns the evicted job ids."""
        with self._lock, self._write() as conn:
            running = conn.execute(sa.select(jobs.c.job_id, jobs.c.demand, jobs.c.allocation)
                                   .where(jobs.c.state == RUNNING).order_by(jobs.c.placed_generation)).all()
            snapshot, orphans = ClusterSnapshot.empty(cluster), []
            for job_id, demand, allocation in running:
                try:
                    placed = allocation_from_json(cluster, job_id, json.loads(allocation))
                    problems = violations(snapshot, _job_of(demand), placed)
                except OrphanedAllocation as exc:
                    problems = [str(exc)]
                if problems:
                    orphans.append((job_id, problems[0]))
                else:
                    snapshot = apply(snapshot, placed)
            if orphans and not force:
                shown = "; ".join(f"{j}: {p}" for j, p in orphans[:5])
                raise LiveAllocations(f"{len(orphans)} running job(s) would not fit the new cluster ({shown}); "
                                      "release them first or load it with force")
            now = time.time()
            generation = conn.execute(sa.select(cluster_state.c.generation).with_for_update()).scalar_one()
            for job_id, _ in orphans:
                conn.execute(jobs.update().where(jobs.c.job_id == job_id).values(
                    state=EVICTED, ended_at=now, ended_generation=generation + 1))
            conn.execute(cluster_state.update().where(cluster_state.c.id == 1).values(
                generation=generation + 1, cluster_generation=generation + 1, updated_at=now))
            conn.execute(cluster_spec.update().where(cluster_spec.c.id == 1).values(
                cluster=json.dumps(cluster_to_json(cluster)), loaded_at=now))
            self._cache = replace(snapshot, generation=generation + 1)
        return [j for j, _ in orphans]


def _insert_job(conn: Connection, cluster: Cluster, decision: Decision, job: Job, details: Json | None,
                generation: int, now: float) -> None:
    conn.execute(_INSERT_JOB, _job_row_of(cluster, decision, job, details, generation, now))


def _dumps(value: Json) -> str:
    """``value`` as JSON text, as ``json.dumps`` writes it but for spaces (``NaN`` included), about four
    times faster: a placement stores three such documents, on the event loop. A value JSON cannot
    hold is a ``ValueError``."""
    return to_json(value).decode()


def _job_row_of(cluster: Cluster, decision: Decision, job: Job, details: Json | None, generation: int,
                now: float) -> dict[str, Any]:
    assert decision.allocation is not None
    return {"job_id": job.job_id, "state": RUNNING, "demand": _dumps(job_to_json(job)),
            "allocation": _dumps(allocation_to_json(cluster, decision.allocation)), "policy": decision.policy,
            "details": _dumps(details or {}), "placed_generation": generation, "placed_at": now, "ended_at": None,
            "ended_generation": None}


@dataclass
class _Writes:
    """The rows a group commit writes, gathered while its ops are decided, then written kind by kind."""

    now: float
    inserts: list[dict[str, Any]] = field(default_factory=list)
    ends: list[dict[str, Any]] = field(default_factory=list)
    completions: list[dict[str, Any]] = field(default_factory=list)

    def run(self, sql: _DriverSql, cursor: Any) -> None:
        if self.inserts:  # before the ends: a job may be placed and ended in one batch
            sql.many(cursor, sql.insert_job, self.inserts)
        if self.ends:
            ended = sql.many(cursor, sql.end, self.ends)
            if ended != len(self.ends):  # the snapshot and the jobs table disagree: store nothing
                raise RuntimeError(f"state store out of step: {len(self.ends)} running job(s) to end, "
                                   f"{ended} found running in the database")
        if self.completions:
            sql.many(cursor, sql.complete, self.completions)


_WITH_COMPLETION = sa.select(jobs, completions.c.duration_s, completions.c.usage, completions.c.completed_at) \
    .outerjoin(completions, completions.c.job_id == jobs.c.job_id)


def _job_row(r: Any) -> JobRow:
    """A row of ``_WITH_COMPLETION`` (a job, and its completion if it has one)."""
    completion = None if r.completed_at is None else {
        "duration_s": float(r.duration_s), "usage": json.loads(r.usage), "completed_at": float(r.completed_at)}
    return JobRow(r.job_id, r.state, json.loads(r.demand), json.loads(r.allocation), r.policy, json.loads(r.details),
                  int(r.placed_generation), float(r.placed_at), r.ended_at, completion)


def _job_of(demand: str) -> Job:
    return job_from_json(json.loads(demand))
