"""A reservation's forecast made with some jobs released at once against the same jobs released one by one
(``placement.scheduling.future.Future``): SYNTHETIC clusters and jobs."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from placement.model.demand import Job, Role, Task
from placement.model.snapshot import ClusterSnapshot, apply
from placement.scheduling.future import Future
from tests.placement.scheduling_cases import FIRST_FIT, gpu_job, synthetic_cluster

SHARES = [0.25, 0.5, 1.0, 2.0]


def job_totals(future: Future) -> tuple[int, int, int]:
    return future.wanted


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.lists(st.tuples(st.sampled_from(SHARES),
                                                                                st.integers(1, 3)), max_size=12),
       st.sampled_from(SHARES), st.integers(1, 6), st.booleans(), st.data())
def test_releasing_at_once_leaves_the_forecast_one_release_after_another_leaves(
        machines: list[int], placed: list[tuple[float, int]], share: float, instances: int, fence: bool,
        data: st.DataObject) -> None:
    cluster = synthetic_cluster(*machines, cpu_cores=8.0, mem_gib=64.0)
    snapshot = ClusterSnapshot.empty(cluster)
    allocations = []
    for n, (gpus, count) in enumerate(placed):
        decision = FIRST_FIT(snapshot, gpu_job(f"r{n}", gpus, count))
        if decision.allocation is not None:
            snapshot = apply(snapshot, decision.allocation)
            allocations.append(decision.allocation)
    fences = [allocations[0]] if fence and allocations else []
    ended = data.draw(st.permutations(allocations[len(fences):]))
    job = Job("waiting", (Task(Role.WORKER, instances, gpu=share, cpu_cores=1.0, mem_gib=1.0),))
    at_once = data.draw(st.integers(0, len(ended)))

    one_by_one = Future(snapshot, fences, job)
    asked = [one_by_one.could_fit()]
    for allocation in ended[:at_once]:
        one_by_one.release(allocation)
        asked.append(one_by_one.could_fit())  # where the search asks: its rooms worked out there
    skipped = Future(snapshot, fences, job, ended[:at_once])
    # the search asks only at the end of a group of ends alike: any release may be the last one before it asks
    assert skipped.could_fit() == asked[-1]
    for allocation in ended[at_once:]:
        one_by_one.release(allocation)
        skipped.release(allocation)
        assert skipped.could_fit() == one_by_one.could_fit()
        assert skipped.free == one_by_one.free
        if all(w <= f for w, f in zip(job_totals(skipped), skipped.free, strict=True)):
            # the rooms are worked out only once the totals allow the job: then alike, machine by machine
            assert [r.room.tolist() for r in skipped.rooms] == [r.room.tolist() for r in one_by_one.rooms]
    made, expected = skipped.snapshot(), one_by_one.snapshot()
    assert made.generation == expected.generation
    for got, want in zip((made.gpu_milli_used, made.gpu_mem_used, made.cpu_used, made.mem_used),
                         (expected.gpu_milli_used, expected.gpu_mem_used, expected.cpu_used, expected.mem_used),
                         strict=True):
        assert np.array_equal(got, want)
