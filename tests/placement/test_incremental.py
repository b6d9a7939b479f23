"""What the placement keeps from one decision or step to the next equals what is worked out from scratch
(hypothesis, SYNTHETIC clusters, occupancies and demands): machine state ids, the fragmentation measure
compiled and in numpy, the network tally's levels and changed machines, the free GPUs per type, candidates kept with a
snapshot, and a policy's sum rescored on the machines that changed."""

from __future__ import annotations

import math
from dataclasses import replace
from unittest.mock import patch

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement.model import feasibility, states
from placement.model.cluster import Cluster, Machine, build_cluster
from placement.model.demand import Job, Role, Task
from placement.model.feasibility import Need, need_of, needs_of
from placement.model.layout import FloatArray, IntArray
from placement.model.network import NetworkTally
from placement.model.snapshot import MILLI, Allocation, ClusterSnapshot, InstancePlacement, apply, release
from placement.model.states import StateIds
from placement.online import machine_states
from placement.online.frag_kernel import added_on, kernel_table
from placement.online.frag_measure import (
    Measured,
    ShapeTable,
    Tally,
    added,
    added_both,
    measure,
    rows_of,
)
from placement.online.greedy import PlacementConfig, Step, _build, fits_by_room, never_fills
from placement.online.machine_states import MachineStates
from placement.online.policies import CHOOSERS, FILLS, LEARNING, fresh_chooser, online_policy
from placement.online.scorers import base, fragmentation
from placement.online.scorers.base import WeightedSum
from placement.online.scorers.fragmentation import Fragmentation
from placement.online.shape_mix import Mix, Shape
from placement.online.working import WorkingState
from tests.placement.test_fragmentation import cluster, pod, used
from tests.placement.test_properties import clusters, jobs

SLOW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def occupied(draw: st.DrawFn) -> ClusterSnapshot:
    """A SYNTHETIC cluster with a few jobs placed by first fit."""
    snapshot = ClusterSnapshot.empty(draw(clusters()))
    place = online_policy("first-fit")
    for k in range(draw(st.integers(0, 8))):
        decision = place(snapshot, draw(jobs(f"held{k}")))
        if decision.allocation is not None:
            snapshot = apply(snapshot, decision.allocation)
    return snapshot


@st.composite
def mixes(draw: st.DrawFn) -> Mix:
    shapes = draw(st.lists(st.builds(
        Shape, st.sampled_from([0, 500, 4000, 16000]), st.sampled_from([0, 100, 250, 300, 500, 1000]),
        st.integers(0, 4), st.sampled_from([(), ("T4",), ("MISC", "V100M32")])), min_size=1, max_size=6, unique=True))
    shapes = [s if s.gpus and s.gpu_milli else Shape(s.cpu_milli, 0, 0, ()) for s in shapes]
    shapes = list(dict.fromkeys(shapes))
    return Mix(tuple(shapes), tuple(draw(st.integers(1, 9)) for _ in shapes), 1)


def needs() -> st.SearchStrategy[Need]:
    return st.builds(lambda gpu, cpu, mem: need_of(Task(Role.WORKER, 1, gpu=gpu, cpu_cores=cpu, gpu_mem_gib=mem)),
                     st.sampled_from([0.0, 0.1, 0.25, 0.5, 0.7, 1.0, 2.0, 4.0]), st.sampled_from([0.0, 0.5, 4.0, 16.0]),
                     st.sampled_from([math.nan, 1.5, 10.0]))


@SLOW
@given(snapshot=occupied(), mix=mixes(), need=needs(), step=st.sampled_from([None, 40.0, 100.0]),
       takes=st.lists(st.integers(0, 10_000), max_size=4))
def test_the_compiled_measure_is_the_numpy_measure(snapshot: ClusterSnapshot, mix: Mix, need: Need,
                                                   step: float | None, takes: list[int]) -> None:
    """Machine by machine, instance after instance: the same cost (exactly) and the same GPUs, in numpy and
    compiled."""
    table = ShapeTable.of(mix, snapshot.layout)
    kernel = kernel_table(table)
    working = WorkingState(snapshot)
    for machine in range(len(snapshot.cluster)):
        for pick in [*takes, None]:
            rows = rows_of(working, np.array([machine]))
            tally = Tally.of(rows, table)
            cost, _, then = added_both(rows, tally, measure(tally, table), need, table, None, step)
            compiled = added_on(working, np.array([machine]), kernel, need, step)
            assert (compiled[0][0], compiled[1][0]) == (cost[0], then[0])
            fits = working.candidates(need).ok[machine]
            if pick is None or not fits:
                break
            working.take(machine, 0, need)


