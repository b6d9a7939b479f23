"""Online policies on small SYNTHETIC clusters: table-driven cases with the arithmetic in comments."""

from __future__ import annotations

import gc
from dataclasses import replace

import pytest

from placement.model.cluster import Cluster, Machine, build_cluster
from placement.model.decision import Verdict
from placement.model.demand import Job, Role, Task
from placement.model.feasibility import violations
from placement.model.snapshot import ClusterSnapshot, apply
from placement.online.policies import CHOOSERS, online_policy


def cluster() -> Cluster:
    """SYNTHETIC: 2 racks of 2 T4 machines (4 GPUs each), 1 rack of 2 V100M32 machines (8 GPUs), 1 CPU box."""
    machines = [Machine(f"t4-{i}", "T4", 4, 32, 128) for i in range(4)]
    machines += [Machine(f"v32-{i}", "V100M32", 8, 64, 512) for i in range(2)]
    machines += [Machine("cpu-0", "CPU", 0, 96, 512)]
    return build_cluster("synthetic", machines, rack_size=2, racks_per_domain=2)


def worker(n: int, gpu: float, **kw: object) -> Task:
    return Task(Role.WORKER, n, gpu=gpu, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("policy", sorted(CHOOSERS))
def test_every_policy_places_a_small_job_feasibly(policy: str) -> None:
    snap = ClusterSnapshot.empty(cluster())
    job = Job("j", (worker(2, 1, cpu_cores=4, mem_gib=8, bandwidth_gbps=10), Task(Role.PS, 1, cpu_cores=2)))
    decision = online_policy(policy)(snap, job)
    assert decision.verdict is Verdict.PLACED and decision.allocation is not None
    assert violations(snap, job, decision.allocation) == []
    assert decision.score["machines"] >= 1


def test_liquid_keeps_ps_and_workers_on_one_machine() -> None:
    # 2 workers x 1 GPU + 1 PS fit one T4 machine: network cost 0 (every pair at distance 0)
    snap = ClusterSnapshot.empty(cluster())
    job = Job("j", (worker(2, 1, bandwidth_gbps=10), Task(Role.PS, 1, cpu_cores=1)))
    decision = online_policy("liquid")(snap, job)
    assert decision.score["network"] == 0.0 and decision.score["machines"] == 1.0


def test_liquid_spans_racks_only_when_it_must() -> None:
    # 6 one-GPU workers + 1 PS on T4s only: 4 on one machine, 2 on its rack mate -> 1 rack.
    # pair traffic = 10 Gbit/s / 1 PS; 2 workers one hop away in the rack: cost 2 x 10 x 1 = 20
    snap = ClusterSnapshot.empty(cluster())
    job = Job("j", (worker(6, 1, bandwidth_gbps=10, gpu_types=frozenset({"T4"})), Task(Role.PS, 1, cpu_cores=1)))
    decision = online_policy("liquid")(snap, job)
    assert decision.score["racks"] == 1.0
    assert decision.score["network"] == pytest.approx(20.0)


def test_liquid_keeps_high_end_gpus_for_jobs_that_need_them() -> None:
    # a 1-GPU job without a type constraint goes to a T4, not a V100M32
    snap = ClusterSnapshot.empty(cluster())
    decision = online_policy("liquid")(snap, Job("j", (worker(1, 1),)))
    assert decision.allocation is not None
    assert snap.cluster.machines[decision.allocation.instances[0].machine].gpu_type == "T4"


def test_pack_sends_big_jobs_high_and_small_jobs_low() -> None:
    snap = ClusterSnapshot.empty(cluster())
    big = online_policy("pack")(snap, Job("big", (worker(1, 8),)))
    small = online_policy("pack")(snap, Job("small", (worker(1, 1),)))
    assert big.allocation is not None and small.allocation is not None
    types = [snap.cluster.machines[d.instances[0].machine].gpu_type for d in (big.allocation, small.allocation)]
    assert types == ["V100M32", "T4"]


def test_gpu_sharing_packs_shares_onto_one_gpu() -> None:
    # two 0.5 shares fill one GPU (500 + 500 = 1000 milli); a third 0.4 needs another GPU
    snap = ClusterSnapshot.empty(cluster())
    decision = online_policy("first-fit")(snap, Job("j", (worker(2, 0.5), worker(1, 0.4))))
    assert decision.allocation is not None
    gpus = [p.gpus[0] for p in decision.allocation.instances]
    assert gpus[0] == gpus[1] != gpus[2]


def test_gpu_memory_is_respected_when_sharing() -> None:
    # 0.5 of a GPU with 20 GiB: a T4 has 16 GiB, so only a V100M32 (32 GiB) can host it
    snap = ClusterSnapshot.empty(cluster())
    decision = online_policy("first-fit")(snap, Job("j", (worker(1, 0.5, gpu_mem_gib=20),)))
    assert decision.allocation is not None
    assert snap.cluster.machines[decision.allocation.instances[0].machine].gpu_type == "V100M32"


def test_gang_nothing_or_everything_and_the_reasons() -> None:
    # 3 x 8 V100M32 GPUs: only 2 machines have 8 -> room for 2 of the 3 instances, so none is placed
    snap = ClusterSnapshot.empty(cluster())
    job = Job("j", (worker(3, 8, gpu_types=frozenset({"V100M32"})),))
    for policy in ("liquid", "first-fit", "pack"):
        decision = online_policy(policy)(snap, job)
        assert decision.verdict is Verdict.CAN_NEVER_FIT and decision.allocation is None
        assert decision.reasons == ("gang: room for at most 2 of its 3 worker instances, on the 2 machines that can "
                                    "host one; none placed",)
    # the same demand asked by instances of another role, on the same snapshot: the reason names that role
    evaluators = Job("e", (Task(Role.EVALUATOR, 3, gpu=8, gpu_types=frozenset({"V100M32"})),))
    assert online_policy("pack")(snap, evaluators).reasons == (
        "gang: room for at most 2 of its 3 evaluator instances, on the 2 machines that can host one; none placed",)
    # 2 x 8 fit the two machines, then a third 8-GPU job finds none: the filters' reasons
    v100m32 = frozenset({"V100M32"})
    placed = online_policy("first-fit")(snap, replace(job, job_id="two", tasks=(worker(2, 8, gpu_types=v100m32),)))
    assert placed.allocation is not None
    decision = online_policy("liquid")(apply(snap, placed.allocation), Job("k", (worker(1, 8, gpu_types=v100m32),)))
    assert "no machine has 8 free V100M32 GPUs (most free on one allowed machine: 0)" in decision.reasons


def test_waiting_can_help_when_the_cluster_is_busy() -> None:
    snap = ClusterSnapshot.empty(cluster())
    policy = online_policy("first-fit")
    for i in range(2):  # fill both V100M32 machines
        decision = policy(snap, Job(f"fill{i}", (worker(1, 8, gpu_types=frozenset({"V100M32"})),)))
        assert decision.allocation is not None
        snap = apply(snap, decision.allocation)
    blocked = policy(snap, Job("j", (worker(1, 4, gpu_types=frozenset({"V100M32"})),)))
    assert blocked.verdict is Verdict.UNSCHEDULABLE_NOW
    assert blocked.reasons[0] == "no machine has 4 free V100M32 GPUs (most free on one allowed machine: 0)"


def test_memory_reason_names_the_largest_free() -> None:
    snap = ClusterSnapshot.empty(cluster())
    decision = online_policy("liquid")(snap, Job("j", (Task(Role.WORKER, 1, mem_gib=600),)))
    assert decision.verdict is Verdict.CAN_NEVER_FIT
    assert decision.reasons == ("7 machines lack 600 GiB free memory (most free: 512 GiB)",)


def test_unknown_policy_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="liquid"):
        online_policy("best-guess")


