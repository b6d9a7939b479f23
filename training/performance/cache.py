"""The job-performance model of the shipped profiles, kept on disk by what it is fitted from.

A replay with the measured runtime fits the speed model (``training.performance.build.fit_speed_model``) on the
Pollux, Gavel and Zeus profiles in the data folder before it replays anything: about 1.5 s, and the imports of
SciPy's least squares and scikit-learn's regressor besides, for a model that is the same every time the profiles
and the code that fits them are. So it is kept in ``folder`` as JSON (``SpeedModel.to_json``, which gives the
same model back), named by a digest of the profile files and the source of ``training/performance`` and of the
model itself (``training.kept``: written whole or not at all; a damaged file fitted again; at most ``KEPT``
kept).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from placement.model import speed
from placement.model.cluster_io import data_dir
from placement.model.speed import SpeedModel
from training.kept import add_files, kept

KEPT = 4
"""Speed-model files kept in a folder (a data folder's profiles, a few versions of the code)."""
PROFILES = ("profiles", "zeus")
"""The data folder's subfolders the shipped model is fitted from (Pollux and Gavel; Zeus)."""
_CODE = (Path(__file__).resolve().parent, Path(speed.__file__).resolve())


def shipped_speed_model(folder: Path | None) -> SpeedModel:
    """``fit_speed_model()`` on the data folder's profiles, read from ``folder`` where it was fitted before
    (always fitted where ``folder`` is ``None``)."""
    if folder is None:
        return _fit()
    return kept(folder / f"speed-model-{digest()}.json", _fit,
                lambda path: SpeedModel.from_json(path.read_text(encoding="utf-8")),
                lambda model, aside: aside.write_text(model.to_json(), encoding="utf-8"), KEPT,
                (OSError, ValueError, KeyError, TypeError))


def _fit() -> SpeedModel:
    from training.performance.build import fit_speed_model  # SciPy and scikit-learn: only to fit

    return fit_speed_model()


def digest() -> str:
    """What the shipped speed model is fitted from, as 24 hex digits: every file of the profile folders (path and
    bytes) and the source of the code that reads, fits and writes it."""
    h = hashlib.sha256()
    root = data_dir()
    add_files(h, (p for name in PROFILES for p in (root / name).rglob("*") if p.is_file()), root)
    code, model = _CODE
    add_files(h, [*code.glob("*.py"), model], code.parent.parent)
    return h.hexdigest()[:24]