@SLOW
@given(snapshot=occupied(), need=needs(), picks=st.lists(st.integers(0, 10_000), min_size=1, max_size=4))
def test_a_placement_put_where_it_says_is_the_take_that_made_it(snapshot: ClusterSnapshot, need: Need,
                                                                 picks: list[int]) -> None:
    """Every usage array a working state keeps is the same after :meth:`WorkingState.put` of the placements that
    :meth:`WorkingState.take` chose as after the takes themselves."""
    taken, put = WorkingState(snapshot), WorkingState(snapshot)
    for pick in picks:
        fits = np.flatnonzero(taken.candidates(need).ok)
        if not len(fits):
            break
        put.put(taken.take(int(fits[pick % len(fits)]), 0, need))
        for name in ("gpu_milli", "gpu_mem", "cpu", "mem", "machine_milli", "free_whole"):
            assert np.array_equal(getattr(put, name), getattr(taken, name)), name
        assert np.array_equal(put.gpu_allocated_share(), taken.gpu_allocated_share())
        assert put.touched() == taken.touched()


@SLOW
@given(snapshot=occupied(), mixes_=st.lists(mixes(), min_size=1, max_size=3), need=needs())
def test_the_kept_parts_of_the_measure_give_the_measure(snapshot: ClusterSnapshot, mixes_: list[Mix],
                                                        need: Need) -> None:
    """Kept per machine (a machine as its own state) across tables: the measure, and for an instance without a
    share the fragmentation it adds and where it fits, as :func:`added_both` works them out."""
    working = WorkingState(snapshot)
    machines = np.arange(len(snapshot.cluster))
    rows = rows_of(working, machines)
    kept: Measured | None = None
    for mix in mixes_:
        table = ShapeTable.of(mix, snapshot.layout)
        kept = Measured(table) if kept is None else kept.retable(table)
        kept.fit(len(machines))
        kept.prepare(working, machines, machines)
        tally = Tally.of(rows, table)
        before = measure(tally, table)
        assert np.array_equal(kept.before[machines], before)
        if need.gpu_milli and not need.whole_gpus:
            continue
        cost, _, _ = added_both(rows, tally, before, need, table, None, None)
        grown, fits = kept.added_whole(machines, need.whole_gpus, need.cpu_milli)
        assert np.array_equal(fits, np.isfinite(cost))
        assert np.array_equal((grown / table.norm[rows.gpu_type])[fits], cost[fits])


def _same_state(working: WorkingState, a: int, b: int) -> bool:
    rows = rows_of(working, np.array([a, b]))
    return all(np.array_equal(getattr(rows, f)[0], getattr(rows, f)[1])
               for f in ("free", "mem_free", "caps", "cpu_free", "gpu_type"))


@SLOW
@given(snapshot=occupied(), job=jobs("j"), picks=st.lists(st.integers(0, 10_000), min_size=1, max_size=10),
       restart=st.lists(st.booleans(), min_size=10, max_size=10))
def test_machine_state_ids_follow_working_states(snapshot: ClusterSnapshot, job: Job, picks: list[int],
                                                 restart: list[bool]) -> None:
    """Followed over working states on one snapshot and the next (committed, or made afresh from the same usage),
    a machine's id is the one its state gets worked out from scratch, and two machines share an id exactly when
    they are in the same state."""
    states = MachineStates(snapshot.layout)
    registry = snapshot.layout.derived.state_ids
    working = WorkingState(snapshot)
    for k, pick in enumerate(picks):
        if restart[k]:
            snapshot = apply(snapshot, _allocation_of(working, f"c{k}")) if working.touched() else snapshot
            if k % 2:
                snapshot = ClusterSnapshot(snapshot.cluster, snapshot.generation, snapshot.gpu_milli_used,
                                           snapshot.gpu_mem_used, snapshot.cpu_used, snapshot.mem_used)
            working = WorkingState(snapshot)
        ids = states.follow(working).copy()
        n = len(ids)
        assert np.array_equal(registry.of(working.gpu_milli, working.gpu_mem, working.cpu, np.arange(n)), ids)
        assert np.array_equal(MachineStates(snapshot.layout).follow(working), ids)
        for a in range(n):
            for b in range(a + 1, n):
                assert (ids[a] == ids[b]) == _same_state(working, a, b)
        need = need_of(job.tasks[pick % len(job.tasks)])
        fit = np.flatnonzero(working.candidates(need).ok)
        if fit.size:
            working.take(int(fit[pick % fit.size]), 0, need)


