"""Serving-time features equal the training-time (causal) features of a job submitted after the history."""

from __future__ import annotations

import numpy as np
import pandas as pd

from training.features.frames import build_features, online_features
from training.features.targets import target_spec
from training.ingest.sources import get_source


def test_online_history_matches_the_causal_sweep() -> None:
    table = get_source("pai2020-jobs").load().iloc[:3000]
    spec = target_spec("pai2020-jobs", "duration")
    _, state = build_features(table, spec)
    # replay 20 of the table's jobs as if submitted after every job finished (SYNTHETIC submit times)
    late = table.iloc[::150].copy()
    late["submit_time_s"] = table["end_time_s"].max() + 1.0
    late["job_id"] = late["job_id"] + "-late"
    late[["start_time_s", "end_time_s", "duration_s"]] = np.nan  # just submitted: not finished
    together = pd.concat([table, late], ignore_index=True)
    causal, _ = build_features(together, spec)
    online = online_features(late.reset_index(drop=True), spec, state)
    hist = [c for c in online.columns if c.startswith(("hist_", "rec_"))] + ["baseline", "depth"]
    hist += ["rule", "rule_err_q90"]  # the history rule and its error scale, from the same state
    np.testing.assert_allclose(online[hist].to_numpy(dtype=float),
                               causal.iloc[len(table):][hist].to_numpy(dtype=float), equal_nan=True)
