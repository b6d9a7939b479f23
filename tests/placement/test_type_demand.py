"""The ``type-demand`` term and Liquid's fragmentation term (``placement.online.policies``), on SYNTHETIC
clusters and jobs made up here."""

from __future__ import annotations

import numpy as np
import pytest

from placement.model.cluster import Machine, build_cluster
from placement.model.demand import Job, Role, Task
from placement.model.layout import MILLI
from placement.model.snapshot import ClusterSnapshot
from placement.online.greedy import PlacementConfig
from placement.online.policies import OnePodFragmentation, online_policy
from placement.online.scorers.fragmentation import Fragmentation
from placement.online.scorers.type_demand import PRESSURE_CAP, STEPS_PER_PRESSURE, TypeDemand, type_pressure
from placement.online.shape_mix import ShapeMix
from tests.placement.test_fragmentation import pod, used
from tests.placement.test_scorers import steps

MACHINES = [Machine("t0", "T4", 2, 32, 128), Machine("v0", "V100M32", 2, 32, 128)]
"""SYNTHETIC: a T4 machine first in cluster order, a V100M32 machine second, 2 GPUs each."""


def test_pressure_is_restricted_demand_over_free_capacity_and_rises_as_the_type_fills() -> None:
    snapshot = ClusterSnapshot.empty(build_cluster("synthetic", MACHINES))
    layout = snapshot.layout
    # a quarter of the recent demand is restricted to T4, which holds half of the free GPUs: 0.25 / 0.5
    demand = {("T4",): 1000}
    assert type_pressure(layout, snapshot.gpu_milli_used, demand, 4000).tolist() == [0.5, 0.0]
    # one T4 GPU taken: T4 holds 1 of the 3 free GPUs -> 0.25 / (1/3) = 0.75
    fuller = used(snapshot, 0, [MILLI, 0])
    assert type_pressure(layout, fuller.gpu_milli_used, demand, 4000).tolist() == pytest.approx([0.75, 0.0])
    # no T4 left: the cap
    full = used(snapshot, 0, [MILLI, MILLI])
    assert type_pressure(layout, full.gpu_milli_used, demand, 4000).tolist() == [PRESSURE_CAP, 0.0]


@pytest.mark.parametrize("policy", ["fgd", "liquid"])
def test_pods_that_could_go_anywhere_keep_off_the_types_restricted_pods_need(policy: str) -> None:
    snapshot = ClusterSnapshot.empty(build_cluster("synthetic", MACHINES))
    decide = online_policy(policy)
    # without restricted arrivals the two machines tie on fragmentation: fgd takes the first (T4), liquid
    # the lower tier (T4)
    first = decide(snapshot, pod("free0", 1))
    assert first.allocation is not None and first.allocation.instances[0].machine == 0
    for i in range(10):  # arrivals restricted to T4 (asked about, not placed)
        decide(snapshot, pod(f"t4-{i}", 1, gpu_types=frozenset({"T4"})))
    later = decide(snapshot, pod("free1", 1))
    assert later.allocation is not None and later.allocation.instances[0].machine == 1
    restricted = decide(snapshot, pod("t4-more", 1, gpu_types=frozenset({"T4"})))
    assert restricted.allocation is not None and restricted.allocation.instances[0].machine == 0


def test_liquid_weighs_fragmentation_for_one_pod_jobs_and_shares_only() -> None:
    snapshot = ClusterSnapshot.empty(build_cluster("synthetic", MACHINES))
    term = OnePodFragmentation(Fragmentation())
    one = steps(snapshot, pod("one", 1), PlacementConfig(), 0)
    gang = Job("gang", (Task(Role.WORKER, 2, gpu=1.0, cpu_cores=1, mem_gib=1),))
    shares = Job("shares", (Task(Role.WORKER, 2, gpu=0.5, cpu_cores=1, mem_gib=1, gpu_mem_gib=0.0),))
    assert term.cost(one) is not None
    assert term.cost(steps(snapshot, gang, PlacementConfig(), 0)) is None
    assert term.cost(steps(snapshot, shares, PlacementConfig(), 0)) is not None
    # the gang was still counted in the shape mix
    assert any(s.gpus == 1 and s.gpu_milli == MILLI for s in term.fragmentation.mix.current().shapes)
    assert np.isfinite(np.asarray(term.cost(one))).all()


def test_every_instance_of_a_job_meets_the_pressure_of_the_snapshot_it_started_from() -> None:
    """A gang's own GPUs are not restricted demand: its second instance pays what its first did on each type,
    though the first took a T4 GPU (the working state's T4 share fell from a half to a third)."""
    snapshot = ClusterSnapshot.empty(build_cluster("synthetic", MACHINES))
    scorer = Fragmentation()
    demand = TypeDemand(scorer.mix)
    scorer.mix.observe(pod("t4", 1, gpu_types=frozenset({"T4"})))
    scorer.mix.observe(pod("any", 3))
    gang = Job("gang", (Task(Role.WORKER, 2, gpu=1.0, cpu_cores=1, mem_gib=1),))
    first, second = steps(snapshot, gang, PlacementConfig(), 0), steps(snapshot, gang, PlacementConfig(), 1)
    assert second.working.gpu_milli.sum() == MILLI  # the first instance is taken in the second's state
    expected = STEPS_PER_PRESSURE * type_pressure(snapshot.layout, snapshot.gpu_milli_used, {("T4",): 1000}, 4000)
    for step in (first, second):
        cost = demand.cost(step)
        assert cost is not None and cost.tolist() == expected.tolist() == [12.5, 0.0]
        assert demand.cost_at(step, np.array([1, 0])).tolist() == [0.0, 12.5]


def test_the_windows_demand_follows_jobs_in_and_out() -> None:
    # SYNTHETIC jobs through a window of 3: the demand is that of the last 3 jobs, restricted and in all
    def job(name: str, gpu: float, types: frozenset[str] = frozenset(), instances: int = 1) -> Job:
        return Job(name, (Task(Role.WORKER, instances, gpu=gpu, cpu_cores=1.0, gpu_types=types),))

    mix = ShapeMix(window=3)
    jobs = [job("a", 1.0, frozenset({"T4"})), job("b", 0.5), job("c", 2.0, frozenset({"T4"}), instances=2),
            job("d", 0.0), job("e", 0.25, frozenset({"V100M32", "T4"})), job("f", 1.0)]
    expected = [({("T4",): 1000}, 1000), ({("T4",): 1000}, 1500), ({("T4",): 5000}, 5500), ({("T4",): 4000}, 4500),
                ({("T4",): 4000, ("T4", "V100M32"): 250}, 4250), ({("T4", "V100M32"): 250}, 1250)]
    for arriving, (restricted, total) in zip(jobs, expected, strict=True):
        mix.observe(arriving)
        mix.observe(arriving)  # asked again while it waits: counted once
        assert (mix.restricted_demand(), mix.gpu_demand()) == (restricted, total)