@pytest.mark.parametrize("policy", sorted(CHOOSERS))
def test_a_decision_leaves_nothing_for_the_cyclic_collector(policy: str) -> None:
    """What a decision builds is freed when it is done: garbage left for the collector (a working state per
    decision, before) made the collector's passes part of the decisions' tail latency."""
    snap = ClusterSnapshot.empty(cluster())
    decide = online_policy(policy)
    jobs = [Job("gang", (worker(3, 4, cpu_cores=2, bandwidth_gbps=10),)),  # placed over several machines
            Job("shares", (worker(2, 0.5),)),
            Job("never", (worker(3, 8, gpu_types=frozenset({"V100M32"})),)),  # refused, with its reasons
            Job("later", (worker(1, 1, cpu_cores=90),))]
    for job in jobs:  # first decisions fill the policy's and the layout's caches, which live on
        decide(snap, job)
    gc.collect()
    gc.disable()
    try:
        for job in jobs:
            decide(snap, job)
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_reasons_kept_with_a_snapshot_are_those_worked_out_afresh() -> None:
    """What the reasons read of a snapshot is kept with it for every demand asked there: demands allowed on
    different machines (any type, one type, CPU only) asked one after the other on one snapshot get the reasons
    a copy of it, with nothing kept, gives each alone."""
    snap = ClusterSnapshot.empty(cluster())
    for job in (Job("a", (worker(1, 4, cpu_cores=20),)), Job("b", (worker(1, 6, gpu_types=frozenset({"V100M32"})),)),
                Job("c", (worker(1, 0.5, cpu_cores=30, mem_gib=100),)),
                Job("z", (worker(1, 8, gpu_types=frozenset({"V100M32"})),))):
        placed = online_policy("first-fit")(snap, job)
        assert placed.allocation is not None
        snap = apply(snap, placed.allocation)
    asked = [Job("d", (worker(1, 8),)), Job("e", (worker(1, 4, gpu_types=frozenset({"V100M32"})),)),
             Job("f", (Task(Role.PS, 1, cpu_cores=100),)), Job("g", (worker(1, 0.9, gpu_mem_gib=40),)),
             Job("h", (worker(1, 8, gpu_types=frozenset({"T4"})),))]
    kept = [online_policy("first-fit")(snap, job).reasons for job in asked]
    assert all(kept)  # none of them fits: each has reasons
    for job, reasons in zip(asked, kept, strict=True):
        alone = ClusterSnapshot(snap.cluster, snap.generation, snap.gpu_milli_used, snap.gpu_mem_used, snap.cpu_used,
                                snap.mem_used, snap.allocations)
        assert online_policy("first-fit")(alone, job).reasons == reasons
