"""The state database's tables, and bringing a database up to them.

Tables: ``cluster_state`` (one row: the state generation, moved by every change, the generation the
cluster spec was loaded at, and how many jobs are pending), ``cluster_spec`` (one row: the cluster
spec, written only when a spec is loaded), ``queue_spec`` (at most one row: the queue configuration,
as ``placement.queues_to_dict`` writes it), ``jobs`` (every job placed or submitted: its demand, its
allocation (JSON ``null`` while it holds none), its state ``pending`` / ``running`` / ``released`` /
``completed`` / ``evicted`` / ``cancelled``, the estimate it was placed with, the generations it was
last placed and ended at; a submitted job also its queue, priority, mode, submit time and duration
estimate), ``job_events`` (every state change of a submitted job, in order, with why) and
``completions`` (observed duration and usage of completed jobs, kept for retraining).

The schema is migrated by Alembic (``migrations/``, run by :func:`migrate` when a store opens). A
database made before the migrations were kept in Alembic has no ``alembic_version`` table: it is taken
to be at the first revision, and the later ones, which look before they change anything, bring it up
from whatever layout it has. A new revision is a file in ``migrations/versions/`` naming the last one
as its ``down_revision``.
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Engine

from service.store.sqlite import WritersQueue

metadata = sa.MetaData()
cluster_state = sa.Table(
    "cluster_state", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("generation", sa.BigInteger, nullable=False),
    sa.Column("updated_at", sa.Float, nullable=False),
    sa.Column("cluster_generation", sa.BigInteger, nullable=False, server_default=sa.text("0")),
    # read with the generation in every write: a release looks for a scheduling pass only if jobs wait
    sa.Column("pending", sa.BigInteger, nullable=False, server_default=sa.text("0")),
)
# The spec has a row of its own: to change one column SQLite rebuilds the whole record, and a large
# cluster's spec is hundreds of kB, so every move of the generation would rewrite it; and a commit that
# reads the generation no longer walks the spec.
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
    sa.Column("queue", sa.String(128)),
    sa.Column("priority", sa.Integer),
    sa.Column("mode", sa.String(16)),
    sa.Column("submitted_at", sa.Float),
    sa.Column("p50_s", sa.Float),
    sa.Column("p90_s", sa.Float),
    sa.Column("requested_policy", sa.String(32)),
    # the mode a submitted job waits in again when preempted (``mode``: the one it runs in); NULL: ``mode``
    sa.Column("submitted_mode", sa.String(16)),
)
queue_spec = sa.Table(
    "queue_spec", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("spec", sa.Text, nullable=False),
    sa.Column("loaded_at", sa.Float, nullable=False),
)
job_events = sa.Table(
    "job_events", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.String(128), nullable=False, index=True),
    sa.Column("generation", sa.BigInteger, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("at", sa.Float, nullable=False),
)
completions = sa.Table(
    "completions", metadata,
    sa.Column("job_id", sa.String(128), sa.ForeignKey("jobs.job_id"), primary_key=True),
    sa.Column("duration_s", sa.Float, nullable=False),
    sa.Column("usage", sa.Text, nullable=False),
    sa.Column("completed_at", sa.Float, nullable=False),
)
RUNNING, RELEASED, COMPLETED, EVICTED = "running", "released", "completed", "evicted"
PENDING, CANCELLED = "pending", "cancelled"
ENDED = (RELEASED, COMPLETED, EVICTED)

MIGRATIONS = Path(__file__).with_name("migrations")
FIRST_REVISION = "0001"
"""The layout every database made before the migrations were kept in Alembic has at least."""


def alembic_config(connection: sa.Connection) -> Config:
    """Alembic's configuration for this package's migrations, run on ``connection`` (``migrations/env.py``)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS).replace("%", "%%"))
    config.attributes["connection"] = connection
    return config


def migrate(engine: Engine, writers: WritersQueue) -> None:
    """Bring the database up to the newest revision, in one transaction. Processes that start together
    take turns: on SQLite by the writers' lock, on PostgreSQL by an advisory lock."""
    with writers, engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7142)")  # held until this transaction ends
        config = alembic_config(conn)
        inspector = sa.inspect(conn)
        if inspector.has_table("cluster_state") and not inspector.has_table("alembic_version"):
            command.stamp(config, FIRST_REVISION)
        command.upgrade(config, "head")
