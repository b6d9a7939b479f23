"""Causal feature frames kept on disk, by what they are computed from.

A replay builds the causal features of the whole trace (every earlier job's history, 68,727 PAI rows: about
4 s) before it replays a few thousand jobs in about as long; the same trace gives the same features, so they
are kept in ``folder`` as Parquet, named by a digest of the table (its values, index, columns and dtypes),
the target spec and the source of ``training/features`` (a change of the code that makes them makes them
again); ``training.kept`` writes it whole or not at all, makes a damaged one again and keeps at most ``KEPT``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd

from training.features.frames import TargetSpec, build_features
from training.kept import add_files, kept

KEPT = 8
"""Feature files kept in a folder (traces x targets a user replays)."""
_CODE = Path(__file__).resolve().parent


def cached_features(table: pd.DataFrame, spec: TargetSpec, folder: Path | None) -> pd.DataFrame:
    """``build_features(table, spec)[0]``, read from ``folder`` when it was made before (always made where
    ``folder`` is ``None``)."""
    if folder is None:
        return build_features(table, spec)[0]
    return kept(folder / f"features-{digest(table, spec)}.parquet", lambda: build_features(table, spec)[0],
                pd.read_parquet, lambda frame, aside: frame.to_parquet(aside), KEPT)


def digest(table: pd.DataFrame, spec: TargetSpec) -> str:
    """What the features of ``table`` for ``spec`` are computed from, as 24 hex digits."""
    h = hashlib.sha256()
    h.update(pd.util.hash_pandas_object(table, index=True).to_numpy().tobytes())
    h.update(repr([(str(c), str(t)) for c, t in table.dtypes.items()]).encode())
    h.update(repr(spec).encode())
    add_files(h, _CODE.glob("*.py"), _CODE)
    return h.hexdigest()[:24]
