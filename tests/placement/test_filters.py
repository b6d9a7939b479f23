"""Contract tests over every registered filter, the filters composed, and the per-machine public face
(``filter_nodes``, ``place_on``), on small SYNTHETIC clusters (made up here) and Hypothesis ones."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement import FILTERS, Verdict, filter_nodes, place_on, usage_of
from placement.filters import filter_named
from placement.filters.base import Usage
from placement.filters.capacity import ROWS, spare_rows, use_of
from placement.filters.chain import OK, chain_for
from placement.model.cluster import Cluster, Machine, build_cluster
from placement.model.demand import Job, Role, Task
from placement.model.feasibility import Need, need_of, violations
from placement.model.snapshot import ClusterSnapshot, apply
from placement.online.policies import online_policy
from placement.online.working import WorkingState
from tests.placement.test_properties import clusters, jobs

V32 = frozenset({"V100M32"})


def cluster() -> Cluster:
    """SYNTHETIC: 4 T4 machines (4 GPUs, 16 GiB each), 2 V100M32 machines (8 GPUs, 32 GiB), 1 CPU box,
    and a big node of 80 T4 GPUs (its GPUs are counted in numpy)."""
    machines = [Machine(f"t4-{i}", "T4", 4, 32, 128) for i in range(4)]
    machines += [Machine(f"v32-{i}", "V100M32", 8, 64, 512) for i in range(2)]
    machines += [Machine("cpu-0", "CPU", 0, 96, 512), Machine("big-0", "T4", 80, 400, 4096)]
    return build_cluster("synthetic", machines, rack_size=2, racks_per_domain=2)


def worker(n: int, gpu: float, **kw: object) -> Task:
    return Task(Role.WORKER, n, gpu=gpu, **kw)  # type: ignore[arg-type]


TASKS = [worker(1, g, cpu_cores=c, mem_gib=m, gpu_mem_gib=gm, gpu_types=t)
         for g in (0, 0.3, 0.5, 1, 2, 8) for c in (0, 8, 40) for m in (0, 200) for gm in (math.nan, 12)
         for t in (frozenset(), V32)]


def busy() -> ClusterSnapshot:
    """The cluster with a few jobs placed by first fit: partly used GPUs, shares, CPU and memory."""
    snapshot = ClusterSnapshot.empty(cluster())
    place = online_policy("first-fit")
    for i, task in enumerate([worker(3, 1, cpu_cores=8), worker(5, 0.5, gpu_mem_gib=10), worker(2, 0.3),
                              worker(1, 4, mem_gib=300, gpu_types=V32), worker(1, 0, cpu_cores=90),
                              worker(30, 0.5, cpu_cores=4)]):
        decision = place(snapshot, Job(f"busy{i}", (task,)))
        assert decision.allocation is not None
        snapshot = apply(snapshot, decision.allocation)
    return snapshot


def check_contract(usage: Usage, need: Need) -> None:
    """What every filter promises, on every machine (see ``placement.filters.base.Filter``)."""
    machines = range(len(usage.layout.cpu_cap))
    for f in FILTERS.values():
        mask = f.mask(usage, need)
        assert mask.dtype == np.bool_ and mask.shape == (len(machines),), f.name
        if not f.applies(need):
            assert mask.all() and f.room_bound(usage, need) is None, f.name
        bound = f.room_bound(usage, need)
        for m in machines:
            fits, reason, room = f.fits_at(usage, need, m), f.reason(usage, need, m), f.room_at(usage, need, m)
            assert bool(mask[m]) == fits, (f.name, m)
            assert (reason is None) == fits, (f.name, m, reason)
            assert fits == (room is None or room >= 1), (f.name, m, room)
            assert bound is None or room is None or int(bound[m]) >= room, (f.name, m)
        if not mask.all():
            text = f.summary(usage, need, int(np.count_nonzero(~mask)), np.ones(len(machines), dtype=bool))
            assert isinstance(text, str) and text, f.name


@pytest.mark.parametrize("empty", [True, False])
def test_every_filter_keeps_its_contract(empty: bool) -> None:
    snapshot = ClusterSnapshot.empty(cluster()) if empty else busy()
    for task in TASKS:
        need = need_of(task)
        check_contract(usage_of(snapshot), need)
        check_contract(WorkingState(snapshot), need)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), job=jobs("j"), picks=st.lists(st.integers(0, 10_000), min_size=1, max_size=8))
def test_filters_keep_their_contract_while_a_state_fills(cluster: Cluster, job: Job, picks: list[int]) -> None:
    working = WorkingState(ClusterSnapshot.empty(cluster))
    for pick in picks:
        task_index = pick % len(job.tasks)
        need = need_of(job.tasks[task_index])
        check_contract(working, need)
        fit = np.flatnonzero(working.candidates(need).ok)
        if fit.size:
            working.take(int(fit[pick % fit.size]), task_index, need)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), job=jobs("j"), picks=st.lists(st.integers(0, 10_000), min_size=1, max_size=8))
def test_no_filter_passes_a_machine_more_with_more_in_use(cluster: Cluster, job: Job, picks: list[int]) -> None:
    """What the scheduling cycle's shortcuts stand on: taking running jobs away only frees room (the preemption
    probe's snapshot without every candidate, the reservation search's releases, the room index's patches). So
    as instances are taken one by one, no filter passes a machine it failed before, nor lets one take more."""
    working = WorkingState(ClusterSnapshot.empty(cluster))
    needs = list(dict.fromkeys([need_of(task) for task in job.tasks] + [need_of(task) for task in TASKS[::9]]))
    machines = range(len(working.layout.cpu_cap))

    def seen() -> dict[tuple[str, Need], tuple[list[bool], list[int | None]]]:
        return {(f.name, need): (f.mask(working, need).tolist(), [f.room_at(working, need, m) for m in machines])
                for f in FILTERS.values() for need in needs}

    before = seen()
    for pick in picks:
        task_index = pick % len(job.tasks)
        need = need_of(job.tasks[task_index])
        fit = np.flatnonzero(working.candidates(need).ok)
        if not fit.size:
            continue
        working.take(int(fit[pick % fit.size]), task_index, need)
        after = seen()
        for key, (passing, room) in after.items():
            was_passing, was_room = before[key]
            assert all(was or not now for was, now in zip(was_passing, passing, strict=True)), key
            # room None: no limit
            assert all(w is None or (r is not None and r <= w) for w, r in zip(was_room, room, strict=True)), key
        before = after


def test_a_machine_the_filters_pass_has_room_in_every_summed_row() -> None:
    """The batch models' per-machine sums relax the filters: never stricter than them."""
    snapshot = busy()
    usage = usage_of(snapshot)
    spare = spare_rows(usage)
    assert spare.shape == (ROWS, len(snapshot.cluster)) and (spare[0] == usage.free_whole).all()
    layout = snapshot.layout
    for task in TASKS:
        need = need_of(task)
        for m in np.flatnonzero(chain_for(need).passing(usage)).tolist():
            cap = int(layout.gpu_mem_cap[layout.gpu_first[m]]) if layout.gpu_count[m] else 0
            assert all(use <= int(spare[row, m]) for row, use in enumerate(use_of(need, cap))), (task, m)


