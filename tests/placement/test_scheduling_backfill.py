"""Reservations and backfilling: the first job of a queue that waits for capacity gets a reserved place
at the estimated end of the jobs there; later jobs start now only if they do not delay it; with a
pre-scheduling horizon, places that free soon are reserved for further jobs (Liquid). SYNTHETIC clusters.

The running jobs belong to queue ``b``, whose guarantee is 0: with preemption on, queue ``a`` would
reclaim their GPUs at once (``test_with_preemption_the_head_reclaims_instead``), so the reservation
tests turn preemption off, as a cluster that does not preempt would."""

from __future__ import annotations

from placement.model.feasibility import violations
from placement.model.snapshot import release
from placement.scheduling.jobs import JobMode
from placement.scheduling.plan import PreemptReason, ReservationKind, WaitReason, apply_plan
from tests.placement.scheduling_cases import gpu_job, pending, plan_of, queues, running, started, synthetic_cluster

G = JobMode.GUARANTEED


def _one_machine_half_busy() -> tuple:  # type: ignore[type-arg]
    cluster = synthetic_cluster(8)  # synthetic: one machine, 8 GPUs
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 8}}, {"name": "b", "quota": {"gpus": 0}})
    snapshot, run = running(cluster, (gpu_job("r1", 4), "b", 0.0, 100.0, G))  # 4 GPUs until t = 100
    return cluster, qs, snapshot, run


def test_backfill_never_delays_the_reserved_head() -> None:
    _, qs, snapshot, run = _one_machine_half_busy()
    head = pending(gpu_job("head", 8), "a", submit_s=0.0, p50_s=500.0)
    short = pending(gpu_job("short", 2), "a", submit_s=1.0, p50_s=40.0, p90_s=60.0)  # ends by 60 <= 100
    long = pending(gpu_job("long", 2), "a", submit_s=2.0, p50_s=40.0, p90_s=400.0)  # might run to 400
    unknown = pending(gpu_job("unknown", 2), "a", submit_s=3.0)  # no estimate: might run forever
    plan = plan_of(snapshot, [head, short, long, unknown], run, qs, now=0.0, preemption=False)
    assert [(r.job_id, r.at_s, r.waits_for, r.kind) for r in plan.reservations] == [
        ("head", 100.0, ("r1",), ReservationKind.HEAD)]
    assert started(plan) == ["short"]
    for job_id in ("long", "unknown"):
        assert plan.waiting_for(job_id).reason is WaitReason.WOULD_DELAY_RESERVATION  # type: ignore[union-attr]
    assert plan.waiting_for("head").reservation_at_s == 100.0  # type: ignore[union-attr]
    # at t = 100, with r1 and the backfilled job ended as estimated, the reserved place is free
    later = release(release(apply_plan(snapshot, plan), "r1"), "short")
    assert violations(later, head.job, plan.reservations[0].allocation) == []


def test_without_reservations_a_long_job_takes_the_heads_place() -> None:
    _, qs, snapshot, run = _one_machine_half_busy()
    head = pending(gpu_job("head", 8), "a", submit_s=0.0)
    long = pending(gpu_job("long", 2), "a", submit_s=2.0, p90_s=400.0)
    plan = plan_of(snapshot, [head, long], run, qs, now=0.0, reserve_heads=False, preemption=False)
    assert started(plan) == ["long"] and plan.reservations == ()


def test_with_preemption_the_head_reclaims_instead() -> None:
    _, qs, snapshot, run = _one_machine_half_busy()
    plan = plan_of(snapshot, [pending(gpu_job("head", 8), "a")], run, qs, now=10.0)
    assert [(p.job_id, p.reason, p.for_job) for p in plan.preemptions] == [("r1", PreemptReason.RECLAIM, "head")]
    assert started(plan) == ["head"] and plan.reservations == ()


def test_a_long_job_backfills_around_a_reserved_place() -> None:
    cluster = synthetic_cluster(4, 4)  # synthetic: two machines of 4 GPUs
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 8}}, {"name": "b", "quota": {"gpus": 0}})
    snapshot, run = running(cluster, (gpu_job("r1", 4), "b", 0.0, 100.0, G),  # machine 0 until 100
                            (gpu_job("r2", 2), "b", 0.0, 1000.0, G))  # 2 GPUs of machine 1 until 1000
    head = pending(gpu_job("head", 4), "a", submit_s=0.0)
    long = pending(gpu_job("long", 2), "a", submit_s=1.0, p90_s=5000.0)
    plan = plan_of(snapshot, [head, long], run, qs, now=0.0, preemption=False)
    assert plan.reservations[0].allocation.machines() == {0} and plan.reservations[0].at_s == 100.0
    assert started(plan) == ["long"] and plan.starts[0].allocation.machines() == {1}


def test_prescheduling_reserves_places_that_free_within_the_horizon() -> None:
    cluster = synthetic_cluster(8)
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 8}}, {"name": "b", "quota": {"gpus": 0}})
    snapshot, run = running(cluster, (gpu_job("r1", 4), "b", 0.0, 30.0, G), (gpu_job("r2", 4), "b", 0.0, 50.0, G))
    jobs = [pending(gpu_job("first", 4), "a", submit_s=0.0), pending(gpu_job("second", 4), "a", submit_s=1.0)]
    plan = plan_of(snapshot, jobs, run, qs, now=0.0, prescheduling_horizon_s=60.0, preemption=False)
    assert [(r.job_id, r.kind, r.at_s, r.waits_for) for r in plan.reservations] == [
        ("first", ReservationKind.HEAD, 30.0, ("r1",)), ("second", ReservationKind.PRESCHEDULED, 50.0, ("r2",))]
    # r2 ends at 50, beyond a 40 s horizon: the second job only waits
    plan = plan_of(snapshot, jobs, run, qs, now=0.0, prescheduling_horizon_s=40.0, preemption=False)
    assert [r.job_id for r in plan.reservations] == ["first"]
    assert plan.waiting_for("second").reason is WaitReason.DOES_NOT_FIT_NOW  # type: ignore[union-attr]
    # and off, as by default
    assert [r.job_id for r in plan_of(snapshot, jobs, run, qs, now=0.0, preemption=False).reservations] == ["first"]


def test_a_job_that_fits_nowhere_ever_says_so() -> None:
    cluster = synthetic_cluster(8)
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 8}})
    snapshot, run = running(cluster)
    plan = plan_of(snapshot, [pending(gpu_job("huge", 8, instances=2), "a")], run,  # 16 GPUs > 8
                   queues(cluster, {"name": "a", "cohort": "c", "quota": {"gpus": 8}}, cohorts=["c"]))
    assert plan.waiting_for("huge").reason in (WaitReason.OVER_QUOTA, WaitReason.CAN_NEVER_FIT)  # type: ignore[union-attr]
    plan = plan_of(snapshot, [pending(gpu_job("wide", 1, instances=1, types=frozenset({"T4"})), "a")], run, qs)
    assert plan.waiting_for("wide").reason is WaitReason.CAN_NEVER_FIT  # type: ignore[union-attr]
