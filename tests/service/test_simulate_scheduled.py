"""``gpuplace simulate scheduled`` end to end on real PAI jobs (the first 300 out-of-sample rows) on a big node
of 64 GPUs, fast enough for them to queue."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.service.test_cli import gpuplace

JOBS = 300
ARGS = ("simulate", "scheduled", "--jobs", str(JOBS), "--cluster", "big-node", "--gpus", "64", "--load", "4",
        "--estimate", "oracle", "--order", "sjf", "--opportunistic", "--prescheduling-s", "600", "--json")
FIELDS = {"jobs", "finished", "never_started", "never_started_by_reason", "jct_mean_s", "jct_p95_s", "wait_mean_s",
          "wait_sum_s", "wait_mean_s_by_queue", "finished_by_queue", "slowdown_mean_by_queue",
          "fairness_jain_slowdown", "quota_violations", "preemptions", "preempted_gpu_h", "idle_gpu_h_while_waiting",
          "passes", "pass_ms_p95", "wall_s", "settings"}


def test_ablation_json_is_complete_and_consistent_and_the_written_queues_replay_the_same(tmp_path: Path) -> None:
    out = tmp_path / "run"
    result = gpuplace(*ARGS, "--queues", "by-user:3", "--ablation", "--out", str(out), home=tmp_path, timeout_s=900)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert json.loads((out / "scheduled.json").read_text()) == report
    assert (out / "scheduled.png").read_bytes().startswith(b"\x89PNG")
    assert report["jobs"] == JOBS and report["cluster"] == "big-node-64" and report["queued_by"] == "user"
    assert report["told"] == {"jobs_with_p90": JOBS, "p90_coverage": 1.0}  # oracle: the real duration as P90
    runs = report["runs"]
    assert list(runs) == ["full", "no-preemption", "no-opportunistic", "no-prescheduling", "no-borrowing"]
    for name, run in runs.items():
        assert set(run) >= FIELDS, name
        assert run["quota_violations"] == 0, name
        assert run["finished"] + run["never_started"] == JOBS
        assert run["never_started"] == sum(run["never_started_by_reason"].values())
        assert sum(run["finished_by_queue"].values()) == run["finished"]
        assert run["wait_sum_s"] == pytest.approx(run["wait_mean_s"] * run["finished"])
        per_queue = sum(run["wait_mean_s_by_queue"][q] * n for q, n in run["finished_by_queue"].items())
        assert per_queue == pytest.approx(run["wait_sum_s"])
        assert run["jct_p95_s"] >= run["jct_mean_s"] > run["wait_mean_s"] >= 0
        assert 0 < run["fairness_jain_slowdown"] <= 1
        assert run["passes"] > 0 and run["idle_gpu_h_while_waiting"] >= 0
    # jobs of more than 64 GPUs never fit the node; at load 4 the others queue
    assert runs["full"]["never_started_by_reason"].get("can-never-fit", 0) > 0
    assert runs["full"]["wait_mean_s"] > 0
    assert runs["no-preemption"]["preemptions"] == 0 and runs["no-preemption"]["preempted_gpu_h"] == 0
    assert runs["no-preemption"]["settings"]["preemption"] is False
    assert runs["no-opportunistic"]["opportunistic_submitted"] == 0 < runs["full"]["opportunistic_submitted"]
    assert runs["no-borrowing"]["settings"]["borrowing"] is False

    # the derived queues: one per user among the 3 with the most GPU-seconds in the history, and 'shared'
    written = Path(report["queues"])
    config = yaml.safe_load(written.read_text())
    names = [q["name"] for q in config["queues"]]
    assert len(names) == 4 and names[-1] == "shared" and set(names) == set(report["guaranteed_gpus"])
    assert sum(q["quota"]["gpus"] for q in config["queues"]) <= 64
    assert {q["order"] for q in config["queues"]} == {"sjf"}

    again = gpuplace(*ARGS, "--queues", str(written), "--out", str(tmp_path / "again"), home=tmp_path, timeout_s=900)
    assert again.returncode == 0, again.stderr
    replayed = json.loads(again.stdout)["runs"]
    assert list(replayed) == ["full"]
    timings = ("wall_s", "pass_ms_mean", "pass_ms_p95", "pass_ms_max")
    assert {k: v for k, v in replayed["full"].items() if k not in timings} == \
        {k: v for k, v in runs["full"].items() if k not in timings}


def test_the_table_and_bad_options(tmp_path: Path) -> None:
    shown = gpuplace("simulate", "scheduled", "--jobs", "40", "--cluster", "big-node", "--gpus", "64", "--load", "4",
                     "--queues", "by-group:2", "--out", str(tmp_path / "t"), home=tmp_path, timeout_s=900)
    assert shown.returncode == 0, shown.stderr
    assert "violations" in shown.stdout and "mean wait per queue" in shown.stdout
    assert "shared" in shown.stdout
    for args, named in ((("--order", "lifo"), "lifo"), (("--estimate", "tarot"), "tarot"),
                        (("--queues", "by-user:many"), "by-user:K"), (("--queues", str(tmp_path / "no.yaml")),
                                                                       "no.yaml")):
        bad = gpuplace("simulate", "scheduled", "--jobs", "10", *args, home=tmp_path, timeout_s=900)
        assert bad.returncode == 2, (args, bad.stderr)
        assert named in bad.stderr


def test_the_wait_after_which_a_job_may_start_opportunistically_is_an_option_the_ablation_turns_off(
        tmp_path: Path) -> None:
    result = gpuplace("simulate", "scheduled", "--jobs", "80", "--cluster", "big-node", "--gpus", "64", "--load", "4",
                      "--queues", "by-user:2", "--opportunistic-after-s", "300", "--ablation", "--json",
                      "--out", str(tmp_path / "p"), home=tmp_path, timeout_s=900)
    assert result.returncode == 0, result.stderr
    runs = json.loads(result.stdout)["runs"]
    assert "no-opportunistic-after" in runs
    assert runs["full"]["settings"]["opportunistic_after_s"] == 300.0
    assert runs["no-opportunistic-after"]["settings"]["opportunistic_after_s"] is None
    assert all(run["quota_violations"] == 0 for run in runs.values())
    bad = gpuplace("simulate", "scheduled", "--jobs", "10", "--opportunistic-after-s", "-5", home=tmp_path,
                   timeout_s=900)
    assert bad.returncode == 2 and "--opportunistic-after-s" in bad.stderr
