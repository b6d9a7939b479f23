"""The conformal rules every estimator of ``training.needs`` calibrates its P90 with."""

from __future__ import annotations

import numpy as np
import pytest

from training.needs.scoring import conformal_quantile, grouped_conformal_quantile


def test_conformal_quantile_is_the_rank_with_one_more_row() -> None:
    residuals = np.arange(1.0, 21.0)  # 1 .. 20
    # ceil(0.9 x 21) = 19: the 19th smallest.
    assert conformal_quantile(residuals, 0.9) == 19.0
    # Too few rows for the rank: the largest; no finite row: NaN.
    assert conformal_quantile(np.array([3.0, 1.0, np.nan]), 0.9) == 3.0
    assert np.isnan(conformal_quantile(np.array([np.nan, np.inf]), 0.9))


def test_every_group_weighs_the_same_whatever_its_rows() -> None:
    # Group "a": 18 small residuals 0.01 .. 0.18; group "b": two large ones, 1 and 2. n = 20, K = 2.
    residuals = np.r_[np.arange(1, 19) / 100, 1.0, 2.0]
    groups = np.array(["a"] * 18 + ["b"] * 2)
    # By row, "a" is 90% of the calibration: ceil(0.7 x 21) = 15th smallest, 0.15.
    assert conformal_quantile(residuals, 0.7) == pytest.approx(0.15)
    # By group: an "a" row weighs 1/18, a "b" row 1/2; wanted 0.7 x K (n + 1) / n = 0.7 x 2 x 21 / 20 = 1.47.
    # Sorted cumulative weights: 18 x 1/18 = 1.0 at 0.18, 1.5 at 1.0 (>= 1.47): the band is 1.
    assert grouped_conformal_quantile(residuals, groups, 0.7) == 1.0
    # At 0.9 the wanted 1.89 is past 1.5: the band is 2, where by row it is the 19th smallest, 1.
    assert conformal_quantile(residuals, 0.9) == 1.0
    assert grouped_conformal_quantile(residuals, groups, 0.9) == 2.0


def test_groups_of_one_size_give_the_plain_conformal_quantile() -> None:
    rng = np.random.default_rng(0)
    for n in (5, 10, 37, 100):
        residuals = rng.normal(size=n)
        assert grouped_conformal_quantile(residuals, np.arange(n), 0.9) == conformal_quantile(residuals, 0.9)
        assert grouped_conformal_quantile(residuals, np.zeros(n), 0.9) == conformal_quantile(residuals, 0.9)
    residuals = rng.normal(size=40)
    assert grouped_conformal_quantile(residuals, np.arange(40) % 4, 0.9) == conformal_quantile(residuals, 0.9)


def test_non_finite_residuals_are_left_out_with_their_group_share() -> None:
    residuals = np.array([0.1, 0.2, np.nan, 0.3, 0.4])
    groups = np.array(["a", "a", "a", "b", "b"])
    # Left: a = {0.1, 0.2}, b = {0.3, 0.4}, equal sizes: the plain rule, ceil(0.5 x 5) = 3rd smallest.
    assert grouped_conformal_quantile(residuals, groups, 0.5) == conformal_quantile(residuals, 0.5) == 0.3
    assert np.isnan(grouped_conformal_quantile(np.array([np.nan]), np.array(["a"]), 0.9))
