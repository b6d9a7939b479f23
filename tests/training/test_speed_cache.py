"""The speed model of the shipped profiles kept on disk: read back equal to fitting it, fitted again when a profile
file changes or the file is damaged, never half-written (the real Pollux, Gavel and Zeus profiles of ``data/``)."""

from __future__ import annotations

import shutil
from pathlib import Path
from unittest.mock import patch

import pytest

from placement.model.cluster_io import DATA_DIR_ENV, data_dir
from placement.model.speed import SpeedModel
from training.performance import cache
from training.performance.build import fit_speed_model
from training.performance.cache import PROFILES, digest, shipped_speed_model


@pytest.fixture(scope="module")
def fitted() -> SpeedModel:
    return fit_speed_model()


def test_the_model_read_back_equals_the_one_fitted(fitted: SpeedModel, tmp_path: Path) -> None:
    first = shipped_speed_model(tmp_path)
    with patch.object(cache, "_fit", side_effect=AssertionError("fitted again")):
        again = shipped_speed_model(tmp_path)
    assert first == fitted
    assert again == fitted
    assert again.to_json() == fitted.to_json()
    assert [p.name for p in tmp_path.iterdir()] == [f"speed-model-{digest()}.json"]


def test_a_changed_profile_or_a_damaged_file_is_fitted_again(fitted: SpeedModel, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    kept = tmp_path / "cache"
    shipped_speed_model(kept)
    path = kept / f"speed-model-{digest()}.json"
    path.write_text('{"workloads": ', encoding="utf-8")
    assert shipped_speed_model(kept) == fitted
    assert SpeedModel.from_json(path.read_text(encoding="utf-8")) == fitted  # written again, whole

    copy = tmp_path / "data"
    for name in PROFILES:
        shutil.copytree(data_dir() / name, copy / name)
    before = digest()
    monkeypatch.setenv(DATA_DIR_ENV, str(copy))
    assert digest() == before  # the same bytes: the same model
    gavel = copy / "profiles" / "gavel" / "simulation_throughputs.json"
    gavel.write_text(gavel.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    assert digest() != before
    with patch.object(cache, "_fit", return_value=fitted) as fit:
        shipped_speed_model(kept)
    assert fit.call_count == 1


def test_a_failed_write_leaves_no_file_and_still_answers(fitted: SpeedModel, tmp_path: Path) -> None:
    def full_disk(self: Path, text: str, encoding: str | None = None) -> int:
        self.write_bytes(text[:10].encode())
        raise OSError(28, "No space left on device")

    with patch.object(Path, "write_text", full_disk):
        assert shipped_speed_model(tmp_path) == fitted
    assert list(tmp_path.iterdir()) == []
