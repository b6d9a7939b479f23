"""The quick start's replay through the service's queue against a real server on a tiny synthetic cluster
(two GPUs), and the baseline it is compared with, with the arithmetic worked out: who starts at once,
who waits for completions, who can never fit; and the pace, the cluster share and the figures both sides
are judged by."""

from __future__ import annotations

import io
import math
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from rich.console import Console

from placement import Machine, build_cluster, queue_policy, simulate, summarise
from service.cli.quickstart import API_KEY_ENV, QUEUE, comparison_table, replay
from service.cli.quickstart_compare import (
    Arrival,
    JobRun,
    baseline,
    cluster_share,
    figures,
    over_share,
    peak_demand,
    queueing_rate,
    sim_job,
)
from service.codec import cluster_from_json
from tests.service.conftest import API_KEY, Server, server_env

TINY = {"name": "tiny-synthetic", "machines": [{"name": "m1", "gpu_type": "V100", "gpus": 2, "cpu_cores": 32,
                                                "mem_gib": 128}]}


def body(job_id: str, gpus: int = 1, instances: int = 1) -> dict[str, object]:
    return {"job_id": job_id, "user": "u1", "tasks": [{"instances": instances, "gpu": gpus, "cpu_cores": 2}]}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    running = Server(server_env(tmp_path, f"sqlite:///{tmp_path / 'state.db'}")).start()
    put = httpx.put(f"{running.url}/v1/cluster", json=TINY, headers={"X-API-Key": API_KEY})
    assert put.status_code == 200, put.text
    yield running
    running.stop()


