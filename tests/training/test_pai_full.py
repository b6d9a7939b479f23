"""The full PAI v2020 adapter on SYNTHETIC tables written with the trace's exact headers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.synthetic_pai import HEADERS, SyntheticTrace, write_trace
from training.ingest.adapters import pai_full, pai_stream
from training.ingest.errors import DataError


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> SyntheticTrace:
    return write_trace(tmp_path_factory.mktemp("synthetic_pai"), instances=3000, seed=7)


def _raw(directory: Path, table: str) -> pd.DataFrame:
    names = (HEADERS / f"{table}.header").read_text().strip().split(",")
    return pd.read_csv(directory / f"{table}.csv", header=None, names=names, keep_default_na=True)


def test_one_row_per_task_with_exact_aggregates(trace: SyntheticTrace) -> None:
    table = pai_full.load(trace.directory).set_index(["job_id", "task_id"])
    assert len(table) == trace.tasks
    tasks = _raw(trace.directory, "pai_task_table").set_index(["job_name", "task_name"])
    sensor = _raw(trace.directory, "pai_sensor_table")
    sensor["gbps"] = (sensor["read"] + sensor["write"]) * 8 / 1e9
    expected = sensor.groupby(["job_name", "task_name"]).agg(
        cpu=("cpu_usage", "mean"), gpu=("gpu_wrk_util", "mean"), mem=("max_mem", "max"),
        gmem=("max_gpu_wrk_mem", "max"), gbps=("gbps", "mean"))
    ok = tasks["status"] == "Terminated"
    keys = tasks.index[ok]
    got = table.loc[keys]
    want = expected.loc[keys]
    np.testing.assert_allclose(got["obs_cpu_cores"], want["cpu"] / 100)
    np.testing.assert_allclose(got["obs_gpu_util_share"], want["gpu"] / 100)
    np.testing.assert_allclose(got["obs_mem_max_gib"], want["mem"])
    np.testing.assert_allclose(got["obs_gpu_mem_max_gib"], want["gmem"])
    np.testing.assert_allclose(got["obs_net_gbps"], want["gbps"])
    # failed and running tasks feed no observed-usage target
    assert table.loc[tasks.index[~ok], ["obs_cpu_cores", "obs_gpu_util_share"]].isna().all().all()
    np.testing.assert_allclose(table.loc[tasks.index, "req_gpu"], tasks["plan_gpu"] / 100)
    np.testing.assert_allclose(table.loc[tasks.index, "req_cpu_cores"], tasks["plan_cpu"] / 100)


def test_streaming_in_small_blocks_gives_the_same_table(trace: SyntheticTrace,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    whole = pai_full.load(trace.directory)
    monkeypatch.setattr(pai_stream, "BLOCK_BYTES", 4096)  # dozens of blocks per table
    seen: list[int] = []
    streamed = pai_full.load(trace.directory, progress=seen.append)
    pd.testing.assert_frame_equal(whole, streamed)
    assert len(seen) > 20


def _tiny(directory: Path, rows: dict[str, list[str]]) -> Path:
    directory.mkdir()
    for table, lines in rows.items():
        (directory / f"{table}.csv").write_text("\n".join(lines) + "\n")
    return directory


TINY = {  # SYNTHETIC: one job, a ps task and a 2-instance worker task
    "pai_job_table": ["j1,i1,u1,Terminated,100,900"],
    "pai_task_table": ["j1,ps,1,Terminated,110,800,600,29.296875,0,",
                       "j1,worker,2,Terminated,120,820,400,10,50,V100"],
    "pai_instance_table": ["j1,ps,n0,w0,i1,Terminated,110,800,m1",
                           "j1,worker,n1,w1,i1,Terminated,120,810,m1",
                           "j1,worker,n2,w2,i1,Terminated,125,820,m2"],
    "pai_sensor_table": ["j1,ps,w0,i1,m1,,300,0,1,2,0,0,1000000000,250000000,1,1",
                         "j1,worker,w1,i1,m1,/dev/nvidia0,100,40,1,3,1,5,0,0,1,1",
                         "j1,worker,w2,i1,m2,/dev/nvidia0,200,60,1,4,1,7,0,0,1,1"],
    "pai_group_tag_table": ["i1,u1,V100,g1,bert"],
}


def test_unit_conversions_on_a_tiny_trace(tmp_path: Path) -> None:
    table = pai_full.load(_tiny(tmp_path / "synthetic", TINY), header_dir=HEADERS).set_index("task_id")
    ps, worker = table.loc["ps"], table.loc["worker"]
    assert (ps["role"], worker["role"]) == ("ps", "worker")
    assert ps["req_cpu_cores"] == 6.0                        # plan_cpu 600 % of a core
    assert worker["req_gpu"] == 0.5                          # plan_gpu 50 % of a GPU
    assert ps["obs_net_gbps"] == pytest.approx(10.0)        # (1e9 + 0.25e9) B/s * 8 / 1e9
    assert worker["obs_cpu_cores"] == pytest.approx(1.5)    # mean(100, 200) / 100
    assert worker["obs_gpu_util_share"] == pytest.approx(0.5)  # mean(40, 60) / 100
    assert worker["obs_gpu_mem_max_gib"] == 7.0             # max over instances
    assert (worker["submit_time_s"], worker["start_time_s"], worker["duration_s"]) == (100.0, 120.0, 700.0)
    assert (worker["group"], worker["workload"], worker["req_gpu_type"]) == ("g1", "bert", "V100")
    assert pd.isna(ps["assigned_gpu_type"]) and worker["assigned_gpu_type"] == "V100"


@pytest.mark.parametrize(("table", "line_no", "bad_line", "column", "words"), [
    ("pai_instance_table", 2, "j1,worker,n1,w1,i1,Terminated,soon,810,m1", "start_time", "not a number"),
    ("pai_sensor_table", 3, "j1,worker,w2,i1,m2,/dev/nvidia0,200,60,1,4,1,7,0,0", None, "expected 16 fields"),
    ("pai_task_table", 1, "j1,ps,1,Terminated,110,800,six,29.296875,0,", "plan_cpu", "not a number"),
])
def test_bad_rows_name_their_line(tmp_path: Path, table: str, line_no: int, bad_line: str,
                                  column: str | None, words: str) -> None:
    rows = {k: list(v) for k, v in TINY.items()}
    rows[table][line_no - 1] = bad_line
    with pytest.raises(DataError) as info:
        pai_full.load(_tiny(tmp_path / "synthetic", rows), header_dir=HEADERS)
    assert (info.value.line, info.value.column) == (line_no, column)
    assert words in str(info.value) and f"{table}.csv" in str(info.value)


def test_missing_table_and_header(tmp_path: Path) -> None:
    rows = {k: v for k, v in TINY.items() if k != "pai_sensor_table"}
    with pytest.raises(DataError, match=r"pai_sensor_table\.csv: file not found"):
        pai_full.load(_tiny(tmp_path / "a", rows), header_dir=HEADERS)
    with pytest.raises(DataError, match="header file not found"):
        pai_full.load(_tiny(tmp_path / "b", TINY))  # no header folder given, none beside the tables


def test_header_lacking_a_column(tmp_path: Path) -> None:
    directory = _tiny(tmp_path / "synthetic", TINY)
    for table in TINY:
        (directory / f"{table}.header").write_text((HEADERS / f"{table}.header").read_text())
    (directory / "pai_task_table.header").write_text("job_name,task_name,inst_num,status,start_time,end_time,"
                                                     "plan_cpu,plan_mem,plan_gpux,gpu_type\n")
    with pytest.raises(DataError) as info:
        pai_full.load(directory)
    assert info.value.column == "plan_gpu"


@pytest.mark.parametrize("target", ["gpu", "cpu", "mem", "gpu_mem", "bandwidth", "duration"])
def test_usage_targets_train_and_score_on_the_full_trace_format(trace: SyntheticTrace, target: str) -> None:
    """The observed-usage targets exist only in the full trace: the whole path runs (numbers are SYNTHETIC)."""
    from models.calibrated import CalibratedEstimator
    from training.features.targets import target_spec
    from training.pipeline.evaluate import baselines, evaluate, time_split

    table = pai_full.load(trace.directory)
    spec = target_spec("pai2020", target)
    split = time_split(table, spec)
    # only tasks that terminated successfully carry an observed-usage label
    labelled = table.iloc[np.concatenate([split.train, split.test])]
    assert (labelled["status"] == "succeeded").all() or target == "duration"
    estimators = {**baselines(spec), "lgbm": CalibratedEstimator("lgbm", params={"n_estimators": 10})}
    result = evaluate(split, estimators)["estimators"]
    assert ("request" in result) == (spec.request_baseline is not None)
    assert 0 < result["lgbm"]["male"] < 10 and 0 <= result["lgbm"]["p90_coverage"] <= 1
