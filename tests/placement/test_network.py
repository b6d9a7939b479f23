"""The network cost: the one tally against the definition, pair by pair (hypothesis, SYNTHETIC clusters)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement.batch.policies import plan_cost
from placement.model.cluster import Cluster
from placement.model.demand import Job, Role
from placement.model.network import NetworkTally, network_cost
from placement.model.topology import DEFAULT_DISTANCE_COST
from placement.online.greedy import instance_order
from tests.placement.test_properties import clusters, jobs

COSTS = st.sampled_from([DEFAULT_DISTANCE_COST, (0.5, 2.0, 3.0, 7.0)])


def _level(cluster: Cluster, a: int, b: int) -> int:
    names = cluster.machines
    return cluster.topology.distance(names[a].name, names[b].name)


def _by_definition(cluster: Cluster, job: Job, placed: list[tuple[int, int]], cost: tuple[float, ...]) -> float:
    """The module docstring of ``placement.model.network``, written out: parameter-server jobs pay every
    (ps, worker) pair; all-reduce instances pay for the nearest instance placed before them."""
    tasks = job.tasks
    n_ps = sum(t.instances for t in tasks if t.role is Role.PS)
    if n_ps:
        ps = [m for t, m in placed if tasks[t].role is Role.PS]
        workers = [(tasks[t].bandwidth_gbps, m) for t, m in placed if tasks[t].role is not Role.PS]
        return sum(b / n_ps * cost[_level(cluster, p, w)] for p in ps for b, w in workers)
    total = 0.0
    for k, (t, m) in enumerate(placed):
        if k:
            total += tasks[t].bandwidth_gbps * cost[min(_level(cluster, m, before) for _, before in placed[:k])]
    return total


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), job=jobs("j"), picks=st.lists(st.integers(0, 10_000), min_size=12, max_size=12),
       cost=COSTS)
def test_network_cost_is_the_definition(cluster: Cluster, job: Job, picks: list[int],
                                        cost: tuple[float, ...]) -> None:
    # a job of ``jobs`` has at most 12 instances: one pick each
    placed = [(task_index, picks[k] % len(cluster)) for k, task_index in enumerate(instance_order(job))]
    want = _by_definition(cluster, job, placed, cost)
    layout = cluster.layout
    assert math.isclose(network_cost(job, placed, layout, cost), want, rel_tol=1e-12, abs_tol=1e-9)
    assert math.isclose(plan_cost(job, [m for _, m in placed], layout, cost), want, rel_tol=1e-12, abs_tol=1e-9)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), job=jobs("j"), picks=st.lists(st.integers(0, 10_000), min_size=1, max_size=12),
       cost=COSTS)
def test_every_machine_at_once_equals_one_machine_at_a_time(cluster: Cluster, job: Job, picks: list[int],
                                                            cost: tuple[float, ...]) -> None:
    """The vector increment (what the online policies score) and the scalar one (what the totals add up)
    agree on every machine after every instance placed."""
    tally = NetworkTally(job, cluster.layout, cost)
    for task_index, pick in zip(instance_order(job), picks, strict=False):
        vector = tally.increment(task_index)
        scalar = [tally.increment_at(task_index, m) for m in range(len(cluster))]
        np.testing.assert_allclose(vector, scalar, rtol=1e-12, atol=1e-9)
        machine = pick % len(cluster)
        tally.record_at(task_index, machine, scalar[machine])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), job=jobs("j"), picks=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 4)),
                                                      min_size=1, max_size=8), cost=COSTS)
def test_many_instances_on_one_machine_are_booked_as_one_by_one(cluster: Cluster, job: Job,
                                                                picks: list[tuple[int, int]],
                                                                cost: tuple[float, ...]) -> None:
    """``record_many`` (a policy's run of a task's instances on one machine) leaves the tally as booking each
    instance at its increment would: the same total to the last bit, the same costs next, the same changes."""
    many, single = NetworkTally(job, cluster.layout, cost), NetworkTally(job, cluster.layout, cost)
    for k, (pick, count) in enumerate(picks):
        task_index, machine = k % len(job.tasks), pick % len(cluster)
        many_mark, single_mark = many.mark(), single.mark()
        many.record_many(task_index, machine, count)
        for _ in range(count):
            single.record_at(task_index, machine, single.increment_at(task_index, machine))
        assert many.total == single.total
        assert many.mark() == single.mark()
        changed_many, changed_single = many.changed_since(many_mark), single.changed_since(single_mark)
        assert (changed_many is None) == (changed_single is None)
        if changed_many is not None and changed_single is not None:
            assert changed_many.tolist() == changed_single.tolist()
        for t in range(len(job.tasks)):
            np.testing.assert_array_equal(many.increment(t), single.increment(t))
