"""Causal feature frames kept on disk, by what they are computed from.

A replay builds the causal features of the whole trace (every earlier job's history, 68,727 PAI rows: about
4 s) before it replays a few thousand jobs in about as long; the same trace gives the same features, so they
are kept in ``folder`` as Parquet, named by a digest of the table (its values, index, columns and dtypes),
the target spec and the source of ``training/features`` (a change of the code that makes them makes them
again). A file is written whole or not at all (written aside, then renamed); one that cannot be read is
made again. At most ``KEPT`` are kept, the least recently used dropped first.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import pandas as pd

from training.features.frames import TargetSpec, build_features

log = logging.getLogger(__name__)

KEPT = 8
"""Feature files kept in a folder (traces x targets a user replays)."""
_CODE = Path(__file__).resolve().parent


def cached_features(table: pd.DataFrame, spec: TargetSpec, folder: Path | None) -> pd.DataFrame:
    """``build_features(table, spec)[0]``, read from ``folder`` when it was made before (always made where
    ``folder`` is ``None``)."""
    if folder is None:
        return build_features(table, spec)[0]
    path = folder / f"features-{digest(table, spec)}.parquet"
    if path.exists():
        try:
            frame = pd.read_parquet(path)
            os.utime(path)  # recently used: kept longest
            return frame
        except (OSError, ValueError) as exc:  # a damaged file is made again
            log.warning("feature cache unreadable, building again", extra={"path": str(path), "error": str(exc)})
    frame = build_features(table, spec)[0]
    aside = path.with_name(f"{path.name}.{os.getpid()}.part")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(aside)
        os.replace(aside, path)
        _prune(folder)
    except OSError as exc:  # a read-only or full disk costs the next run the build, nothing else
        aside.unlink(missing_ok=True)
        log.warning("feature cache not written", extra={"path": str(path), "error": str(exc)})
    return frame


def digest(table: pd.DataFrame, spec: TargetSpec) -> str:
    """What the features of ``table`` for ``spec`` are computed from, as 24 hex digits."""
    h = hashlib.sha256()
    h.update(pd.util.hash_pandas_object(table, index=True).to_numpy().tobytes())
    h.update(repr([(str(c), str(t)) for c, t in table.dtypes.items()]).encode())
    h.update(repr(spec).encode())
    for source in sorted(_CODE.glob("*.py")):
        h.update(source.name.encode())
        h.update(source.read_bytes())
    return h.hexdigest()[:24]


def _prune(folder: Path) -> None:
    files = sorted(folder.glob("features-*.parquet"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in files[KEPT:]:
        old.unlink(missing_ok=True)
