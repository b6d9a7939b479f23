"""What ``GET /v1/queues`` says of each queue's next start, from a plan (SYNTHETIC plans, no server)."""

from __future__ import annotations

import math

from placement.model.decision import Decision, Verdict
from placement.model.snapshot import Allocation
from placement.scheduling.jobs import JobMode
from placement.scheduling.plan import Plan, PlannedStart, WaitingJob, WaitReason
from service.http.queue import next_starts


def test_a_queue_s_first_waiting_job_gives_its_next_start() -> None:
    plan = Plan(generation=3, now=1_000.0, waiting=(
        WaitingJob("a-1", "a", WaitReason.RESERVED, reservation_at_s=1_600.0),
        WaitingJob("a-2", "a", WaitReason.WOULD_DELAY_RESERVATION),  # behind a-1: not a's next
        WaitingJob("b-1", "b", WaitReason.OVER_QUOTA),
        WaitingJob("c-1", "c", WaitReason.DOES_NOT_FIT_NOW, reservation_at_s=math.inf),  # ends unknown
        WaitingJob("d-1", "d", WaitReason.RESERVED, reservation_at_s=900.0),  # overdue: due now
    ))
    assert next_starts(plan) == {"a": (600.0, "waiting-for-reservation"), "b": (None, "over-quota"),
                                 "c": (None, "does-not-fit-now"), "d": (0.0, "waiting-for-reservation")}
    assert next_starts(plan, now=1_100.0)["a"] == (500.0, "waiting-for-reservation")  # a plan read later


def test_a_queue_that_starts_a_job_now_starts_its_next_at_once() -> None:
    decision = Decision("s-1", "liquid", Verdict.PLACED, 3, Allocation("s-1", ()))
    plan = Plan(generation=3, now=1_000.0, starts=(PlannedStart("s-1", "s", decision, JobMode.GUARANTEED),),
                waiting=(WaitingJob("s-2", "s", WaitReason.DOES_NOT_FIT_NOW),))
    assert next_starts(plan) == {"s": (0.0, None)}
