"""Causal features kept on disk: read back equal to building them, made again when the table, or a file,
changes; never half-written (the first 3,000 rows of the shipped PAI job table)."""

from __future__ import annotations

from pathlib import Path
from unittest.mock import patch

import pandas as pd
import pytest

from training.features import cache
from training.features.cache import cached_features, digest
from training.features.frames import build_features
from training.features.targets import target_spec
from training.ingest.sources import get_source

SPEC = target_spec("pai2020-jobs", "duration")


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return get_source("pai2020-jobs").load().iloc[:3000]


def test_features_read_back_equal_those_built(table: pd.DataFrame, tmp_path: Path) -> None:
    built = build_features(table, SPEC)[0]
    first = cached_features(table, SPEC, tmp_path)
    with patch.object(cache, "build_features", side_effect=AssertionError("built again")):
        again = cached_features(table, SPEC, tmp_path)
    pd.testing.assert_frame_equal(first, built)
    pd.testing.assert_frame_equal(again, built)
    assert [p.name for p in tmp_path.iterdir()] == [f"features-{digest(table, SPEC)}.parquet"]


def test_another_table_or_a_damaged_file_is_built_again(table: pd.DataFrame, tmp_path: Path) -> None:
    cached_features(table, SPEC, tmp_path)
    changed = table.copy()
    changed.loc[changed.index[10], "duration_s"] = 12_345.0
    assert digest(changed, SPEC) != digest(table, SPEC)
    pd.testing.assert_frame_equal(cached_features(changed, SPEC, tmp_path), build_features(changed, SPEC)[0])
    path = tmp_path / f"features-{digest(table, SPEC)}.parquet"
    path.write_bytes(b"not parquet")
    pd.testing.assert_frame_equal(cached_features(table, SPEC, tmp_path), build_features(table, SPEC)[0])
    assert path.read_bytes()[:4] == b"PAR1"  # written again, whole


def test_a_failed_write_leaves_no_file_and_still_answers(table: pd.DataFrame, tmp_path: Path) -> None:
    def half_written(self: pd.DataFrame, path: Path) -> None:
        Path(path).write_bytes(b"PAR1 and then the disk was full")
        raise OSError("No space left on device")

    with patch.object(pd.DataFrame, "to_parquet", half_written):
        frame = cached_features(table.iloc[:500], SPEC, tmp_path)
    assert len(frame) == 500 and not list(tmp_path.iterdir())


def test_only_the_most_recently_used_files_are_kept(table: pd.DataFrame, tmp_path: Path) -> None:
    with patch.object(cache, "KEPT", 2):
        for n in (300, 400, 500):
            cached_features(table.iloc[:n], SPEC, tmp_path)
    assert sorted(p.name for p in tmp_path.glob("features-*.parquet")) == sorted(
        f"features-{digest(table.iloc[:n], SPEC)}.parquet" for n in (400, 500))
