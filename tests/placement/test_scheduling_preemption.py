"""Preemption and opportunistic jobs: victims lose the least work, opportunistic ones go first, a gang is
preempted whole, guarantees are never taken, and opportunistic jobs live outside quota. SYNTHETIC clusters."""

from __future__ import annotations

from placement.model.demand import Job
from placement.model.snapshot import ClusterSnapshot, apply, release
from placement.online.policies import online_policy
from placement.scheduling.jobs import JobMode, RunningJob
from placement.scheduling.plan import PreemptReason, Reservation, ReservationKind, WaitReason, apply_plan
from placement.scheduling.preemption import _Futures, find_victims
from placement.scheduling.probe import could_start, fewest_victims
from placement.scheduling.settings import SchedulingSettings
from placement.scheduling.state import CycleState, Held
from tests.placement.scheduling_cases import (
    FIRST_FIT,
    gpu_job,
    pending,
    plan_of,
    queues,
    running,
    started,
    synthetic_cluster,
)

G, OPP = JobMode.GUARANTEED, JobMode.OPPORTUNISTIC


def _victims(plan: object) -> list[tuple[str, PreemptReason]]:
    return [(p.job_id, p.reason) for p in plan.preemptions]  # type: ignore[attr-defined]


def test_a_higher_priority_job_preempts_the_victim_that_loses_least_work() -> None:
    cluster = synthetic_cluster(8)  # synthetic: one machine, 8 GPUs
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 8}})
    snapshot, run = running(cluster, (gpu_job("old", 4), "a", 0.0, 5000.0, G),  # ran 1000 s: 4000 GPU-s
                            (gpu_job("new", 4), "a", 900.0, 5000.0, G))  # ran 100 s: 400 GPU-s
    plan = plan_of(snapshot, [pending(gpu_job("urgent", 4, priority=10), "a")], run, qs, now=1000.0)
    assert _victims(plan) == [("new", PreemptReason.HIGHER_PRIORITY)]
    assert plan.preemptions[0].lost_gpu_s == 400.0
    assert started(plan) == ["urgent"]


def test_an_equal_priority_job_preempts_nobody() -> None:
    cluster = synthetic_cluster(8)
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 8}})
    snapshot, run = running(cluster, (gpu_job("r", 8), "a", 0.0, 5000.0, G))
    plan = plan_of(snapshot, [pending(gpu_job("same", 4), "a")], run, qs, now=10.0)
    assert plan.preemptions == () and plan.waiting_for("same").reason is WaitReason.OVER_QUOTA  # type: ignore[union-attr]


def test_a_gang_is_preempted_whole_or_not_at_all() -> None:
    cluster = synthetic_cluster(4, 4, 4)  # synthetic: three machines of 4 GPUs
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 12}})
    # the gang's two 4-GPU workers fill machines 0 and 1; it ran 10 s (80 GPU-s); "solo" ran 100 s (400 GPU-s)
    snapshot, run = running(cluster, (gpu_job("gang", 4, instances=2), "a", 90.0, 5000.0, G),
                            (gpu_job("solo", 4), "a", 0.0, 5000.0, G))
    assert snapshot.allocations["gang"].machines() == {0, 1}
    plan = plan_of(snapshot, [pending(gpu_job("urgent", 4, priority=10), "a")], run, qs, now=100.0)
    assert _victims(plan) == [("gang", PreemptReason.HIGHER_PRIORITY)]  # cheaper, and released whole
    after = apply_plan(snapshot, plan)
    assert "gang" not in after.allocations
    assert all(len(a.instances) == {"solo": 1, "urgent": 1}[j] for j, a in after.allocations.items())
    assert int(after.gpu_milli_used.sum()) == 8 * 1000  # solo + urgent: no GPU of the gang is left held


def test_opportunistic_jobs_are_preempted_first() -> None:
    cluster = synthetic_cluster(8)
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 8}})
    # the opportunistic job has done far more work than the low-priority guaranteed one, and still goes first
    snapshot, run = running(cluster, (gpu_job("opp", 4), "a", 0.0, 5000.0, OPP),
                            (gpu_job("low", 4), "a", 990.0, 5000.0, G))
    plan = plan_of(snapshot, [pending(gpu_job("urgent", 4, priority=10), "a")], run, qs, now=1000.0)
    assert _victims(plan) == [("opp", PreemptReason.OPPORTUNISTIC)]
    assert started(plan) == ["urgent"]


