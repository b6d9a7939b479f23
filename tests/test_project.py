"""The project itself: packages import from this checkout, shipped data is byte-identical to its source."""

from __future__ import annotations

import hashlib
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("service", "models", "placement", "training", "gpuplace")


@pytest.mark.parametrize("name", PACKAGES)
def test_packages_import_from_this_repository(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__file__ is not None
    assert Path(module.__file__).resolve().parent == REPO / name


def test_shipped_data_is_unedited() -> None:
    sums = (REPO / "data" / "SHA256SUMS").read_text().splitlines()
    assert len(sums) >= 25
    for line in sums:
        digest, name = line.split(maxsplit=1)
        assert hashlib.sha256((REPO / "data" / name).read_bytes()).hexdigest() == digest, name


def test_data_readme_keeps_the_attribution() -> None:
    text = (REPO / "data" / "README.md").read_text()
    for citation in ("NSDI'22", "ATC'23", "ATC'19", "NSDI'25", "CC BY 4.0", "Gavel", "Pollux"):
        assert citation in text
