"""Optimistic commits: concurrent deciders never double-allocate; release is idempotent (SYNTHETIC cluster)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from placement.cluster import Machine, build_cluster
from placement.demand import Job, Role, Task
from placement.policies import online_policy
from placement.snapshot import ClusterSnapshot
from placement.store import CommitStatus, MemoryStore, place_and_commit


def store() -> MemoryStore:
    machines = [Machine(f"m{i}", "T4", 4, 32, 128) for i in range(6)]  # 24 GPUs in all
    return MemoryStore(ClusterSnapshot.empty(build_cluster("synthetic", machines, rack_size=2)))


def test_a_stale_decision_is_refused() -> None:
    s = store()
    policy = online_policy("first-fit")
    snap = s.snapshot()
    first = policy(snap, Job("a", (Task(Role.WORKER, 1, gpu=4),)))
    second = policy(snap, Job("b", (Task(Role.WORKER, 1, gpu=4),)))  # same snapshot: same machine
    assert first.allocation is not None and second.allocation is not None
    assert first.allocation.instances[0].machine == second.allocation.instances[0].machine
    assert s.commit(first, Job("a", (Task(Role.WORKER, 1, gpu=4),))) is CommitStatus.COMMITTED
    assert s.commit(second, Job("b", (Task(Role.WORKER, 1, gpu=4),))) is CommitStatus.CONFLICT


def test_concurrent_placements_never_double_allocate() -> None:
    # 40 jobs of 1 GPU from 8 threads on 24 GPUs: exactly 24 commit, the rest are refused as full
    s = store()
    policy = online_policy("liquid")
    jobs = [Job(f"j{i}", (Task(Role.WORKER, 1, gpu=1, cpu_cores=1),)) for i in range(40)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda j: place_and_commit(s, policy, j, attempts=50), jobs))
    committed = {d.job_id for d, ok in results if ok}
    assert len(committed) == 24 == len(s.snapshot().allocations)
    assert set(s.snapshot().allocations) == committed
    assert s.snapshot().gpu_milli_used.max() == 1000 and int(s.snapshot().gpu_milli_used.sum()) == 24_000


def test_release_is_idempotent_and_exact() -> None:
    s = store()
    before = s.snapshot()
    decision, ok = place_and_commit(s, online_policy("liquid"), Job("a", (Task(Role.WORKER, 2, gpu=0.5, cpu_cores=3),)))
    assert ok and decision.placed
    assert s.release("a") is True
    assert s.release("a") is False
    np.testing.assert_array_equal(s.snapshot().gpu_milli_used, before.gpu_milli_used)
    np.testing.assert_array_equal(s.snapshot().cpu_used, before.cpu_used)
