"""Derived workloads (``placement.sim.derived_pods``) on SYNTHETIC pod lists and clusters made up here."""

from __future__ import annotations

import pytest

from placement.model.cluster import Cluster, Machine, build_cluster
from placement.model.demand import Job, Role, Task
from placement.sim.derived_pods import derive, parse_variant


def pod(k: int, gpu: float, types: frozenset[str] = frozenset()) -> Job:
    return Job(f"p{k}", (Task(Role.WORKER, 1, gpu=gpu, cpu_cores=2, mem_gib=4, gpu_mem_gib=0.0, gpu_types=types),))


PODS = tuple(pod(k, g) for k, g in enumerate([0.5] * 20 + [0.25] * 10 + [1.0] * 60 + [8.0] * 10 + [0.0] * 10))
"""SYNTHETIC: 100 GPU pods (30 shares: 20 of 0.5 and 10 of 0.25; 60 whole GPUs; 10 eight-GPU pods) and 10 CPU pods."""
CLUSTER: Cluster = build_cluster("synthetic", [Machine("t", "T4", 2, 32, 128), Machine("v", "V100M32", 8, 64, 512),
                                               Machine("c", "CPU", 0, 32, 128)])
"""SYNTHETIC: 2 T4s on one machine, 8 V100M32s on another, a CPU machine."""


def gpus(pods: tuple[Job, ...]) -> list[float]:
    return [p.tasks[0].gpu for p in pods]


def test_share_raises_and_lowers_the_share_of_fractional_pods() -> None:
    more = gpus(derive(PODS, "share:0.6", CLUSTER, seed=1))
    assert sum(0 < g < 1 for g in more) == 60 and sum(g == 1 for g in more) == 30
    assert {g for g in more if 0 < g < 1} <= {0.5, 0.25}  # drawn from the list's own fractions
    fewer = gpus(derive(PODS, "share:0.1", CLUSTER, seed=1))
    assert sum(0 < g < 1 for g in fewer) == 10 and sum(g == 1 for g in fewer) == 80
    assert gpus(derive(PODS, "share:0.3", CLUSTER)) == gpus(PODS)  # already 30 of 100


def test_multi_raises_and_lowers_the_share_of_multi_gpu_pods() -> None:
    more = gpus(derive(PODS, "multi:0.25", CLUSTER, seed=2))
    assert sum(g > 1 for g in more) == 25 and {g for g in more if g > 1} == {8.0}
    assert sum(g == 0 for g in more) == 10  # CPU pods stay CPU pods
    fewer = gpus(derive(PODS, "multi:0.05", CLUSTER, seed=2))
    assert sum(g > 1 for g in fewer) == 5 and sum(g == 1 for g in fewer) == 65


def test_types_restricts_gpu_pods_to_one_type_that_can_host_them() -> None:
    derived = derive(PODS, "types:0.5", CLUSTER, seed=3)
    restricted = [p.tasks[0] for p in derived if p.tasks[0].gpu_types]
    assert len(restricted) == 50 and all(t.gpu > 0 for t in restricted)
    assert all(len(t.gpu_types) == 1 and t.gpu_types <= {"T4", "V100M32"} for t in restricted)
    assert all(t.gpu_types == {"V100M32"} for t in restricted if t.gpu > 2)  # no T4 machine has 8 GPUs
    # everything else is as it was: names, order, CPU, GPUs
    assert [(p.job_id, p.tasks[0].gpu, p.tasks[0].cpu_cores) for p in derived] == \
        [(p.job_id, p.tasks[0].gpu, p.tasks[0].cpu_cores) for p in PODS]


def test_cpu_raises_and_lowers_the_share_of_pods_asking_for_no_gpu() -> None:
    typed = tuple(pod(k, 1.0, frozenset({"T4"})) if k < 5 else p for k, p in enumerate(PODS))
    more = derive(typed, "cpu:0.3", CLUSTER, seed=4)  # 33 of the 110 pods
    assert sum(g == 0 for g in gpus(more)) == 33
    assert all(not p.tasks[0].gpu_types for p in more if p.tasks[0].gpu == 0)  # no type without a GPU
    fewer = derive(PODS, "cpu:0.05", CLUSTER, seed=4)  # 6 of 110 (round(5.5) is 6)
    assert sum(g == 0 for g in gpus(fewer)) == 6
    assert {g for k, g in enumerate(gpus(fewer)) if k >= 100 and g > 0} <= {0.5, 0.25, 1.0, 8.0}  # drawn from the list
    for derived in (more, fewer):  # names, order, CPU and memory are kept
        assert [(p.job_id, p.tasks[0].cpu_cores, p.tasks[0].mem_gib) for p in derived] == \
            [(p.job_id, p.tasks[0].cpu_cores, p.tasks[0].mem_gib) for p in PODS]


def test_the_same_seed_gives_the_same_pods_and_another_seed_other_ones() -> None:
    assert derive(PODS, "types:0.3", CLUSTER, seed=5) == derive(PODS, "types:0.3", CLUSTER, seed=5)
    assert derive(PODS, "share:0.6", CLUSTER, seed=5) != derive(PODS, "share:0.6", CLUSTER, seed=6)


@pytest.mark.parametrize("text", ["share", "share:1.5", "size:0.5", "types:x", "multi:-0.1", "cpu:2"])
def test_a_bad_variant_is_refused_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match="KIND:SHARE"):
        parse_variant(text)


def test_a_job_of_several_instances_is_refused() -> None:
    job = Job("gang", (Task(Role.WORKER, 2, gpu=1.0),))
    with pytest.raises(ValueError, match="not one pod"):
        derive((job,), "share:0.5", CLUSTER)
