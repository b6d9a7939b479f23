"""The replay's scheduling pass against a plain one, on SYNTHETIC clusters and jobs.

The pass (``placement.sim.engine``) leaves out the jobs the free totals or the GPUs' room rule out, learns within
a pass which jobs cannot start (``placement.sim.pass_memo``), offers only new arrivals when nothing was freed, and
after a start checks the next jobs one by one until one is not covered. None of that may change a record: the
plain pass below asks the placement policy about every waiting job, in queue order, at every event time.

Jobs of one task: for them a first-fit placement that fails on a snapshot fails on every fuller one (one demand:
the machines' room for it adds up or not), which is what offering only new arrivals when nothing was freed rests on.
"""

from __future__ import annotations

import heapq

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement.model.cluster import Cluster, Machine, build_cluster
from placement.model.demand import Job, Role, Task
from placement.model.snapshot import ClusterSnapshot, apply, release
from placement.online.policies import online_policy
from placement.sim.engine import simulate
from placement.sim.jobs import SimJob
from placement.sim.queues import queue_policy

GPUS = (0.25, 0.5, 0.6, 1.0, 2.0, 4.0)


def plain_replay(cluster: Cluster, jobs: list[SimJob], queue: str) -> list[tuple[float | None, float | None]]:
    """(start, end) per job: at each event time ends, then arrivals, then every waiting job asked in queue order."""
    place = online_policy("first-fit", explain=False)
    empty = ClusterSnapshot.empty(cluster)
    orders = {"fifo": lambda j: (j.submit_s, j.job_id), "sjf-oracle": lambda j: (j.duration_s, j.submit_s, j.job_id)}
    key = orders[queue]
    arrivals = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_s, i))
    snapshot, waiting, at = empty, [], 0
    starts: list[float | None] = [None] * len(jobs)
    ends: list[tuple[float, int]] = []  # a heap of (end, job)
    while at < len(arrivals) or ends:
        now = min(jobs[arrivals[at]].submit_s if at < len(arrivals) else float("inf"),
                  ends[0][0] if ends else float("inf"))
        while ends and ends[0][0] == now:
            snapshot = release(snapshot, jobs[heapq.heappop(ends)[1]].job_id)
        while at < len(arrivals) and jobs[arrivals[at]].submit_s == now:
            i = arrivals[at]
            at += 1
            if place(empty, jobs[i].job).allocation is not None:  # else it could never fit: dropped
                waiting.append(i)
        for i in sorted(waiting, key=lambda i: key(jobs[i])):
            decision = place(snapshot, jobs[i].job)
            if decision.allocation is not None:
                snapshot = apply(snapshot, decision.allocation)
                waiting.remove(i)
                starts[i] = now
                heapq.heappush(ends, (now + jobs[i].duration_s, i))
    return [(s, None if s is None else s + j.duration_s) for s, j in zip(starts, jobs, strict=True)]


job_specs = st.lists(st.tuples(st.sampled_from(GPUS), st.integers(1, 4), st.integers(1, 24), st.integers(0, 30),
                               st.integers(1, 40)), min_size=1, max_size=40)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(machines=st.lists(st.tuples(st.sampled_from((1, 2, 4, 8)), st.integers(8, 48)), min_size=1, max_size=4),
       specs=job_specs, queue=st.sampled_from(("fifo", "sjf-oracle")))
def test_the_pass_starts_every_job_when_asking_about_every_waiting_job_would(
        machines: list[tuple[int, int]], specs: list[tuple[float, int, int, int, int]], queue: str) -> None:
    cluster = build_cluster("synthetic", [Machine(f"m{k}", "T4", gpus, cores, 256)
                                          for k, (gpus, cores) in enumerate(machines)])
    jobs = [SimJob(Job(f"j{k:03d}", (Task(Role.WORKER, instances, gpu=gpu, cpu_cores=cores),)), "u", float(submit),
                   float(duration))
            for k, (gpu, instances, cores, submit, duration) in enumerate(specs)]
    result = simulate(cluster, jobs, "first-fit", queue_policy(queue))
    assert [(r.start_s, r.end_s) for r in result.records] == plain_replay(cluster, jobs, queue)
