"""What is derived from a cluster lives with its layout, once, keyed by value (SYNTHETIC clusters)."""

from __future__ import annotations

import gc
import weakref
from dataclasses import replace
from types import MappingProxyType

import numpy as np

from placement.filters.gpu_type import type_mask_of
from placement.model.cluster import Cluster, Machine, build_cluster
from placement.model.decision import Verdict
from placement.model.demand import Job, Role, Task
from placement.model.layout import Table
from placement.model.snapshot import ClusterSnapshot, apply, empty_snapshot, layout_of
from placement.model.speed import SpeedModel, WorkloadSpeed
from placement.online.greedy import PlacementConfig, machine_scarcity, machine_tiers
from placement.online.policies import online_policy
from placement.online.type_cost import type_cost
from tests.placement.test_runtime import CURVE, MODEL


def cluster() -> Cluster:
    """SYNTHETIC: a P100, a V100 and a T4 machine, and a CPU box."""
    return build_cluster("derived", [Machine("p", "P100", 2, 8, 64), Machine("v", "V100", 2, 8, 64),
                                     Machine("t", "T4", 4, 8, 64), Machine("c", "CPU", 0, 8, 64)])


def test_a_cluster_has_one_layout_shared_by_its_snapshots() -> None:
    one = cluster()
    snapshot = ClusterSnapshot.empty(one)
    job = Job("j", (Task(Role.WORKER, 1, gpu=1.0),))
    placed = apply(snapshot, online_policy("liquid")(snapshot, job).allocation)  # type: ignore[arg-type]
    assert one.layout is layout_of(one) is snapshot.layout is placed.layout
    assert empty_snapshot(one) is empty_snapshot(one)
    other = cluster()  # equal, but another cluster: its own layout
    assert other == one and other.layout is not one.layout
    np.testing.assert_array_equal(other.layout.gpu_machine, one.layout.gpu_machine)


def test_tiers_are_kept_by_the_tier_of_each_type_not_by_config_object() -> None:
    layout = cluster().layout
    first, again = PlacementConfig(), PlacementConfig()
    assert machine_tiers(first, layout) is machine_tiers(again, layout)  # equal tables: one entry
    assert machine_tiers(first, layout).tolist() == [2.0, 3.0, 2.0, 0.0]
    assert machine_scarcity(first, layout).tolist() == [2 / 3, 1.0, 2 / 3, 0.0]
    changed = replace(first, gpu_tier=MappingProxyType({**first.gpu_tier, "T4": 1}))
    assert machine_tiers(changed, layout).tolist() == [2.0, 3.0, 1.0, 0.0]
    assert machine_tiers(first, layout).tolist() == [2.0, 3.0, 2.0, 0.0]
    assert len(layout.derived.tiers) == 2


def test_type_costs_are_kept_by_the_speeds_of_the_types() -> None:
    layout = cluster().layout
    same = SpeedModel.from_json(MODEL.to_json())
    assert same == MODEL and type_cost(same, layout, "a") is type_cost(MODEL, layout, "a")
    assert type_cost(MODEL, layout, "a").tolist() == [3600.0, 0.0, 3600.0, 3600.0]  # type: ignore[union-attr]
    faster = replace(MODEL, workloads=MappingProxyType({"a": WorkloadSpeed(
        "a", CURVE, MappingProxyType({"V100": 1.0, "P100": 0.8}), MappingProxyType({}))}))
    cost = type_cost(faster, layout, "a")
    assert cost is not None and cost.tolist() == [900.0, 0.0, 900.0, 900.0]
    assert len(layout.derived.type_costs) == 2


def test_the_speed_memo_is_not_part_of_the_model() -> None:
    model = SpeedModel.from_json(MODEL.to_json())
    text = model.to_json()
    assert model.speeds_on("a", ("P100", "V100M32", "T4")) == (0.5, 1.0, None)
    assert model.to_json() == text and "_speeds" not in text and model == MODEL


def test_type_masks_and_the_empty_cluster_verdicts_are_kept_with_the_layout() -> None:
    one = cluster()
    layout = one.layout
    mask = type_mask_of(layout, frozenset({"V100", "T4"}))
    assert mask.tolist() == [False, True, True, False] and not mask.flags.writeable
    assert type_mask_of(layout, frozenset({"T4", "V100"})) is mask
    huge = Job("huge", (Task(Role.WORKER, 1, gpu=8.0),))
    assert online_policy("liquid")(ClusterSnapshot.empty(one), huge).verdict is Verdict.CAN_NEVER_FIT
    assert len(layout.derived.fits_empty) == 1


def test_tables_are_bounded() -> None:
    table: Table[int, str] = Table(2)
    assert [table.get(k, lambda k=k: str(k)) for k in (1, 2, 1)] == ["1", "2", "1"]
    table.get(3, lambda: "3")  # full: emptied first
    assert len(table) == 1


def test_nothing_outlives_its_cluster() -> None:
    """The derived data belong to the layout: no module-level table keeps a cluster's layout alive."""
    one = cluster()
    layout = weakref.ref(one.layout)
    config = PlacementConfig(speed=MODEL)
    job = Job("j", (Task(Role.WORKER, 2, gpu=1.0, bandwidth_gbps=1.0, gpu_types=frozenset({"T4"})),),
              workload_class="a")
    for policy in ("liquid", "pack", "first-fit"):
        assert online_policy(policy, config)(ClusterSnapshot.empty(one), job).placed
    assert online_policy("liquid", config)(empty_snapshot(one), Job("huge", (Task(Role.WORKER, 1, gpu=8.0),))) \
        .verdict is Verdict.CAN_NEVER_FIT
    del one
    gc.collect()
    assert layout() is None
