"""The promotion gate: ``champion`` moves to the challenger only if it is better on the same holdout.

Both bundles are scored on the challenger's holdout (the later ``test_share`` of each target's source,
rebuilt from the data): the challenger must have a lower mean absolute log error on the primary target
by at least ``margin``, and a P90 coverage no further from the nominal 0.9 than the champion's plus
0.01. Without a champion the challenger is promoted. Promoting is one alias move.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from models.registry import CHALLENGER, CHAMPION, ModelRegistry
from training.ingest.sources import get_source
from training.pipeline.bundle import EstimatorBundle
from training.pipeline.evaluate import time_split
from training.pipeline.metrics import scores

NOMINAL = 0.9
COVERAGE_SLACK = 0.01


@dataclass(frozen=True)
class Decision:
    promoted: bool
    challenger: str | None
    champion_before: str | None
    reason: str
    comparison: dict[str, dict[str, float]]


def holdout_scores(bundle: EstimatorBundle, reference: EstimatorBundle, test_share: float,
                   tables: Mapping[str, pd.DataFrame] | None = None) -> dict[str, Any]:
    """Scores of ``bundle`` on the holdout of each target of ``reference`` that both have (each source's
    table from ``tables`` if given there, else the shipped one)."""
    found: dict[str, Any] = {}
    for name, target in reference.targets.items():
        if name not in bundle.targets:
            continue
        table = tables[target.source] if tables and target.source in tables else get_source(target.source).load()
        split = time_split(table, target.spec, test_share)
        estimator = bundle.targets[name].estimator
        features = split.features.iloc[split.test].copy()
        for column in estimator.feature_names_:
            if column not in features:
                features[column] = np.nan
        predicted = estimator.predict(features)
        found[name] = scores(predicted.point, predicted.p90, split.target[split.test])
    return found


def promote(registry: ModelRegistry, margin: float = 0.0, primary: str = "duration",
            tables: Mapping[str, pd.DataFrame] | None = None) -> Decision:
    """Move ``champion`` to the current ``challenger`` if the gate passes; idempotent. Both are scored on
    the holdout rebuilt from ``tables`` (see :func:`holdout_scores`)."""
    challenger = registry.alias_version(CHALLENGER)
    champion = registry.alias_version(CHAMPION)
    if challenger is None:
        return Decision(False, None, champion, "no challenger registered", {})
    if challenger == champion:
        return Decision(False, challenger, champion, f"version {challenger} is already the champion", {})
    if champion is None:
        registry.set_alias(CHAMPION, challenger)
        return Decision(True, challenger, None, "no champion yet", {})
    test_share = float(registry.run_info(challenger).params.get("test_share", "0.3"))
    _, new = registry.load(challenger)
    _, old = registry.load(champion)
    new_scores, old_scores = holdout_scores(new, new, test_share, tables), holdout_scores(old, new, test_share, tables)
    key = primary if primary in new_scores else next(iter(new_scores), None)
    comparison = {"challenger": _flat(new_scores), "champion": _flat(old_scores)}
    if key is None or key not in old_scores:
        registry.set_alias(CHAMPION, challenger)
        return Decision(True, challenger, champion, "the champion has none of the challenger's targets", comparison)
    better = new_scores[key]["male"] <= old_scores[key]["male"] - margin and \
        new_scores[key]["male"] < old_scores[key]["male"]
    calibrated = abs(new_scores[key]["p90_coverage"] - NOMINAL) <= \
        abs(old_scores[key]["p90_coverage"] - NOMINAL) + COVERAGE_SLACK
    reason = (f"{key} MALE {new_scores[key]['male']:.4f} vs {old_scores[key]['male']:.4f} (margin {margin}); "
              f"P90 coverage {new_scores[key]['p90_coverage']:.3f} vs {old_scores[key]['p90_coverage']:.3f}")
    if better and calibrated:
        registry.set_alias(CHAMPION, challenger)
        return Decision(True, challenger, champion, "better: " + reason, comparison)
    return Decision(False, challenger, champion, "not better: " + reason, comparison)


def _flat(found: dict[str, Any]) -> dict[str, float]:
    return {f"{t}.{k}": float(v) for t, entry in found.items() for k, v in entry.items()}
