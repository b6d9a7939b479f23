"""Bad input gives one DataError naming file, line and column (the files here are SYNTHETIC)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from training.ingest.adapters import dlrm, openb, pai_jobs, philly
from training.ingest.errors import DataError

PAI_HEAD = ("job_id,user,num_gpu,num_cpu,num_pod,duration,job_name,submit_time,group,gpu_type,wait_time,"
            "user_dur,group_dur,group_gpu_dur")
PAI_OK = "0,u1,1.0,8.0,1.0,34,j1,0,g1,T4,3,386.0,6793.5,34.0"
OPENB_HEAD = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
              "scheduled_time")
OPENB_OK = "p0,12000,16384,1,1000,,LS,Running,0,100,0"
PHILLY_HEAD = "timestamp,duration,num_gpus,gpu_time,cluster"
DLRM_HEAD = ("instance_sn,role,app_name,cpu_request,cpu_limit,gpu_request,gpu_limit,rdma_request,rdma_limit,"
             "memory_request,memory_limit,disk_request,disk_limit,max_instance_per_node,creation_time,"
             "scheduled_time,deletion_time")

Loader = Callable[[Path], pd.DataFrame]
CASES: list[tuple[str, Loader, list[str], int | None, str | None, str]] = [
    # (case, loader, file lines, expected line, expected column, words in the message)
    ("non-numeric GPU count", pai_jobs.load, [PAI_HEAD, PAI_OK, PAI_OK.replace(",1.0,8.0,", ",x,8.0,")],
     3, "num_gpu", "not a number"),
    ("negative duration", pai_jobs.load, [PAI_HEAD, PAI_OK.replace(",34,j1", ",-5,j1")], 2, "duration", "negative"),
    ("missing duration (NaN)", pai_jobs.load, [PAI_HEAD, PAI_OK, PAI_OK.replace(",34,j1", ",,j1")], 3, "duration",
     "missing"),
    ("NaN written out", pai_jobs.load, [PAI_HEAD, PAI_OK.replace(",34,j1", ",nan,j1")], 2, "duration",
     "not a number"),
    ("unknown GPU type", pai_jobs.load, [PAI_HEAD, PAI_OK.replace(",T4,", ",H100,")], 2, "gpu_type", "unknown"),
    ("zero pods", pai_jobs.load, [PAI_HEAD, PAI_OK.replace(",8.0,1.0,", ",8.0,0,")], 2, "num_pod", "at least 1"),
    ("missing column", pai_jobs.load, [PAI_HEAD.replace(",group_gpu_dur", ""), PAI_OK[:-5]], None,
     "group_gpu_dur", "missing column"),
    ("openb deletion before creation", openb.load, [OPENB_HEAD, OPENB_OK.replace(",0,100,0", ",50,10,50")], 2,
     "deletion_time", "before creation"),
    ("openb unknown GPU in any-of", openb.load, [OPENB_HEAD, OPENB_OK.replace(",,LS", ",V100M16|X9,LS")], 2,
     "gpu_spec", "unknown"),
    ("openb GPU share over 1000 milli", openb.load, [OPENB_HEAD, OPENB_OK.replace(",1,1000,", ",1,1500,")], 2,
     "gpu_milli", "at most 1000"),
    ("openb unknown phase", openb.load, [OPENB_HEAD, OPENB_OK.replace("Running", "Exploded")], 2, "pod_phase",
     "unknown"),
    ("philly bad timestamp", philly.load, [PHILLY_HEAD, "2017-10-09 07:01:55,66.0,1,66.0,a", "yesterday,1,1,1,a"],
     3, "timestamp", "time"),
    ("philly infinite duration", philly.load, [PHILLY_HEAD, "2017-10-09 07:01:55,inf,1,66.0,a"], 2, "duration",
     "finite"),
    ("dlrm unknown role", dlrm.load, [DLRM_HEAD, "i0,XN,app_0,12,12,1,1,25,25,120,120,640,800,8,,,"], 2, "role",
     "unknown"),
]


@pytest.mark.parametrize(("case", "loader", "lines", "line", "column", "words"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_names_file_line_and_column(tmp_path: Path, case: str, loader: Loader, lines: list[str],
                                              line: int | None, column: str | None, words: str) -> None:
    path = tmp_path / "synthetic.csv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as info:
        loader(path)
    err = info.value
    assert (err.line, err.column) == (line, column), str(err)
    assert words in str(err)
    assert str(path) in str(err)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="file not found"):
        pai_jobs.load(tmp_path / "nope.csv")


def test_good_synthetic_rows_load(tmp_path: Path) -> None:
    path = tmp_path / "synthetic.csv"
    path.write_text("\n".join([PAI_HEAD, PAI_OK]) + "\n")
    frame = pai_jobs.load(path)
    # submit 0 + wait 3 = start 3; duration 34 -> end 37
    assert frame[["start_time_s", "end_time_s", "duration_s"]].iloc[0].tolist() == [3.0, 37.0, 34.0]
