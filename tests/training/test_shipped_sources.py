"""Every shipped real source loads through its adapter, whole, into the canonical schema."""

from __future__ import annotations

import pandas as pd
import pytest

from training.ingest.schema import COLUMN_NAMES, COLUMNS
from training.ingest.sources import SOURCES, get_source

# rows as stated in the data README (the PAI table may grow: at least 68,727)
EXPECTED_ROWS = {
    "openb2023": 8152,
    "openb2023-gpushare20": 8152,
    "philly": 82247,
    "dlrm2025": 23871,
}


def _file_rows(source_name: str) -> int:
    path = get_source(source_name).default_path()
    assert path is not None
    with path.open() as handle:
        return sum(1 for line in handle if line.strip()) - 1  # data lines: non-blank, minus the header


@pytest.fixture(scope="module")
def tables() -> dict[str, pd.DataFrame]:
    return {name: s.load() for name, s in SOURCES.items() if s.shipped}


@pytest.mark.parametrize("name", sorted(EXPECTED_ROWS))
def test_row_counts_match_the_data_readme(tables: dict[str, pd.DataFrame], name: str) -> None:
    assert len(tables[name]) == EXPECTED_ROWS[name] == _file_rows(name)


def test_pai_job_table_keeps_every_row(tables: dict[str, pd.DataFrame]) -> None:
    frame = tables["pai2020-jobs"]
    assert len(frame) == _file_rows("pai2020-jobs") >= 68727
    assert frame["job_id"].is_unique


def test_every_table_has_the_canonical_columns_and_dtypes(tables: dict[str, pd.DataFrame]) -> None:
    for name, frame in tables.items():
        assert tuple(frame.columns) == COLUMN_NAMES, name
        for col in COLUMNS:
            assert str(frame[col.name].dtype).startswith(col.dtype.split("[")[0]) or \
                col.dtype == "category", (name, col.name, frame[col.name].dtype)


def test_pai_units_are_per_instance(tables: dict[str, pd.DataFrame]) -> None:
    frame = tables["pai2020-jobs"].set_index("job_id")
    # line 3 of the file: job 1, num_gpu 3.0, num_cpu 72.0, num_pod 12 -> 0.25 GPU and 6 cores per pod
    row = frame.loc["1"]
    assert row["instances"] == 12
    assert row["req_gpu"] == pytest.approx(3.0 / 12)
    assert row["req_cpu_cores"] == pytest.approx(72.0 / 12)
    # submit 3 + wait 2 = start 5; + duration 15748 = end 15753
    assert (row["start_time_s"], row["end_time_s"], row["duration_s"]) == (5.0, 15753.0, 15748.0)
    assert row["ref_group_gpu_dur_s"] == 15199.0


def test_missing_is_missing_not_zero(tables: dict[str, pd.DataFrame]) -> None:
    # no shipped table records GPU memory use: the column is missing everywhere, never 0
    for name, frame in tables.items():
        assert frame["obs_gpu_mem_max_gib"].isna().all(), name
    # Philly records no CPU request
    assert tables["philly"]["req_cpu_cores"].isna().all()


def test_openb_censoring_and_shares(tables: dict[str, pd.DataFrame]) -> None:
    frame = tables["openb2023"]
    # 34 pods are Running and deleted at the last deletion time of the file (12902960 s)
    assert int(frame["censored"].sum()) == 34
    assert (frame.loc[frame["censored"], "end_time_s"] == 12902960).all()
    # pending pods were never scheduled: no duration
    pending = frame["status"] == "pending"
    assert pending.sum() == 897 and frame.loc[pending, "duration_s"].isna().all()
    # openb-pod-0001: 1 GPU at 460 milli -> 0.46 of a GPU; 6000 milli-cores -> 6 cores; 12288 MiB -> 12 GiB
    row = frame.set_index("job_id").loc["openb-pod-0001"]
    assert (row["req_gpu"], row["req_cpu_cores"], row["req_mem_gib"]) == (pytest.approx(0.46), 6.0, 12.0)


def test_dlrm_bandwidth_and_censoring(tables: dict[str, pd.DataFrame]) -> None:
    frame = tables["dlrm2025"]
    # rdma_request 25 (% of one NIC) at the assumed 100 Gbit/s NIC -> 25 Gbit/s
    assert frame.set_index("job_id").loc["instance_0", "req_net_gbps"] == 25.0
    # 8,878 instances have no deletion time: still running when the trace ended
    assert int(frame["censored"].sum()) == 8878
    assert frame.loc[frame["censored"], "duration_s"].isna().all()


def test_philly_uses_the_virtual_cluster(tables: dict[str, pd.DataFrame]) -> None:
    frame = tables["philly"]
    assert frame["cluster"].notna().all()
    assert frame["cluster"].nunique() == 15
    # 2017-10-09 07:01:55 UTC is 1507532515 s after the Unix epoch
    assert frame["submit_time_s"].iloc[0] == 1507532515.0
