"""The causal feature frame on Dask (training.features.distributed) equals the single-process one on real PAI rows."""

from __future__ import annotations

import dask.dataframe as dd
import pandas as pd
import pytest
from distributed import Client

from training.features.distributed import Served, causal_features, causal_state, shuffle_plan
from training.features.frames import build_features
from training.features.targets import target_spec
from training.ingest.sources import get_source

ROWS = 4000
"""The first rows of the shipped PAI job table: enough for keys with long histories, ties and censored jobs."""


@pytest.fixture(scope="module")
def pai_rows() -> pd.DataFrame:
    return get_source("pai2020-jobs").load().iloc[:ROWS]


def test_one_shuffle_serves_every_key_that_contains_its_columns() -> None:
    spec = target_spec("pai2020-jobs", "duration")
    plan = shuffle_plan(spec)
    assert plan == {("user",): Served(["user", "group_user", "group_user_gpu"], []),
                    ("app",): Served(["app", "app_gpu"], []),
                    ("group",): Served([], ["group_gpu_shape", "group_gpu", "group"])}
    assert sorted(name for served in plan.values() for name in served.history) == sorted(spec.keys)
    assert sorted(name for served in plan.values() for name in served.recent) == sorted(n for n, _ in spec.recent_keys)


@pytest.mark.parametrize("target", ["duration", "gpu_request"])
def test_dask_features_equal_the_single_process_frame(pai_rows: pd.DataFrame, client: Client, target: str) -> None:
    spec = target_spec("pai2020-jobs", target)
    single, _ = build_features(pai_rows, spec)
    spread = causal_features(dd.from_pandas(pai_rows, npartitions=3), spec).compute()
    pd.testing.assert_frame_equal(spread.sort_index(), single.sort_index())


def test_a_trace_without_known_divisions_is_refused(pai_rows: pd.DataFrame) -> None:
    trace = dd.from_pandas(pai_rows.iloc[:100], npartitions=2).clear_divisions()
    with pytest.raises(ValueError, match="known divisions"):
        causal_features(trace, target_spec("pai2020-jobs", "duration"))


@pytest.mark.parametrize("target", ["duration", "gpu_request"])
def test_dask_history_state_equals_the_single_process_state(pai_rows: pd.DataFrame, client: Client,
                                                            target: str) -> None:
    spec = target_spec("pai2020-jobs", target)
    _, single = build_features(pai_rows, spec)
    trace = dd.from_pandas(pai_rows, npartitions=3)
    state = causal_state(trace, spec, causal_features(trace, spec))
    assert state.keys == single.keys
    assert state.tables == single.tables
    assert sum(len(table) for table in state.tables.values()) > 100  # keys with history, not empty tables
    if spec.recent_keys:
        assert state.recent is not None and single.recent is not None
        assert state.recent.tables == single.recent.tables
        assert state.recent.error_q90 == single.recent.error_q90
        assert (state.recent.window, state.recent.halflife) == (single.recent.window, single.recent.halflife)
    else:
        assert state.recent is None and single.recent is None
