"""The one feasibility checker rejects every way of breaking the rules, on a small SYNTHETIC cluster.

Machine 0 is a T4 box with GPUs 0-3, machine 4 a V100M32 box with GPUs 16-23 (``test_online.cluster``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from placement.model.demand import Job, Role, Task
from placement.model.feasibility import need_of, violations
from placement.model.snapshot import Allocation, ClusterSnapshot, InstancePlacement, apply
from placement.online.policies import online_policy
from tests.placement.test_online import cluster

T4_MIB, V32_MIB = 16 * 1024, 32 * 1024


def placed(task: int, machine: int, gpus: tuple[int, ...], milli: int, gpu_mib: int, cpu: int = 1000,
           mem: int = 0) -> InstancePlacement:
    return InstancePlacement(task, machine, gpus, milli, gpu_mib, cpu, mem)


GANG = Job("g", (Task(Role.WORKER, 2, gpu=2, cpu_cores=1),))
SHARE = Job("s", (Task(Role.WORKER, 1, gpu=0.5, cpu_cores=1, gpu_types=frozenset({"V100M32"})),))


@pytest.mark.parametrize(("job", "instances", "says"), [
    (GANG, (placed(0, 0, (0, 1), 1000, T4_MIB),), "gang broken"),
    (GANG, (placed(0, 0, (0, 1), 1000, T4_MIB), placed(0, 7, (2, 3), 1000, T4_MIB)), "no machine 7"),
    (GANG, (placed(0, 0, (0, 1), 1000, T4_MIB), placed(0, 0, (2,), 1000, T4_MIB)), "needs 2 distinct GPU(s)"),
    (GANG, (placed(0, 0, (0, 1), 1000, T4_MIB), placed(0, 0, (2, 2), 1000, T4_MIB)), "needs 2 distinct GPU(s)"),
    (GANG, (placed(0, 0, (0, 1), 1000, T4_MIB), placed(0, 0, (3, 4), 1000, T4_MIB)), "needs 2 distinct GPU(s)"),
    (GANG, (placed(0, 0, (0, 1), 1000, T4_MIB), placed(0, 0, (2, 3), 1000, T4_MIB, cpu=999)), "less CPU"),
    (GANG, (placed(0, 0, (0, 1), 1000, T4_MIB), placed(0, 0, (1, 2), 1000, T4_MIB)), "GPU share over capacity"),
    (SHARE, (placed(0, 0, (0,), 500, T4_MIB // 2),), "GPU type T4 not in ['V100M32']"),
    (SHARE, (placed(0, 4, (16,), 400, V32_MIB // 2),), "holds less GPU share"),
    (SHARE, (placed(0, 4, (16,), 500, V32_MIB // 2 - 1),), "holds less GPU share or memory"),
])
def test_the_checker_names_what_an_allocation_breaks(job: Job, instances: tuple[InstancePlacement, ...],
                                                      says: str) -> None:
    snapshot = ClusterSnapshot.empty(cluster())
    problems = violations(snapshot, job, Allocation(job.job_id, instances))
    assert any(says in problem for problem in problems), problems


def test_the_checker_passes_what_fits_and_sees_what_is_already_held() -> None:
    snapshot = ClusterSnapshot.empty(cluster())
    fits = Allocation("g", (placed(0, 0, (0, 1), 1000, T4_MIB), placed(0, 0, (2, 3), 1000, T4_MIB)))
    assert violations(snapshot, GANG, fits) == []
    assert violations(apply(snapshot, fits), GANG, fits) == ["job g is already allocated"]
    other = apply(snapshot, replace(fits, job_id="other", instances=fits.instances[:1]))
    assert any("over capacity" in p for p in violations(other, GANG, fits))
    share = Allocation("s", (placed(0, 4, (16,), 500, need_of(SHARE.tasks[0]).gpu_mem_on(V32_MIB)),))
    assert violations(snapshot, SHARE, share) == []


def test_what_every_policy_places_for_a_job_of_many_shares_passes() -> None:
    job = Job("many", (Task(Role.WORKER, 24, gpu=0.25, cpu_cores=0.5), Task(Role.PS, 2, cpu_cores=2)))
    snapshot = ClusterSnapshot.empty(cluster())
    for name in ("first-fit", "liquid", "fgd", "pack"):
        decision = online_policy(name)(snapshot, job)
        assert decision.allocation is not None and violations(snapshot, job, decision.allocation) == []
