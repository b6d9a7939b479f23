"""The replay on the scheduler core (``placement.sim.scheduled``), on SYNTHETIC clusters and jobs: small
cases worked out by hand, and a random synthetic workload of a few hundred jobs in three queues."""

from __future__ import annotations

import math
import random
from dataclasses import asdict

import pytest

from placement.model.cluster import Cluster
from placement.online.policies import online_policy
from placement.scheduling.jobs import DurationEstimate, JobMode
from placement.scheduling.queue_config import queues_from_dict
from placement.scheduling.queues import QueueSet
from placement.scheduling.settings import SchedulingSettings
from placement.sim.scheduled import (
    NEVER_FITS,
    OVER_LIMIT,
    ReplayJob,
    ReplayResult,
    ReplaySettings,
    causal_fill,
    compressed,
    queue_of,
    queues_by_share,
    replay_scheduled,
)
from placement.sim.scheduled_summary import jain, summarise_replay
from tests.placement.scheduling_cases import gpu_job, queues, synthetic_cluster


def job(job_id: str, queue: str, submit_s: float, gpus: float, duration_s: float, instances: int = 1,
        estimate_s: float | None = None, mode: JobMode = JobMode.GUARANTEED) -> ReplayJob:
    told = duration_s if estimate_s is None else estimate_s
    return ReplayJob(gpu_job(job_id, gpus, instances), queue, submit_s, duration_s, DurationEstimate(told, told), mode)


def run(cluster: Cluster, jobs: list[ReplayJob], queue_set: QueueSet, opportunistic: bool = False,
        **settings: object) -> ReplayResult:
    return replay_scheduled(cluster, jobs, queue_set, online_policy("first-fit", explain=False),
                            ReplaySettings(SchedulingSettings(**settings), opportunistic))  # type: ignore[arg-type]


def two_queues(cluster: Cluster, each: float) -> QueueSet:
    return queues(cluster, {"name": "a", "cohort": "all", "quota": {"gpus": each}},
                  {"name": "b", "cohort": "all", "quota": {"gpus": each}}, cohorts=["all"])


def synthetic_workload(seed: int, count: int = 240) -> tuple[Cluster, QueueSet, list[ReplayJob]]:
    """SYNTHETIC: three queues in one cohort on 3 machines of 8 GPUs; jobs of 1-8 GPUs (some shares), arriving
    faster than they end, durations 10 s to 1 h, estimates off by up to 2x, a few of high priority."""
    rng = random.Random(seed)
    cluster = synthetic_cluster(8, 8, 8)
    queue_set = queues(cluster, {"name": "a", "cohort": "all", "quota": {"gpus": 12}},
                       {"name": "b", "cohort": "all", "quota": {"gpus": 8}, "order": "sjf"},
                       {"name": "c", "cohort": "all", "quota": {"gpus": 4}, "order": "priority",
                        "borrowing_limit": {"gpus": 4}}, cohorts=["all"])
    jobs, now = [], 0.0
    for k in range(count):
        now += rng.expovariate(1 / 20)
        duration = rng.choice([10.0, 60.0, 300.0, 900.0, 3600.0])
        gpus, instances = rng.choice([(0.5, 1), (1.0, 1), (1.0, 2), (2.0, 1), (4.0, 1), (2.0, 4)])
        base = gpu_job(f"j{k}", gpus, instances, priority=rng.choice([0, 0, 0, 1]))
        told = duration * rng.uniform(0.5, 2.0)
        jobs.append(ReplayJob(base, rng.choice("abc"), round(now, 1), duration, DurationEstimate(told, 1.5 * told)))
    return cluster, queue_set, jobs


def test_a_preempted_jobs_old_end_is_passed_over_and_it_restarts_from_scratch() -> None:
    # 4 GPUs, queues a and b guaranteed 2 each in one cohort: A (4 GPUs, 100 s) borrows b's idle half at 0;
    # B (2 GPUs) reclaims it at 10, preempting A (4 GPUs x 10 s lost); B ends at 20, A starts again and runs
    # its whole 100 s: it ends at 120, and the end of its first run (due at 100) is passed over
    cluster = synthetic_cluster(4)
    result = run(cluster, [job("A", "a", 0.0, 4.0, 100.0), job("B", "b", 10.0, 2.0, 10.0)], two_queues(cluster, 2))
    a, b = result.outcomes
    assert (a.starts, a.ends, a.preemptions, a.start_s, a.end_s) == (2, 1, 1, 20.0, 120.0)
    assert (b.starts, b.ends, b.start_s, b.end_s) == (1, 1, 10.0, 20.0)
    assert a.lost_gpu_s == result.preempted_gpu_s == 40.0
    assert result.preemptions_by_reason == {"reclaim": 1}
    assert result.stale_ends == 1
    assert a.wait_s == 20.0 and a.jct_s == 120.0  # JCT = wait (queueing and the run lost) + the real duration
    assert not result.violations


