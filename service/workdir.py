"""Where gpuplace keeps its working files: ``GPUPLACE_HOME`` (:class:`service.settings.Settings`), by
default ``./.gpuplace``."""

from __future__ import annotations

from pathlib import Path

# Settings (pydantic-settings) are imported when first asked for: the command line imports this module
# at start-up, and ``gpuplace --help`` needs none of it.


def home() -> Path:
    """The working folder (tables, the MLflow store and the state database)."""
    from service.settings import Settings

    return Settings().home


def mlflow_uri() -> str:
    """MLflow tracking and registry store: ``GPUPLACE_MLFLOW_URI``, else a SQLite file in :func:`home`."""
    from service.settings import Settings

    return Settings().resolved_mlflow_uri()


def tables_dir() -> Path:
    """Canonical Parquet tables."""
    return home() / "tables"
