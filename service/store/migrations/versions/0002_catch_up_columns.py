"""The generations a process catches up from: when the cluster spec was loaded and when each job
ended, both indexed with the generation a job was placed at.

A database made before the migrations were kept in Alembic may have some of these already: each is
added only if it is missing.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None

INDEXES = (("ix_jobs_placed_generation", "placed_generation"), ("ix_jobs_ended_generation", "ended_generation"))


def _columns(table: str) -> set[str]:
    return {c["name"] for c in sa.inspect(op.get_bind()).get_columns(table)}


def upgrade() -> None:
    if "cluster_generation" not in _columns("cluster_state"):
        op.add_column("cluster_state", sa.Column("cluster_generation", sa.BigInteger, nullable=False,
                                                 server_default=sa.text("0")))
    if "ended_generation" not in _columns("jobs"):
        op.add_column("jobs", sa.Column("ended_generation", sa.BigInteger))
    present = {i["name"] for i in sa.inspect(op.get_bind()).get_indexes("jobs")}
    for name, column in INDEXES:
        if name not in present:
            op.create_index(name, "jobs", [column])


def downgrade() -> None:
    for name, _ in INDEXES:
        op.drop_index(name, "jobs")
    op.drop_column("jobs", "ended_generation")
    op.drop_column("cluster_state", "cluster_generation")
