"""Alembic's migration environment of the state database (run by :func:`service.store.schema.migrate`)."""
