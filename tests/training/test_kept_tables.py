"""A trace table kept on disk (``Source.load(cache=...)``): read back equal to loading the file, loaded again when
the file's bytes change, and a bad file refused with its error as without a cache, nothing kept (the real
openb pod list of ``data/``, and a copy of it changed by hand)."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from training.ingest.errors import DataError
from training.ingest.sources import get_source

SOURCE = get_source("openb2023")


def test_a_table_read_back_equals_the_file_loaded(tmp_path: Path) -> None:
    loaded = SOURCE.load()
    first = SOURCE.load(cache=tmp_path)
    def loaded_again(path: Path) -> pd.DataFrame:
        raise AssertionError("loaded again")

    again = replace(SOURCE, loader=loaded_again).load(cache=tmp_path)
    pd.testing.assert_frame_equal(first, loaded)
    pd.testing.assert_frame_equal(again, loaded)
    assert [p.suffix for p in tmp_path.iterdir()] == [".parquet"]


def test_changed_bytes_are_loaded_again_and_a_bad_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pods.csv"
    shipped = SOURCE.default_path()
    assert shipped is not None
    shutil.copy(shipped, path)
    cache = tmp_path / "cache"
    before = SOURCE.load(path, cache=cache)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(lines[:-1]), encoding="utf-8")  # the last pod gone
    after = SOURCE.load(path, cache=cache)
    assert len(after) == len(before) - 1
    pd.testing.assert_frame_equal(after, SOURCE.load(path))
    path.write_text(lines[0] + "not,a,pod\n", encoding="utf-8")
    with pytest.raises(DataError) as raised:
        SOURCE.load(path, cache=cache)
    assert str(path) in str(raised.value)
    assert len(list(cache.glob("table-*.parquet"))) == 2
