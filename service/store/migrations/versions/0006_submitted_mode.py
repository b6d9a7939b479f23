"""A queued job's mode as submitted (``guaranteed`` or ``opportunistic``), kept apart from ``mode`` (the one it
runs in: a guaranteed job that waited long enough may start opportunistically, an opportunistic one may be
upgraded), so that a preempted job waits again in the mode it was submitted in.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    # a database made before the migrations were kept in Alembic runs every revision again: look first
    if "submitted_mode" not in {c["name"] for c in sa.inspect(op.get_bind()).get_columns("jobs")}:
        op.add_column("jobs", sa.Column("submitted_mode", sa.String(16)))


def downgrade() -> None:
    op.drop_column("jobs", "submitted_mode")
