"""The scheduling cycle's room index (``placement.scheduling.screen.RoomIndex``) against the filters asked afresh,
on random SYNTHETIC clusters whose usage changes from one snapshot to the next."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement import usage_of
from placement.filters.chain import chain_for
from placement.model.cluster import Cluster
from placement.model.demand import Job, Role, Task
from placement.model.feasibility import Need, need_of, needs_of
from placement.model.snapshot import ClusterSnapshot, apply, release
from placement.online.policies import online_policy
from placement.scheduling.screen import LOG_TICKS, RoomIndex
from tests.placement.test_filters import TASKS, cluster
from tests.placement.test_properties import clusters, jobs


def check(index: RoomIndex, snapshot: ClusterSnapshot, need: Need, count: int) -> None:
    """Which machines pass is the filters' answer; a machine's room lies between its exact room (``room_at``) and
    the filters' bound (the index counts exactly the machines it brought up to date one by one), so the index
    says the machines cannot take ``count`` only where they cannot, and always where the bound says so."""
    usage = usage_of(snapshot)
    chain = chain_for(need)
    fresh = chain.passing(usage)
    assert index.passing(snapshot, need).tolist() == fresh.tolist()
    if count <= 1:
        assert index.holds(snapshot, need, count) == bool(fresh.any())
        return
    bound = chain.room(usage, fresh).tolist()
    exact = [chain.room_at(usage, m) if ok else 0 for m, ok in enumerate(fresh.tolist())]
    kept = index.room(snapshot, need).tolist()
    assert all(e <= k <= b for e, k, b in zip(exact, kept, bound, strict=True)), (exact, kept, bound)
    holds = index.holds(snapshot, need, count)
    assert holds or sum(exact) < count
    assert not holds or sum(bound) >= count


def states(cluster_: Cluster, stream: list[Job], picks: list[int]) -> list[ClusterSnapshot]:
    """Snapshots one after the other: each the last with one job placed (first fit) or one released."""
    place = online_policy("first-fit", explain=False)
    snapshot, held, found = ClusterSnapshot.empty(cluster_), list[str](), []
    for k, pick in enumerate(picks):
        if held and pick % 3 == 0:
            snapshot = release(snapshot, held.pop(pick % len(held)))
        else:
            job = stream[pick % len(stream)]
            job = Job(f"{job.job_id}-{k}", job.tasks)
            decision = place(snapshot, job)
            if decision.allocation is not None:
                snapshot = apply(snapshot, decision.allocation)
                held.append(job.job_id)
        found.append(snapshot)
    return found


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster_=clusters(), stream=st.lists(jobs("j"), min_size=1, max_size=6),
       picks=st.lists(st.integers(0, 1_000), min_size=1, max_size=40), seed=st.integers(0, 2**16))
def test_the_index_answers_as_the_filters_afresh(cluster_: Cluster, stream: list[Job], picks: list[int],
                                                 seed: int) -> None:
    """Demands are not asked about at every snapshot: most often, but a third of them seldom, so that they fall
    behind by one change, by several, or by more than the index remembers (then worked out anew)."""
    demands = list(dict.fromkeys(pair for job in stream for pair in needs_of(job)))
    demands += [(need, 1) for need, _ in dict.fromkeys(needs_of(Job("t", tuple(TASKS[::5]))))]
    index, asked = RoomIndex(cluster_.layout), random.Random(seed)
    for snapshot in states(cluster_, stream, picks):
        for k, (need, count) in enumerate(demands):
            if asked.random() < (0.05 if k % 3 == 0 else 0.75):
                check(index, snapshot, need, count)


def test_a_demand_asked_again_after_more_changes_than_the_index_remembers_is_worked_out_anew() -> None:
    """Jobs spread over the machines one by one, four more than ``LOG_TICKS``, then the first demand asked again: so
    far behind, the index works it out anew rather than patching the machines of the last change."""
    cluster_ = cluster()
    place = online_policy("balance", explain=False)
    need = need_of(Task(Role.WORKER, 1, gpu=4.0, cpu_cores=4.0))  # the first jobs take it off the 4-GPU machines
    snapshot = ClusterSnapshot.empty(cluster_)
    index = RoomIndex(cluster_.layout)
    check(index, snapshot, need, 1)
    for k in range(LOG_TICKS + 4):
        decision = place(snapshot, Job(f"spread-{k}", (Task(Role.WORKER, 1, gpu=1.0, cpu_cores=2.0),)))
        assert decision.allocation is not None
        snapshot = apply(snapshot, decision.allocation)
        check(index, snapshot, need_of(Task(Role.WORKER, 1, gpu=0.5)), 1)  # the stream moves on, one change a time
    check(index, snapshot, need, 1)
