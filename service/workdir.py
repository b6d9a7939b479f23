"""Where gpuplace keeps its working files: ``$GPUPLACE_HOME``, by default ``./.gpuplace``."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """The working folder (tables, and later the MLflow store and the state database)."""
    return Path(os.environ.get("GPUPLACE_HOME", ".gpuplace"))


def mlflow_uri() -> str:
    """MLflow tracking and registry store: ``$GPUPLACE_MLFLOW_URI``, else a SQLite file in :func:`home`."""
    configured = os.environ.get("GPUPLACE_MLFLOW_URI")
    return configured or f"sqlite:///{(home() / 'mlflow.db').resolve()}"


def tables_dir() -> Path:
    """Canonical Parquet tables."""
    return home() / "tables"
