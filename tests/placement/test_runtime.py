"""The replay's measured runtime on tiny SYNTHETIC clusters and a SYNTHETIC speed model, with the
expected arithmetic in comments."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from placement.cluster import Cluster, Machine, build_cluster
from placement.demand import Job, Role, Task
from placement.sim.engine import SimResult, simulate
from placement.sim.jobs import SimJob
from placement.sim.queues import queue_policy
from placement.sim.runtime import MeasuredRuntime
from placement.speed import SpeedModel, Spread, SyncCurve, WorkloadSpeed

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
    return SimJob(Job(job_id, (task,)), "u", submit, duration, workload_class=workload,
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
    # A (10 s) alone at full speed 0..4 (4 s of work done); B arrives at 4: both at 0.5.
    # A's remaining 6 s of work take 12 s: A ends at 16. B did 6 s of work by 16, then alone: ends at 20.
    records = replay(cluster, [job("A", 0, 10, gpu=0.5), job("B", 4, 10, gpu=0.5)])
    assert records["A"].end_s == pytest.approx(16.0)  # type: ignore[attr-defined]
    assert records["B"].end_s == pytest.approx(20.0)  # type: ignore[attr-defined]
    # lost to sharing: 12 s at half speed = 6 s each
    assert records["A"].lost_share_s == pytest.approx(6.0)  # type: ignore[attr-defined]
    assert records["B"].lost_share_s == pytest.approx(6.0)  # type: ignore[attr-defined]


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
