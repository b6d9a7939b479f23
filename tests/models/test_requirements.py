"""What a registered model records that it needs, and the verdict on whether an installation can load it."""

from __future__ import annotations

from importlib.metadata import version

import pytest

from models.requirements import (
    LIBRARIES,
    REQUIREMENTS_TAG,
    VERSION_TAG,
    loadability,
    pip_requirements,
    version_tags,
)

HERE = {"gpuplace": "0.3.0", "numpy": "2.1.0", "pandas": "2.2.3", "scipy": "1.14.0", "scikit-learn": "1.6.0",
        "lightgbm": "4.7.0", "pyarrow": "18.0.0", "cloudpickle": "3.1.0", "mlflow": "3.1.0"}


def test_requirements_pin_gpuplace_and_the_libraries_as_installed() -> None:
    pins = pip_requirements()
    assert pins[0] == f"gpuplace=={version('gpuplace')}"
    assert pins[1:] == [f"{name}=={version(name)}" for name in LIBRARIES]
    assert {"scikit-learn", "lightgbm", "numpy", "pandas", "cloudpickle"} <= set(LIBRARIES)


def test_a_library_that_is_not_installed_is_refused() -> None:
    with pytest.raises(RuntimeError, match="lightgbm is not installed"):
        pip_requirements(lambda name: None if name == "lightgbm" else "1.0")


def test_tags_carry_the_gpuplace_version_and_every_pin() -> None:
    tags = version_tags(pip_requirements(HERE.get))
    assert tags[VERSION_TAG] == "0.3.0"
    assert tags[REQUIREMENTS_TAG].splitlines()[:2] == ["gpuplace==0.3.0", "numpy==2.1.0"]


@pytest.mark.parametrize(("installed", "verdict", "reason"), [
    (HERE, "yes", ""),
    ({**HERE, "gpuplace": "0.4.0"}, "no", "gpuplace 0.3.0 needed, 0.4.0 installed"),
    ({**HERE, "lightgbm": "4.6.0"}, "unsure", "lightgbm 4.7.0 needed, 4.6.0 installed"),
    ({k: v for k, v in HERE.items() if k != "scikit-learn"}, "unsure", "scikit-learn 1.6.0 needed, none installed"),
])
def test_loadability_compares_the_pins_with_what_is_installed(installed: dict[str, str], verdict: str,
                                                              reason: str) -> None:
    tags = version_tags(pip_requirements(HERE.get))
    found = loadability(tags, installed.get)
    assert (found.verdict, found.reason) == (verdict, reason)


def test_a_version_without_recorded_requirements_is_unknown() -> None:
    assert loadability({}).verdict == "unknown"
