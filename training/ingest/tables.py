"""Storing canonical tables as Parquet files, atomically: a reader never sees half a file."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from training.ingest.schema import conform


def write_tables(tables: Mapping[str, pd.DataFrame], folder: Path) -> list[Path]:
    """Write each table to ``folder/<name>.parquet``; all files are complete before any is replaced.

    Every table is first written to a temporary file in ``folder``; only when all of them are written
    are they renamed into place, so a failure leaves the previous files untouched.
    """
    folder.mkdir(parents=True, exist_ok=True)
    staged: list[tuple[Path, Path]] = []
    try:
        for name, table in tables.items():
            handle, tmp_name = tempfile.mkstemp(prefix=f".{name}.", suffix=".parquet.tmp", dir=folder)
            os.close(handle)
            staged.append((Path(tmp_name), folder / f"{name}.parquet"))
            table.to_parquet(tmp_name, index=False)
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, final in staged:
        os.replace(tmp, final)
    return [final for _, final in staged]


def read_table(path: Path) -> pd.DataFrame:
    """Read a table written by :func:`write_tables`, checked against the canonical schema."""
    return conform(pd.read_parquet(path), path)
