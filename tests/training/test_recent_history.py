"""The recent-history statistics and the history rule: equal to a plain loop, causal, and served alike."""

from __future__ import annotations

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.training.test_no_leakage import _perturb_future, synthetic_table
from training.features.frames import build_features, rule_frame_columns
from training.features.recent import recent_history
from training.features.rule import error_scale
from training.features.targets import target_spec
from training.ingest.sources import get_source
from training.pipeline.evaluate import time_split

KEYS = {"user": ("user",), "group_user": ("group", "user")}


def _loop(table: pd.DataFrame, columns: tuple[str, ...], window: int, halflife: float) -> pd.DataFrame:
    """The statistics the slow way: for each job, scan every other job (what the vectorised code replaces)."""
    rows = []
    for _, job in table.iterrows():
        key = [job[c] for c in columns]
        same = np.ones(len(table), dtype=bool)
        for column, value in zip(columns, key, strict=True):
            same &= (table[column] == value).fillna(False).to_numpy(dtype=bool) if pd.notna(value) else False
        done = same & (table["end_time_s"] <= job["submit_time_s"]).to_numpy() & ~table["censored"].to_numpy(bool)
        earlier = table[done].sort_values("end_time_s", kind="stable")
        values = earlier["duration_s"].to_numpy(dtype=float)[-window:]
        weights = 0.5 ** (np.arange(len(values))[::-1] / halflife)
        if len(values) == 0:
            rows.append({"n": 0.0, "rwmed": np.nan, "rwlog": np.nan, "last": np.nan, "rwq25": np.nan,
                         "rwq75": np.nan, "quick": np.nan})
            continue
        order = np.argsort(values, kind="stable")
        cumulative = np.cumsum(weights[order])

        def quantile(q: float, values: np.ndarray = values, order: np.ndarray = order,
                     cumulative: np.ndarray = cumulative, total: float = weights.sum()) -> float:
            return float(values[order][np.argmax(cumulative >= total * q)])

        rows.append({"n": float(done.sum()), "rwmed": quantile(0.5),
                     "rwlog": float(np.sum(weights * np.log1p(values)) / weights.sum()), "last": values[-1],
                     "rwq25": quantile(0.25), "rwq75": quantile(0.75),
                     "quick": float(np.sum(weights * (values < 60.0)) / weights.sum())})
    return pd.DataFrame(rows, index=table.index)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 60), window=st.integers(1, 6))
def test_vectorised_statistics_equal_a_plain_loop(seed: int, n: int, window: int) -> None:
    table = synthetic_table(seed, n)  # SYNTHETIC jobs (tests.training.test_no_leakage)
    # distinct end times: the loop and the sweep order ties differently, and either order is causal
    table["end_time_s"] += np.arange(n) * 1e-6
    fast, _ = recent_history(table, "duration_s", KEYS, window=window, halflife=2.0)
    for name, columns in KEYS.items():
        slow = _loop(table, columns, window, 2.0)
        for stat in slow.columns:
            np.testing.assert_allclose(fast[f"rec_{name}_{stat}"], slow[stat], equal_nan=True, err_msg=f"{name} {stat}")


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(5, 80), cut=st.floats(0, 1000))
def test_recent_statistics_and_the_error_scale_ignore_the_future(seed: int, n: int, cut: float) -> None:
    table = synthetic_table(seed, n)  # SYNTHETIC jobs
    future = _perturb_future(table, cut, seed)
    known = (table["submit_time_s"] <= cut).to_numpy()
    before, _ = recent_history(table, "duration_s", KEYS, window=5)
    after, _ = recent_history(future, "duration_s", KEYS, window=5)
    pd.testing.assert_frame_equal(before[known], after[known])
    rule = before["rec_group_user_rwmed"].fillna(before["rec_user_rwmed"]).to_numpy()
    scale_before, _ = error_scale(table, "duration_s", rule)
    scale_after, _ = error_scale(future, "duration_s", after["rec_group_user_rwmed"].fillna(
        after["rec_user_rwmed"]).to_numpy())
    np.testing.assert_array_equal(scale_before[known], scale_after[known])


def test_the_rule_of_a_real_job_never_reads_a_later_job() -> None:
    # real PAI jobs; everything unknowable at the cut is then changed (SYNTHETIC values)
    table = get_source("pai2020-jobs").load().iloc[:4000].reset_index(drop=True)
    spec = target_spec("pai2020-jobs", "duration")
    cut = float(table["submit_time_s"].iloc[3000])
    future = table.copy()
    later_end = (future["end_time_s"] > cut).to_numpy()
    future.loc[later_end, "duration_s"] = 1.0 + np.arange(int(later_end.sum()))
    future.loc[later_end, "end_time_s"] = cut + 1.0 + np.arange(int(later_end.sum()))
    later = (future["submit_time_s"] > cut).to_numpy()
    future.loc[later, "group"] = "another-group"
    columns = rule_frame_columns(spec)
    before, after = build_features(table, spec)[0], build_features(future, spec)[0]
    known = (table["submit_time_s"] <= cut).to_numpy()
    assert known.sum() > 3000 and before.loc[known, "rule"].notna().mean() > 0.8
    pd.testing.assert_frame_equal(before.loc[known, columns], after.loc[known, columns])
    assert not before.loc[~known, "rule"].equals(after.loc[~known, "rule"])  # the change itself is seen later


def test_only_jobs_finished_by_the_submission_count_newest_first() -> None:
    # a ends at 100 (60 s), b at 150 (130 s), c at 400; d is submitted at 150: it sees a and b, not c
    table = pd.DataFrame({"user": ["u"] * 4, "submit_time_s": [0.0, 10.0, 20.0, 150.0],
                          "start_time_s": [40.0, 20.0, 20.0, 150.0], "end_time_s": [100.0, 150.0, 400.0, 1000.0],
                          "duration_s": [60.0, 130.0, 380.0, 850.0], "censored": [False] * 4})
    rec, state = recent_history(table, "duration_s", {"user": ("user",)}, window=50, halflife=1.0)
    d = rec.iloc[3]
    assert d["rec_user_n"] == 2.0 and d["rec_user_last"] == 130.0
    # weights 0.5 for a (older), 1 for b: the weighted median is b's 130, the weighted log-mean leans to b
    assert d["rec_user_rwmed"] == 130.0
    assert d["rec_user_rwlog"] == (0.5 * np.log1p(60.0) + np.log1p(130.0)) / 1.5
    assert rec.iloc[0]["rec_user_n"] == 0.0 and np.isnan(rec.iloc[0]["rec_user_rwmed"])
    # the serving state holds every finished job, oldest first, also those ending after the last submission
    assert state.tables["user"][("u",)] == (4, (60.0, 130.0, 380.0, 850.0))


def test_validation_split_never_touches_the_held_out_jobs() -> None:
    table = get_source("pai2020-jobs").load().iloc[:5000]
    spec = target_spec("pai2020-jobs", "duration")
    holdout, validation = time_split(table, spec), time_split(table, spec, validation=True)
    assert set(validation.train) | set(validation.test) == set(holdout.train)
    assert len(validation.test) == round(len(holdout.train) * 0.3)
    assert table["submit_time_s"].iloc[validation.test].max() <= table["submit_time_s"].iloc[holdout.test].min()