def test_replay_queues_starts_on_completions_and_matches_the_baseline(server: Server,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(API_KEY_ENV, API_KEY)
    cluster = cluster_from_json(TINY)
    arrivals = [Arrival(0.0, 10.0, body("a")), Arrival(1.0, 10.0, body("b")),
                Arrival(2.0, 5.0, body("c", instances=2)),  # both GPUs: waits for a (ends 10) and b (ends 11)
                Arrival(3.0, 1.0, body("d", instances=3)),  # three GPUs on a two-GPU cluster: never starts
                Arrival(4.0, 1.0, {**body("e"), "tasks": [{"gpu": -1}]})]  # bad input: refused
    summary = replay(server.url, arrivals, cluster)

    assert (summary.started_at_once, summary.started_after_wait, summary.never_started) == (2, 1, ["d"])
    assert summary.completed == 3 and len(summary.refused) == 1 and "e:" in summary.refused[0]
    assert [a.body["job_id"] for a in summary.accepted] == ["a", "b", "c", "d"]
    assert {r.job_id: (r.start_s, r.end_s) for r in summary.runs} == {
        "a": (0.0, 10.0), "b": (1.0, 11.0), "c": (11.0, 16.0), "d": (None, None)}
    assert summary.cluster_gpus == 2.0 and summary.requested["gpu"] == 7.0 and summary.model_versions == {"heuristic"}

    ours = figures(summary.runs, summary.cluster_gpus)
    assert (ours.jobs, ours.finished, ours.never_started, ours.waited) == (4, 3, 1, 1)
    assert ours.jct_mean_s == pytest.approx((10 + 10 + 14) / 3) and ours.wait_mean_s == pytest.approx(3.0)
    assert ours.idle_gpu_h == pytest.approx(1 / 3600)  # c waits while a's GPU is free, from 10 to 11
    base = figures(baseline(cluster, summary.accepted), float(cluster.total_gpus))
    assert base == ours  # the same jobs, arrivals and cluster, and here the same decisions

    for job_id, state in (("a", "completed"), ("c", "completed"), ("d", "cancelled")):
        assert httpx.get(f"{server.url}/v1/jobs/{job_id}").json()["state"] == state
    assert httpx.get(f"{server.url}/v1/jobs/c").json()["completion"]["duration_s"] == 5.0
    assert httpx.get(f"{server.url}/v1/jobs", params={"state": "pending", "queue": QUEUE}).json()["jobs"] == []
    assert httpx.get(f"{server.url}/v1/cluster").json()["gpus_allocated"] == 0.0

    shown = Console(file=io.StringIO(), width=240)
    shown.print(comparison_table(summary, base, "4 jobs on tiny-synthetic", "heuristic"))
    text = shown.file.getvalue()  # type: ignore[attr-defined]
    assert "gpuplace (the service's queue)" in text and "baseline (FIFO, first fit)" in text
    assert "3 / 1" in text and "4 jobs on tiny-synthetic" in text
    jct = next(line for line in text.splitlines() if "mean JCT" in line)
    assert jct.count(" 11 s ") == 2 and "+0%" in jct


def test_a_replay_with_waiting_jobs_is_judged_as_the_simulator_judges_it() -> None:
    """``figures`` over the baseline's jobs: the simulator's own JCT, wait and time-weighted free GPUs."""
    rng = np.random.default_rng(7)
    cluster = build_cluster("two-machines", [Machine("m1", "V100", 4, 32.0, 128.0), Machine("m2", "T4", 2, 32.0,
                                                                                           128.0)])
    arrivals = [Arrival(float(i * 20), float(rng.integers(10, 300)), body(f"j{i}", instances=int(rng.integers(1, 4))))
                for i in range(40)]
    arrivals.append(Arrival(800.0, 5.0, body("too-big", instances=7)))
    runs = baseline(cluster, arrivals)
    mine = figures(runs, float(cluster.total_gpus))

    result = simulate(cluster, [sim_job(a) for a in arrivals], "first-fit", queue_policy("fifo"))
    theirs = summarise(result)
    assert mine.jobs == len(arrivals) == theirs["jobs"] and mine.never_started == 1 == theirs["never_fit"]
    assert mine.waited > 10 and mine.idle_gpu_h > 0.1  # they queue, with GPUs free: nothing below compares zeros
    assert mine.jct_mean_s == pytest.approx(theirs["jct_mean_s"])
    assert mine.jct_p95_s == pytest.approx(theirs["jct_p95_s"])
    assert mine.wait_mean_s == pytest.approx(theirs["wait_mean_s"])
    times = [s[0] for s in result.samples]
    waited_s = theirs["waiting_time_share"] * (times[-1] - times[0])
    assert mine.idle_gpu_h == pytest.approx(theirs["fragmentation"] * cluster.total_gpus * waited_s / 3600)


def test_figures_of_jobs_that_never_waited_have_no_idle_time() -> None:
    runs = [JobRun("a", 0.0, 1.0, 0.0, 5.0), JobRun("b", 1.0, 0.5, 1.0, 3.0), JobRun("c", 2.0, 1.0)]
    got = figures(runs, 8.0)
    assert (got.finished, got.never_started, got.waited, got.idle_gpu_h) == (2, 1, 0, 0.0)
    assert got.jct_mean_s == 3.5 and got.wait_mean_s == 0.0
    assert math.isnan(figures([JobRun("c", 2.0, 1.0)], 8.0).jct_mean_s)


def test_peak_demand_counts_the_gpus_held_at_once() -> None:
    # held: 1 from 0, 3 from 10, 2 from 15 (the first ends), 6 from 20, 4 from 25
    assert peak_demand(np.array([0.0, 10.0, 20.0]), np.array([15.0, 15.0, 100.0]), np.array([1.0, 2.0, 4.0])) == 6.0
    # an end and a start at the same time: the end goes first
    assert peak_demand(np.array([0.0, 10.0]), np.array([10.0, 5.0]), np.array([3.0, 3.0])) == 3.0


def test_the_pace_is_the_slowest_at_which_demand_exceeds_the_cluster_half_the_time() -> None:
    durations, gpus = np.full(3, 120.0), np.ones(3)
    # one a minute: arrivals at 0, 60, 120; two held from 60 to 180; over one GPU for 60 s of the 120 s span
    assert over_share(durations, gpus, 1.0, 1.0) == pytest.approx(0.5)
    assert over_share(durations, gpus, 1.0, 0.5) == 0.0  # at 0, 120, 240: never two at once
    assert over_share(durations, gpus, 2.0, 100.0) == 0.0  # never more than the cluster's two
    # arrivals s seconds apart (60 < s < 120) hold two GPUs within their span, 0 to 2 s, from s to 120 only:
    # under half of it; at s = 60 (one a minute) just half
    assert over_share(durations, gpus, 1.0, 0.75) == pytest.approx((120 - 80) / 160)
    assert queueing_rate(durations, gpus, 1.0, 0.1) == pytest.approx(1.0, rel=1e-6)
    assert queueing_rate(durations, gpus, 1.0, 2.0) == 2.0  # already over at the pace it starts from
    assert queueing_rate(durations, gpus, 3.0, 0.1) == 6000.0  # three GPUs hold them all: the fastest tried


def test_a_cluster_share_keeps_every_kth_machine_of_each_type_in_order() -> None:
    machines = [Machine(f"a{i}", "V100", 8, 96.0, 512.0) for i in range(5)] + \
        [Machine(f"b{i}", "T4", 2, 96.0, 512.0) for i in range(2)] + [Machine("c0", "CPU", 0, 96.0, 512.0)]
    cluster = build_cluster("mixed", [machines[i] for i in (0, 5, 1, 2, 6, 3, 7, 4)])
    share = cluster_share(cluster, 2)
    assert [m.name for m in share.machines] == ["a0", "b0", "a2", "c0", "a4"]
    assert share.name == "mixed-1-in-2" and share.total_gpus == 26
    assert cluster_share(cluster, 1) is cluster