@SLOW
@given(snapshot=occupied())
def test_a_few_machines_hash_as_many_do(snapshot: ClusterSnapshot) -> None:
    """Hashed one at a time (in Python ints) or all at once (in numpy), each machine's state gets the same id."""
    registry = StateIds(snapshot.layout)
    usage = (snapshot.gpu_milli_used, snapshot.gpu_mem_used, snapshot.cpu_used)
    machines = np.arange(len(snapshot.cpu_used))
    with patch.object(states, "FEW_MACHINES", 0):
        at_once = registry.of(*usage, machines)
    one_by_one = [int(registry.of(*usage, np.array([m]))[0]) for m in machines.tolist()]
    assert at_once.tolist() == one_by_one
    assert len(registry) == len(set(one_by_one))


def _allocation_of(working: WorkingState, job_id: str) -> Allocation:
    """The usage ``working`` added to its snapshot, as one allocation of SYNTHETIC instances per GPU and machine."""
    base, instances = working.snapshot, []
    for g in np.flatnonzero((working.gpu_milli != base.gpu_milli_used) | (working.gpu_mem != base.gpu_mem_used)):
        machine = int(base.layout.gpu_machine[g])
        instances.append(InstancePlacement(0, machine, (int(g),), int(working.gpu_milli[g] - base.gpu_milli_used[g]),
                                           int(working.gpu_mem[g] - base.gpu_mem_used[g]), 0, 0))
    for m in np.flatnonzero((working.cpu != base.cpu_used) | (working.mem != base.mem_used)):
        instances.append(InstancePlacement(0, int(m), (), 0, 0, int(working.cpu[m] - base.cpu_used[m]),
                                           int(working.mem[m] - base.mem_used[m])))
    return Allocation(job_id, tuple(instances))


@SLOW
@given(cluster=clusters(), job=jobs("j"), picks=st.lists(st.integers(0, 10_000), min_size=1, max_size=12))
def test_the_network_tally_keeps_its_levels_and_says_what_changed(cluster: Cluster, job: Job,
                                                                  picks: list[int]) -> None:
    tally = NetworkTally(job, cluster.layout)
    n = len(cluster)
    for pick in picks:
        task_index = pick % len(job.tasks)
        before = [tally.increment(t).copy() for t in range(len(job.tasks))]
        mark = tally.mark()
        machine = pick % n
        tally.record_at(task_index, machine, tally.increment_at(task_index, machine))
        changed = tally.changed_since(mark)
        fresh = NetworkTally(job, cluster.layout)
        fresh.footprint, fresh.ps, fresh.workers = tally.footprint, tally.ps, tally.workers
        if not tally.n_ps and tally.footprint.total:
            assert np.array_equal(tally.nearest_level(), fresh.nearest_level())
        machines = np.arange(n)
        for t in range(len(job.tasks)):
            now = tally.increment(t)
            assert np.array_equal(tally.increment_on(t, machines), now)
            if changed is not None:
                same = np.ones(n, dtype=bool)
                same[changed] = False
                assert np.array_equal(now[same], before[t][same])


@SLOW
@given(snapshot=occupied(), job=jobs("j"), pick=st.integers(0, 10_000))
def test_free_gpus_per_type_are_kept_through_commits(snapshot: ClusterSnapshot, job: Job,
                                                               pick: int) -> None:
    def counted(gpu_milli: IntArray) -> list[float]:
        layout = snapshot.layout
        return np.bincount(layout.gpu_type[layout.gpu_machine], weights=MILLI - gpu_milli,
                           minlength=len(layout.gpu_types)).tolist()

    assert snapshot.type_free_milli.tolist() == counted(snapshot.gpu_milli_used)
    decision = online_policy("liquid")(snapshot, job)
    if decision.allocation is not None:
        after = apply(snapshot, decision.allocation)
        assert after.type_free_milli.tolist() == counted(after.gpu_milli_used)


