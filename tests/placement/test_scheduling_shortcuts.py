"""The cycle's shortcuts (jobs alike decided once per state, placements the filters rule out never asked,
preemption tried only where it could help) decide the same plans as deciding every job from scratch:
``plan_cycle(..., shortcuts=False)``. Over random SYNTHETIC clusters, queues and jobs (Hypothesis), and
over REAL PAI jobs (rows of the shipped ``pai_job_duration_estimate_100K_head.csv``) on a SYNTHETIC small
cluster made of the first machines of the shipped PAI machine list, cycle after cycle, as jobs arrive,
start, are preempted and end. The policies are ones that do not learn from the jobs they are asked about
(``first-fit``, ``pack``, ``balance``): they decide the same on the same snapshot, however often asked.
"""

from __future__ import annotations

import csv
import math
import zlib
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement.model.cluster import build_cluster
from placement.model.cluster_io import load_cluster
from placement.model.snapshot import ClusterSnapshot, release
from placement.online.policies import OnlinePolicy, online_policy
from placement.scheduling.cycle import plan_cycle
from placement.scheduling.jobs import DurationEstimate, JobMode, PendingJob, RunningJob
from placement.scheduling.plan import Plan, WaitReason, apply_plan
from placement.scheduling.queue_config import queues_from_dict
from placement.scheduling.queues import QueueSet
from placement.scheduling.settings import SchedulingSettings
from tests.benchmarks.bench_placement import JOBS_CSV, job_from_row
from tests.placement.scheduling_cases import FIRST_FIT, gpu_job, pending, queues, running, started, synthetic_cluster
from tests.placement.test_scheduling_properties import clusters, pending_jobs, queue_sets


def decided(plan: Plan) -> dict[str, Any]:
    """A plan as compared: everything but how long the policy took (a placed decision's score)."""
    return {"starts": [(s.job_id, s.queue, s.mode, s.borrows, s.allocation, s.decision.verdict)
                       for s in plan.starts],
            "rest": (plan.generation, plan.now, plan.preemptions, plan.reservations, plan.upgrades, plan.waiting,
                     {q: dict(u) for q, u in plan.usage.items()})}


def both(snapshot: ClusterSnapshot, pending: list[PendingJob], running: list[RunningJob], queues: QueueSet,
         now: float, policy: OnlinePolicy, chosen: SchedulingSettings) -> Plan:
    """The plan with shortcuts, once checked against the plan without."""
    quick = plan_cycle(snapshot, pending, running, queues, now, policy, chosen)
    plain = plan_cycle(snapshot, pending, running, queues, now, policy, chosen, shortcuts=False)
    assert decided(quick) == decided(plain)
    return quick


def advance(snapshot: ClusterSnapshot, pending: list[PendingJob], running: list[RunningJob], plan: Plan,
            now: float) -> tuple[ClusterSnapshot, list[PendingJob], list[RunningJob]]:
    """The state once ``plan`` is committed: preempted jobs back to pending, started ones running."""
    snapshot = apply_plan(snapshot, plan)
    preempted = {p.job_id for p in plan.preemptions}
    started = {s.job_id: s for s in plan.starts}
    by_id = {p.job_id: p for p in pending}
    pending = [p for p in pending if p.job_id not in started]
    pending += [PendingJob(r.job, r.queue, r.started_s, r.mode, r.estimate) for r in running if r.job_id in preempted]
    running = [r for r in running if r.job_id not in preempted]
    running += [RunningJob(by_id[j].job, by_id[j].queue, now, s.mode, by_id[j].estimate) for j, s in started.items()]
    return snapshot, pending, running


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_shortcuts_decide_as_deciding_every_job_from_scratch(data: st.DataObject) -> None:
    cluster = data.draw(clusters())
    queues = data.draw(queue_sets(cluster))
    policy = data.draw(st.sampled_from([FIRST_FIT, online_policy("first-fit", explain=False),
                                        online_policy("pack", explain=False), online_policy("pack")]))
    chosen = SchedulingSettings(preemption=data.draw(st.booleans()), reserve_heads=data.draw(st.booleans()),
                                prescheduling_horizon_s=data.draw(st.sampled_from([0.0, 50.0, 500.0])),
                                opportunistic_after_s=data.draw(st.sampled_from([math.inf, 30.0])),
                                max_victims=data.draw(st.sampled_from([1, 64])))
    snapshot, pending, running = ClusterSnapshot.empty(cluster), list[PendingJob](), list[RunningJob]()
    for cycle, now in enumerate((0.0, 60.0, 600.0, 700.0)):
        pending += data.draw(pending_jobs(f"c{cycle}-", now))
        plan = both(snapshot, pending, running, queues, now, policy, chosen)
        snapshot, pending, running = advance(snapshot, pending, running, plan, now)
        for job in [r for r in running if r.started_s + 50.0 <= now and data.draw(st.booleans())]:
            snapshot = release(snapshot, job.job_id)
            running.remove(job)


