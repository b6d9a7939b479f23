"""Runs the revisions on the connection :func:`service.store.schema.migrate` hands over, inside its
transaction (which holds the lock that makes processes starting together take turns)."""

from __future__ import annotations

from alembic import context

from service.store.schema import metadata

context.configure(connection=context.config.attributes["connection"], target_metadata=metadata)
with context.begin_transaction():
    context.run_migrations()
