"""The cluster spec in a table of its own, out of the row every commit rewrites.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if not inspector.has_table("cluster_spec"):
        op.create_table(
            "cluster_spec",
            sa.Column("id", sa.Integer, primary_key=True),
            sa.Column("cluster", sa.Text, nullable=False),
            sa.Column("loaded_at", sa.Float, nullable=False),
        )
    if "cluster" in {c["name"] for c in inspector.get_columns("cluster_state")}:
        op.execute("INSERT INTO cluster_spec (id, cluster, loaded_at) SELECT id, cluster, updated_at "
                   "FROM cluster_state WHERE id = 1 AND NOT EXISTS (SELECT 1 FROM cluster_spec)")
        op.drop_column("cluster_state", "cluster")


def downgrade() -> None:
    op.add_column("cluster_state", sa.Column("cluster", sa.Text, nullable=False, server_default=""))
    op.execute("UPDATE cluster_state SET cluster = (SELECT cluster FROM cluster_spec WHERE cluster_spec.id = 1)")
    op.drop_table("cluster_spec")
