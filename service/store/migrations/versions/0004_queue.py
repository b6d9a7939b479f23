"""The queue: jobs that wait (state ``pending``, with their queue, priority, mode, submit time and
duration estimate), the count of them beside the generation, the queue configuration, and each
submitted job's state changes.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

JOB_COLUMNS = (("queue", sa.String(128)), ("priority", sa.Integer), ("mode", sa.String(16)),
               ("submitted_at", sa.Float), ("p50_s", sa.Float), ("p90_s", sa.Float))


def _columns(table: str) -> set[str]:
    return {c["name"] for c in sa.inspect(op.get_bind()).get_columns(table)}


def upgrade() -> None:
    # a database made before the migrations were kept in Alembic runs every revision again: look first
    inspector = sa.inspect(op.get_bind())
    if "pending" not in _columns("cluster_state"):
        op.add_column("cluster_state", sa.Column("pending", sa.BigInteger, nullable=False,
                                                 server_default=sa.text("0")))
    present = _columns("jobs")
    for name, kind in JOB_COLUMNS:
        if name not in present:
            op.add_column("jobs", sa.Column(name, kind))
    if inspector.has_table("job_events"):
        return
    op.create_table(
        "queue_spec",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("loaded_at", sa.Float, nullable=False),
    )
    op.create_table(
        "job_events",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(128), nullable=False),
        sa.Column("generation", sa.BigInteger, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("at", sa.Float, nullable=False),
    )
    op.create_index("ix_job_events_job_id", "job_events", ["job_id"])


def downgrade() -> None:
    op.drop_index("ix_job_events_job_id", "job_events")
    op.drop_table("job_events")
    op.drop_table("queue_spec")
    for name, _ in reversed(JOB_COLUMNS):
        op.drop_column("jobs", name)
    op.drop_column("cluster_state", "pending")
