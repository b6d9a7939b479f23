"""The P90 the replay tells the scheduler beside a causal duration estimate: from how wrong the estimate was
on the jobs that had ended before each submission (SYNTHETIC jobs)."""

from __future__ import annotations

import math

import numpy as np

from training.features.rule import MIN_ERRORS
from training.replay.trace_jobs import causal_p90


def test_exact_estimates_get_their_p50_as_p90_once_enough_jobs_ended() -> None:
    submit = np.arange(200) * 100.0
    p90 = causal_p90(submit, [50.0] * 200, [50.0] * 200)
    ended_before = np.searchsorted(submit + 50.0, submit, side="right")
    assert np.isnan(p90[ended_before < MIN_ERRORS]).all()
    assert np.allclose(p90[ended_before >= MIN_ERRORS], 50.0)


def test_a_p90_covers_nine_in_ten_of_jobs_like_those_that_ended() -> None:
    rng = np.random.default_rng(7)
    n = 4000
    submit = np.arange(n) * 10.0
    p50 = np.full(n, 600.0)
    real = (1 + p50) * np.exp(rng.normal(0.0, 0.8, n)) - 1  # log errors centred on the estimate
    p90 = causal_p90(submit, real, p50)
    told = ~np.isnan(p90)
    assert told.sum() > 0.9 * n and (p90[told] >= p50[told]).all()
    # once the jobs that ended are a fair sample (early on the short ones end first: a narrower band)
    steady = told & (np.arange(n) >= 1000)
    assert abs(float(np.mean(real[steady] <= p90[steady])) - 0.9) < 0.03


def test_a_p90_reads_only_jobs_that_ended_before_the_submission() -> None:
    submit = np.arange(300) * 100.0
    real, p50 = np.full(300, 50.0), np.full(300, 50.0)
    before = causal_p90(submit, real, p50)
    later = real.copy()
    later[200:260] = 500.0  # jobs submitted from 20,000 s run longer: no P90 told before they end may know it
    after = causal_p90(submit, later, p50)
    assert np.array_equal(before[:206], after[:206], equal_nan=True)  # the first of them ends at 20,500 s
    assert after[-1] > 50.0 and not math.isnan(after[-1])
