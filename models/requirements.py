"""What a registered model needs to load, and whether this installation has it.

A registered bundle is a cloudpickled Python object: its classes are pickled by reference to gpuplace's
modules, and its fitted estimators are pickles of scikit-learn and LightGBM objects. It loads only where
the same gpuplace and compatible libraries are installed, so each version records them: as its MLflow
``pip_requirements`` (what ``mlflow`` checks and warns about when loading) and as model-version tags that
``gpuplace models list`` reads without downloading the model.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

GPUPLACE = "gpuplace"
LIBRARIES = ("numpy", "pandas", "scipy", "scikit-learn", "lightgbm", "pyarrow", "cloudpickle", "mlflow")
"""Distributions a bundle's pickle refers to or is read with, besides gpuplace itself."""
VERSION_TAG = "gpuplace.version"
REQUIREMENTS_TAG = "gpuplace.requirements"
_PIN = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*==\s*(\S+)\s*$")


def installed(distribution: str) -> str | None:
    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def pip_requirements(lookup: Callable[[str], str | None] = installed) -> list[str]:
    """``name==version`` for gpuplace and each of :data:`LIBRARIES`, as installed in this environment."""
    pins = []
    for name in (GPUPLACE, *LIBRARIES):
        found = lookup(name)
        if found is None:
            raise RuntimeError(f"{name} is not installed: cannot record what the model needs")
        pins.append(f"{name}=={found}")
    return pins


def version_tags(requirements: Iterable[str]) -> dict[str, str]:
    """The model-version tags that record ``requirements`` (one ``name==version`` a line)."""
    pins = list(requirements)
    gpuplace = next((p.split("==", 1)[1] for p in pins if p.startswith(f"{GPUPLACE}==")), "")
    return {VERSION_TAG: gpuplace, REQUIREMENTS_TAG: "\n".join(pins)}


@dataclass(frozen=True)
class Loadability:
    """Whether this installation can load a version: ``yes``; ``no`` (another gpuplace); ``unsure`` (the
    same gpuplace, other library versions: pickles of fitted models may or may not load); ``unknown`` (a
    version registered before requirements were recorded)."""

    verdict: str
    reason: str = ""


def loadability(tags: dict[str, str], lookup: Callable[[str], str | None] = installed) -> Loadability:
    recorded = tags.get(REQUIREMENTS_TAG, "")
    if not recorded:
        return Loadability("unknown", "registered without its requirements")
    mismatches: list[tuple[str, str, str | None]] = []
    for line in recorded.splitlines():
        pin = _PIN.match(line)
        if pin is None:
            continue
        name, wanted = pin.group(1), pin.group(2)
        here = lookup(name)
        if here != wanted:
            mismatches.append((name, wanted, here))
    if not mismatches:
        return Loadability("yes")
    described = "; ".join(f"{name} {wanted} needed, {here or 'none'} installed" for name, wanted, here in mismatches)
    if any(name == GPUPLACE for name, _, _ in mismatches):
        return Loadability("no", described)
    return Loadability("unsure", described)
