"""The canonical schema: documented, typed, and strict about bad values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from training.ingest.errors import DataError
from training.ingest.schema import COLUMN_NAMES, conform, empty_table, schema_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "canonical-schema.md"


def test_the_doc_lists_every_column_as_defined() -> None:
    assert schema_markdown() in DOC.read_text()


def test_absent_columns_are_missing_not_zero() -> None:
    table = conform(pd.DataFrame({"source": ["s"], "job_id": ["j"], "task_id": ["0"], "role": ["job"],
                                  "instances": [1], "status": ["ended"], "censored": [False]}), "synthetic")
    assert tuple(table.columns) == COLUMN_NAMES
    assert table["req_gpu"].isna().all() and table["user"].isna().all()


@pytest.mark.parametrize(("column", "value", "words"), [
    ("duration_s", -1.0, "non-negative"),
    ("duration_s", np.inf, "finite"),
    ("req_gpu", -0.5, "non-negative"),
])
def test_conform_rejects_bad_values_with_the_line(column: str, value: float, words: str) -> None:
    frame = pd.DataFrame({"source": ["s", "s"], "job_id": ["a", "b"], "task_id": ["0", "0"], "role": ["job"] * 2,
                          "instances": [1, 1], "status": ["ended"] * 2, "censored": [False, False],
                          column: [1.0, value]})
    with pytest.raises(DataError) as info:
        conform(frame, "synthetic.csv", lines=[10, 11])
    assert (info.value.line, info.value.column) == (11, column)
    assert words in str(info.value)


def test_required_columns_and_unknown_columns() -> None:
    with pytest.raises(DataError, match="job_id is required"):
        conform(pd.DataFrame({"source": ["s"], "job_id": [None], "task_id": ["0"], "role": ["job"],
                              "instances": [1], "status": ["ended"], "censored": [False]}), "synthetic")
    with pytest.raises(ValueError, match="not canonical"):
        conform(pd.DataFrame({"jobid": ["x"]}), "synthetic")


def test_empty_table_is_typed() -> None:
    table = empty_table()
    assert len(table) == 0 and str(table["duration_s"].dtype) == "float64"
