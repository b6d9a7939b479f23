"""Hypothesis properties over random SYNTHETIC clusters, occupancies and demand streams, for every policy."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement.model.cluster import Cluster, Machine, build_cluster
from placement.model.demand import Job, Role, Task
from placement.model.snapshot import MIB_PER_GIB, MILLI, ClusterSnapshot, apply, release
from placement.online.policies import CHOOSERS, online_policy

TYPES = {"T4": 16.0, "V100M32": 32.0, "MISC": 8.0}


@st.composite
def clusters(draw: st.DrawFn) -> Cluster:
    machines = []
    for i in range(draw(st.integers(1, 8))):
        gpu_type = draw(st.sampled_from([*TYPES, "CPU"]))
        gpus = 0 if gpu_type == "CPU" else draw(st.sampled_from([1, 2, 4, 8]))
        machines.append(Machine(f"m{i}", gpu_type, gpus, draw(st.sampled_from([8.0, 32.0, 96.0])),
                                draw(st.sampled_from([32.0, 128.0, 512.0]))))
    return build_cluster("synthetic", machines, rack_size=draw(st.integers(1, 4)), racks_per_domain=2)


@st.composite
def jobs(draw: st.DrawFn, job_id: str) -> Job:
    tasks = []
    for _ in range(draw(st.integers(1, 3))):
        types = draw(st.sets(st.sampled_from(list(TYPES)), max_size=2))
        tasks.append(Task(draw(st.sampled_from(list(Role))), draw(st.integers(1, 4)),
                          gpu=draw(st.sampled_from([0.0, 0.25, 0.3, 0.5, 1.0, 2.0, 4.0])),
                          cpu_cores=draw(st.sampled_from([0.0, 0.5, 4.0, 16.0])),
                          mem_gib=draw(st.sampled_from([0.0, 3.3, 64.0])),
                          gpu_mem_gib=draw(st.sampled_from([math.nan, 1.5, 10.0, 20.0])),
                          bandwidth_gbps=draw(st.sampled_from([0.0, 1.0, 25.0])), gpu_types=frozenset(types)))
    return Job(job_id, tuple(tasks))


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Cluster, list[Job], str]:
    cluster = draw(clusters())
    stream = [draw(jobs(f"job{i}")) for i in range(draw(st.integers(1, 10)))]
    return cluster, stream, draw(st.sampled_from(sorted(CHOOSERS)))


def _run(cluster: Cluster, stream: list[Job], policy: str) -> tuple[ClusterSnapshot, list[ClusterSnapshot], list[str]]:
    place = online_policy(policy)
    snapshot = ClusterSnapshot.empty(cluster)
    history, placed = [snapshot], []
    for job in stream:
        decision = place(snapshot, job)
        if decision.allocation is not None:
            snapshot = apply(snapshot, decision.allocation)
            history.append(snapshot)
            placed.append(job.job_id)
    return snapshot, history, placed


def _independent_usage_check(cluster: Cluster, snapshot: ClusterSnapshot, stream: list[Job]) -> None:
    """Recount every allocation from scratch, with plain loops, and compare with the capacities."""
    gpu_share: dict[tuple[int, int], int] = defaultdict(int)
    gpu_mem: dict[tuple[int, int], int] = defaultdict(int)
    cpu: dict[int, int] = defaultdict(int)
    mem: dict[int, int] = defaultdict(int)
    first_gpu = np.concatenate([[0], np.cumsum([m.gpus for m in cluster.machines])])
    by_id = {j.job_id: j for j in stream}
    for job_id, allocation in snapshot.allocations.items():
        job = by_id[job_id]
        assert len(allocation.instances) == job.instances  # gang: all of them
        for p in allocation.instances:
            task = job.tasks[p.task]
            assert not task.gpu_types or task.gpu == 0 or cluster.machines[p.machine].gpu_type in task.gpu_types
            for g in p.gpus:
                local = g - int(first_gpu[p.machine])
                assert 0 <= local < cluster.machines[p.machine].gpus  # the GPU is on the machine
                gpu_share[(p.machine, local)] += p.gpu_milli
                gpu_mem[(p.machine, local)] += p.gpu_mem_mib
            cpu[p.machine] += p.cpu_milli
            mem[p.machine] += p.mem_mib
    for (m, _), used in gpu_share.items():
        assert used <= MILLI
        assert gpu_mem[(m, _)] <= math.floor(cluster.machines[m].gpu_mem_gib * MIB_PER_GIB)
    for m, used in cpu.items():
        assert used <= math.floor(cluster.machines[m].cpu_cores * MILLI)
        assert mem[m] <= math.floor(cluster.machines[m].mem_gib * MIB_PER_GIB)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_no_policy_over_allocates_and_gang_holds(scenario: tuple[Cluster, list[Job], str]) -> None:
    cluster, stream, policy = scenario
    snapshot, _, _ = _run(cluster, stream, policy)
    _independent_usage_check(cluster, snapshot, stream)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_release_restores_the_exact_prior_state_and_is_idempotent(scenario: tuple[Cluster, list[Job], str]) -> None:
    cluster, stream, policy = scenario
    snapshot, history, placed = _run(cluster, stream, policy)
    for job_id, before in zip(reversed(placed), reversed(history[:-1]), strict=True):
        snapshot = release(snapshot, job_id)
        again = release(snapshot, job_id)
        assert again is snapshot  # releasing twice changes nothing
        for name in ("gpu_milli_used", "gpu_mem_used", "cpu_used", "mem_used"):
            np.testing.assert_array_equal(getattr(snapshot, name), getattr(before, name))
    assert not snapshot.allocations and not snapshot.cpu_used.any() and not snapshot.gpu_milli_used.any()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_same_input_same_decision(scenario: tuple[Cluster, list[Job], str]) -> None:
    cluster, stream, policy = scenario
    first, _, _ = _run(cluster, stream, policy)
    second, _, _ = _run(cluster, stream, policy)
    assert dict(first.allocations) == dict(second.allocations)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_per_machine_sums_carried_to_new_snapshots_equal_a_recount(scenario: tuple[Cluster, list[Job], str]) -> None:
    """``apply`` and ``release`` hand the per-machine arrays on, recomputed only where the job sits;
    they must equal what a snapshot with the same usage but nothing cached derives over the cluster."""
    cluster, stream, policy = scenario
    snapshot, history, placed = _run(cluster, stream, policy)
    # each placement was decided on its parent snapshot, which derived the sums; apply carried them on
    assert all(one._per_machine.free_whole is not None for one in history[1:])
    for job_id in reversed(placed):
        history.append(snapshot := release(snapshot, job_id))
    for one in history:
        fresh = ClusterSnapshot(cluster, one.generation, one.gpu_milli_used, one.gpu_mem_used, one.cpu_used,
                                one.mem_used)
        for name in ("machine_gpu_milli", "machine_free_whole", "machine_share"):
            np.testing.assert_array_equal(getattr(one, name), getattr(fresh, name), err_msg=name)
