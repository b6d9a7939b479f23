"""WorkingState's incremental paths agree with computing from scratch (hypothesis, SYNTHETIC clusters)."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import placement.filters.gpu_share as gpu_share_module
from placement.model.cluster import Cluster
from placement.model.demand import Job
from placement.model.feasibility import need_of
from placement.model.snapshot import ClusterSnapshot, allocated_share
from placement.online.working import WorkingState
from tests.placement.test_properties import clusters, jobs


def _fresh(working: WorkingState) -> WorkingState:
    """A WorkingState built from scratch on the usage ``working`` holds now."""
    s = working.snapshot
    snap = ClusterSnapshot(s.cluster, s.generation, working.gpu_milli.copy(), working.gpu_mem.copy(),
                           working.cpu.copy(), working.mem.copy())
    return WorkingState(snap)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), job=jobs("j"), picks=st.lists(st.integers(0, 10_000), min_size=1, max_size=12),
       ask_every=st.integers(1, 3))
def test_incremental_candidates_match_a_full_recount(cluster: Cluster, job: Job, picks: list[int],
                                                     ask_every: int) -> None:
    """Take instances on machines that fit, asking for candidates every few takes; every answer (and
    the maintained allocated share) equals what a fresh state computes for all machines."""
    working = WorkingState(ClusterSnapshot.empty(cluster))
    for step, pick in enumerate(picks):
        task_index = pick % len(job.tasks)
        need = need_of(job.tasks[task_index])
        got = working.candidates(need)
        want = _fresh(working).candidates(need)
        assert np.array_equal(got.reason, want.reason) and np.array_equal(got.ok, want.ok)
        assert np.array_equal(got.free_whole, want.free_whole)
        assert np.allclose(working.gpu_allocated_share(),
                           allocated_share(working.layout, _fresh(working).machine_milli, working.cpu))
        fit = np.flatnonzero(got.ok)
        if not fit.size:
            continue
        machine = int(fit[pick % fit.size])
        for _ in range(1 if step % ask_every else min(working.room_on(machine, need), 6)):
            working.take(machine, task_index, need)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), job=jobs("j"), pick=st.integers(0, 10_000))
def test_take_many_is_take_repeated(cluster: Cluster, job: Job, pick: int) -> None:
    task = job.tasks[0]
    need = need_of(task)
    one, many = WorkingState(ClusterSnapshot.empty(cluster)), WorkingState(ClusterSnapshot.empty(cluster))
    fit = np.flatnonzero(one.candidates(need).ok)
    if not fit.size:
        return
    machine = int(fit[pick % fit.size])
    room = one.room_on(machine, need)
    assert room >= 1
    count = min(room, 6)  # a task asking for nothing has unbounded room
    singles = [one.take(machine, 0, need) for _ in range(count)]
    assert many.take_many(machine, 0, need, count) == singles
    assert one.room_on(machine, need) == room - count or room > 6
    if count == room:
        assert not one.candidates(need).ok[machine]
    for name in ("gpu_milli", "gpu_mem", "cpu", "mem", "machine_milli", "free_whole"):
        assert np.array_equal(getattr(one, name), getattr(many, name)), name


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), job=jobs("j"), picks=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 9)),
                                                        min_size=1, max_size=10))
def test_large_node_path_places_as_the_small_one(cluster: Cluster, job: Job, picks: list[tuple[int, int]]) -> None:
    """The numpy path for machines with many GPUs chooses exactly the GPUs the Python path does."""
    states = {}
    for threshold in (64, 0):  # 0: every machine counts as large
        with patch.object(gpu_share_module, "FEW_GPUS_PER_MACHINE", threshold):
            working = WorkingState(ClusterSnapshot.empty(cluster))
            placed = []
            for pick, count in picks:
                task_index = pick % len(job.tasks)
                need = need_of(job.tasks[task_index])
                fit = np.flatnonzero(working.candidates(need).ok)
                if fit.size:
                    machine = int(fit[pick % fit.size])
                    placed += working.take_many(machine, task_index, need, min(count, working.room_on(machine, need)))
            states[threshold] = (placed, working)
    assert states[64][0] == states[0][0]
    for name in ("gpu_milli", "gpu_mem", "cpu", "mem", "machine_milli", "free_whole"):
        assert np.array_equal(getattr(states[64][1], name), getattr(states[0][1], name)), name
