"""The state store's SQL: every statement of its write path and catch-up, declared once from the tables
(:mod:`.schema`), and :class:`DriverSql`, which compiles them for the engine's dialect and runs them on the
driver's cursor (SQLAlchemy's execution machinery costs more per statement than SQLite takes to run it)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from service.store.schema import (
    PENDING,
    RUNNING,
    cluster_spec,
    cluster_state,
    completions,
    job_events,
    jobs,
    queue_spec,
)

GENERATIONS = sa.select(cluster_state.c.generation, cluster_state.c.cluster_generation,
                         cluster_state.c.pending).where(cluster_state.c.id == 1)
QUEUED = sa.select(jobs.c.job_id, jobs.c.state, jobs.c.demand, jobs.c.queue, jobs.c.priority, jobs.c.mode,
                    jobs.c.submitted_at, jobs.c.placed_at, jobs.c.p50_s, jobs.c.p90_s, jobs.c.requested_policy
                    ).where(sa.or_(
                        jobs.c.state == PENDING, sa.and_(jobs.c.state == RUNNING, jobs.c.queue.is_not(None))))
EVENT_COLUMNS = ("job_id", "generation", "state", "reason", "at")
WITH_COMPLETION = sa.select(jobs, completions.c.duration_s, completions.c.usage, completions.c.completed_at) \
    .outerjoin(completions, completions.c.job_id == jobs.c.job_id)
STATEMENTS: dict[str, Any] = {
    "generations": GENERATIONS,
    "generations_locked": GENERATIONS.with_for_update(),
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
    "end_event": job_events.insert().from_select(list(EVENT_COLUMNS), sa.select(
        jobs.c.job_id, sa.cast(sa.bindparam("ended"), sa.BigInteger), sa.cast(sa.bindparam("new_state"), sa.String),
        sa.literal("ended"), sa.cast(sa.bindparam("now"), sa.Float)).where(
            jobs.c.job_id == sa.bindparam("ending"), jobs.c.queue.is_not(None))),
    # (bound names differ from the columns they set: SQLAlchemy keeps those for itself)
    "start": jobs.update().where(jobs.c.job_id == sa.bindparam("starting"), jobs.c.state == PENDING).values(
        state=RUNNING, allocation=sa.bindparam("placed_at_allocation"), policy=sa.bindparam("placed_by"),
        placed_generation=sa.bindparam("placed"), placed_at=sa.bindparam("now"), mode=sa.bindparam("as_mode")),
    # a preempted job waits again in the mode it was submitted in, whichever it ran in
    "requeue": jobs.update().where(jobs.c.job_id == sa.bindparam("requeuing"), jobs.c.state == RUNNING).values(
        state=PENDING, allocation="null", ended_generation=sa.bindparam("ended"),
        mode=sa.func.coalesce(jobs.c.submitted_mode, jobs.c.mode)),
    "cancel": jobs.update().where(jobs.c.job_id == sa.bindparam("cancelling"), jobs.c.state == PENDING).values(
        state="cancelled", ended_at=sa.bindparam("now"), ended_generation=sa.bindparam("ended")),
    "upgrade": jobs.update().where(jobs.c.job_id == sa.bindparam("upgrading"), jobs.c.state == RUNNING).values(
        mode=sa.bindparam("as_mode")),
    "event": (job_events.insert(), EVENT_COLUMNS),
    "queued": QUEUED,
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
        for name, given in STATEMENTS.items():
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