def test_a_queue_reclaims_its_guarantee_from_a_borrower_only() -> None:
    cluster = synthetic_cluster(8)
    qs = queues(cluster, {"name": "a", "cohort": "c", "quota": {"gpus": 4}},
                {"name": "b", "cohort": "c", "quota": {"gpus": 4}}, cohorts=["c"])
    # b borrowed a's idle 4 GPUs: b1 ran 100 s, b2 ran 10 s
    snapshot, run = running(cluster, (gpu_job("b1", 4), "b", 0.0, 5000.0, G), (gpu_job("b2", 4), "b", 90.0, 5000.0, G))
    plan = plan_of(snapshot, [pending(gpu_job("a1", 4), "a"), pending(gpu_job("a2", 4), "a")], run, qs, now=100.0)
    assert _victims(plan) == [("b2", PreemptReason.RECLAIM)]  # b is back at its guarantee: b1 stays
    assert started(plan) == ["a1"]
    assert plan.waiting_for("a2").reason is WaitReason.OVER_QUOTA  # type: ignore[union-attr]


def test_jobs_the_scheduler_did_not_start_are_never_preempted() -> None:
    cluster = synthetic_cluster(8)
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 8}})
    placed = FIRST_FIT(ClusterSnapshot.empty(cluster), gpu_job("outside", 8))
    assert placed.allocation is not None
    snapshot = apply(ClusterSnapshot.empty(cluster), placed.allocation)
    plan = plan_of(snapshot, [pending(gpu_job("p", 4, priority=99), "a")], [], qs, now=0.0)
    assert plan.preemptions == ()
    waiting = plan.waiting_for("p")
    assert waiting is not None and waiting.reason is WaitReason.DOES_NOT_FIT_NOW  # the outsider never ends


def test_preemption_can_be_turned_off() -> None:
    cluster = synthetic_cluster(8)
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 8}})
    snapshot, run = running(cluster, (gpu_job("opp", 8), "a", 0.0, 5000.0, OPP))
    plan = plan_of(snapshot, [pending(gpu_job("p", 4), "a")], run, qs, now=10.0, preemption=False)
    assert plan.preemptions == () and started(plan) == []


def test_an_opportunistic_job_runs_outside_quota_and_gives_way_later() -> None:
    cluster = synthetic_cluster(8)
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 0}}, {"name": "b", "quota": {"gpus": 8}})
    empty, _ = running(cluster)
    plan = plan_of(empty, [pending(gpu_job("opp", 8), "a", mode=OPP)], [], qs, now=0.0)
    assert started(plan) == ["opp"] and plan.starts[0].mode is OPP
    assert plan.usage.get("a", {}).get("gpus", 0.0) == 0.0  # counts against no quota
    # the next cycle: b's guaranteed job takes the GPUs back at once
    snapshot, run = running(cluster, (gpu_job("opp", 8), "a", 0.0, 5000.0, OPP))
    plan = plan_of(snapshot, [pending(gpu_job("g", 8), "b")], run, qs, now=60.0)
    assert _victims(plan) == [("opp", PreemptReason.OPPORTUNISTIC)] and started(plan) == ["g"]


def test_an_opportunistic_job_is_upgraded_when_its_quota_allows() -> None:
    cluster = synthetic_cluster(8)
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 4}})
    snapshot, run = running(cluster, (gpu_job("later", 4), "a", 5.0, 5000.0, OPP),
                            (gpu_job("earlier", 4), "a", 0.0, 5000.0, OPP))
    plan = plan_of(snapshot, [], run, qs, now=10.0)
    assert plan.upgrades == ("earlier",)  # longest running first: 4 GPUs fit the quota of 4, 8 would not
    assert plan.usage["a"]["gpus"] == 4.0
    # nobody is upgraded while a guaranteed job of the queue waits
    assert plan_of(snapshot, [pending(gpu_job("g", 8), "a")], run, qs, now=10.0).upgrades == ()


