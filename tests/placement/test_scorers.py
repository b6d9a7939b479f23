"""Contract tests over every registered scorer, the policies as weighted sums of them, and the bounded
per-machine scores of the public face (``score_nodes``), on SYNTHETIC clusters (made up here) and
Hypothesis ones."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from placement import SCORERS, bounded, filter_nodes, score_nodes
from placement.model.cluster import Cluster
from placement.model.demand import Job, Role, Task
from placement.model.feasibility import need_of
from placement.model.network import NetworkTally
from placement.model.snapshot import ClusterSnapshot
from placement.online.greedy import PlacementConfig, Step, instance_order
from placement.online.policies import (
    CHOOSERS,
    EPSILON,
    POLICIES,
    TIER_WEIGHT,
    OnePodFragmentation,
    liquid_terms,
    online_policy,
)
from placement.online.scorers import scorer_named
from placement.online.scorers.base import WeightedSum, score
from placement.online.scorers.fragmentation import Fragmentation
from placement.online.scorers.type_demand import TypeDemand
from placement.online.working import WorkingState
from tests.placement.test_filters import busy, worker
from tests.placement.test_properties import clusters, jobs
from tests.placement.test_runtime import CURVE, MODEL

CONFIGS = [PlacementConfig(), PlacementConfig(speed=MODEL, w_network=2.0, w_load=0.5, w_scarce=3.0)]
JOBS = [Job("ps", (worker(3, 1, bandwidth_gbps=10), Task(Role.PS, 2, cpu_cores=2, bandwidth_gbps=1))),
        Job("allreduce", (worker(4, 1, bandwidth_gbps=25),), workload_class="a"),
        Job("curve", (worker(3, 2, bandwidth_gbps=5, gpu_types=frozenset({"V100M32"})),), sync_curve=CURVE),
        Job("shares", (worker(3, 0.5, gpu_mem_gib=4),)), Job("cpu", (worker(2, 0, cpu_cores=4),)),
        Job("big", (worker(2, 8),))]


def steps(snapshot: ClusterSnapshot, job: Job, config: PlacementConfig, placed: int) -> Step:
    """The step of the instance after the first ``placed`` ones (``instance_order``), each on the first
    machine that fits it (fewer where one fits nowhere)."""
    working = WorkingState(snapshot)
    network = NetworkTally(job, snapshot.layout, config.distance_cost)
    done = []
    order = instance_order(job)
    for task_index in order[:placed]:
        need = need_of(job.tasks[task_index])
        ok = working.candidates(need).ok
        if not ok.any():
            break
        machine = int(np.argmax(ok))
        placement = working.take(machine, task_index, need)
        network.record_at(task_index, machine, network.increment_at(task_index, machine))
        done.append(placement)
    task_index = order[min(placed, len(order) - 1)]
    need = need_of(job.tasks[task_index])
    return Step(job, task_index, working.candidates(need), working, network, config, done, need)


def check_contract(step: Step) -> None:
    ok = step.candidates.ok
    for s in SCORERS.values():
        costs = s.cost(step)
        if costs is not None:
            assert costs.shape == ok.shape and np.isfinite(costs[ok]).all(), s.name
        scores = score(s, step)
        assert ((scores >= 0) & (scores <= 1)).all() and not scores[~ok].any(), s.name
        if ok.any():
            cheapest = costs is None or costs[ok].min() == costs[int(np.argmax(scores))]
            assert scores.max() == 1.0 and cheapest, s.name


@pytest.mark.parametrize("job", JOBS, ids=lambda j: j.job_id)
def test_every_scorer_keeps_its_contract(job: Job) -> None:
    snapshot = busy()
    for config in CONFIGS:
        for placed in (0, 2):
            check_contract(steps(snapshot, job, config, placed))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=clusters(), job=jobs("j"))
def test_scores_stay_bounded_on_any_cluster(cluster: Cluster, job: Job) -> None:
    for placed in (0, 1):
        check_contract(steps(ClusterSnapshot.empty(cluster), job, CONFIGS[1], placed))


@pytest.mark.parametrize(("costs", "ok", "among", "expected"), [
    # cheapest 1 -> 1, dearest 3 -> 0, 2 halfway; a machine that cannot host scores 0 whatever it costs
    ([3.0, 1.0, 2.0, 0.0], [True, True, True, False], None, [0.0, 1.0, 0.5, 0.0]),
    ([2.0, 2.0, 5.0], [True, True, False], None, [1.0, 1.0, 0.0]),  # all alike: 1
    ([3.0, 1.0, 2.0, 0.0], [True, True, True, True], [2, 0], [1.0, 0.0]),  # over the machines asked about
    ([3.0, 1.0], [False, False], None, [0.0, 0.0]),
])
def test_bounded(costs: list[float], ok: list[bool], among: list[int] | None, expected: list[float]) -> None:
    assert bounded(np.array(costs), np.array(ok), among).tolist() == expected


def test_the_policies_are_the_sums_their_docstring_writes() -> None:
    snapshot = busy()
    learning, mirror = Fragmentation(), Fragmentation()  # liquid's learned terms, and a twin fed the same jobs
    chooser = WeightedSum(liquid_terms(learning))
    for job in JOBS:
        for config in CONFIGS:
            step = steps(snapshot, job, config, 1)
            cost = {name: s.cost(step) for name, s in SCORERS.items()}
            one_pod = sum(t.instances for t in job.tasks) == 1 or 0 < job.tasks[step.task_index].gpu < 1
            liquid = config.w_network * cost["network"]
            if not one_pod:  # one-pod instances: fragmentation packs instead
                liquid = liquid + config.w_load * cost["load"]
            if cost["scarcity"] is not None and not one_pod:  # one-pod instances: type-demand instead
                liquid = liquid + config.w_scarce * cost["scarcity"]
            if not one_pod:  # one-pod instances: cluster order breaks the ties, as in FGD
                liquid = liquid + EPSILON * step.candidates.free_whole
            if cost["type-cost"] is not None:
                liquid = liquid + config.w_network * cost["type-cost"]
            frag = OnePodFragmentation(mirror).cost(step)
            assert (frag is not None) == one_pod
            if frag is not None:
                liquid = liquid + 2.0 * (config.w_load + config.w_scarce) * frag
            demand = TypeDemand(mirror.mix).cost(step)  # the "curve" job is restricted: it applies after it
            if demand is not None:
                liquid = liquid + 2.0 * (config.w_load + config.w_scarce) * demand
            assert chooser(step).tolist() == liquid.tolist()
            pack = TIER_WEIGHT * cost["tier"] + cost["most-allocated"]
            assert CHOOSERS["pack"](step).tolist() == pack.tolist()
            assert CHOOSERS["balance"](step).tolist() == cost["least-allocated"].tolist()
    assert set(POLICIES) == set(CHOOSERS) == {"liquid", "first-fit", "pack", "balance", "random", "fgd"}


@pytest.mark.parametrize("policy", sorted(CHOOSERS))
def test_score_nodes_is_one_where_the_policy_places(policy: str) -> None:
    snapshot = busy()
    for config in CONFIGS:
        for job in (Job("one", (worker(1, 1, cpu_cores=2),), workload_class="a"), Job("share", (worker(1, 0.3),))):
            decision = online_policy(policy, config)(snapshot, job)
            assert decision.allocation is not None
            scores = score_nodes(snapshot, job, policy, config)
            assert ((scores >= 0) & (scores <= 1)).all()
            assert int(np.argmax(scores)) == decision.allocation.instances[0].machine
            # over some machines only: the same order, rescaled to [0, 1] among them
            among, ok = [7, 1, 5, 0], filter_nodes(snapshot, job).ok
            np.testing.assert_allclose(score_nodes(snapshot, job, policy, config, among),
                                       bounded(-scores, ok, among), atol=1e-12)


def test_score_nodes_names_the_known_policies() -> None:
    with pytest.raises(KeyError, match="liquid"):
        score_nodes(busy(), JOBS[0], "best-guess")


def test_the_registry_names_its_scorers() -> None:
    assert all(scorer_named(name).name == name and SCORERS[name].unit for name in SCORERS)
    with pytest.raises(KeyError, match="network, load"):
        scorer_named("carbon")
