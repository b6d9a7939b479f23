"""The tables as the service first made them: the cluster spec in the generation row.

Revision ID: 0001
Revises: (none)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "cluster_state",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("generation", sa.BigInteger, nullable=False),
        sa.Column("cluster", sa.Text, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_table(
        "jobs",
        sa.Column("job_id", sa.String(128), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("demand", sa.Text, nullable=False),
        sa.Column("allocation", sa.Text, nullable=False),
        sa.Column("policy", sa.String(32), nullable=False),
        sa.Column("details", sa.Text, nullable=False),
        sa.Column("placed_generation", sa.BigInteger, nullable=False),
        sa.Column("placed_at", sa.Float, nullable=False),
        sa.Column("ended_at", sa.Float),
    )
    op.create_index("ix_jobs_state", "jobs", ["state"])
    op.create_table(
        "completions",
        sa.Column("job_id", sa.String(128), sa.ForeignKey("jobs.job_id"), primary_key=True),
        sa.Column("duration_s", sa.Float, nullable=False),
        sa.Column("usage", sa.Text, nullable=False),
        sa.Column("completed_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("completions")
    op.drop_index("ix_jobs_state", "jobs")
    op.drop_table("jobs")
    op.drop_table("cluster_state")