def test_a_guaranteed_job_that_waited_long_enough_starts_opportunistically() -> None:
    cluster = synthetic_cluster(8)
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 2}})
    empty, _ = running(cluster)
    jobs = [pending(gpu_job("over", 4), "a", submit_s=0.0)]
    assert started(plan_of(empty, jobs, [], qs, now=100.0)) == []
    plan = plan_of(empty, jobs, [], qs, now=100.0, opportunistic_after_s=60.0)
    assert started(plan) == ["over"] and plan.starts[0].mode is OPP
    early = plan_of(empty, jobs, [], qs, now=30.0, opportunistic_after_s=60.0)
    assert early.starts == () and early.wake_s == 60.0  # time alone starts it then: a pass is to be woken
    assert plan_of(empty, jobs, [], qs, now=30.0).wake_s is None  # never started so: nothing to wake for


def test_a_plan_wakes_its_next_pass_at_the_first_reservation_due_or_patience_run_out() -> None:
    cluster = synthetic_cluster(4, 4)
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 6}}, {"name": "b", "quota": {"gpus": 2}})
    snapshot, run = running(cluster, (gpu_job("busy", 3), "a", 0.0, 500.0, G),
                            (gpu_job("filler", 2), "b", 0.0, 2000.0, G))
    waiting = [pending(gpu_job("head", 3), "a", submit_s=10.0),  # reserved from 500, when busy is estimated to end
               pending(gpu_job("over", 1), "b", submit_s=20.0)]  # over b's quota of 2
    plan = plan_of(snapshot, waiting, run, qs, now=100.0)
    assert plan.waiting_for("head").reservation_at_s == 500.0  # type: ignore[union-attr]
    assert plan.waiting_for("over").reason is WaitReason.OVER_QUOTA  # type: ignore[union-attr]
    assert plan.wake_s == 500.0
    assert plan_of(snapshot, waiting, run, qs, now=100.0, opportunistic_after_s=300.0).wake_s == 320.0
    assert plan_of(snapshot, waiting, run, qs, now=100.0, opportunistic_after_s=1000.0).wake_s == 500.0


def test_a_trial_reads_each_forecast_without_the_victims_it_held() -> None:
    """A trial's forecasts are released lazily: read after victims come and go, each is its forecast without the
    victims still gone, those it never held leaving it as it was, whatever was read before."""
    cluster = synthetic_cluster(4, 4)
    empty = ClusterSnapshot.empty(cluster)
    place = online_policy("first-fit", explain=False)
    a = place(empty, gpu_job("a", 2)).allocation
    assert a is not None
    only_a = apply(empty, a)
    b = place(only_a, gpu_job("b", 2)).allocation
    assert b is not None
    both = apply(only_a, b)
    futures = _Futures([both, only_a])

    def held(k: int) -> set[str]:
        return set(futures[k].allocations)

    futures.gone = ("a",)
    assert held(0) == {"b"} and held(1) == set()
    futures.gone = ("a", "b")  # one victim more: released from what was read
    assert held(0) == set() and futures[0].gpu_milli_used.sum() == 0 and held(1) == set()
    futures.gone = ("b",)  # "a" given back
    assert [set(f.allocations) for f in futures] == [{"a"}, {"a"}]
    sliced = futures[0:2]
    assert futures[1] is only_a and [f.gpu_milli_used.tolist() for f in sliced] == [only_a.gpu_milli_used.tolist()] * 2


def _reserved_beside_a_victim(end_s: float) -> tuple[CycleState, list[RunningJob], Job]:
    """One 8-GPU machine (synthetic): victim "v" on GPUs 0-1, "x" on 2-4, "y" on 5-7 until 50 s (both of the job's
    priority: no victims); a reservation at
    100 s on GPUs 0, 1, 5 and 6 (its forecast: "v" and "y" gone), GPU 7 free beside it; a 1-GPU job that would run
    until ``end_s``."""
    cluster = synthetic_cluster(8)
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 8}})
    snapshot, run = running(cluster, (gpu_job("v", 2), "a", 0.0, 5000.0, G),
                            (gpu_job("x", 3, priority=10), "a", 0.0, 5000.0, G),
                            (gpu_job("y", 3, priority=10), "a", 0.0, 50.0, G))
    future = release(release(snapshot, "v"), "y")
    place = FIRST_FIT(future, gpu_job("r", 4)).allocation
    assert place is not None and sorted(g for p in place.instances for g in p.gpus) == [0, 1, 5, 6]
    state = CycleState.begin(snapshot, run, qs, 10.0, FIRST_FIT, SchedulingSettings())
    state.hold(Held(Reservation("r", "a", ReservationKind.HEAD, 100.0, place, ("v", "y")), gpu_job("r", 4), future))
    return state, run, gpu_job("p", 1, priority=10)


