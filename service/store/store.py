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
from service.store.codec import JobRow, allocation_of, job_row
from service.store.ops import Moved, Op, Place, Written
from service.store.schema import RUNNING, cluster_spec, cluster_state, completions, jobs, migrate
from service.store.sqlite import WalCheckpoints, WritersQueue, sqlite_engine, sqlite_file

_GENERATIONS = sa.select(cluster_state.c.generation, cluster_state.c.cluster_generation).where(
    cluster_state.c.id == 1)
_WITH_COMPLETION = sa.select(jobs, completions.c.duration_s, completions.c.usage, completions.c.completed_at) \
    .outerjoin(completions, completions.c.job_id == jobs.c.job_id)
_STATEMENTS = {
    "generations": _GENERATIONS,
    "generations_locked": _GENERATIONS.with_for_update(),
    "changed": sa.select(jobs.c.job_id, jobs.c.state, jobs.c.allocation).where(sa.or_(
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
    "set_generation": cluster_state.update().where(cluster_state.c.id == 1)
    .values(generation=sa.bindparam("next"), updated_at=sa.bindparam("now")),
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
        for name, statement in _STATEMENTS.items():
            done = statement.compile(dialect=dialect)
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

    def existing(self, cursor: Any, ids: list[str]) -> set[str]:
        """Which of ``ids`` the jobs table holds."""
        marks = ", ".join(self._placeholder.format(f"id{k}") for k in range(len(ids)))
        cursor.execute(f"SELECT job_id FROM jobs WHERE job_id IN ({marks})", {f"id{k}": v for k, v in enumerate(ids)})
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
            generation, _ = self._sql.run(cursor, "generations").fetchone()
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
            generation, cluster_generation = self._sql.run(cursor, "generations").fetchone()
            self._cache = self._state_at(cursor, int(generation), int(cluster_generation))
            return self._cache

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

    def completions(self) -> list[JobRow]:
        """Every completed job with its observed duration and usage (for retraining), oldest first."""
        query = _WITH_COMPLETION.where(completions.c.job_id.is_not(None)).order_by(completions.c.completed_at)
        with self.engine.connect() as conn:
            return [job_row(r) for r in conn.execute(query).all()]

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
        base = held
        for job_id, state, allocation in self._sql.run(cursor, "changed", {"since": held.generation}).fetchall():
            running = job_id in base.allocations
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
                generation, cluster_generation = self._sql.run(cursor, "generations_locked").fetchone()
                base = self._state_at(cursor, int(generation), int(cluster_generation))
                if decided_on is not None and base.generation != decided_on:
                    outcome: Written | Moved = Moved(base)
                else:
                    outcome = self._apply(cursor, base, ops, decided_on is not None, comes_to)
            self._cache = outcome.snapshot  # once committed
        return outcome

    def _apply(self, cursor: Any, base: ClusterSnapshot, ops: Sequence[Op], trusted: bool,
               ahead: ClusterSnapshot | None) -> Written:
        sql = self._sql
        wanted = [op.job.job_id for op in ops if isinstance(op, Place)]

        def running() -> list[RunningRow]:
            return [tuple(row) for row in sql.run(cursor, "running_jobs").fetchall()]

        changes = Changes(base, sql.existing(cursor, wanted) if wanted else set(), trusted, running, time.time(),
                          ahead)
        results = [changes.apply(op) for op in ops]
        rows, after = changes.rows, changes.after()
        if rows.inserts:
            sql.many(cursor, "insert_job", rows.inserts)
        if rows.ends:
            ended = sql.many(cursor, "end", rows.ends)
            if ended != len(rows.ends):  # the snapshot and the jobs table disagree: store nothing
                raise RuntimeError(f"state store out of step: {len(rows.ends)} running job(s) to end, "
                                   f"{ended} found running in the database")
        if rows.completions:
            sql.many(cursor, "complete", rows.completions)
        if rows.spec is not None:
            sql.run(cursor, "set_spec", {"spec": rows.spec, "now": rows.now})
            sql.run(cursor, "set_cluster_generation", {"loaded": rows.cluster_generation})
        if after.generation != base.generation:
            sql.run(cursor, "set_generation", {"next": after.generation, "now": rows.now})
        return Written(results, after)

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
