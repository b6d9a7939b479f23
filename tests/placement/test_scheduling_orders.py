"""Orders within a queue by name: fifo, sjf on the expected duration (a missing estimate takes the causal
median, as in the replay), priority then fifo. SYNTHETIC jobs."""

from __future__ import annotations

import math

import pytest

from placement.scheduling.orders import ORDERS, CausalMedian, queue_order
from tests.placement.scheduling_cases import gpu_job, pending

JOBS = [pending(gpu_job("c", 1, priority=0), "a", submit_s=3.0, p50_s=10.0),
        pending(gpu_job("a", 1, priority=1), "a", submit_s=1.0, p50_s=300.0),
        pending(gpu_job("d", 1, priority=1), "a", submit_s=4.0),  # no estimate: median of 300, 50, 10 = 50
        pending(gpu_job("b", 1, priority=0), "a", submit_s=2.0, p90_s=50.0)]  # P90 only: expected 50


@pytest.mark.parametrize(("name", "expected"), [
    ("fifo", ["a", "b", "c", "d"]),
    ("sjf", ["c", "b", "d", "a"]),  # 10, 50 (submitted 2), 50 (submitted 4), 300
    ("priority", ["a", "d", "b", "c"]),  # priority 1 by submit, then priority 0 by submit
])
def test_each_order(name: str, expected: list[str]) -> None:
    assert [j.job_id for j in queue_order(name)(JOBS)] == expected


def test_an_unknown_order_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="fifo, sjf, priority"):
        queue_order("lifo")
    assert set(ORDERS) == {"fifo", "sjf", "priority"}


def test_the_causal_median_fills_only_missing_values() -> None:
    fill = CausalMedian()
    assert fill(math.nan) == 0.0  # nothing seen yet
    assert [fill(v) for v in (4.0, 2.0)] == [4.0, 2.0]
    assert fill(math.nan) == 3.0  # median of 2 and 4
