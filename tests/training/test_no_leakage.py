"""No future information reaches a feature: perturbing what is unknowable at submit time changes nothing."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from training.features.activity import activity_features
from training.features.history import causal_history

KEYS = {"user": ("user",), "group_user": ("group", "user")}


def synthetic_table(seed: int, n: int) -> pd.DataFrame:
    """SYNTHETIC jobs: a few users and groups, random submit, start and end times."""
    rng = np.random.default_rng(seed)
    submit = np.sort(rng.uniform(0, 1000, n)).round()
    start = submit + rng.integers(0, 20, n)
    duration = rng.lognormal(3, 1, n).round()
    return pd.DataFrame({
        "user": rng.choice(["u1", "u2", "u3"], n), "group": rng.choice(["g1", "g2", None], n),
        "submit_time_s": submit, "start_time_s": start, "end_time_s": start + duration, "duration_s": duration,
        "censored": rng.random(n) < 0.05,
    })


def _perturb_future(table: pd.DataFrame, t: float, seed: int) -> pd.DataFrame:
    """Change everything not observable at time t: labels and ends of jobs finishing after t, later jobs."""
    rng = np.random.default_rng(seed + 1)
    future = table.copy()
    ends_later = future["end_time_s"] > t
    future.loc[ends_later, "duration_s"] = rng.uniform(1, 1e5, int(ends_later.sum()))
    future.loc[ends_later, "end_time_s"] = t + 1 + rng.uniform(0, 1e4, int(ends_later.sum()))
    submitted_later = future["submit_time_s"] > t
    future.loc[submitted_later, "user"] = "u1"
    future.loc[submitted_later, "start_time_s"] = future.loc[submitted_later, "submit_time_s"]
    return future


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(5, 80), cut=st.floats(0, 1000))
def test_history_and_activity_ignore_the_future(seed: int, n: int, cut: float) -> None:
    table = synthetic_table(seed, n)
    future = _perturb_future(table, cut, seed)
    known = (table["submit_time_s"] <= cut).to_numpy()
    for build in (lambda t: causal_history(t, "duration_s", KEYS)[0], lambda t: activity_features(t, KEYS)):
        before, after = build(table), build(future)
        pd.testing.assert_frame_equal(before[known], after[known])


def test_history_counts_only_jobs_finished_before_submission() -> None:
    # job a ends at 100; job b is submitted at 100 (sees a), job c at 99 (does not)
    table = pd.DataFrame({"user": ["u", "u", "u"], "submit_time_s": [0.0, 100.0, 99.0],
                          "start_time_s": [0.0, 100.0, 99.0], "end_time_s": [100.0, 200.0, 150.0],
                          "duration_s": [100.0, 100.0, 51.0], "censored": [False, False, False]})
    hist, state = causal_history(table, "duration_s", {"user": ("user",)})
    assert hist["hist_user_n"].tolist() == [0.0, 1.0, 0.0]
    assert hist["hist_user_mean"].iloc[1] == 100.0
    # the state after the sweep holds all three finished jobs: mean (100 + 100 + 51) / 3
    assert state.lookup("user", ("u",))[1] == (100 + 100 + 51) / 3


def test_censored_jobs_never_become_history() -> None:
    table = pd.DataFrame({"user": ["u", "u"], "submit_time_s": [0.0, 500.0], "start_time_s": [0.0, 500.0],
                          "end_time_s": [100.0, 600.0], "duration_s": [100.0, 100.0], "censored": [True, False]})
    hist, _ = causal_history(table, "duration_s", {"user": ("user",)})
    assert hist["hist_user_n"].tolist() == [0.0, 0.0]


def test_activity_sees_running_siblings() -> None:
    # a starts at 10 and runs to 1000; b is submitted at 300: one active sibling, running for 290 s
    table = pd.DataFrame({"user": ["u", "u"], "submit_time_s": [0.0, 300.0], "start_time_s": [10.0, 300.0],
                          "end_time_s": [1000.0, 400.0]})
    act = activity_features(table, {"user": ("user",)})
    assert act.loc[1, ["act_user_active", "act_user_elapsed_s", "act_user_gap_s"]].tolist() == [1.0, 290.0, 300.0]
    assert act.loc[0, "act_user_active"] == 0.0 and np.isnan(act.loc[0, "act_user_elapsed_s"])
