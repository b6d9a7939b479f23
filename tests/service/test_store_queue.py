"""The queue in the store and the cycle, on SQLite, on a real PostgreSQL and in memory, with a SYNTHETIC
3-machine cluster (16 GPUs): submitted jobs wait as rows of their own, a scheduling pass starts what fits
and is written only on the generation it was decided on, preempted jobs go back to pending with their
history, and a second process catches up with all of it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace

import pytest

from placement.model.demand import Job
from placement.online.policies import online_policy
from placement.scheduling.jobs import JobMode
from placement.scheduling.settings import SchedulingSettings
from service.cycle import Cycle, run_cycle, schedule_pass
from service.store import (
    CANCELLED,
    PENDING,
    RUNNING,
    Cancel,
    Cancelled,
    End,
    Moved,
    Planner,
    Reason,
    Refused,
    Result,
    Schedule,
    SetQueues,
    Store,
    Submit,
    Submitted,
)
from service.store.memory import MemoryStore
from service.store.queued import READ_PLAN_S
from tests.service.test_store import CLUSTER, PLACE, job, store_at

PLANNER = Planner(PLACE)


@pytest.fixture(params=["sqlite", "postgresql", "memory"])
def any_store(request: pytest.FixtureRequest) -> Store:
    if request.param == "memory":
        return MemoryStore(CLUSTER)
    url: str = request.getfixturevalue("database_url" if request.param == "sqlite" else "postgres_url")
    return store_at(url)


@pytest.fixture
def database_url(tmp_path: object) -> str:
    return f"sqlite:///{tmp_path}/state.db"


def submit(store: Store, *jobs: Job, queue: str = "default", mode: JobMode = JobMode.GUARANTEED) -> list[Result]:
    return run_cycle(store, [Submit(j, queue, mode, 100.0, 200.0) for j in jobs])


def states(store: Store, ids: Sequence[str]) -> dict[str, str]:
    return {i: row.state for i in ids if (row := store.job(i)) is not None}


def test_submitted_jobs_wait_and_a_pass_starts_what_fits(any_store: Store) -> None:
    store = any_store
    big = [job(f"q{k}", gpu=1.0, instances=8) for k in range(3)]
    assert all(isinstance(r, Submitted) and r.state == PENDING for r in submit(store, *big))
    assert states(store, ["q0", "q1", "q2"]) == dict.fromkeys(["q0", "q1", "q2"], PENDING)
    assert not store.snapshot().allocations  # pending jobs hold nothing
    started = schedule_pass(store, PLANNER)
    assert started.started == ("q0", "q1") and not started.preempted  # first come, 16 GPUs
    assert states(store, ["q0", "q1", "q2"]) == {"q0": RUNNING, "q1": RUNNING, "q2": PENDING}
    assert set(store.snapshot().allocations) == {"q0", "q1"}
    assert store.list_jobs([PENDING], "default", None, 10)[0].job_id == "q2"
    assert store.pending_by_queue() == {"default": 1}
    assert schedule_pass(store, PLANNER).started == ()  # nothing fits: nothing written
    run_cycle(store, [End("q0")])
    assert schedule_pass(store, PLANNER).started == ("q2",)
    assert [e.state for e in store.events("q2")] == [PENDING, RUNNING]
    assert [e.state for e in store.events("q0")] == [PENDING, RUNNING, "released"]
    assert store.pending_by_queue() == {}


def test_a_job_read_again_unchanged_is_the_same_object(any_store: Store) -> None:
    """The cycle remembers what it worked out about a job by the job object: a pass that reads a row it read
    before, unchanged, gets the object it got then; a row that changed (the job started), a new one."""
    store = any_store
    submit(store, job("s0", gpu=1.0, instances=8), job("s1", gpu=1.0, instances=8), job("s2", gpu=1.0, instances=8))
    _, first = store.queued()
    _, again = store.queued()
    assert [id(j) for j in again.pending] == [id(j) for j in first.pending] and len(first.pending) == 3
    schedule_pass(store, PLANNER)
    _, after = store.queued()
    assert [j.job_id for j in after.running] == ["s0", "s1"] and after.pending[0] is first.pending[2]
    assert all(r is not p for r in after.running for p in first.pending)


def test_readers_share_a_plan_while_the_state_and_its_age_allow() -> None:
    """A plan answers readers while the state is at the generation it was decided on and it is at most
    ``READ_PLAN_S`` old, whoever decided it; then a new one is made."""
    store, clock = MemoryStore(CLUSTER), [1_000.0]
    planner = Planner(PLACE, clock=lambda: clock[0])
    submit(store, *(job(f"r{k}", gpu=1.0, instances=8) for k in range(3)))
    snapshot, queued = store.queued()
    decided = planner(snapshot, queued)
    assert planner.latest(snapshot, queued) is decided
    assert planner.usage(snapshot, queued) is planner.usage(snapshot, queued)
    clock[0] += READ_PLAN_S + 1
    assert planner.latest(snapshot, queued) is not decided  # too old
    again = planner.latest(snapshot, queued)
    submit(store, job("r3", gpu=1.0))
    snapshot, queued = store.queued()
    assert planner.latest(snapshot, queued) is not again  # the state moved on
    assert "r3" in {w.job_id for w in planner.latest(snapshot, queued).waiting}


def test_passes_leave_out_the_words_a_reader_of_waits_gets() -> None:
    """The passes' plans word no wait of a job that fits nowhere; a reader of why jobs wait gets a plan with them,
    which starts, reserves and waits alike, and shares it while the state and its age allow."""
    store, clock = MemoryStore(CLUSTER), [1_000.0]
    planner = Planner(online_policy("liquid"), clock=lambda: clock[0])
    submit(store, *(job(f"w{k}", gpu=1.0, instances=8) for k in range(4)), job("huge", gpu=1.0, instances=20))
    snapshot, queued = store.queued()
    passed, read = planner(snapshot, queued), planner.latest(snapshot, queued, worded=True)
    assert read is not passed and planner.latest(snapshot, queued) is passed
    assert [(s.job_id, s.allocation) for s in read.starts] == [(s.job_id, s.allocation) for s in passed.starts]
    assert read.reservations == passed.reservations
    assert [(w.job_id, w.reason) for w in read.waiting] == [(w.job_id, w.reason) for w in passed.waiting]
    huge = (passed.waiting_for("huge"), read.waiting_for("huge"))
    assert huge[0] is not None and huge[1] is not None and huge[0].reason is huge[1].reason
    assert huge[0].details == () and huge[1].details  # 20 GPUs on a cluster of 16: said to the reader alone
    assert planner.latest(snapshot, queued, worded=True) is read


def test_a_job_that_names_a_policy_is_placed_by_it_and_keeps_asking_for_it(any_store: Store) -> None:
    """``Submit`` with a policy: the pass places the job by that policy (machines a, b: 4 T4 each; c: 8 V100),
    and a job preempted back to pending is placed by it again."""
    store = any_store
    first_fit = Planner(online_policy("first-fit"))
    run_cycle(store, [Submit(job("fill", gpu=1.0), "default", JobMode.GUARANTEED, 100.0, 200.0),
                      Submit(job("spread", gpu=1.0), "default", JobMode.GUARANTEED, 100.0, 200.0,
                             policy="balance")])
    assert {j.job_id: j.policy for j in store.queued()[1].pending} == {"fill": None, "spread": "balance"}
    assert schedule_pass(store, first_fit).started == ("fill", "spread")
    rows = {i: store.job(i) for i in ("fill", "spread")}
    assert {i: (r.policy, r.allocation["instances"][0]["machine"]) for i, r in rows.items() if r is not None} == {
        "fill": ("first-fit", "a"), "spread": ("balance", "b")}  # balance: not a, which "fill" took first
    urgent = [Submit(replace(job(f"u{k}", gpu=4.0), priority=5), "default", JobMode.GUARANTEED, 100.0, 200.0)
              for k in range(4)]
    run_cycle(store, urgent)  # 16 GPUs asked by a higher priority: every running job gives way
    started = schedule_pass(store, first_fit)
    assert set(started.preempted) == {"fill", "spread"}
    assert {j.job_id: j.policy for j in store.queued()[1].pending} == {"fill": None, "spread": "balance"}


def test_cancel_takes_only_a_pending_job(any_store: Store) -> None:
    store = any_store
    submit(store, job("c1", gpu=1.0, instances=16), job("c2", gpu=1.0))
    schedule_pass(store, PLANNER)
    assert states(store, ["c1", "c2"]) == {"c1": RUNNING, "c2": PENDING}
    assert isinstance(run_cycle(store, [Cancel("c2")])[0], Cancelled)
    for job_id in ("c2", "c1", "nobody"):
        refused = run_cycle(store, [Cancel(job_id)])[0]
        assert isinstance(refused, Refused) and refused.reason is Reason.NOT_PENDING
    assert states(store, ["c1", "c2"]) == {"c1": RUNNING, "c2": CANCELLED}
    assert [e.state for e in store.events("c2")] == [PENDING, CANCELLED]
    resubmitted = submit(store, job("c2"))[0]  # ids are never reused
    assert isinstance(resubmitted, Refused) and resubmitted.reason is Reason.EXISTS
    assert store.pending_by_queue() == {}


def test_a_plan_decided_before_another_write_is_not_written(any_store: Store) -> None:
    store = any_store
    submit(store, job("p1", gpu=1.0, instances=16), job("p2", gpu=1.0, instances=16))
    snapshot, queued = store.queued()
    plan = PLANNER(snapshot, queued)
    assert [s.job_id for s in plan.starts] == ["p1"]
    run_cycle(store, [Cancel("p1")])  # the state moves under the plan
    assert isinstance(store.write([Schedule(PLANNER, plan)], plan.generation), Moved)
    assert states(store, ["p1", "p2"]) == {"p1": CANCELLED, "p2": PENDING}
    assert schedule_pass(store, PLANNER).started == ("p2",)  # decided again on the state as it is


def test_higher_priority_preempts_and_the_victim_waits_again_with_its_history(any_store: Store) -> None:
    store = any_store
    run_cycle(store, [SetQueues({"queues": [{"name": "team", "order": "priority", "quota": {"gpus": 16}}]})])
    submit(store, job("low", gpu=1.0, instances=16), queue="team")
    assert schedule_pass(store, PLANNER).started == ("low",)
    urgent = Job("urgent", job("urgent", gpu=1.0, instances=8).tasks, priority=5)
    submit(store, urgent, queue="team")
    scheduled = schedule_pass(store, PLANNER)
    assert scheduled.preempted == ("low",) and scheduled.started == ("urgent",)
    assert states(store, ["low", "urgent"]) == {"low": PENDING, "urgent": RUNNING}
    history = store.events("low")
    assert [e.state for e in history] == [PENDING, RUNNING, PENDING] and "higher-priority" in history[-1].reason
    assert store.job("low").allocation is None  # type: ignore[union-attr]
    run_cycle(store, [End("urgent")])
    assert schedule_pass(store, PLANNER).started == ("low",)  # back at its place, started again
    assert [e.state for e in store.events("low")][-1] == RUNNING


def test_a_preempted_job_waits_again_in_the_mode_it_was_submitted_in(any_store: Store) -> None:
    # "late", guaranteed but over its queue's quota, starts opportunistically at once (no patience), then gives way
    # to a job within its queue's guarantee: it waits again as guaranteed, not in the mode it ran in
    store, planner = any_store, Planner(PLACE, SchedulingSettings(opportunistic_after_s=0.0))
    queues = [{"name": "a", "quota": {"gpus": 8}}, {"name": "b", "quota": {"gpus": 8}}]
    run_cycle(store, [SetQueues({"queues": queues})])
    submit(store, job("first", gpu=1.0, instances=8), queue="a")
    submit(store, job("late", gpu=1.0, instances=4), queue="a")
    scheduled = schedule_pass(store, planner)
    assert scheduled.started == ("first", "late") and scheduled.plan.starts[1].mode is JobMode.OPPORTUNISTIC
    assert store.job("late").mode == JobMode.OPPORTUNISTIC.value  # type: ignore[union-attr]
    submit(store, job("other", gpu=1.0, instances=8), queue="b")
    scheduled = schedule_pass(store, planner)
    assert scheduled.preempted == ("late",) and scheduled.started == ("other",)
    assert store.job("late").state == PENDING  # type: ignore[union-attr]
    assert store.job("late").mode == JobMode.GUARANTEED.value  # type: ignore[union-attr]


def test_another_process_catches_up_with_starts_preemptions_and_restarts(database_url: str) -> None:
    one, two = store_at(database_url), store_at(database_url)
    run_cycle(one, [SetQueues({"queues": [{"name": "team", "order": "priority", "quota": {"gpus": 16}}]})])
    submit(one, job("x", gpu=1.0, instances=16), queue="team")
    schedule_pass(one, PLANNER)
    assert set(two.snapshot().allocations) == {"x"}
    before = two.snapshot().generation
    submit(one, Job("y", job("y", gpu=1.0, instances=16).tasks, priority=9), queue="team")
    schedule_pass(one, PLANNER)  # x preempted for y
    run_cycle(one, [End("y")])
    schedule_pass(one, PLANNER)  # x started again, maybe elsewhere
    caught = two.snapshot()
    assert caught.generation > before and set(caught.allocations) == {"x"}
    assert caught.allocations["x"] == one.snapshot().allocations["x"]


def test_the_memory_store_comes_to_what_the_database_does(database_url: str) -> None:
    stores: list[Store] = [MemoryStore(CLUSTER), store_at(database_url)]
    seen = []
    for store in stores:
        run_cycle(store, [SetQueues({"queues": [{"name": "a", "quota": {"gpus": 8}},
                                                {"name": "b", "order": "sjf", "quota": {"gpus": 8}}]})])
        submit(store, *(job(f"a{k}", gpu=float(1 + k % 3), instances=2) for k in range(6)), queue="a")
        submit(store, *(job(f"b{k}", gpu=1.0, instances=1 + k % 4) for k in range(6)), queue="b")
        schedule_pass(store, PLANNER)
        run_cycle(store, [End("a0"), Cancel("b5"), End("b0")])
        schedule_pass(store, PLANNER)
        ids = [f"{q}{k}" for q in "ab" for k in range(6)]
        seen.append((states(store, ids), sorted(store.snapshot().allocations), store.pending_by_queue(),
                     {i: [(e.state, e.reason) for e in store.events(i)] for i in ids}))
    assert seen[0] == seen[1]


def test_a_submission_the_pass_of_its_cycle_starts_is_answered_as_running() -> None:
    store = MemoryStore(CLUSTER)
    cycle = Cycle(store, on_loop=True, decide=PLANNER)

    async def go() -> list[Result]:
        first = await cycle.run(Submit(job("s1", gpu=1.0, instances=16), "default"))
        second = await cycle.run(Submit(job("s2", gpu=1.0), "default"))
        freed = await cycle.run(End("s1"))
        return [first, second, freed]

    first, second, _ = asyncio.run(go())
    assert first == Submitted("s1", RUNNING) and second == Submitted("s2", PENDING)
    assert states(store, ["s1", "s2"]) == {"s1": "released", "s2": RUNNING}  # the release's pass started it


def test_the_earliest_reservation_arms_the_only_timer() -> None:
    store = MemoryStore(CLUSTER)
    cycle = Cycle(store, on_loop=True, decide=PLANNER)

    async def go() -> tuple[float | None, bool]:
        await cycle.run(Submit(job("t1", gpu=1.0, instances=16), "default", p50_s=600.0, p90_s=900.0))
        assert cycle.due is None  # nobody waits
        await cycle.run(Submit(job("t2", gpu=1.0, instances=8), "default", p50_s=60.0, p90_s=90.0))
        armed = cycle._timer is not None and not cycle._timer.cancelled()
        cycle.stop()
        return cycle.due, armed

    now = time.time()
    due, armed = asyncio.run(go())
    assert due is not None and now + 590 < due < time.time() + 610 and armed  # when t1 is expected to end
