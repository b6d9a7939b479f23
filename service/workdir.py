"""Where gpuplace keeps its working files: ``GPUPLACE_HOME`` (:class:`service.settings.Settings`), by
default ``./.gpuplace``."""

from __future__ import annotations

from pathlib import Path

from service.settings import Settings


def home() -> Path:
    """The working folder (tables, the MLflow store and the state database)."""
    return Settings().home


def mlflow_uri() -> str:
    """MLflow tracking and registry store: ``GPUPLACE_MLFLOW_URI``, else a SQLite file in :func:`home`."""
    return Settings().resolved_mlflow_uri()


def tables_dir() -> Path:
    """Canonical Parquet tables."""
    return home() / "tables"
