"""Feedback rows and the drift report on hand-made (synthetic) completions, with worked numbers."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, get_args

import pandas as pd
import pytest

from service.http.schemas import UsageKey
from training.ingest.schema import empty_table
from training.pipeline.drift import drift_report, pairs
from training.pipeline.feedback import USAGE_COLUMNS, completed_jobs, digest, feedback_table, with_feedback

RECORD = {"job_id": "j1", "user": "alice", "group": "g7", "workload": "bert", "app": None, "qos": None,
          "hyperparams": None, "task_id": "0", "role": "worker", "instances": 2, "req_gpu": 1.0,
          "req_cpu_cores": 8.0, "req_mem_gib": 32.0, "req_gpu_mem_gib": None, "req_net_gbps": 0.0,
          "req_gpu_type": None}


def completed(job_id: str = "j1", usage: dict[str, float] | None = None) -> dict[str, object]:
    return {"job_id": job_id, "records": [{**RECORD, "job_id": job_id}], "placed_at": 1_700_000_000.0,
            "duration_s": 3600.0, "usage": usage if usage is not None else {"gpu": 0.4, "cpu_cores": 3.0},
            "gpu_type": "V100"}


def test_a_completion_becomes_a_canonical_row() -> None:
    table = feedback_table([completed()])
    row = table.iloc[0]
    assert len(table) == 1 and row["source"] == "feedback" and row["status"] == "succeeded"
    assert (row["user"], row["group"], row["instances"], row["req_gpu"]) == ("alice", "g7", 2, 1.0)
    assert row["end_time_s"] - row["start_time_s"] == row["duration_s"] == 3600.0
    assert (row["obs_gpu_util_share"], row["obs_cpu_cores"]) == (0.4, 3.0)
    assert math.isnan(row["obs_mem_max_gib"]) and row["assigned_gpu_type"] == "V100" and not row["censored"]


def test_unknown_usage_is_refused_naming_the_job_and_key() -> None:
    with pytest.raises(ValueError, match=r"j9.*'gpu_util'"):
        feedback_table([completed("j9", {"gpu_util": 0.5})])


def test_feedback_follows_the_trace_and_its_digest_tracks_content() -> None:
    trace = feedback_table([completed("t1")]).assign(source="pai2020-jobs", submit_time_s=10.0)
    fb = feedback_table([completed("f1"), completed("f2")])
    both = with_feedback(trace, fb)
    assert list(both["job_id"]) == ["t1", "f1", "f2"] and list(both["source"])[1:] == ["feedback"] * 2
    assert with_feedback(trace, empty_table()) is trace
    assert digest(empty_table()) == "none" and digest(fb) == digest(fb.copy())
    assert digest(fb) != digest(feedback_table([completed("f1")]))


def test_drift_compares_recent_errors_with_training_errors() -> None:
    # two jobs predicted at e-1 s with P90 above one of them: MALE |1 - ln(1+y)| for y = e^2-1, e-1
    estimate = {"duration_s": {"point": math.e - 1, "p50": math.e - 1, "p90": 5.0},
                "tasks": [{"gpu": {"point": 0.5, "p50": 0.5, "p90": 0.8}}]}
    jobs = [{"details": {"estimate": estimate, "model_version": "3"},
             "completion": {"duration_s": duration, "usage": {"gpu": 0.5}}}
            for duration in (math.e ** 2 - 1, math.e - 1)]
    found = pairs(jobs)
    assert sorted(p.target for p in found) == ["duration", "duration", "gpu", "gpu"]
    report = drift_report(found, lambda v: {"duration.model.male": 0.25, "duration.model.p90_coverage": 0.9})
    duration = report["duration@3"]
    assert duration["recent_male"] == pytest.approx(0.5) and duration["recent_p90_coverage"] == 0.5
    assert duration["male_ratio"] == pytest.approx(2.0) and duration["drifted"] is True
    assert report["gpu@3"]["recent_male"] == 0.0 and report["gpu@3"]["drifted"] is None  # nothing logged to compare
    calm = drift_report(found, lambda v: {"duration.model.male": 0.5, "duration.model.p90_coverage": 0.55})
    assert calm["duration@3"]["drifted"] is False


def test_a_job_without_records_gives_no_rows() -> None:
    job = {**completed(), "records": []}
    assert feedback_table([job]).empty and isinstance(feedback_table([]), pd.DataFrame)


def test_the_api_accepts_exactly_the_usage_keys_feedback_knows() -> None:
    assert set(get_args(UsageKey)) == set(USAGE_COLUMNS)


@dataclass(frozen=True)
class Row:
    """A job row as the state store keeps it (the fields feedback reads)."""

    job_id: str
    details: dict[str, Any]
    allocation: dict[str, Any]
    placed_at: float
    completion: dict[str, Any] | None


def test_completed_rows_become_feedback_with_the_gpu_type_they_ran_on() -> None:
    types = {"m1": "V100", "m2": "V100", "m3": "T4", "cpu": "none"}

    def row(job_id: str, *machines: str, completion: bool = True) -> Row:
        instances = [{"machine": m, "gpus": [] if m == "cpu" else [0]} for m in machines]
        done = {"duration_s": 60.0, "usage": {"gpu": 0.5}, "completed_at": 2.0} if completion else None
        return Row(job_id, {"records": [{**RECORD, "job_id": job_id}]}, {"instances": instances}, 1.0, done)

    found = completed_jobs([row("one", "m1", "m2", "cpu"), row("mixed", "m1", "m3"), row("running", "m1",
                                                                                        completion=False)], types)
    assert [(f["job_id"], f["gpu_type"]) for f in found] == [("one", "V100"), ("mixed", None)]
    assert found[0] == {"job_id": "one", "records": [{**RECORD, "job_id": "one"}], "placed_at": 1.0,
                        "duration_s": 60.0, "usage": {"gpu": 0.5}, "gpu_type": "V100"}
    table = feedback_table(found)
    assert list(table["job_id"]) == ["one", "mixed"] and list(table["assigned_gpu_type"].fillna("-")) == ["V100", "-"]


def test_feedback_of_jobs_completed_through_the_state_store() -> None:
    from service.cycle import run_cycle
    from service.store import Completion, End, MemoryStore, Place
    from tests.service.test_store import CLUSTER, PLACE, job

    store = MemoryStore(CLUSTER)
    for name, gpu in (("a", 8.0), ("b", 1.0)):
        run_cycle(store, [Place(job(name, gpu=gpu), PLACE, {"records": [{**RECORD, "job_id": name}]})])
    run_cycle(store, [End("a", Completion(120.0, {"gpu": 0.9})), End("b")])  # b released: no feedback
    types = {m.name: m.gpu_type for m in store.cached().cluster.machines}
    table = feedback_table(completed_jobs(store.completions(), types))
    assert list(table["job_id"]) == ["a"] and table.iloc[0]["duration_s"] == 120.0
    assert table.iloc[0]["assigned_gpu_type"] == "V100" and table.iloc[0]["obs_gpu_util_share"] == 0.9