@SLOW
@given(snapshot=occupied(), job=jobs("j"))
def test_candidates_kept_with_the_snapshot_are_those_worked_out_afresh(snapshot: ClusterSnapshot, job: Job) -> None:
    for task in job.tasks:
        need = need_of(task)
        first, again = WorkingState(snapshot).candidates(need), WorkingState(snapshot).candidates(need)
        fresh = ClusterSnapshot(snapshot.cluster, snapshot.generation, snapshot.gpu_milli_used,
                                snapshot.gpu_mem_used, snapshot.cpu_used, snapshot.mem_used)
        want = WorkingState(fresh).candidates(need)
        first.ok[:] = False  # a decision changes its own copy, never the kept one
        assert np.array_equal(again.ok, want.ok) and np.array_equal(again.reason, want.reason)


class _Afresh:
    """SYNTHETIC wrapper: the policy's chooser, with every step also worked out afresh on a scratch memo."""

    def __init__(self, chooser: WeightedSum) -> None:
        self.chooser = chooser
        self.steps = 0

    def __call__(self, step: Step) -> FloatArray:
        got = self.chooser(step)
        scratch = Step(step.job, step.task_index, step.candidates, step.working, step.network, step.config,
                       step.placed, step.need, more=step.more)
        want = self.chooser._afresh(scratch)
        ok = step.candidates.ok
        assert np.array_equal(got[ok], want[ok]), (step.changed, np.flatnonzero(got != want))
        self.steps += 1
        return got


GANGS = st.lists(st.tuples(st.sampled_from([0.25, 1.0, 2.0, 8.0]), st.integers(2, 9), st.sampled_from([0.0, 10.0])),
                 max_size=3)


@SLOW
@given(snapshot=occupied(), stream=st.lists(jobs("j"), min_size=1, max_size=4),
       policy=st.sampled_from(sorted(CHOOSERS)), gangs=GANGS)
def test_a_policy_rescored_on_the_machines_that_changed_is_the_policy_worked_out_afresh(
        snapshot: ClusterSnapshot, stream: list[Job], policy: str, gangs: list[tuple[float, int, float]]) -> None:
    """Every step of every decision: the sum kept and rescored where machines changed equals, number for number,
    the sum over every machine that can host the instance (rescoring however many machines changed, on these
    small clusters)."""
    chooser = fresh_chooser(policy) if policy in LEARNING else CHOOSERS[policy]
    assert isinstance(chooser, WeightedSum)
    check = _Afresh(chooser)
    named = [replace(job, job_id=f"s{k}") for k, job in enumerate(stream)]
    made = [Job(f"g{k}", (Task(Role.WORKER, n, gpu=gpu, cpu_cores=1.0, bandwidth_gbps=bw),))
            for k, (gpu, n, bw) in enumerate(gangs)]
    fills = FILLS.get(policy, never_fills)
    with patch.object(base, "RESCORE_SHARE", 0):
        for job in [*named, *made]:
            placed, failed, _ = _build(WorkingState(snapshot), job, check, PlacementConfig(), fills)
            if failed is None:
                snapshot = apply(snapshot, Allocation(job.job_id, tuple(placed)))


def test_a_gang_on_machines_of_a_rack_it_uses_is_rescored_on_them_alone() -> None:
    """SYNTHETIC: 40 machines of 2 GPUs in racks of 4; a gang of 6 one-GPU instances spreads over 3 machines
    (liquid fills a machine, then the next): after the first machine, each step rescores a few machines only."""
    machines = [Machine(f"m{i}", "T4", 2, 32, 128) for i in range(40)]
    snapshot = ClusterSnapshot.empty(build_cluster("synthetic", machines, rack_size=4, racks_per_domain=2))
    chooser = fresh_chooser("liquid")
    assert isinstance(chooser, WeightedSum)
    rescored: list[int] = []
    original = WeightedSum._rescored

    def counting(self: WeightedSum, step: Step, kept: object, changed: IntArray) -> FloatArray | None:
        rescored.append(len(changed))
        return original(self, step, kept, changed)  # type: ignore[arg-type]

    job = Job("gang", (Task(Role.WORKER, 6, gpu=1.0, cpu_cores=1.0, bandwidth_gbps=10.0),))
    with patch.object(WeightedSum, "_rescored", counting):
        placed, failed, _ = _build(WorkingState(snapshot), job, _Afresh(chooser), PlacementConfig(), FILLS["liquid"])
    assert failed is None and len(placed) == 6 and rescored and max(rescored) < 4