def test_no_trial_is_asked_where_the_victims_free_only_a_reserved_place() -> None:
    """Per machine the job has room now (GPUs 0-1, once "v" is gone) and beside the reservation (GPU 7); per GPU it
    has neither at once, so no trial can let it start before the reservation is due, and none is asked; the search
    without the probe finds none either. Where the job ends before the reservation is due, it may take GPU 0."""
    state, run, job = _reserved_beside_a_victim(end_s=1000.0)
    victims = [r for r in run if r.job_id == "v"]
    p = pending(job, "a", 1.0, 1000.0, 1000.0)
    assert not could_start(state, ("victims", "a"), job, 1000.0, victims)
    state.screen = None
    assert find_victims(state, p, job, 1000.0) is None

    state, run, job = _reserved_beside_a_victim(end_s=80.0)
    victims = [r for r in run if r.job_id == "v"]
    assert could_start(state, ("victims", "a"), job, 80.0, victims)
    state.screen = None
    found = find_victims(state, pending(job, "a", 1.0, 80.0, 80.0), job, 80.0)
    assert found is not None and [v.job_id for v, _ in found.chosen] == ["v"]


def test_trials_start_from_the_fewest_victims_that_leave_room_now_and_beside_the_reservations() -> None:
    """One 8-GPU machine (synthetic): the cheapest victim "v1" holds GPU 0, which a reservation takes at 150 s;
    the next, "v2", holds GPU 7, which no reservation takes. Without "v1" alone the job has no GPU free now and
    beside the reservation, so the search starts with both gone; it then gives "v1" back, as the search
    trying one victim after the other does."""
    cluster = synthetic_cluster(8)
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 8}})
    snapshot, run = running(cluster, (gpu_job("v1", 1), "a", 95.0, 5000.0, G),
                            (gpu_job("x", 4, priority=10), "a", 0.0, 5000.0, G),
                            (gpu_job("y", 2, priority=10), "a", 0.0, 120.0, G),
                            (gpu_job("v2", 1), "a", 50.0, 5000.0, G))
    assert sorted(snapshot.allocations["v2"].instances[0].gpus) == [7]
    future = release(release(snapshot, "v1"), "y")
    place = FIRST_FIT(future, gpu_job("r", 3)).allocation
    assert place is not None and sorted(g for p in place.instances for g in p.gpus) == [0, 5, 6]
    job = gpu_job("p", 1, priority=10)
    outcomes = []
    for screened in (True, False):
        state = CycleState.begin(snapshot, run, qs, 100.0, FIRST_FIT, SchedulingSettings())
        state.hold(Held(Reservation("r", "a", ReservationKind.HEAD, 150.0, place, ("v1", "y")), gpu_job("r", 3),
                        future))
        if screened:
            victims = [next(r for r in run if r.job_id == name) for name in ("v1", "v2")]
            assert fewest_victims(state, ("fewest",), job, 1000.0, victims) == 2
            assert fewest_victims(state, ("fewest",), job, 1000.0, victims[:1]) is None
        else:
            state.screen = None
        found = find_victims(state, pending(job, "a", 1.0, 1000.0, 1000.0), job, 1000.0)
        assert found is not None and found.decision.allocation is not None
        outcomes.append(([v.job_id for v, _ in found.chosen], found.decision.allocation.instances[0].gpus))
    assert outcomes == [(["v2"], (7,))] * 2


def test_a_later_cycle_ranks_the_victims_it_is_given_not_those_an_earlier_cycle_ranked() -> None:
    # what a queue's candidates are ranked by is kept from one cycle to the next (placement.scheduling.memo):
    # here the same queue holds jobs of the same ids, started at other times
    cluster = synthetic_cluster(8)  # synthetic: one machine, 8 GPUs
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 8}})
    for old_start, new_start, victim in ((0.0, 900.0, "new"), (950.0, 0.0, "old"), (0.0, 900.0, "new")):
        snapshot, run = running(cluster, (gpu_job("old", 4), "a", old_start, 5000.0, G),
                                (gpu_job("new", 4), "a", new_start, 5000.0, G))
        plan = plan_of(snapshot, [pending(gpu_job("urgent", 4, priority=10), "a")], run, qs, now=1000.0)
        assert _victims(plan) == [(victim, PreemptReason.HIGHER_PRIORITY)]
