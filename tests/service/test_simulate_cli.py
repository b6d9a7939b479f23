"""``gpuplace simulate`` end to end on real PAI jobs (a few hundred, to stay fast)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from tests.service.test_cli import gpuplace


def test_simulate_compare_writes_summary_csv_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    result = gpuplace("simulate", "compare", "--cluster", "big-node", "--gpus", "64", "--rate", "1000",
                      "--jobs", "300", "--queues", "fifo,sjf-oracle,sjf-group-gpu", "--out", str(out), home=tmp_path)
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    runs = summary["runs"]
    assert set(runs) == {"fifo/liquid", "sjf-oracle/liquid", "sjf-group-gpu/liquid"}
    for run in runs.values():
        assert run["jobs"] == 300 and run["finished"] + run["never_fit"] == 300
    # on these jobs the oracle, which knows every duration, gets a mean JCT no worse than FIFO
    assert runs["sjf-oracle/liquid"]["jct_mean_s"] <= runs["fifo/liquid"]["jct_mean_s"]
    assert (out / "jct_cdf.png").stat().st_size > 0 and (out / "allocation.png").stat().st_size > 0
    assert (out / "jobs-fifo-liquid.csv").read_text().startswith("job_id,")


def test_sjf_model_without_a_champion_says_what_to_do(tmp_path: Path) -> None:
    result = gpuplace("simulate", "--queue", "sjf-model", "--jobs", "10", home=tmp_path)
    assert result.returncode == 2
    assert "gpuplace train" in result.stderr


def test_simulate_compare_online_against_batch_windows(tmp_path: Path) -> None:
    out = tmp_path / "sim"
    result = gpuplace("simulate", "compare", "--cluster", "big-node", "--gpus", "64", "--rate", "1000",
                      "--jobs", "120", "--queues", "fifo", "--placements", "liquid,ffd,gga", "--window", "30",
                      "--batch-limit", "0.2", "--out", str(out), home=tmp_path)
    assert result.returncode == 0, result.stderr
    runs = json.loads((out / "summary.json").read_text())["runs"]
    assert set(runs) == {"fifo/liquid", "fifo/ffd", "fifo/gga"}
    for name in ("fifo/ffd", "fifo/gga"):
        assert runs[name]["finished"] + runs[name]["never_fit"] == 120
        assert runs[name]["batch_window"]["every_s"] == 30 and sum(runs[name]["batch_stops"].values()) >= 1
    # with batch windows, jobs start only at window ends (multiples of 30 s)
    starts = pd.read_csv(out / "jobs-fifo-gga.csv")["start_s"].dropna()
    assert len(starts) and (starts % 30 == 0).all()


def test_unknown_placement_is_named(tmp_path: Path) -> None:
    result = gpuplace("simulate", "--placement", "annealing", "--jobs", "10", home=tmp_path)
    assert result.returncode == 2
    assert "annealing" in result.stderr and "gga" in result.stderr


def test_the_measured_runtime_is_the_default_and_the_trace_runtime_ignores_placement(tmp_path: Path) -> None:
    # 300 real PAI jobs on the real PAI cluster, fast enough to queue: under the measured runtime a job
    # runs at the speed of where it was placed, under the trace runtime for its trace duration
    out = {}
    for runtime in ("measured", "trace"):
        folder = tmp_path / runtime
        args = ["simulate", "compare", "--cluster", "pai", "--rate", "600", "--jobs", "300", "--queues", "fifo",
                "--placements", "liquid,balance", "--out", str(folder)]
        result = gpuplace(*args, *(["--runtime", "trace"] if runtime == "trace" else []), home=tmp_path)
        assert result.returncode == 0, result.stderr
        assert f"{runtime} runtime" in result.stdout
        out[runtime] = json.loads((folder / "summary.json").read_text())
        assert out[runtime]["runtime"] == runtime
    trace, measured = out["trace"]["runs"], out["measured"]["runs"]
    assert all(run["lost_spread_gpu_h"] == 0 and run["lost_share_gpu_h"] == 0 for run in trace.values())
    # spreading costs time under the measured runtime: balance spreads jobs, liquid keeps them together
    assert measured["fifo/balance"]["lost_spread_gpu_h"] > measured["fifo/liquid"]["lost_spread_gpu_h"] >= 0
    per_job = pd.read_csv(folder / "jobs-fifo-liquid.csv")
    assert {"lost_type_s", "lost_spread_s", "lost_share_s"} <= set(per_job.columns)


def test_an_unknown_runtime_is_named(tmp_path: Path) -> None:
    result = gpuplace("simulate", "--runtime", "wallclock", "--jobs", "10", home=tmp_path)
    assert result.returncode == 2
    assert "wallclock" in result.stderr and "measured" in result.stderr


def test_simulate_compare_on_a_fluid_big_node(tmp_path: Path) -> None:
    # the big node as one pool: no placement (the runs are named "fluid"), trace durations, and never a wait
    # longer than on the same node's discrete GPUs for FIFO, where shares of GPUs fragment
    out = {}
    for cluster in ("big-node-fluid", "big-node"):
        out[cluster] = tmp_path / cluster
        result = gpuplace("simulate", "compare", "--cluster", cluster, "--gpus", "64", "--rate", "1000", "--jobs",
                          "300", "--queues", "fifo", "--runtime", "trace", "--out", str(out[cluster]), home=tmp_path)
        assert result.returncode == 0, result.stderr
    fluid = json.loads((out["big-node-fluid"] / "summary.json").read_text())
    discrete = json.loads((out["big-node"] / "summary.json").read_text())
    assert fluid["cluster"] == "big-node-64-fluid" and set(fluid["runs"]) == {"fifo/fluid"}
    run = fluid["runs"]["fifo/fluid"]
    assert run["finished"] + run["never_fit"] == 300 and run["finished"] >= 290
    assert fluid["runs"]["fifo/fluid"]["wait_mean_s"] <= discrete["runs"]["fifo/liquid"]["wait_mean_s"]
    # a sweep and the scheduler core's replay place jobs: they do not take the pool for the node, say why, and
    # name the node to give instead, before any replay starts
    for command in (["sweep", "--seeds", "0", "--queues", "fifo"], ["scheduled"]):
        refused = gpuplace("simulate", *command, "--cluster", "big-node-fluid", "--jobs", "10", home=tmp_path)
        assert refused.returncode == 2, refused.stderr
        assert "'big-node-fluid' counts the big node as one pool" in refused.stderr
        assert "give big-node" in refused.stderr and "replaying" not in refused.stderr