def test_a_gang_that_fits_only_in_a_reserved_place_waits_for_it_alike() -> None:
    """The reservation a job would delay is named without asking the policy where the job would go (one
    task, every machine with room in the same reserved place, none beside it): the same plan."""
    cluster = synthetic_cluster(8)  # SYNTHETIC: one 8-GPU machine, half of it busy until t = 100
    qs = queues(cluster, {"name": "a", "quota": {"gpus": 8}}, {"name": "b", "quota": {"gpus": 0}})
    snapshot, run = running(cluster, (gpu_job("r1", 4), "b", 0.0, 100.0, JobMode.GUARANTEED))
    head = pending(gpu_job("head", 8), "a", submit_s=0.0)
    gang = pending(gpu_job("gang", 1, instances=3), "a", submit_s=1.0, p50_s=300.0, p90_s=400.0)
    alone = pending(gpu_job("alone", 2), "a", submit_s=2.0, p50_s=300.0, p90_s=400.0)
    for policy in (FIRST_FIT, online_policy("pack", explain=False)):
        plan = both(snapshot, [head, gang, alone], run, qs, 0.0, policy, SchedulingSettings(preemption=False))
        assert [r.job_id for r in plan.reservations] == ["head"]
        for job_id in ("gang", "alone"):
            waits = plan.waiting_for(job_id)
            assert waits is not None and waits.reason is WaitReason.WOULD_DELAY_RESERVATION
            assert waits.details == ("it would still run when head is due",)


def test_a_class_told_its_answer_waits_for_the_other_queues_turn_between_its_jobs() -> None:
    """Two jobs of one class with another queue's job between them in turn: the second is decided on the state
    the other queue's start left, not told what the first was told before it. SYNTHETIC: one 2-GPU machine, one
    GPU busy until t = 100; a's head needs both and is reserved for t = 100; a's long 1-GPU jobs would delay it
    while a GPU is free, b's short one starts on it, and the 1-GPU job after that fits nowhere."""
    cluster = synthetic_cluster(2)
    qs = queues(cluster, {"name": "a", "quota": {"cpu_cores": 16}}, {"name": "b", "quota": {"cpu_cores": 16}})
    snapshot, run = running(cluster, (gpu_job("r1", 1), "a", 0.0, 100.0, JobMode.GUARANTEED))
    waiting = [pending(gpu_job("a-head", 2), "a", submit_s=0.0, p50_s=50.0, p90_s=60.0),
               pending(gpu_job("a-long-1", 1), "a", submit_s=1.0, p50_s=300.0, p90_s=400.0),
               pending(gpu_job("b-short", 1), "b", submit_s=2.0, p50_s=10.0, p90_s=20.0),
               pending(gpu_job("a-long-2", 1), "a", submit_s=3.0, p50_s=300.0, p90_s=400.0)]
    plan = both(snapshot, waiting, run, qs, 0.0, FIRST_FIT, SchedulingSettings(preemption=False))
    assert started(plan) == ["b-short"] and [r.job_id for r in plan.reservations] == ["a-head"]
    first, second = plan.waiting_for("a-long-1"), plan.waiting_for("a-long-2")
    assert first is not None and first.reason is WaitReason.WOULD_DELAY_RESERVATION
    assert second is not None and second.reason is WaitReason.DOES_NOT_FIT_NOW


