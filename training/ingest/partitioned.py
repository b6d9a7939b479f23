"""A canonical table on Dask, read partition by partition where it is stored, for traces larger than memory."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from training.ingest.schema import conform

ROW = "row"
"""The index of a trace read here: each job's position in the stored table."""


def read_trace(path: Path) -> Any:
    """The canonical table at ``path`` (a Parquet file as ``gpuplace ingest`` writes it, or a folder of such files
    in order) as a ``dask.dataframe``: each partition checked against the canonical schema (an error names the
    file's row), indexed by row position with known divisions, as :func:`training.features.distributed.
    causal_features` needs. Rows are kept in their stored order. Counting each partition's rows reads the files
    once."""
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder")
    lazy: Any = importlib.import_module("dask.dataframe")
    raw = lazy.read_parquet(str(path))
    counts = raw.map_partitions(len).compute().tolist()
    kept = [i for i, count in enumerate(counts) if count]
    if not kept:
        raise ValueError(f"{path}: no rows")
    sizes = [counts[i] for i in kept]
    starts = row_starts(sizes)
    meta = _with_rows(conform(raw._meta, path), 0)
    table = raw.partitions[kept].map_partitions(_conformed, str(path), starts, meta=meta)
    divisions = [*starts, starts[-1] + sizes[-1] - 1]
    return table.set_index(ROW, sorted=True, divisions=divisions)


def row_starts(counts: list[int]) -> list[int]:
    """The position of each partition's first row, from the partitions' row counts."""
    return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int).tolist() if counts else []


def _conformed(part: pd.DataFrame, origin: str, starts: list[int],
               partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
    assert partition_info is not None  # dask passes it to a function that names it
    start = starts[partition_info["number"]]
    # the rows' positions in the file, 1 for the first, so that an error names a row a person can find
    return _with_rows(conform(part.reset_index(drop=True), origin, np.arange(start + 1, start + 1 + len(part))), start)


def _with_rows(table: pd.DataFrame, start: int) -> pd.DataFrame:
    return table.assign(**{ROW: np.arange(start, start + len(table), dtype=np.int64)})
