"""Where gpuplace keeps its working files: ``$GPUPLACE_HOME``, by default ``./.gpuplace``."""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """The working folder (tables, and later the MLflow store and the state database)."""
    return Path(os.environ.get("GPUPLACE_HOME", ".gpuplace"))


def tables_dir() -> Path:
    """Canonical Parquet tables."""
    return home() / "tables"