def _pai_rows(count: int) -> list[dict[str, str]]:
    with open(JOBS_CSV, encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        return [row for _, row in zip(range(count), reader, strict=False)]


def _pai_pending(row: dict[str, str], now: float) -> PendingJob:
    """A PAI row as a pending job: queue, priority and mode by its user (hashed), its duration as P50."""
    job = job_from_row(row)
    user = zlib.crc32((row["user"] or "").encode())
    job = replace(job, priority=user % 3)
    estimate = DurationEstimate(job.duration_s, 1.5 * job.duration_s) if user % 5 else DurationEstimate()
    mode = JobMode.OPPORTUNISTIC if user % 7 == 0 else JobMode.GUARANTEED
    return PendingJob(job, ("a", "b", "c")[user % 3], now, mode, estimate)


CYCLES, ARRIVALS, STEP_S, MACHINES = 12, 40, 900.0, 96


def test_shortcuts_decide_as_from_scratch_on_real_pai_jobs() -> None:
    machines = load_cluster("pai").machines[:MACHINES]  # REAL machine specs, a SYNTHETIC small cluster of them
    cluster = build_cluster("pai-small", machines)
    share = cluster.total_gpus // 3
    queues = queues_from_dict({"cohorts": [{"name": "all"}], "queues": [
        {"name": "a", "cohort": "all", "order": "fifo", "quota": {"gpus": share}},
        {"name": "b", "cohort": "all", "order": "sjf", "quota": {"gpus": share}, "borrowing_limit": {"gpus": 8}},
        {"name": "c", "cohort": "all", "order": "priority", "quota": {"gpus": share}}]}, cluster)
    rows = _pai_rows(CYCLES * ARRIVALS)
    for policy, chosen in ((FIRST_FIT, SchedulingSettings()),
                           (online_policy("balance", explain=False), SchedulingSettings(prescheduling_horizon_s=600.0,
                                                                                      opportunistic_after_s=120.0))):
        snapshot, pending, running = ClusterSnapshot.empty(cluster), list[PendingJob](), list[RunningJob]()
        starts = 0
        for cycle in range(CYCLES):
            now = STEP_S * cycle
            pending += [_pai_pending(row, now) for row in rows[ARRIVALS * cycle:ARRIVALS * (cycle + 1)]]
            plan = both(snapshot, pending, running, queues, now, policy, chosen)
            starts += len(plan.starts)
            snapshot, pending, running = advance(snapshot, pending, running, plan, now)
            for job in [r for r in running if r.estimated_end_s() <= now + STEP_S]:  # those due end
                snapshot = release(snapshot, job.job_id)
                running.remove(job)
        assert starts and pending  # jobs started, and others waited, in these cycles



def _worded(plan: Plan) -> dict[str, Any]:
    """:func:`decided`, each wait without its details."""
    found = decided(plan)
    found["rest"] = (*found["rest"][:5], [(w.job_id, w.queue, w.reason, w.reservation_at_s) for w in plan.waiting],
                     found["rest"][6])
    return found


def test_a_cycle_without_words_decides_the_same_plan_less_the_reasons() -> None:
    """``explain_waits=False``: an explaining policy is not asked for the reasons of jobs that fit nowhere, yet
    every start, preemption, reservation and wait is the one the plan with its words gives, a job that can never
    fit is still told so, and what each wait says is the beginning of what it says with words (REAL PAI jobs on a
    SYNTHETIC small cluster of REAL machine specs, a learning and a non-learning policy, each decided twice by
    instances of their own)."""
    machines = load_cluster("pai").machines[:MACHINES]
    cluster = build_cluster("pai-small", machines)
    share = cluster.total_gpus // 3
    queues = queues_from_dict({"cohorts": [{"name": "all"}], "queues": [
        {"name": "a", "cohort": "all", "order": "fifo", "quota": {"gpus": share}},
        {"name": "b", "cohort": "all", "order": "sjf", "quota": {"gpus": share}},
        {"name": "c", "cohort": "all", "order": "priority", "quota": {"gpus": share}}]}, cluster)
    rows = _pai_rows(CYCLES * ARRIVALS)
    never = pending(gpu_job("never", 4), "a", submit_s=0.0)  # within quota, more GPUs than a machine has
    for name in ("first-fit", "liquid"):
        worded, unworded = online_policy(name), online_policy(name)
        snapshot, waiting, running = ClusterSnapshot.empty(cluster), [never], list[RunningJob]()
        told = set()
        for cycle in range(CYCLES):
            now = STEP_S * cycle
            waiting += [_pai_pending(row, now) for row in rows[ARRIVALS * cycle:ARRIVALS * (cycle + 1)]]
            with_words = plan_cycle(snapshot, waiting, running, queues, now, worded, SchedulingSettings())
            without = plan_cycle(snapshot, waiting, running, queues, now, unworded,
                                 SchedulingSettings(explain_waits=False))
            assert _worded(without) == _worded(with_words)
            for said, full in zip(without.waiting, with_words.waiting, strict=True):
                assert full.details[:len(said.details)] == said.details
                told.add(said.details == full.details)
            if cycle == 0:
                assert without.waiting_for("never").reason is WaitReason.CAN_NEVER_FIT
            snapshot, waiting, running = advance(snapshot, waiting, running, without, now)
            for job in [r for r in running if r.estimated_end_s() <= now + STEP_S]:
                snapshot = release(snapshot, job.job_id)
                running.remove(job)
        assert told == {True, False}  # some waits kept their words (not fitting nowhere), others lost them


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_without_words_the_same_plan_over_random_cycles(data: st.DataObject) -> None:
    """As above, over random SYNTHETIC clusters, queues, jobs and settings (Hypothesis)."""
    cluster = data.draw(clusters())
    queues = data.draw(queue_sets(cluster))
    name = data.draw(st.sampled_from(["first-fit", "pack", "liquid"]))
    worded, unworded = online_policy(name), online_policy(name)
    chosen = SchedulingSettings(preemption=data.draw(st.booleans()), reserve_heads=data.draw(st.booleans()),
                                prescheduling_horizon_s=data.draw(st.sampled_from([0.0, 500.0])),
                                opportunistic_after_s=data.draw(st.sampled_from([math.inf, 30.0])))
    snapshot, waiting, running = ClusterSnapshot.empty(cluster), list[PendingJob](), list[RunningJob]()
    for cycle, now in enumerate((0.0, 60.0, 600.0, 700.0)):
        waiting += data.draw(pending_jobs(f"c{cycle}-", now))
        with_words = plan_cycle(snapshot, waiting, running, queues, now, worded, chosen)
        without = plan_cycle(snapshot, waiting, running, queues, now, unworded, replace(chosen, explain_waits=False))
        assert _worded(without) == _worded(with_words)
        for said, full in zip(without.waiting, with_words.waiting, strict=True):
            assert full.details[:len(said.details)] == said.details
        snapshot, waiting, running = advance(snapshot, waiting, running, without, now)
        for job in [r for r in running if r.started_s + 50.0 <= now and data.draw(st.booleans())]:
            snapshot = release(snapshot, job.job_id)
            running.remove(job)
