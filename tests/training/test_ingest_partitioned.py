"""A canonical table read on Dask partition by partition (training.ingest.partitioned)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from training.ingest.errors import DataError
from training.ingest.partitioned import read_trace
from training.ingest.sources import get_source
from training.ingest.tables import write_tables


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    return get_source("pai2020-jobs").load().iloc[:3000]


def test_a_folder_of_tables_reads_back_in_order_indexed_by_row(rows: pd.DataFrame, tmp_path: Path) -> None:
    write_tables({"part-0": rows.iloc[:1000], "part-1": rows.iloc[1000:]}, tmp_path)
    trace = read_trace(tmp_path)
    assert trace.known_divisions and trace.npartitions == 2
    assert trace.divisions == (0, 1000, 2999)
    back = trace.compute()
    assert back.index.tolist() == list(range(3000))
    pd.testing.assert_frame_equal(back.reset_index(drop=True), rows.reset_index(drop=True))


def test_a_bad_value_is_named_with_its_file_row_and_column(rows: pd.DataFrame, tmp_path: Path) -> None:
    broken = rows.copy()
    broken.loc[2500, "duration_s"] = -5.0
    write_tables({"part-0": broken.iloc[:1000], "part-1": broken.iloc[1000:]}, tmp_path)
    with pytest.raises(DataError, match=r"duration_s must be finite and non-negative") as raised:
        read_trace(tmp_path).compute()
    assert "2501" in str(raised.value) and str(tmp_path) in str(raised.value)


def test_a_missing_trace_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        read_trace(tmp_path / "absent.parquet")
