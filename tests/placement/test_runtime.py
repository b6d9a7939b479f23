"""The replay's measured runtime on tiny SYNTHETIC clusters and a SYNTHETIC speed model, with the
expected arithmetic in comments."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from placement.model.cluster import Cluster, Machine, build_cluster
from placement.model.demand import Job, Role, Task
from placement.model.speed import SpeedModel, Spread, SyncCurve, WorkloadSpeed
from placement.sim.engine import SimResult, simulate
from placement.sim.jobs import SimJob
from placement.sim.queues import queue_policy
from placement.sim.runtime import MeasuredRuntime

# class "a": P100 at half the speed of V100; a step is 1 s of compute, plus 1 s of sync across machines
# (none on one machine); beside another "a" on one GPU a job keeps 50% of its speed, beside "b" 80%.
CURVE = SyncCurve(grad_s=1.0, local_s=(0.0, 0.0), network_s=(1.0, 0.0), gamma=1.0)
MODEL = SpeedModel(MappingProxyType({
    "a": WorkloadSpeed("a", CURVE, MappingProxyType({"V100": 1.0, "P100": 0.5}),
                       MappingProxyType({"a": 0.5, "b": 0.8})),
}), type_aliases=MappingProxyType({"V100M32": ("V100", 1.0)}), level_factor=(1.0, 2.0, 4.0))


def job(job_id: str, submit: float, duration: float, gpu: float = 1.0, instances: int = 1,
        types: frozenset[str] = frozenset(), workload: str = "a", reference: str = "V100") -> SimJob:
    task = Task(Role.WORKER, instances, gpu=gpu, gpu_types=types)
    return SimJob(Job(job_id, (task,), workload_class=workload), "u", submit, duration,
                  reference_gpu_type=reference)


def replay(cluster: Cluster, jobs: list[SimJob], runtime: str = "measured") -> dict[str, object]:
    made = (lambda js, layout: MeasuredRuntime(js, layout, MODEL)) if runtime == "measured" else None
    result: SimResult = simulate(cluster, jobs, "first-fit", queue_policy("fifo"), runtime=made)
    return {r.job_id: r for r in result.records}


def test_a_slower_gpu_type_stretches_the_run_and_books_the_loss_to_type() -> None:
    cluster = build_cluster("types", [Machine("v", "V100", 1, 8, 64), Machine("p", "P100", 1, 8, 64)])
    # on P100 the job runs at 0.5 / 1.0 of its V100 reference: 100 s of work take 200 s, 100 s lost to type
    records = replay(cluster, [job("slow", 0, 100, types=frozenset({"P100"}))])
    slow = records["slow"]
    assert slow.end_s == pytest.approx(200.0)  # type: ignore[attr-defined]
    assert slow.lost_type_s == pytest.approx(100.0)  # type: ignore[attr-defined]
    # the trace runtime ignores where it runs
    assert replay(cluster, [job("slow", 0, 100, types=frozenset({"P100"}))], "trace")["slow"].end_s == 100  # type: ignore[attr-defined]


def test_a_spread_job_pays_for_synchronisation_across_machines() -> None:
    cluster = build_cluster("x", [Machine("m0", "V100", 1, 8, 64), Machine("m1", "V100", 1, 8, 64),
                                  Machine("m2", "V100", 2, 8, 64)])
    # 'big' (no class, 1 x 2 GPUs) takes m2, so 'pair' (2 x 1 GPU) must span m0 and m1 (one rack):
    # step = 1 s compute + 1 s sync x level factor 1.0 = 2 s, against 1 s packed on one 2-GPU machine.
    # Half speed: 10 s of work take 20 s, from t=1 to t=21; 10 s lost to spread.
    records = replay(cluster, [job("big", 0, 1000, gpu=2.0, workload=""), job("pair", 1, 10, instances=2)])
    assert records["pair"].end_s == pytest.approx(21.0)  # type: ignore[attr-defined]
    assert records["pair"].lost_spread_s == pytest.approx(10.0)  # type: ignore[attr-defined]
    # on one 2-GPU machine it runs packed, as its reference: no loss
    alone = replay(build_cluster("one", [Machine("m", "V100", 2, 8, 64)]), [job("pair", 1, 10, instances=2)])["pair"]
    assert (alone.end_s, alone.lost_spread_s) == (11.0, 0.0)  # type: ignore[attr-defined]


def test_sharing_a_gpu_slows_both_jobs_while_they_overlap() -> None:
    cluster = build_cluster("one", [Machine("m0", "V100", 1, 8, 64)])
    # beside a whole-GPU "a", an "a" keeps 50%: a load of 1 / 0.5 - 1 = 1. A neighbour holding half the
    # GPU puts half that load on it: factor 1 / (1 + 0.5) = 2/3.
    # A (10 s) alone at full speed 0..4 (4 s of work done); B arrives at 4: both at 2/3.
    # A's remaining 6 s of work take 9 s: A ends at 13. B did 6 s of work by 13, then alone: ends at 17.
    records = replay(cluster, [job("A", 0, 10, gpu=0.5), job("B", 4, 10, gpu=0.5)])
    assert records["A"].end_s == pytest.approx(13.0)  # type: ignore[attr-defined]
    assert records["B"].end_s == pytest.approx(17.0)  # type: ignore[attr-defined]
    # lost to sharing: 9 s at a third below full speed = 3 s each
    assert records["A"].lost_share_s == pytest.approx(3.0)  # type: ignore[attr-defined]
    assert records["B"].lost_share_s == pytest.approx(3.0)  # type: ignore[attr-defined]


def test_several_neighbours_add_their_loads() -> None:
    # beside "a" (load 1) and "b" (load 1 / 0.8 - 1 = 0.25), both on the whole GPU: 1 / (1 + 1.25)
    assert MODEL.share_factor("a", [("a", 1.0), ("b", 1.0)]) == pytest.approx(1 / 2.25)
    # four equal whole-GPU jobs time-slice: each keeps a quarter
    assert MODEL.share_factor("a", [("a", 1.0)] * 3) == pytest.approx(1 / 4)
    assert MODEL.share_factor("a", []) == 1.0


def test_unknown_classes_and_types_run_at_trace_speed() -> None:
    cluster = build_cluster("misc", [Machine("m", "T4", 1, 8, 64)])
    # T4 is neither measured nor aliased in this model, and class "z" is unknown: factor 1 each
    records = replay(cluster, [job("t4", 0, 50), job("z", 0, 30, workload="z")])
    assert records["t4"].end_s == pytest.approx(50.0)  # type: ignore[attr-defined]
    assert records["z"].end_s == pytest.approx(80.0)  # type: ignore[attr-defined]


def test_spread_factor_is_one_at_the_reference_and_falls_with_levels() -> None:
    ref = Spread(4, 1, 0)
    assert MODEL.spread_factor("a", ref, ref) == 1.0
    # 4 replicas on 2 machines: step 1 + 1 x factor; one rack 2 s, across racks 3 s, across domains 5 s
    factors = [MODEL.spread_factor("a", Spread(4, 2, level), ref) for level in (1, 2, 3)]
    assert factors == pytest.approx([1 / 2, 1 / 3, 1 / 5])


def test_the_model_survives_json() -> None:
    assert SpeedModel.from_json(MODEL.to_json()) == MODEL


def test_a_job_that_needs_two_machines_for_its_cpu_loses_nothing_on_two() -> None:
    # 2 x (1 GPU, 6 cores) cannot share one 8-core machine, so its reference is already 2 machines in a rack
    cluster = build_cluster("cpu", [Machine("m0", "V100", 2, 8, 64), Machine("m1", "V100", 2, 8, 64)])
    wide = SimJob(Job("wide", (Task(Role.WORKER, 2, gpu=1.0, cpu_cores=6.0),), workload_class="a"), "u", 0, 10,
                  reference_gpu_type="V100")
    record = replay(cluster, [wide])["wide"]
    assert (record.end_s, record.lost_spread_s) == (10.0, 0.0)  # type: ignore[attr-defined]


def test_liquid_with_the_speed_model_keeps_a_job_whole_where_plain_liquid_spreads_it() -> None:
    # m0 and m1 have 1 of 2 GPUs taken (busy: Liquid's load term likes them); m2 is idle. A 2 x 1 GPU job of
    # class "a" with no bandwidth figure: plain Liquid packs onto the busy m0, then m1 (network term 0);
    # with the speed model, a start on m0 or m1 would force a second machine (1 s compute + 1 s sync:
    # 3,600 s lost per hour) and m2 holds both replicas, so the job stays whole on m2.
    from placement.model.snapshot import ClusterSnapshot, apply
    from placement.online.greedy import PlacementConfig
    from placement.online.policies import online_policy

    cluster = build_cluster("three", [Machine(f"m{k}", "V100", 2, 8, 64) for k in range(3)])
    snapshot = ClusterSnapshot.empty(cluster)
    for k in range(2):  # balance puts each on the least allocated machine: m0, then m1
        held = online_policy("balance")(snapshot, Job(f"held{k}", (Task(Role.WORKER, 1, gpu=1.0),))).allocation
        assert held is not None
        snapshot = apply(snapshot, held)
    pair = Job("pair", (Task(Role.WORKER, 2, gpu=1.0),), workload_class="a")
    plain = online_policy("liquid")(snapshot, pair).allocation
    measured = online_policy("liquid", PlacementConfig(speed=MODEL))(snapshot, pair).allocation
    assert plain is not None and measured is not None
    assert plain.machines() == {0, 1}
    assert measured.machines() == {2}


def test_liquid_with_the_speed_model_puts_a_known_job_on_its_fastest_type() -> None:
    # one P100 and one V100 machine, both idle. Plain Liquid keeps the higher-tier V100 free for jobs that
    # ask for it by type and sends an untyped job to the P100; with the speed model the class-"a" job
    # would lose 3,600 s per hour of work on the P100 (half speed) and 0 on the V100, so it takes the
    # V100. A job of no profiled class still keeps to the tier rule.
    from placement.model.snapshot import ClusterSnapshot
    from placement.online.greedy import PlacementConfig
    from placement.online.policies import online_policy
    from placement.online.type_cost import type_cost

    cluster = build_cluster("two", [Machine("slow", "P100", 2, 8, 64), Machine("fast", "V100", 2, 8, 64)])
    snapshot = ClusterSnapshot.empty(cluster)
    known = Job("known", (Task(Role.WORKER, 1, gpu=1.0),), workload_class="a")
    unknown = Job("unknown", (Task(Role.WORKER, 1, gpu=1.0),), workload_class="zzz")
    measured = online_policy("liquid", PlacementConfig(speed=MODEL))
    cost = type_cost(MODEL, snapshot.layout, "a")
    assert cost is not None and cost.tolist() == [3600.0, 0.0]
    assert type_cost(MODEL, snapshot.layout, "zzz") is None
    assert online_policy("liquid")(snapshot, known).allocation.machines() == {0}  # type: ignore[union-attr]
    assert measured(snapshot, known).allocation.machines() == {1}  # type: ignore[union-attr]
    assert measured(snapshot, unknown).allocation.machines() == {0}  # type: ignore[union-attr]