def test_the_chain_is_every_filter_in_order() -> None:
    snapshot = busy()
    working = WorkingState(snapshot)
    for task in TASKS:
        need = need_of(task)
        chain = chain_for(need)
        masks = [f.mask(working, need) for f in FILTERS.values()]
        ok = chain.passing(working)
        assert ok.tolist() == np.logical_and.reduce(masks).tolist()
        codes = chain.first_failing(working)
        for m in range(working.n_machines):
            failing = [code for code, mask in enumerate(masks, 1) if not mask[m]]
            assert codes[m] == (failing[0] if failing else OK) == chain.first_failing_at(working, m)
            assert (chain.reason_at(working, m) is None) == bool(ok[m]) == chain.passes_at(working, m)
            assert chain.room_at(working, m) >= 1 or not ok[m]


def test_one_machine_agrees_with_every_machine() -> None:
    """``WorkingState.fits`` (one machine, scalars) is ``candidates(...).ok`` (every machine, numpy)."""
    working = WorkingState(ClusterSnapshot.empty(cluster()))
    rng = random.Random(5)
    for _ in range(60):
        need = need_of(rng.choice(TASKS))
        ok = working.candidates(need).ok
        assert [working.fits(need, m) for m in range(working.n_machines)] == ok.tolist()
        if ok.any():
            working.take(int(np.flatnonzero(ok)[rng.randrange(int(ok.sum()))]), 0, need)


