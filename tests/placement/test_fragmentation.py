"""The FGD fragmentation measure, the online shape mix and the ``fgd`` policy, on SYNTHETIC clusters and
jobs made up here; the expected arithmetic is in the comments."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from placement.model.cluster import Cluster, Machine, build_cluster
from placement.model.demand import Job, Role, Task
from placement.model.feasibility import need_of, violations
from placement.model.snapshot import Allocation, ClusterSnapshot, InstancePlacement, apply
from placement.online.frag_measure import NO_GPU, Rows, ShapeTable, accepting, added, fragmentation, rows_of
from placement.online.greedy import PlacementConfig
from placement.online.policies import online_policy
from placement.online.scorers.cpu_pods_to_fullest import CpuPodsToFullest
from placement.online.scorers.fragmentation import Fragmentation
from placement.online.shape_mix import Mix, Shape, ShapeMix, typical
from placement.online.working import WorkingState
from tests.placement.test_scorers import steps


def pod(job_id: str, gpu: float, cpu_cores: float = 1.0, **kw: object) -> Job:
    return Job(job_id, (Task(Role.WORKER, 1, gpu=gpu, cpu_cores=cpu_cores, mem_gib=1.0, gpu_mem_gib=0.0,
                             **kw),))  # type: ignore[arg-type]


def cluster(*gpus: int, gpu_type: str = "T4") -> Cluster:
    """SYNTHETIC: one machine per entry of ``gpus``, 32 cores and 128 GiB each."""
    return build_cluster("synthetic", [Machine(f"m{i}", gpu_type, n, 32, 128) for i, n in enumerate(gpus)])


def used(snapshot: ClusterSnapshot, machine: int, gpu_milli: list[int]) -> ClusterSnapshot:
    """``snapshot`` with the GPUs of ``machine`` holding ``gpu_milli`` (one SYNTHETIC share job per GPU)."""
    first = int(snapshot.layout.gpu_first[machine])
    for g, milli in enumerate(gpu_milli):
        if milli:
            placement = InstancePlacement(0, machine, (first + g,), milli, 0, 0, 0)
            snapshot = apply(snapshot, Allocation(f"held-{machine}-{g}", (placement,)))
    return snapshot


def test_fragmentation_of_one_machine_by_shape() -> None:
    # GPUs free 500 and 1000; shapes: a 0.6 share (count 1), one whole GPU (count 1), CPU only (count 2):
    #   0.6 share: GPU0 (500 < 600) cannot take it -> 500; whole GPU: GPU1 hosts it -> GPU0's 500
    #   CPU only: uses no GPU -> all 1500 free
    #   fragmentation = (1 x 500 + 1 x 500 + 2 x 1500) / 4 = 1000 milli-GPUs
    mix = Mix((Shape(1000, 600, 1), Shape(1000, 1000, 1), Shape(1000, 0, 0)), (1, 1, 2), 1)
    snapshot = used(ClusterSnapshot.empty(cluster(2)), 0, [500, 0])
    table = ShapeTable.of(mix, snapshot.layout)
    rows = rows_of(WorkingState(snapshot), np.array([0]))
    assert (fragmentation(rows, table) / table.total).tolist() == [1000.0]


def test_a_shape_restricted_to_other_types_takes_no_part_on_a_machine() -> None:
    # a 0.5 shape that only runs on V100 (count 1) and a whole-GPU shape of any type (count 1), on a T4
    # machine with 500 and 1000 milli-GPUs free: only the whole-GPU shape counts there, with weight 1/1:
    # GPU1 hosts it, GPU0's 500 are its fragment -> 500. (FGD would count all 1500 free milli-GPUs for the
    # V100 shape: (1500 + 500) / 2 = 1000.)
    mix = Mix((Shape(1000, 500, 1, ("V100",)), Shape(1000, 1000, 1)), (1, 1), 1)
    snapshot = used(ClusterSnapshot.empty(cluster(2)), 0, [500, 0])
    table = ShapeTable.of(mix, snapshot.layout)
    rows = rows_of(WorkingState(snapshot), np.array([0]))
    assert (fragmentation(rows, table) / accepting(rows.gpu_type, table)).tolist() == [500.0]
    # a machine no shape accepts adds nothing, whatever is placed on it
    only_v100 = ShapeTable.of(Mix((Shape(1000, 500, 1, ("V100",)),), (1,), 1), snapshot.layout)
    assert added(rows, need_of(pod("x", 0.5).tasks[0]), only_v100)[0].tolist() == [0.0]


class FixedMix(ShapeMix):
    """SYNTHETIC: a shape mix that answers ``mix`` whatever it observes."""

    def __init__(self, mix: Mix) -> None:
        super().__init__()
        self.fixed = mix

    def current(self) -> Mix:
        return self.fixed


def test_costs_count_in_steps_and_a_step_ties_to_the_first_machine() -> None:
    # mix: 99 CPU-only pods, one 0.3 share. A 0.2 share arrives.
    #   m0, GPUs [1000, 1000] free: the CPU shape loses 200 (x 99), the 0.3 share still fits -> -198 milli
    #   m1, GPU [200] free (800 used): the CPU shape loses 200 (x 99), the 0.3 share no longer has the 200 it
    #       could not use -> -200 milli
    # exact costs pick m1; FGD's score gives both floor(100 x sigmoid(0.198 or 0.200)) = 54 points, so m0, first, wins
    mix = Mix((Shape(1000, 0, 0), Shape(1000, 300, 1)), (99, 1), 1)
    snapshot = used(ClusterSnapshot.empty(cluster(2, 1)), 1, [800])
    job = pod("small", 0.2)
    step = steps(snapshot, job, PlacementConfig(), 0)
    stepped = Fragmentation(FixedMix(mix)).cost(step)
    exact = Fragmentation(FixedMix(mix), step_milli=None).cost(step)
    assert stepped is not None and exact is not None
    assert stepped.tolist() == [-54.0, -54.0] and int(np.argmin(stepped)) == 0
    assert exact.tolist() == [-198.0, -200.0] and int(np.argmin(exact)) == 1
    with pytest.raises(ValueError, match="positive"):
        Fragmentation(step_milli=0)


def test_the_gpu_inside_a_machine_is_the_lowest_within_the_least_step() -> None:
    # one machine, GPUs free [330, 1000]; mix: CPU-only pods (count 19), a 0.3 share (count 1). A 0.1 share:
    #   on GPU0 (330 -> 230): the CPU shape loses 100 (x 19), GPU0's 230 no longer takes the share
    #       -> (-1900 + 230) / 20 = -83.5
    #   on GPU1 (1000 -> 900): the CPU shape loses 100 (x 19), the share still fits anywhere -> -1900 / 20 = -95
    # exact: GPU1; FGD's score gives both floor(100 x sigmoid(0.0835 or 0.095)) = 52 points, so, as FGD's plugin
    # does, the lowest-indexed GPU0
    mix = Mix((Shape(1000, 0, 0), Shape(1000, 300, 1)), (19, 1), 1)
    snapshot = used(ClusterSnapshot.empty(cluster(2)), 0, [670, 0])
    table = ShapeTable.of(mix, snapshot.layout)
    rows = rows_of(WorkingState(snapshot), np.array([0]))
    need = need_of(pod("x", 0.1).tasks[0])
    assert added(rows, need, table)[1].tolist() == [1]
    assert added(rows, need, table)[0].tolist() == [-95.0]
    cost, gpu = added(rows, need, table, 40.0)
    assert gpu.tolist() == [0] and cost.tolist() == [-83.5]


def test_added_picks_the_gpu_that_keeps_a_typical_share_usable() -> None:
    # GPUs free 600 and 700; typical pods ask 0.5 of a GPU; a 0.2 share arrives:
    #   on GPU0 (fullest, best fit): free 400, 700 -> 400 cannot take 0.5: +400
    #   on GPU1: free 600, 500 -> both take 0.5: +0
    mix = Mix((Shape(1000, 500, 1),), (1,), 1)
    snapshot = used(ClusterSnapshot.empty(cluster(2)), 0, [400, 300])
    rows = rows_of(WorkingState(snapshot), np.array([0]))
    cost, gpu = added(rows, need_of(pod("x", 0.2).tasks[0]), ShapeTable.of(mix, snapshot.layout))
    assert cost.tolist() == [0.0] and gpu.tolist() == [1]


def test_whole_gpus_and_cpu_only_have_no_gpu_choice() -> None:
    mix = Mix((Shape(1000, 1000, 1),), (1,), 1)
    snapshot = ClusterSnapshot.empty(cluster(2))
    rows = rows_of(WorkingState(snapshot), np.array([0]))
    table = ShapeTable.of(mix, snapshot.layout)
    # one whole GPU: the other still hosts the shape: +0; CPU only: nothing changes for the shape: +0
    for job in (pod("w", 1), pod("c", 0)):
        cost, gpu = added(rows, need_of(job.tasks[0]), table)
        assert cost.tolist() == [0.0] and gpu.tolist() == [NO_GPU]
    # two whole GPUs take the machine: nothing left to fragment
    assert added(rows, need_of(pod("w2", 2).tasks[0]), table)[0].tolist() == [0.0]


def test_added_is_inf_where_the_instance_cannot_go() -> None:
    rows = Rows(np.array([[300, NO_GPU]]), np.array([[1, 0]]), np.array([[16384, 0]]), np.array([32_000]),
                np.array([0]))
    table = ShapeTable.of(Mix((Shape(1000, 500, 1),), (1,), 1), cluster(1).layout)
    assert np.isinf(added(rows, need_of(pod("x", 0.5).tasks[0]), table)[0]).all()


def _added_by_copying(rows: Rows, need_job: Job, table: ShapeTable) -> list[float]:
    """The definition of :func:`added`, worked out the slow way: per row, every GPU (or the whole GPUs, or
    the CPU) taken on a copy of the row, the copy measured again."""
    need = need_of(need_job.tasks[0])
    costs = []
    for r in range(len(rows.free)):
        one = Rows(rows.free[r:r + 1], rows.mem_free[r:r + 1], rows.caps[r:r + 1], rows.cpu_free[r:r + 1],
                   rows.gpu_type[r:r + 1])
        before = int(fragmentation(one, table)[0])
        after_frees = []
        if need.gpu_milli and not need.whole_gpus:
            after_frees = [np.where(np.arange(one.free.shape[1]) == g, one.free - need.gpu_milli, one.free)
                           for g in range(one.free.shape[1]) if one.free[0, g] >= need.gpu_milli]
        elif need.gpu_milli:
            whole = np.flatnonzero(one.free[0] == 1000)[:need.whole_gpus]
            if len(whole) == need.whole_gpus:
                after_frees = [np.where(np.isin(np.arange(one.free.shape[1]), whole), 0, one.free)]
        else:
            after_frees = [one.free]
        grown = [int(fragmentation(Rows(f, one.mem_free, one.caps, one.cpu_free - need.cpu_milli, one.gpu_type),
                                   table)[0]) - before for f in after_frees]
        costs.append(min(grown) / int(accepting(one.gpu_type, table)[0]) if grown else np.inf)
    return costs


@pytest.mark.parametrize("seed", range(6))
def test_added_equals_measuring_a_copy_of_each_machine_after_each_placement(seed: int) -> None:
    # SYNTHETIC random machines (up to 12 GPUs, free shares in steps of 50 milli) and random mixes
    rng = np.random.default_rng(seed)
    n, width = 40, 12
    counts = rng.integers(1, width + 1, n)
    free = np.where(np.arange(width)[None, :] < counts[:, None], rng.integers(0, 21, (n, width)) * 50, NO_GPU)
    caps = np.where(free >= 0, 16384, 0)
    rows = Rows(free, caps.copy(), caps, rng.integers(0, 33, n) * 1000, rng.integers(0, 2, n))
    shapes = [Shape(int(rng.integers(0, 9)) * 1000, int(rng.choice([100, 250, 500, 1000])), int(rng.integers(0, 3)))
              for _ in range(6)]
    shapes = [Shape(s.cpu_milli, 0 if not s.gpus else 1000 if s.gpus > 1 else s.gpu_milli, s.gpus,
                    ("V100",) if i == 0 else ()) for i, s in enumerate(shapes)]
    mix = Mix(tuple(shapes), tuple(int(c) for c in rng.integers(1, 10, len(shapes))), 1)
    table = ShapeTable.of(mix, build_cluster("synthetic", [Machine("a", "T4", 1, 8, 8),
                                                           Machine("b", "V100", 1, 8, 8)]).layout)
    for job in (pod("s", 0.25, 2), pod("h", 0.5), pod("w", 1), pod("w3", 3, 4), pod("c", 0, 3)):
        assert added(rows, need_of(job.tasks[0]), table)[0].tolist() == _added_by_copying(rows, job, table)


def test_fgd_moves_the_share_to_the_gpu_best_fit_would_not_choose() -> None:
    # the machine of test_added_picks_...: best fit takes the fullest GPU (GPU0), fgd GPU1
    snapshot = used(ClusterSnapshot.empty(cluster(2)), 0, [400, 300])
    decide = online_policy("fgd")
    for i in range(20):  # the typical pod, as the policy learns it: half a GPU
        decide(snapshot, pod(f"typical{i}", 0.5))
    job = pod("small", 0.2)
    decision = decide(snapshot, job)
    assert decision.allocation is not None and decision.allocation.instances[0].gpus == (1,)
    assert violations(snapshot, job, decision.allocation) == []
    assert online_policy("first-fit")(snapshot, job).allocation.instances[0].gpus == (0,)  # type: ignore[union-attr]


def test_fgd_fills_the_machine_a_share_completes() -> None:
    # m0: 2 empty GPUs (first in order); m1: one GPU half used. A 0.5 share on m1 completes its GPU
    # (+0); on m0 it leaves a half GPU that cannot take a typical whole-GPU pod (+500 x its weight)
    snapshot = used(ClusterSnapshot.empty(cluster(2, 1)), 1, [500])
    decide = online_policy("fgd")
    for i in range(10):
        decide(snapshot, pod(f"whole{i}", 1))
    decision = decide(snapshot, pod("half", 0.5))
    assert decision.allocation is not None and decision.allocation.instances[0].machine == 1
    assert online_policy("first-fit")(snapshot, pod("half", 0.5)).allocation.instances[0].machine == 0  # type: ignore[union-attr]


def test_cached_costs_equal_costs_worked_out_afresh() -> None:
    # a random SYNTHETIC stream of shares, whole GPUs and CPU pods on machines of 1, 2, 4 and 8 GPUs
    rng = random.Random(7)
    snapshot = ClusterSnapshot.empty(cluster(*[rng.choice([1, 2, 4, 8]) for _ in range(80)]))
    scorer = Fragmentation(ShapeMix(window=50))
    decide = online_policy("fgd")
    for k in range(300):
        job = pod(str(k), rng.choice([0, 0.1, 0.25, 0.5, 0.5, 0.7, 1, 1, 2, 8]), cpu_cores=rng.choice([1, 4, 8]))
        working = WorkingState(snapshot)
        need = need_of(job.tasks[0])
        ok = working.candidates(need).ok
        if ok.any():
            entry, ids = scorer._costs(working, job, need, ok)
            cached = entry.cost[ids][ok]
            seen = scorer._seen
            assert seen is not None
            fresh = added(rows_of(working, np.flatnonzero(ok)), need, seen.table)[0]
            assert cached.tolist() == fresh.tolist()
        decision = decide(snapshot, job)
        if decision.allocation is not None:
            snapshot = apply(snapshot, decision.allocation)


def test_a_learned_mix_counts_every_shape_and_fgds_cut_keeps_the_common_ones() -> None:
    share, cpu, eight = Shape(1000, 500, 1), Shape(1000, 0, 0), Shape(8000, 1000, 8)
    counts = Counter({share: 96, cpu: 3, eight: 1})
    mix = ShapeMix()
    for k in range(96):
        mix.observe(pod(f"s{k}", 0.5))
    for k in range(3):
        mix.observe(pod(f"c{k}", 0))
    mix.observe(pod("e", 8, cpu_cores=8.0))
    current = mix.current()  # the rare eight-GPU pod counts, at its own popularity
    assert current.shapes == (share, cpu, eight) and current.counts == (96, 3, 1)
    # FGD's cut: the shares alone cover 96% of the instances
    assert typical(counts, 0.95) == ((share,), (96,))
    # a workload of ever new shapes: the most common ones, at most ``most``
    assert typical(counts, 1.0, most=2) == ((share, cpu), (96, 3))


def test_the_mix_counts_each_job_once_and_forgets_beyond_its_window() -> None:
    mix = ShapeMix(window=3)
    for job in (pod("a", 0.5), pod("a", 0.5), pod("b", 1), pod("c", 1), pod("d", 1)):
        mix.observe(job)
    current = mix.current()  # "a" asked twice counts once, then left the window of 3 jobs
    assert current.shapes == (Shape(1000, 1000, 1),) and current.counts == (3,)


def test_a_known_mix_is_fgds_cut_of_the_whole_list_and_learns_nothing_after() -> None:
    # SYNTHETIC list: 96 shares, 3 CPU pods, 1 eight-GPU pod; FGD keeps the most common shapes covering 95% of the
    # pods (the shares alone), not the rare ones a learned mix counts
    jobs = [pod(f"s{k}", 0.5) for k in range(96)] + [pod(f"c{k}", 0) for k in range(3)] + [pod("e", 8)]
    mix = ShapeMix.known(jobs)
    before = mix.current()
    assert before.shapes == (Shape(1000, 500, 1),) and before.counts == (96,)
    for k in range(50):
        mix.observe(pod(f"new{k}", 1))
    assert mix.current() == before
    with pytest.raises(ValueError, match="no jobs"):
        ShapeMix.known([])


@pytest.mark.parametrize("types", [frozenset(), frozenset({"T4"})])
def test_fgd_places_type_constrained_pods_only_on_their_types(types: frozenset[str]) -> None:
    machines = [Machine("v0", "V100", 2, 32, 128), Machine("t0", "T4", 2, 32, 128)]
    snapshot = ClusterSnapshot.empty(build_cluster("synthetic", machines))
    decision = online_policy("fgd")(snapshot, pod("typed", 0.5, gpu_types=types))
    assert decision.allocation is not None
    assert decision.allocation.instances[0].machine == (1 if types else 0)


@pytest.mark.parametrize("policy", ["fgd", "liquid"])
def test_a_cpu_only_pod_keeps_off_gpu_machines_where_it_adds_no_fragmentation(policy: str) -> None:
    # a T4 machine first in cluster order, then a CPU-only one; a CPU pod adds no fragmentation on either
    # (the mix is CPU pods and shares with CPU to spare), so the half step a GPU machine costs decides
    machines = [Machine("t0", "T4", 2, 32, 128), Machine("c0", "CPU", 0, 32, 128)]
    snapshot = ClusterSnapshot.empty(build_cluster("synthetic", machines))
    decide = online_policy(policy)
    for i in range(5):
        decide(snapshot, pod(f"share{i}", 0.5))
    decision = decide(snapshot, pod("cpu", 0, cpu_cores=2))
    assert decision.allocation is not None and decision.allocation.instances[0].machine == 1
    assert online_policy("first-fit")(snapshot, pod("cpu", 0, cpu_cores=2)).allocation.instances[0].machine == 0  # type: ignore[union-attr]


@pytest.mark.parametrize("policy", ["fgd", "liquid"])
def test_a_cpu_only_pod_whose_score_ties_goes_to_the_fullest_machine(policy: str) -> None:
    # m0 and m2 empty, m1's GPUs all taken: a CPU pod adds no fragmentation on any of them (the mix is CPU pods and
    # shares with CPU to spare). The fullest wins by default; FGD's rule takes the first in cluster order.
    snapshot = used(ClusterSnapshot.empty(cluster(2, 2, 2)), 1, [1000, 1000])
    for fullest, expected in ((True, 1), (False, 0)):
        decide = online_policy(policy, PlacementConfig(cpu_pods_to_fullest=fullest))
        for i in range(5):
            decide(snapshot, pod(f"share{i}", 0.5))
        decision = decide(snapshot, pod("cpu", 0, cpu_cores=2))
        assert decision.allocation is not None and decision.allocation.instances[0].machine == expected, fullest


def test_the_fullest_machine_breaks_no_tie_of_a_pod_with_gpus() -> None:
    # the scorer does not apply to an instance with GPUs (a share or whole GPUs); for a CPU pod its cost is one
    # less the higher of the GPU and CPU shares allocated
    snapshot = used(ClusterSnapshot.empty(cluster(2, 2)), 1, [1000, 0])
    fullest = CpuPodsToFullest()
    for job in (pod("share", 0.5), pod("whole", 1.0)):
        assert fullest.cost(steps(snapshot, job, PlacementConfig(), 0)) is None
    step = steps(snapshot, pod("cpu", 0, cpu_cores=8), PlacementConfig(), 0)
    cost = fullest.cost(step)
    assert cost is not None and cost.tolist() == [1.0, 0.5]
    assert fullest.cost_at(step, np.array([1])).tolist() == [0.5]  # type: ignore[union-attr]