def test_fragmentation_costs_on_one_snapshot_equal_costs_on_a_fresh_scorer() -> None:
    """SYNTHETIC: decisions on one snapshot (none committed), and then on a snapshot with a machine changed:
    the kept costs are those a fresh scorer works out."""
    snapshot = ClusterSnapshot.empty(cluster(2, 4, 8, 8, 1))
    scorer = Fragmentation()
    for k, gpu in enumerate([0.5, 1, 0.25, 2, 0.5, 0.1, 0, 1, 0.5]):
        job = pod(f"p{k}", gpu, cpu_cores=float(k % 3))
        need = need_of(job.tasks[0])
        working = WorkingState(snapshot)
        ok = working.candidates(need).ok
        entry, ids = scorer._costs(working, job, need, ok)
        fresh = Fragmentation(scorer.mix)
        fresh_entry, fresh_ids = fresh._costs(WorkingState(snapshot), job, need, ok)
        assert np.array_equal(entry.steps[ids][ok], fresh_entry.steps[fresh_ids][ok])
        if k == 4:
            decision = online_policy("fgd")(snapshot, job)
            assert decision.allocation is not None
            snapshot = apply(snapshot, decision.allocation)


@SLOW
@given(snapshot=occupied(), picks=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 3), st.integers(0, 1200),
                                                     st.integers(0, 40_000), st.integers(0, 200_000)),
                                           min_size=1, max_size=12))
def test_capacities_checked_in_numpy_are_those_checked_in_python(
        snapshot: ClusterSnapshot, picks: list[tuple[int, int, int, int, int]]) -> None:
    """SYNTHETIC instances, fitting or not: the same problems, in the same words, either way."""
    layout, instances = snapshot.layout, []
    for pick, gpus, milli, mem, cpu in picks:
        machine = pick % len(snapshot.cluster)
        first, count = int(layout.gpu_first[machine]), int(layout.gpu_count[machine])
        held = tuple(first + (pick + k) % count for k in range(min(gpus, count))) if count else ()
        instances.append(InstancePlacement(0, machine, held, milli, mem, cpu, cpu * 4))
    allocation = Allocation("x", tuple(instances))
    with patch.object(feasibility, "MANY_GPUS", 1 << 30):
        by_python = feasibility._over_capacity(snapshot, allocation)
    assert feasibility._over_capacity_numpy(snapshot, allocation) == by_python


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=occupied(), stream=st.lists(jobs("j"), min_size=1, max_size=6),
       policy=st.sampled_from(["liquid", "fgd"]))
def test_forgetting_what_is_kept_changes_no_decision(snapshot: ClusterSnapshot, stream: list[Job], policy: str) -> None:
    """With the state ids given afresh at every decision and one demand's costs kept at a time, the decisions of a
    learning policy over a stream (each committed) are the same."""

    def decide() -> list[Allocation | None]:
        place, current, made = online_policy(policy), snapshot, []
        for k, job in enumerate(stream):
            allocation = place(current, replace(job, job_id=f"s{k}")).allocation
            made.append(allocation)
            if allocation is not None:
                current = apply(current, allocation)
        return made

    kept = decide()
    with patch.object(machine_states, "STATE_LIMIT", 0), patch.object(fragmentation, "ENTRY_LIMIT", 1):
        assert decide() == kept


@SLOW
@given(snapshot=occupied(), job=jobs("j"))
def test_state_ids_carried_by_a_commit_are_those_worked_out_afresh(snapshot: ClusterSnapshot, job: Job) -> None:
    snapshot.state_ids()
    decision = online_policy("first-fit")(snapshot, job)
    if decision.allocation is None:
        return
    for after in (apply(snapshot, decision.allocation), release(apply(snapshot, decision.allocation), job.job_id)):
        afresh = ClusterSnapshot(after.cluster, after.generation, after.gpu_milli_used, after.gpu_mem_used,
                                 after.cpu_used, after.mem_used)
        near = ClusterSnapshot(after.cluster, after.generation, after.gpu_milli_used, after.gpu_mem_used,
                               after.cpu_used, after.mem_used)
        assert np.array_equal(after.state_ids(), afresh.state_ids())
        assert np.array_equal(near.state_ids(near=snapshot), afresh.state_ids())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # most pairs do not both fit
