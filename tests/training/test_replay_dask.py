"""Replay sweeps spread over a Dask cluster's workers give the numbers they give in one process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from distributed import Client

from tests.service.test_cli_errors import gpuplace, one_error
from training.dask_cluster import local_workers
from training.replay.compare import cluster_for, compare, pai_jobs
from training.replay.runners import InProcess, OnDask
from training.replay.sweep import SweepRun, SweepSetup, grid, sweep

SETUP = SweepSetup(cluster="openb", jobs=100, rate=1000.0)
"""Real jobs of both traces on the real openb GPU nodes, arriving fast so that they queue and the policies matter."""


def test_a_sweep_on_two_workers_gives_each_run_the_numbers_it_gives_here(client: Client) -> None:
    runs = grid(["pai2020-jobs", "openb2023"], [0, 1], ["fifo"], ["liquid"])
    here: list[SweepRun] = []
    serial = sweep(runs, SETUP, done=here.append)
    there: list[SweepRun] = []
    spread = sweep(runs, SETUP, OnDask(client), done=there.append)
    assert list(spread) == list(serial) == [run.name for run in runs]
    assert spread == serial
    assert here == runs and sorted(there, key=runs.index) == runs
    assert all(summary["jobs"] == 100 and summary["finished"] > 0 for summary in serial.values())


def test_compare_on_workers_writes_the_summary_it_writes_here(client: Client, tmp_path: Path) -> None:
    cluster, constrain = cluster_for("big-node", 64)
    jobs = pai_jobs(None, constrain, 80, 1000.0, estimates=False)
    runs = [("fifo", "liquid"), ("sjf-oracle", "first-fit")]
    ticks: list[tuple[str, int]] = []
    serial = compare(cluster, jobs, runs, tmp_path / "here")
    spread = compare(cluster, jobs, runs, tmp_path / "there", lambda run, n: ticks.append((run, n)),
                     runner=OnDask(client))
    assert spread["runs"] == serial["runs"] and spread["never_fit"] == serial["never_fit"]
    assert sorted(ticks) == [("fifo/liquid", 80), ("sjf-oracle/first-fit", 80)]
    for name in ("jobs-fifo-liquid.csv", "jobs-sjf-oracle-first-fit.csv"):
        assert (tmp_path / "there" / name).read_text() == (tmp_path / "here" / name).read_text()


def test_in_process_a_call_that_others_read_runs_once_and_results_come_in_order() -> None:
    calls: list[str] = []

    def make(name: str) -> str:
        calls.append(name)
        return name

    runner = InProcess()
    shared = runner.submit(make, "jobs", name="jobs")
    handles = [runner.submit(lambda jobs, i: f"{jobs}-{i}", shared, i, name=f"run-{i}") for i in range(3)]
    told: list[int] = []
    assert runner.results(handles, told.append) == ["jobs-0", "jobs-1", "jobs-2"]
    assert calls == ["jobs"] and told == [0, 1, 2]


def test_an_unknown_trace_is_named() -> None:
    with pytest.raises(KeyError, match="philly"):
        sweep(grid(["philly"], [0], ["fifo"], ["liquid"]), SETUP)


def test_scheduler_addresses_and_local_workers_are_told_apart() -> None:
    assert local_workers("local:3") == 3
    assert local_workers("tcp://10.0.0.5:8786") is None and local_workers("localhost:8786") is None
    for wrong in ("local:0", "local:two", "localhost"):
        with pytest.raises(ValueError, match=wrong):
            local_workers(wrong)


def test_a_malformed_scheduler_address_is_one_line_naming_it(tmp_path: Path) -> None:
    line = one_error(gpuplace("simulate", "sweep", "--jobs", "10", home=tmp_path,
                              GPUPLACE_DASK_SCHEDULER="local:two"))
    assert "--dask-scheduler" in line and "local:two" in line and "local:N" in line


def test_simulate_sweep_writes_every_run_to_sweep_json(tmp_path: Path) -> None:
    out = tmp_path / "sweep"
    result = gpuplace("simulate", "sweep", "--traces", "openb2023", "--seeds", "0-1", "--queues", "fifo",
                      "--placements", "liquid,random", "--cluster", "openb", "--jobs", "50", "--rate", "1000",
                      "--runtime", "trace", "--network-term", "bandwidth", "--out", str(out), home=tmp_path)
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "sweep.json").read_text())
    assert list(report["runs"]) == [f"openb2023/seed{s}/fifo/{p}" for s in (0, 1) for p in ("liquid", "random")]
    assert report["dask_scheduler"] is None and all(r["jobs"] == 50 for r in report["runs"].values())
