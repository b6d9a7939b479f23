"""The replay engine on a tiny SYNTHETIC cluster, with the expected arithmetic in comments."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from placement.model.cluster import Machine, build_cluster
from placement.model.demand import Job, Role, Task
from placement.sim.engine import BatchWindow, simulate
from placement.sim.jobs import SimJob
from placement.sim.metrics import summarise
from placement.sim.queues import queue_policy

CLUSTER = build_cluster("synthetic", [Machine("m0", "T4", 2, 16, 64)])  # 2 GPUs in all


def job(job_id: str, gpus: int, submit: float, duration: float, user: str = "u", guess: float = float("nan")) -> SimJob:
    return SimJob(Job(job_id, (Task(Role.WORKER, 1, gpu=gpus),)), user, submit, duration,
                  MappingProxyType({"guess": guess}))


def test_fifo_versus_shortest_first() -> None:
    # t=0: 'long' (2 GPUs, 100 s) runs; at t=1 'mid' (2 GPUs, 50 s) and t=2 'short' (2 GPUs, 10 s) wait.
    jobs = [job("long", 2, 0, 100), job("mid", 2, 1, 50), job("short", 2, 2, 10)]
    fifo = {r.job_id: r for r in simulate(CLUSTER, jobs, "first-fit", queue_policy("fifo")).records}
    # FIFO: mid starts at 100, ends 150; short starts 150, ends 160
    assert (fifo["mid"].start_s, fifo["short"].end_s) == (100, 160)
    sjf = {r.job_id: r for r in simulate(CLUSTER, jobs, "first-fit", queue_policy("sjf-oracle")).records}
    # SJF: short starts at 100, ends 110; mid starts 110, ends 160
    assert (sjf["short"].start_s, sjf["mid"].start_s) == (100, 110)
    # mean JCT: FIFO (100 + 149 + 158) / 3 = 135.67; SJF (100 + 159 + 108) / 3 = 122.33
    assert summarise(simulate(CLUSTER, jobs, "first-fit", queue_policy("fifo")))["jct_mean_s"] == pytest.approx(407 / 3)
    assert summarise(simulate(CLUSTER, jobs, "first-fit", queue_policy("sjf-oracle")))["jct_mean_s"] == \
        pytest.approx(367 / 3)


def test_sjf_by_an_estimate_and_backfilling() -> None:
    # the estimate ranks 'b' (guess 5) before 'a' (guess 500); a 1-GPU job backfills next to 'first'
    jobs = [job("first", 1, 0, 100), job("a", 2, 1, 10, guess=500), job("b", 2, 1, 30, guess=5),
            job("small", 1, 2, 10)]
    records = {r.job_id: r for r in simulate(CLUSTER, jobs, "liquid", queue_policy("sjf-guess")).records}
    assert records["small"].start_s == 2  # fits beside 'first' at once
    assert records["b"].start_s == 100 and records["a"].start_s == 130


def test_jobs_that_can_never_fit_are_reported_not_dropped() -> None:
    result = simulate(CLUSTER, [job("huge", 4, 0, 10), job("ok", 1, 0, 10)], "liquid", queue_policy("fifo"))
    huge = next(r for r in result.records if r.job_id == "huge")
    assert huge.never_fits and huge.start_s is None
    assert "no machine has 4 free GPUs" in huge.reasons[0]
    summary = summarise(result)
    assert (summary["never_fit"], summary["finished"]) == (1, 1)


def test_drf_serves_the_user_with_the_smallest_share_first() -> None:
    # 'heavy' holds 1 of 2 GPUs until 300 (share 0.5); at t=1 each user queues a 1-GPU job for the one
    # free GPU. FIFO's tie-break (job id) would pick h1; DRF picks 'light' (share 0): l1 runs 1..11, then h1
    jobs = [job("h0", 1, 0, 300, user="heavy"), job("h1", 1, 1, 10, user="heavy"), job("l1", 1, 1, 10, user="light")]
    drf = {r.job_id: r for r in simulate(CLUSTER, jobs, "first-fit", queue_policy("drf")).records}
    assert drf["l1"].start_s == 1 and drf["h1"].start_s == 11
    fifo = {r.job_id: r for r in simulate(CLUSTER, jobs, "first-fit", queue_policy("fifo")).records}
    assert fifo["h1"].start_s == 1 and fifo["l1"].start_s == 11


def test_allocation_and_fragmentation_are_time_weighted() -> None:
    # 1 of 2 GPUs busy for 0..100 while a 2-GPU job waits: allocation 0.5, fragmentation (1 free / 2) = 0.5
    jobs = [job("one", 1, 0, 100), job("two", 2, 0, 100)]
    summary = summarise(simulate(CLUSTER, jobs, "first-fit", queue_policy("fifo")))
    # 0..100: 1 GPU; 100..200: 2 GPUs -> allocation (100 x 1 + 100 x 2) / 200 / 2 = 0.75
    assert summary["gpu_allocation"] == pytest.approx(0.75)
    assert summary["fragmentation"] == pytest.approx(0.5)


def test_unknown_queue_policy() -> None:
    with pytest.raises(KeyError, match="fifo"):
        queue_policy("lottery")


@pytest.mark.parametrize("policy", ["ffd", "gga", "cpsat"])
def test_batch_windows_place_what_arrived_in_the_window_at_its_end(policy: str) -> None:
    # windows of 60 s: 'a' (t=5) and 'b' (t=20) start together at t=60; 'c' (t=70, 2 GPUs) must wait for
    # both to finish (a: 60+30=90, b: 60+100=160); the window after b's completion ends at 180.
    jobs = [job("a", 1, 5, 30), job("b", 1, 20, 100), job("c", 2, 70, 10)]
    window = BatchWindow(policy, every_s=60.0, time_limit_s=0.5, max_jobs=8)
    result = simulate(CLUSTER, jobs, "first-fit", queue_policy("fifo"), batch=window)
    records = {r.job_id: r for r in result.records}
    assert (records["a"].start_s, records["b"].start_s, records["c"].start_s) == (60, 60, 180)
    assert sum(result.batch_stops.values()) == 2  # solver runs at 60 and 180 (at 120 nothing could start)


def test_batch_window_checks_its_settings() -> None:
    with pytest.raises(KeyError, match="gga"):
        BatchWindow("annealing")
    with pytest.raises(ValueError, match="every_s"):
        BatchWindow("ffd", every_s=0)


def test_estimate_missing_sorts_as_the_median_of_earlier_estimates() -> None:
    # 'x' has no guess: it sorts as the median of those that arrived before it (10 and 30 -> 20),
    # so between 'p' (guess 10) and 'q' (guess 30) once all wait behind 'block'
    jobs = [job("block", 2, 0, 100), job("p", 2, 1, 10, guess=10), job("q", 2, 2, 10, guess=30),
            job("x", 2, 3, 10)]
    records = {r.job_id: r for r in simulate(CLUSTER, jobs, "first-fit", queue_policy("sjf-guess")).records}
    assert records["p"].start_s < records["x"].start_s < records["q"].start_s


def test_every_waiting_job_that_could_fit_is_offered_however_long_the_queue() -> None:
    # m0: 2 GPUs, 16 cores. 'hold' (1 GPU, 10 cores) runs until 1000 and 'blocker' (1 GPU, 1 core) until 50.
    # 300 jobs that each need 1 GPU and more than the 6 free cores arrive at t=1 and wait for 'hold';
    # 'small' (1 GPU, 1 core) arrives at t=2 behind them. When 'blocker' ends at 50, 'small' is offered
    # in that pass and starts at once, behind 300 jobs of 300 different shapes.
    cluster = build_cluster("synthetic", [Machine("m0", "T4", 2, 16, 64)])

    def cpu_job(job_id: str, submit: float, duration: float, cores: float) -> SimJob:
        return SimJob(Job(job_id, (Task(Role.WORKER, 1, gpu=1, cpu_cores=cores),)), "u", submit, duration)

    jobs = [cpu_job("hold", 0, 1000, 10), cpu_job("blocker", 0, 50, 1)]
    jobs += [cpu_job(f"wide{k:03d}", 1, 10, 7 + k / 100) for k in range(300)]
    jobs.append(cpu_job("small", 2, 10, 1))
    records = {r.job_id: r for r in simulate(cluster, jobs, "first-fit", queue_policy("fifo")).records}
    assert records["small"].start_s == 50
    assert records["wide000"].start_s == 1000  # FIFO among the wide ones once 'hold' has gone


def shared(job_id: str, share: float, instances: int, submit: float, duration: float) -> SimJob:
    return SimJob(Job(job_id, (Task(Role.WORKER, instances, gpu=share),)), "u", submit, duration)


def test_a_fluid_cluster_pools_shares_that_discrete_gpus_cannot() -> None:
    # synthetic: 2 GPUs. Three 0.6-GPU instances (1.8 GPUs) need three GPUs when each share sits on one GPU,
    # but fit a pool of 2; a 0.2-GPU job then still fits the pool's last 0.2
    jobs = [shared("three", 0.6, 3, 0, 100), shared("small", 0.2, 1, 1, 10)]
    discrete = {r.job_id: r for r in simulate(CLUSTER, jobs, "first-fit", queue_policy("fifo")).records}
    assert discrete["three"].never_fits and discrete["small"].start_s == 1
    fluid = {r.job_id: r for r in simulate(CLUSTER, jobs, "first-fit", queue_policy("fifo"), fluid=True).records}
    assert (fluid["three"].start_s, fluid["three"].end_s, fluid["small"].start_s) == (0, 100, 1)
    summary = summarise(simulate(CLUSTER, [*jobs, shared("late", 0.5, 1, 2, 5)], "first-fit",
                                 queue_policy("fifo"), fluid=True))
    # 'late' (0.5, t=2) finds the pool full (1.8 + 0.2); 'small' frees only 0.2 at 11, 'three' 1.8 at 100
    assert summary["finished"] == 3 and summary["wait_mean_s"] == pytest.approx(98 / 3)


def test_a_fluid_cluster_orders_its_queue_and_reports_what_exceeds_the_pool() -> None:
    jobs = [job("long", 2, 0, 100), job("mid", 2, 1, 50), job("short", 2, 2, 10), job("huge", 3, 0, 10)]
    sjf = {r.job_id: r for r in simulate(CLUSTER, jobs, "first-fit", queue_policy("sjf-oracle"), fluid=True).records}
    assert (sjf["short"].start_s, sjf["mid"].start_s) == (100, 110)
    assert sjf["huge"].never_fits and sjf["huge"].reasons == ("needs 3 GPUs, the cluster has 2",)
    with pytest.raises(ValueError, match="fluid cluster places nothing"):
        simulate(CLUSTER, jobs, "first-fit", queue_policy("fifo"), batch=BatchWindow("ffd"), fluid=True)