def test_without_preemption_the_borrower_keeps_running() -> None:
    cluster = synthetic_cluster(4)
    result = run(cluster, [job("A", "a", 0.0, 4.0, 100.0), job("B", "b", 10.0, 2.0, 10.0)], two_queues(cluster, 2),
                 preemption=False)
    a, b = result.outcomes
    assert (a.starts, a.end_s, b.start_s, b.end_s) == (1, 100.0, 100.0, 110.0)
    assert result.preempted_gpu_s == 0 and result.stale_ends == 0


def test_idle_gpu_hours_while_waiting_by_hand() -> None:
    # one machine of 4 GPUs, no quota. X (3 GPUs) runs 0-100; Y (2 GPUs) arrives at 10 and waits for X, with
    # a reservation on two of X's GPUs at 100; Z (1 GPU) arrives at 20 and takes the free GPU (it ends at 220,
    # but Y's reserved place does not need it). Free GPUs while someone waits: 1 from 10 to 20, then none
    # until Y starts at 100; afterwards nobody waits: 1 GPU x 10 s
    cluster = synthetic_cluster(4)
    queue_set = queues(cluster, {"name": "q", "quota": {}})
    jobs = [job("X", "q", 0.0, 3.0, 100.0), job("Y", "q", 10.0, 2.0, 50.0), job("Z", "q", 20.0, 1.0, 200.0)]
    result = run(cluster, jobs, queue_set)
    x, y, z = result.outcomes
    assert (x.start_s, y.start_s, z.start_s) == (0.0, 100.0, 20.0)
    assert result.idle_gpu_s_waiting == pytest.approx(10.0)
    summary = summarise_replay(result)
    assert summary["idle_gpu_h_while_waiting"] == pytest.approx(10.0 / 3600)
    assert summary["wait_sum_s"] == pytest.approx(90.0)
    assert summary["jct_mean_s"] == pytest.approx((100 + 140 + 200) / 3)
    assert summary["passes"] == 4  # at 0, 10, 20 and 100; at 150 and 220 nobody waits


def test_a_reservation_coming_due_wakes_a_pass() -> None:
    # X is told it runs 50 s but runs 100: Y's reservation is due at 50, a pass runs then (Y still waits)
    cluster = synthetic_cluster(4)
    queue_set = queues(cluster, {"name": "q", "quota": {}})
    result = run(cluster, [job("X", "q", 0.0, 3.0, 100.0, estimate_s=50.0), job("Y", "q", 10.0, 2.0, 50.0)],
                 queue_set)
    assert result.timed_wakes == 1
    assert result.passes == 4  # 0, 10, the due time 50, and 100 when X ends and Y starts
    assert result.outcomes[1].start_s == 100.0


def test_a_job_out_of_patience_wakes_a_pass_that_starts_it_opportunistically() -> None:
    # Y waits over its queue's quota while X runs; with 60 s of patience a pass at 70 s starts it on the idle GPUs,
    # with nothing else happening then; without, it starts when X ends
    cluster = synthetic_cluster(4)
    queue_set = queues(cluster, {"name": "q", "quota": {"gpus": 2}})
    jobs = [job("X", "q", 0.0, 2.0, 1000.0), job("Y", "q", 10.0, 1.0, 50.0)]
    patient = run(cluster, jobs, queue_set, opportunistic_after_s=60.0)
    assert patient.timed_wakes == 1 and patient.outcomes[1].start_s == 70.0
    assert run(cluster, jobs, queue_set).outcomes[1].start_s == 1000.0
    # the wait runs out at 469.3 + 85.0, from which 469.3 taken is a little under 85.0 in floating point: a job judged
    # by the difference would not be late when its wake-up comes, and would ask for the same wake-up again
    assert (469.3 + 85.0) - 469.3 < 85.0
    odd = [job("X", "q", 0.0, 2.0, 1000.0), job("Y", "q", 469.3, 1.0, 50.0)]
    assert run(cluster, odd, queue_set, opportunistic_after_s=85.0).outcomes[1].start_s == 469.3 + 85.0


def test_jobs_that_can_never_start_are_reported_and_never_wait() -> None:
    cluster = synthetic_cluster(4, 4)
    queue_set = queues(cluster, {"name": "a", "quota": {"gpus": 2}}, {"name": "b", "quota": {"gpus": 6}})
    jobs = [job("huge", "b", 0.0, 1.0, 10.0, instances=9),  # 9 GPUs on a cluster of 8
            job("wide", "b", 0.0, 8.0, 10.0),  # 8 GPUs on one machine of 4
            job("greedy", "a", 0.0, 3.0, 10.0),  # 3 GPUs in a queue that may hold 2 and borrows nothing
            job("nobody", "z", 0.0, 1.0, 10.0),
            job("fine", "a", 5.0, 1.0, 10.0)]
    result = run(cluster, jobs, queue_set)
    reasons = {o.job_id: o.never_started for o in result.outcomes}
    assert reasons == {"huge": NEVER_FITS, "wide": NEVER_FITS, "greedy": OVER_LIMIT, "nobody": "unknown-queue",
                       "fine": None}
    assert result.idle_gpu_s_waiting == 0.0
    assert summarise_replay(result)["never_started"] == 4