@given(snapshot=occupied(), job=jobs("a"), other=jobs("b"))
def test_crowded_by_is_the_capacity_check_of_the_snapshot_with_the_other_applied(snapshot: ClusterSnapshot,
                                                                                   job: Job, other: Job) -> None:
    """``crowded_by`` (what a reservation's ``delayed_by`` asks) answers as the full check on a copy did: two
    jobs placed on the same snapshot by first fit, so that they often want the same GPUs."""
    place = online_policy("first-fit", explain=False)
    mine, theirs = place(snapshot, job).allocation, place(snapshot, other).allocation
    if mine is None or theirs is None:
        return
    want = bool(feasibility.violations(apply(snapshot, theirs), job, mine))
    assert feasibility.crowded_by(snapshot, mine, theirs) == want


@SLOW
@given(mix=mixes(), need=needs(), step=st.sampled_from([None, 40.0]),
       held=st.lists(st.sampled_from([0, 100, 250, 500, 1000]), min_size=80, max_size=80))
def test_the_scorer_on_small_and_large_machines_at_once_gives_the_measure(mix: Mix, need: Need, step: float | None,
                                                                          held: list[int]) -> None:
    """A decision among machines of a few GPUs (compiled) and a big node (numpy) at once: each machine's cost and GPU
    as :func:`added` works them out on all of them together."""
    snapshot = ClusterSnapshot.empty(cluster(2, 8, 70))  # SYNTHETIC: the last machine is large (over 64 GPUs)
    snapshot = used(used(used(snapshot, 0, held[:2]), 1, held[2:10]), 2, held[10:])
    working = WorkingState(snapshot)
    seen = fragmentation._Seen(snapshot.layout, step)
    table = seen.use(mix)
    machines = np.arange(3)
    cost, gpu = seen._added(working, machines, seen.follow(working), need)
    rows = rows_of(working, machines)
    assert np.array_equal(cost, added(rows, need, table)[0])  # the exact cost of the best way
    if need.gpu_milli and not need.whole_gpus:  # the GPU of the best way in FGD's points
        assert np.array_equal(gpu, added(rows, need, table, step)[1])


@SLOW
@given(snapshot=occupied(), pick=st.integers(0, 10_000), gpus=st.integers(0, 3),
       slack=st.tuples(*[st.sampled_from([-300, -1, 0, 1]) for _ in range(4)]), twice=st.booleans())
def test_one_instance_is_checked_as_any_allocation(snapshot: ClusterSnapshot, pick: int, gpus: int,
                                                   slack: tuple[int, int, int, int], twice: bool) -> None:
    """SYNTHETIC: an allocation of one instance (its first GPU listed twice or not) asking for what its first GPU and
    its machine have free, give or take a little, has the problems the general check finds, GPU by GPU and machine by
    machine."""
    layout = snapshot.layout
    machine = pick % len(snapshot.cluster)
    first, count = int(layout.gpu_first[machine]), int(layout.gpu_count[machine])
    held = tuple(first + (pick + k) % count for k in range(min(gpus, count))) if count else ()
    gpu = held[0] if held else first
    free = (MILLI - int(snapshot.gpu_milli_used[gpu]) if held else 0,
            int(layout.gpu_mem_cap[gpu] - snapshot.gpu_mem_used[gpu]) if held else 0,
            int(layout.cpu_cap[machine] - snapshot.cpu_used[machine]),
            int(layout.mem_cap[machine] - snapshot.mem_used[machine]))
    milli, mem, cpu, ram = (max(0, f + s) for f, s in zip(free, slack, strict=True))
    if twice and held:
        held += held[:1]
    allocation = Allocation("x", (InstancePlacement(0, machine, held, milli, mem, cpu, ram),))
    general = feasibility._capacity_problems(snapshot, *feasibility._held(allocation))
    assert feasibility._over_capacity(snapshot, allocation) == general


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=occupied(), job=jobs("j"), instances=st.integers(1, 12), one_task=st.booleans(),
       policy=st.sampled_from(sorted(CHOOSERS)))
def test_the_filters_tell_whether_a_job_of_one_demand_fits_as_every_policy_does(
        snapshot: ClusterSnapshot, job: Job, instances: int, one_task: bool, policy: str) -> None:
    """SYNTHETIC: where ``fits_by_room`` answers, every policy places the job exactly when it says so."""
    if one_task:
        job = replace(job, tasks=(replace(job.tasks[0], instances=instances),))
    known = fits_by_room(snapshot, job)
    if len(needs_of(job)) == 1:
        assert known is not None
    if known is not None:
        assert (online_policy(policy)(snapshot, job).allocation is not None) == known