@pytest.mark.parametrize(("task", "machine", "reason"), [
    # t4-0 has 4 GPUs: busy0 took 3 whole ones, busy1 and busy2 share the fourth: none free
    (worker(1, 2), 0, "needs 2 free GPU(s), 0 free"),
    (worker(1, 1, gpu_types=V32), 0, "GPU type T4 not in ['V100M32']"),
    # the CPU box has 96 cores; busy4 took 90: 6 left
    (worker(1, 0, cpu_cores=8), 6, "needs 8 CPU cores, 6 free"),
    # a T4 machine has 128 GiB
    (worker(1, 0, mem_gib=200), 1, "needs 200 GiB memory, 128 free"),
    # a T4 GPU has 16 GiB: no share of it takes 20
    (worker(1, 0.5, gpu_mem_gib=20), 1, "no GPU with a free share of 0.5 and its GPU memory"),
])
def test_reasons_name_the_figures(task: Task, machine: int, reason: str) -> None:
    checked = filter_nodes(busy(), Job("j", (task,)))
    assert not checked.ok[machine] and checked.reason(machine) == reason


def test_filter_nodes_tells_waiting_from_never() -> None:
    snapshot = busy()
    checked = filter_nodes(snapshot, Job("j", (worker(1, 8),)))  # 8 GPUs: the V100M32 machines and the big node
    assert checked.ok.tolist() == WorkingState(snapshot).candidates(need_of(worker(1, 8))).ok.tolist()
    assert checked.ok_when_empty.tolist() == [False] * 4 + [True, True, False, True]
    assert checked.reason_when_empty(0) == "needs 8 free GPU(s), 4 free"
    assert checked.reason_when_empty(4) == "fits"


def test_place_on_places_there_or_says_why_not() -> None:
    snapshot = busy()
    job = Job("j", (worker(2, 2, cpu_cores=2),))
    placed = place_on(snapshot, job, 5)
    assert placed.verdict is Verdict.PLACED and placed.allocation is not None
    assert placed.allocation.machines() == {5} and violations(snapshot, job, placed.allocation) == []
    # v32-1 has 8 GPUs, 3 shared by six of busy5's instances: 5 free. Two instances of 2 take 4; the third finds 1
    bigger = Job("k", (worker(3, 2),))
    refused = place_on(snapshot, bigger, 5, "pinned")
    assert refused.verdict is Verdict.UNSCHEDULABLE_NOW and refused.allocation is None
    assert refused.reasons == ("needs 2 free GPU(s), 1 free",
                               "gang: 2 of 3 instances fitted, the next did not; none placed")
    with pytest.raises(ValueError, match="no machine 99"):
        place_on(snapshot, job, 99)


def test_the_registry_names_its_filters() -> None:
    assert list(FILTERS) == ["gpu-type", "whole-gpus", "gpu-share", "cpu", "memory"]
    assert all(filter_named(name).name == name for name in FILTERS)
    with pytest.raises(KeyError, match="gpu-type, whole-gpus"):
        filter_named("ports")


@pytest.mark.parametrize("machine", [Machine("few", "T4", 1, 64, 256), Machine("many", "T4", 80, 800, 4096)])
def test_shares_that_fit_a_gpu_by_their_share_fit_it_by_proportional_memory(machine: Machine) -> None:
    # SYNTHETIC: shares of 0.1, 0.2 and 0.5 (proportional memory on a 16,384 MiB T4), one after the other on the
    # GPU the first one took, until its shares sum to exactly 1. Rounded up, a tenth would need 1,639 MiB and
    # the GPU, nine tenths shared, only 1,638 would be left for the last one; rounded down every one fits
    snapshot = ClusterSnapshot.empty(build_cluster("synthetic", [machine]))
    place = online_policy("pack")
    shares = [0.2, 0.2, 0.5, 0.1]
    for k, share in enumerate(shares):
        decision = place(snapshot, Job(f"s{k}", (worker(1, share),)))
        assert decision.allocation is not None, (share, decision.reasons)
        assert decision.allocation.instances[0].gpus == (0,)
        snapshot = apply(snapshot, decision.allocation)
    assert int(snapshot.gpu_milli_used[0]) == 1000 and int(snapshot.gpu_mem_used[0]) <= 16384
    ten = ClusterSnapshot.empty(build_cluster("synthetic", [machine]))
    for k in range(10):
        decision = place(ten, Job(f"t{k}", (worker(1, 0.1),)))
        assert decision.allocation is not None and decision.allocation.instances[0].gpus == (0,)
        ten = apply(ten, decision.allocation)
    assert int(ten.gpu_milli_used[0]) == 1000