@pytest.mark.parametrize("seed", [1, 2])
def test_no_quota_violation_each_job_starts_once_per_run_and_ends_once(seed: int) -> None:
    cluster, queue_set, jobs = synthetic_workload(seed)
    for opportunistic in (False, True):
        result = run(cluster, jobs, queue_set, opportunistic, prescheduling_horizon_s=300.0)
        assert result.violations == []
        for o in result.outcomes:
            assert o.ends == 1 and o.never_started is None, o
            assert o.starts == o.preemptions + 1  # each run started once; every run but the last preempted
            assert o.wait_s is not None and o.jct_s == pytest.approx(o.wait_s + o.duration_s)
        assert result.stale_ends == sum(o.preemptions for o in result.outcomes)
        assert result.preempted_gpu_s == pytest.approx(sum(o.lost_gpu_s for o in result.outcomes))


def test_preemption_off_preempts_nobody_where_on_it_does() -> None:
    cluster, queue_set, jobs = synthetic_workload(3)
    on = run(cluster, jobs, queue_set, True)
    off = run(cluster, jobs, queue_set, True, preemption=False)
    assert sum(o.preemptions for o in on.outcomes) > 0 and on.preempted_gpu_s > 0
    assert sum(o.preemptions for o in off.outcomes) == 0 and off.preempted_gpu_s == 0 and off.stale_ends == 0
    assert not off.violations


def test_the_replay_is_deterministic() -> None:
    cluster, queue_set, jobs = synthetic_workload(4, count=150)

    def facts(result: ReplayResult) -> tuple[object, ...]:
        summary = {k: v for k, v in summarise_replay(result).items() if not k.startswith(("pass_ms", "wall"))}
        return [asdict(o) for o in result.outcomes], summary

    first = run(cluster, jobs, queue_set, True, prescheduling_horizon_s=120.0)
    assert facts(first) == facts(run(cluster, jobs, queue_set, True, prescheduling_horizon_s=120.0))


def test_opportunistic_submission_beyond_the_guarantee() -> None:
    # queue a guarantees 2 GPUs: the first 2-GPU job is guaranteed, the second (2 + 2 > 2) opportunistic; it
    # runs on b's idle GPUs until b's job comes and preempts it (opportunistic jobs go first)
    cluster = synthetic_cluster(4)
    jobs = [job("a1", "a", 0.0, 2.0, 100.0), job("a2", "a", 1.0, 2.0, 100.0), job("b1", "b", 10.0, 2.0, 10.0)]
    result = run(cluster, jobs, two_queues(cluster, 2), opportunistic=True)
    a1, a2, b1 = result.outcomes
    assert (a1.mode, a2.mode, b1.mode) == (JobMode.GUARANTEED, JobMode.OPPORTUNISTIC, JobMode.GUARANTEED)
    assert result.preemptions_by_reason == {"opportunistic": 1} and a2.preemptions == 1
    assert (a2.start_s, a2.end_s) == (20.0, 120.0)
    assert summarise_replay(result)["opportunistic_submitted"] == 1


def test_helpers() -> None:
    assert compressed([100.0, 110.0, 130.0], 2.0) == [0.0, 5.0, 15.0]
    with pytest.raises(ValueError):
        compressed([1.0], 0.0)
    assert causal_fill([math.nan, 4.0, math.nan, 2.0, math.nan]) == [0.0, 4.0, 4.0, 2.0, 3.0]
    assert queue_of("u1", ["u1", "shared"]) == "u1" and queue_of("u9", ["u1", "shared"]) == "shared"
    assert queue_of("u9", ["x", "y"]) == queue_of("u9", ["y", "x"]) in ("x", "y")
    assert jain([2.0, 2.0, 2.0]) == pytest.approx(1.0) and jain([1.0, 0.0]) == pytest.approx(0.5)


def test_queues_by_share_are_proportional_and_fit_the_cluster() -> None:
    cluster = synthetic_cluster(8, 8)
    config = queues_by_share({"u1": 50.0, "u2": 30.0, "u3": 15.0, "u4": 5.0, "none": 0.0}, cluster.total_gpus, 2)
    listed = {q["name"]: q for q in config["queues"]}  # type: ignore[attr-defined]
    assert {n: q["quota"]["gpus"] for n, q in listed.items()} == {"u1": 8.0, "u2": 4.0, "shared": 3.0}
    checked = queues_from_dict(config, cluster)  # a valid configuration: guarantees within the cluster
    assert {q.cohort for q in checked.queues.values()} == {"all"}
