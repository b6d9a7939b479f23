"""The running jobs' views a cycle starts from (``placement.scheduling.running_index``) are those of the running
set alone: brought up to date from the last cycle's, as jobs come, leave, change their estimate or hold another
allocation, they equal the views worked out afresh, whatever the order the jobs are handed over in. Jobs and
cluster SYNTHETIC (Hypothesis)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import placement.scheduling.running_index as running_index
from placement.model.snapshot import ClusterSnapshot, apply, release
from placement.scheduling.jobs import DurationEstimate, JobMode, RunningJob
from placement.scheduling.resources import demand_of
from placement.scheduling.running_index import RunningViews, running_views
from tests.placement.scheduling_cases import FIRST_FIT, gpu_job, mixed_cluster

CLUSTER = mixed_cluster(V100=32, T4=16)
QUEUES = ("a", "b", "c")


def afresh(snapshot: ClusterSnapshot, running: list[RunningJob], known: tuple[str, ...]) -> RunningViews:
    """The views with nothing kept from before."""
    running_index._kept = None
    return running_views(running, dict(snapshot.allocations.items()), snapshot.layout, known)


def comparable(views: RunningViews) -> dict[str, object]:
    """The views with the order of what the cycle reads as sets made plain."""
    return {"by_id": sorted(views.by_id), "by_id_objects": {k: id(v) for k, v in views.by_id.items()},
            "counted": views.counted, "ends": views.ends, "ending": views.ending,
            "opportunistic": views.opportunistic,
            "groups": {q: sorted(j.job_id for j in g) for q, g in views.groups.items()},
            "usage": views.usage, "lowest": views.lowest}


def job_of(rng: random.Random, n: int) -> RunningJob:
    gpus = rng.choice([0.1, 0.2, 0.25, 0.3, 0.5, 1.0, 2.0, 8.0])
    job = gpu_job(f"j{n}", gpus, instances=rng.choice([1, 1, 2]), priority=rng.randint(0, 3))
    mode = JobMode.OPPORTUNISTIC if rng.random() < 0.2 else JobMode.GUARANTEED
    p50 = math.nan if rng.random() < 0.1 else float(rng.choice([60, 600, 3600]))
    return RunningJob(job, rng.choice((*QUEUES, "unknown")), float(rng.randint(0, 50)), mode,
                      DurationEstimate(p50, p50))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_views_kept_across_cycles_equal_views_worked_out_afresh(seed: int) -> None:
    rng = random.Random(seed)
    snapshot, running, made = ClusterSnapshot.empty(CLUSTER), dict[str, RunningJob](), 0
    for _ in range(12):
        for _ in range(rng.randint(0, 6)):  # jobs start
            job = job_of(rng, made)
            made += 1
            decision = FIRST_FIT(snapshot, job.job)
            if decision.allocation is not None:
                snapshot, running[job.job_id] = apply(snapshot, decision.allocation), job
        for job_id in rng.sample(sorted(running), min(len(running), rng.randint(0, 3))):  # end
            snapshot = release(snapshot, job_id)
            del running[job_id]
        for job_id in rng.sample(sorted(running), min(len(running), rng.randint(0, 2))):  # a new estimate
            old = running[job_id]
            running[job_id] = RunningJob(old.job, old.queue, old.started_s, old.mode, DurationEstimate(99.0, 99.0))
        for job_id in rng.sample(sorted(running), min(len(running), 1)):  # another allocation of the same job
            moved = release(snapshot, job_id)
            decision = FIRST_FIT(moved, running[job_id].job)
            assert decision.allocation is not None
            snapshot = apply(moved, decision.allocation)
        listed = list(running.values())
        rng.shuffle(listed)
        kept = running_views(listed, dict(snapshot.allocations.items()), snapshot.layout, QUEUES)
        assert comparable(kept) == comparable(afresh(snapshot, listed, QUEUES))
        # the usage is the correctly rounded sum, and the ends are sorted by (end, id)
        for queue in QUEUES:
            counted = [j for j in listed if j.queue == queue and j.mode is JobMode.GUARANTEED]
            amounts = [demand_of(j.job, snapshot.allocations[j.job_id], snapshot.layout) for j in counted]
            expected = {k: math.fsum(a.get(k, 0.0) for a in amounts) for a in amounts for k in a}
            assert kept.usage.get(queue, {}) == expected
            assert kept.lowest.get(queue) == (min(j.job.priority for j in counted) if counted else None)
        ends = [(j.estimated_end_s(), j.job_id) for j in listed if j.mode is JobMode.GUARANTEED]
        assert kept.ending == sorted(e for e in ends if e[0] != math.inf)
        assert kept.opportunistic == [j.job_id for j in listed if j.mode is JobMode.OPPORTUNISTIC]


def test_the_views_are_the_cycles_to_change() -> None:
    rng = random.Random(7)
    snapshot, listed = ClusterSnapshot.empty(CLUSTER), []
    for n in range(6):
        job = job_of(rng, n)
        decision = FIRST_FIT(snapshot, job.job)
        assert decision.allocation is not None
        snapshot = apply(snapshot, decision.allocation)
        listed.append(job)
    allocations = dict(snapshot.allocations.items())
    first = running_views(listed, allocations, snapshot.layout, QUEUES)
    first.by_id.clear()
    first.ending.clear()
    first.counted.clear()
    for usage in first.usage.values():
        usage.clear()
    again = running_views(listed, allocations, snapshot.layout, QUEUES)
    assert comparable(again) == comparable(afresh(snapshot, listed, QUEUES))
    assert again.by_id


def test_a_running_job_without_an_allocation_or_listed_twice_is_named() -> None:
    snapshot, job = ClusterSnapshot.empty(CLUSTER), job_of(random.Random(1), 0)
    with pytest.raises(ValueError, match="running job 'j0' holds no allocation in the snapshot"):
        running_views([job], {}, snapshot.layout, QUEUES)
    decision = FIRST_FIT(snapshot, job.job)
    assert decision.allocation is not None
    snapshot = apply(snapshot, decision.allocation)
    with pytest.raises(ValueError, match="running job 'j0' is listed twice"):
        running_views([job, job], dict(snapshot.allocations.items()), snapshot.layout, QUEUES)
