"""The replay's vector check of jobs of many GPU shares (``placement.sim.share_room``), on SYNTHETIC clusters."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement.filters.base import usage_of
from placement.filters.gpu_share import GpuShare
from placement.model.cluster import Machine, build_cluster
from placement.model.demand import Job, Role, Task
from placement.model.feasibility import need_of
from placement.model.snapshot import MILLI, ClusterSnapshot
from placement.sim.engine import simulate
from placement.sim.jobs import SimJob
from placement.sim.queues import queue_policy
from placement.sim.share_room import ShareRoom

SHARES = (0.1, 0.25, 0.3, 0.5, 0.6, 0.75)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(used=st.lists(st.integers(0, MILLI), min_size=1, max_size=40), machines=st.integers(1, 4),
       share=st.sampled_from(SHARES), count=st.integers(2, 12))
def test_the_room_is_the_gpu_share_filters_bound_summed_over_machines(used: list[int], machines: int, share: float,
                                                                      count: int) -> None:
    per_machine = -(-len(used) // machines)
    cluster = build_cluster("synthetic", [Machine(f"m{k}", "T4", per_machine, 64, 256) for k in range(machines)])
    empty = ClusterSnapshot.empty(cluster)
    milli = np.zeros(cluster.layout.gpu_machine.shape, dtype=np.int64)
    milli[:len(used)] = used  # the share of each GPU in use: all the room counts
    snapshot = ClusterSnapshot(cluster, 1, milli, empty.gpu_mem_used, empty.cpu_used, empty.mem_used)
    need = need_of(Task(Role.WORKER, count, gpu=share))
    room = ShareRoom([(need, count, True)])
    bound = GpuShare().room_bound(usage_of(snapshot), need)
    assert bound is not None
    assert int(room.room(snapshot)[0]) == int(bound.sum())
    assert bool(room.covers(snapshot, np.array([0]))[0]) == (count <= int(bound.sum()))


def test_jobs_not_of_many_shares_of_any_gpu_type_are_never_held_back() -> None:
    whole, one, typed = (need_of(Task(Role.WORKER, 4, gpu=2)), need_of(Task(Role.WORKER, 1, gpu=0.5)),
                         need_of(Task(Role.WORKER, 4, gpu=0.5, gpu_types=frozenset({"T4"}))))
    room = ShareRoom([(whole, 4, True), (one, 1, True), (typed, 4, False), (one, 0, False)])
    assert not room.checks
    full = ClusterSnapshot.empty(build_cluster("synthetic", [Machine("m0", "T4", 1, 8, 32)]))
    assert room.covers(full, np.arange(4)).all()


def shared(job_id: str, share: float, instances: int, submit: float, duration: float) -> SimJob:
    return SimJob(Job(job_id, (Task(Role.WORKER, instances, gpu=share),)), "u", submit, duration)


def test_a_replay_decides_the_same_with_and_without_the_check() -> None:
    # 4 GPUs; 'half' jobs leave each GPU 0.4 free at times, so jobs of many 0.5 shares wait with the milli-GPUs
    # free in total; the check passes over them, and the replay must start every job when it did without it
    cluster = build_cluster("synthetic", [Machine("m0", "T4", 4, 64, 256), Machine("m1", "T4", 2, 64, 256)])
    rng = np.random.default_rng(7)
    jobs = [shared(f"j{k:03d}", float(rng.choice(SHARES)), int(rng.integers(1, 7)), float(k // 3),
                   float(rng.integers(5, 60))) for k in range(150)]
    covers, held_back = ShareRoom.covers, []

    def counting(self: ShareRoom, snapshot: ClusterSnapshot, jobs: np.ndarray) -> np.ndarray:
        found = covers(self, snapshot, jobs)
        held_back.append(int(np.count_nonzero(~found & self.count[jobs].astype(bool))))
        return found

    for queue in ("fifo", "sjf-oracle"):
        held_back.clear()
        with patch.object(ShareRoom, "covers", counting):
            checked = simulate(cluster, jobs, "first-fit", queue_policy(queue))
        with patch.object(ShareRoom, "covers", lambda self, snapshot, jobs: np.ones(len(self.count[jobs]), bool)):
            unchecked = simulate(cluster, jobs, "first-fit", queue_policy(queue))
        assert sum(held_back) > 0  # the check passed over jobs of many shares that would have been asked about
        assert [(r.start_s, r.end_s) for r in checked.records] == [(r.start_s, r.end_s) for r in unchecked.records]
        assert sum(r.start_s is not None for r in checked.records) == len(jobs)
