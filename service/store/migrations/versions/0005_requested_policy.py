"""A queued job's own placement policy (``POST /v1/jobs`` with ``policy``), kept apart from ``policy`` (the
one that placed it), so that a preempted job is placed again by the policy it asked for.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    # a database made before the migrations were kept in Alembic runs every revision again: look first
    if "requested_policy" not in {c["name"] for c in sa.inspect(op.get_bind()).get_columns("jobs")}:
        op.add_column("jobs", sa.Column("requested_policy", sa.String(32)))


def downgrade() -> None:
    op.drop_column("jobs", "requested_policy")
