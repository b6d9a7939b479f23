"""Quotas: a queue's guarantee is held, borrowing stays within its limit and its cohort's idle quota, and
borrowers take turns by dominant-resource fairness. SYNTHETIC clusters, worked out by hand."""

from __future__ import annotations

import pytest

from placement.scheduling.jobs import JobMode
from placement.scheduling.plan import WaitReason
from tests.placement.scheduling_cases import (
    gpu_job,
    mixed_cluster,
    pending,
    plan_of,
    queues,
    running,
    started,
    synthetic_cluster,
)

G = JobMode.GUARANTEED


def test_a_queue_without_a_cohort_stops_at_its_guarantee() -> None:
    cluster = synthetic_cluster(8, 8)  # synthetic: 16 GPUs, all idle
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 4}})
    snapshot, run = running(cluster)
    jobs = [pending(gpu_job(f"j{i}", 2), "a", submit_s=i) for i in range(3)]
    plan = plan_of(snapshot, jobs, run, qs)
    assert started(plan) == ["j0", "j1"]  # 2 + 2 = 4 = the guarantee
    waiting = plan.waiting_for("j2")
    assert waiting is not None and waiting.reason is WaitReason.OVER_QUOTA
    assert "no cohort" in waiting.details[0]
    assert plan.usage["a"]["gpus"] == 4.0


def test_borrowing_stops_at_the_borrowing_limit() -> None:
    cluster = synthetic_cluster(8, 8)
    qs = queues(cluster, {"name": "a", "cohort": "c", "quota": {"gpus": 4}, "borrowing_limit": {"gpus": 2}},
                {"name": "b", "cohort": "c", "quota": {"gpus": 8}}, cohorts=["c"])
    snapshot, run = running(cluster)
    jobs = [pending(gpu_job(f"j{i}", 2), "a", submit_s=i) for i in range(5)]
    plan = plan_of(snapshot, jobs, run, qs)
    assert started(plan) == ["j0", "j1", "j2"]  # 4 guaranteed + 2 borrowed of b's idle 8
    assert [s.borrows for s in plan.starts] == [False, False, True]
    assert plan.waiting_for("j3").reason is WaitReason.OVER_QUOTA  # type: ignore[union-attr]
    assert "borrowing limit of 6" in plan.waiting_for("j3").details[0]  # type: ignore[union-attr]


def test_borrowing_stops_at_the_cohorts_idle_quota() -> None:
    cluster = synthetic_cluster(8, 8)
    qs = queues(cluster, {"name": "a", "cohort": "c", "quota": {"gpus": 4}},  # no limit: as much as is idle
                {"name": "b", "cohort": "c", "quota": {"gpus": 8}}, cohorts=["c"])
    snapshot, run = running(cluster, (gpu_job("b1", 6), "b", 0.0, 100.0, G))
    jobs = [pending(gpu_job(f"j{i}", 2), "a", submit_s=i) for i in range(4)]
    plan = plan_of(snapshot, jobs, run, qs)
    # a: 4 guaranteed; b uses 6 of its 8, so 2 are idle to borrow: 3 jobs of 2 GPUs, though 4 GPUs are free
    assert started(plan) == ["j0", "j1", "j2"]
    assert "the cohort has 0 idle" in plan.waiting_for("j3").details[0]  # type: ignore[union-attr]


def test_borrowers_take_turns_by_dominant_share() -> None:
    cluster = synthetic_cluster(8, 8)
    spec = [{"name": "a", "cohort": "c", "quota": {"gpus": 0}}, {"name": "b", "cohort": "c", "quota": {"gpus": 0}},
            {"name": "lender", "cohort": "c", "quota": {"gpus": 8}}]
    qs = queues(cluster, *spec, cohorts=["c"])
    # a already borrows 6 of the lender's 8: 2 idle left, and both a and b want 2 more
    snapshot, run = running(cluster, (gpu_job("a-old", 6), "a", 0.0, 100.0, G))
    jobs = [pending(gpu_job("a-new", 2), "a", submit_s=0.0), pending(gpu_job("b-new", 2), "b", submit_s=5.0)]
    plan = plan_of(snapshot, jobs, run, qs)
    # shares after the job: a (6 + 2) / 8 = 1.0, b 2 / 8 = 0.25: b first although a came first
    assert started(plan) == ["b-new"]
    assert plan.waiting_for("a-new").reason is WaitReason.OVER_QUOTA  # type: ignore[union-attr]
    # without a's borrowing, the earlier job goes first
    empty, none = running(cluster)
    assert started(plan_of(empty, jobs, none, qs))[0] == "a-new"


def test_a_per_type_quota_steers_the_job_to_a_type_with_quota_left() -> None:
    cluster = mixed_cluster(V100=8, T4=8)  # synthetic: machine 0 has 8 V100, machine 1 has 8 T4
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 16, "gpus_by_type": {"V100": 4}}})
    snapshot, run = running(cluster, (gpu_job("v", 4), "a", 0.0, 100.0, G))  # first fit: on the V100s
    plan = plan_of(snapshot, [pending(gpu_job("p", 4), "a")], run, qs)
    # first fit would take the 4 free V100s; the V100 quota is used up, so it goes to the T4s
    assert started(plan) == ["p"]
    assert plan.starts[0].allocation.machines() == {1}
    assert plan.usage["a"]["gpus:T4"] == 4.0 and plan.usage["a"]["gpus:V100"] == 4.0


def test_a_job_that_asks_only_for_a_type_without_quota_waits_over_quota() -> None:
    cluster = mixed_cluster(V100=8, T4=8)
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 16, "gpus_by_type": {"V100": 4}}})
    snapshot, run = running(cluster, (gpu_job("v", 4), "a", 0.0, 100.0, G))
    plan = plan_of(snapshot, [pending(gpu_job("p", 4, types=frozenset({"V100"})), "a")], run, qs)
    waiting = plan.waiting_for("p")
    assert waiting is not None and waiting.reason is WaitReason.OVER_QUOTA
    assert "V100" in waiting.details[-1]


def test_a_job_of_an_unknown_queue_waits_saying_so() -> None:
    cluster = synthetic_cluster(8)
    plan = plan_of(*running(cluster)[:1], [pending(gpu_job("p", 1), "nobody")], [],
                   queues(cluster, {"name": "a", "quota": {"gpus": 4}}))
    assert plan.waiting_for("p").reason is WaitReason.UNKNOWN_QUEUE  # type: ignore[union-attr]


def test_a_pending_job_listed_twice_or_already_running_is_refused_by_name() -> None:
    cluster = synthetic_cluster(8, 8)
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 8}})
    snapshot, run = running(cluster, (gpu_job("r0", 1), "a", 0.0, 100.0, G))
    twice = [pending(gpu_job("p0", 1), "a"), pending(gpu_job("p0", 1), "a", submit_s=1)]
    with pytest.raises(ValueError, match="pending job 'p0' is listed twice or already allocated"):
        plan_of(snapshot, twice, run, qs)
    with pytest.raises(ValueError, match="pending job 'r0' is listed twice or already allocated"):
        plan_of(snapshot, [pending(gpu_job("r0", 1), "a")], run, qs)
