"""Placement: the cluster model and topology, the online and batch policies that put jobs' tasks on
machines, and the trace replay that judges them.

The names below are the package's public face: import them from ``placement`` (``from placement import
Cluster, Job, online_policy``) rather than from the modules that define them, which may move. Besides
the model (clusters, jobs, snapshots) and the replay, they are: ``place`` and the policies by name
(``online_policy``, ``batch_policy``); per machine, ``filter_nodes`` (can it host one instance, and if
not why) and ``score_nodes`` (a policy's bounded score), and ``place_on`` (a job on a machine another
scheduler chose); the scheduler in front of placement (``schedule``: queues with quotas, pending and running
jobs in, a ``Plan`` out); and the extension points, ``Filter`` and ``Scorer``, with their registries. Each
module is loaded when a name from it is first used, so importing a light part of the package (its
errors, its GPU-type table) does not load the policies and their dependencies.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from placement.batch.policies import BATCH_POLICIES as BATCH_POLICIES
    from placement.batch.policies import BatchPolicy as BatchPolicy
    from placement.batch.policies import BatchResult as BatchResult
    from placement.batch.policies import batch_policy as batch_policy
    from placement.filters import FILTERS as FILTERS
    from placement.filters.base import Filter as Filter
    from placement.filters.base import Usage as Usage
    from placement.filters.base import usage_of as usage_of
    from placement.model.cluster import CapacityArrays as CapacityArrays
    from placement.model.cluster import Cluster as Cluster
    from placement.model.cluster import Machine as Machine
    from placement.model.cluster import build_cluster as build_cluster
    from placement.model.cluster_io import CLUSTERS as CLUSTERS
    from placement.model.cluster_io import data_dir as data_dir
    from placement.model.cluster_io import load_cluster as load_cluster
    from placement.model.decision import Decision as Decision
    from placement.model.decision import Verdict as Verdict
    from placement.model.demand import Job as Job
    from placement.model.demand import Role as Role
    from placement.model.demand import Task as Task
    from placement.model.errors import ClusterSpecError as ClusterSpecError
    from placement.model.errors import InputError as InputError
    from placement.model.errors import PodListError as PodListError
    from placement.model.errors import TopologyError as TopologyError
    from placement.model.feasibility import Need as Need
    from placement.model.feasibility import need_of as need_of
    from placement.model.feasibility import violations as violations
    from placement.model.gpu_types import CPU_ONLY as CPU_ONLY
    from placement.model.gpu_types import GPU_MEM_GIB as GPU_MEM_GIB
    from placement.model.gpu_types import KNOWN_TYPES as KNOWN_TYPES
    from placement.model.layout import MIB_PER_GIB as MIB_PER_GIB
    from placement.model.layout import MILLI as MILLI
    from placement.model.layout import Derived as Derived
    from placement.model.layout import Layout as Layout
    from placement.model.network import network_cost as network_cost
    from placement.model.network import placement_cost as placement_cost
    from placement.model.snapshot import Allocation as Allocation
    from placement.model.snapshot import ClusterSnapshot as ClusterSnapshot
    from placement.model.snapshot import InstancePlacement as InstancePlacement
    from placement.model.snapshot import apply as apply
    from placement.model.snapshot import at_generation as at_generation
    from placement.model.snapshot import empty_snapshot as empty_snapshot
    from placement.model.snapshot import layout_of as layout_of
    from placement.model.snapshot import release as release
    from placement.model.speed import NO_PROFILES as NO_PROFILES
    from placement.model.speed import REFERENCE_SPEED_TYPE as REFERENCE_SPEED_TYPE
    from placement.model.speed import SpeedModel as SpeedModel
    from placement.model.speed import Spread as Spread
    from placement.model.speed import SyncCurve as SyncCurve
    from placement.model.speed import WorkloadSpeed as WorkloadSpeed
    from placement.model.topology import DEFAULT_DISTANCE_COST as DEFAULT_DISTANCE_COST
    from placement.model.topology import DEFAULT_RACK_SIZE as DEFAULT_RACK_SIZE
    from placement.model.topology import DEFAULT_RACKS_PER_DOMAIN as DEFAULT_RACKS_PER_DOMAIN
    from placement.model.topology import Topology as Topology
    from placement.model.topology import default_topology as default_topology
    from placement.model.topology import dump_topology_yaml as dump_topology_yaml
    from placement.model.topology import load_topology_yaml as load_topology_yaml
    from placement.model.topology import parse_topology_yaml as parse_topology_yaml
    from placement.online.frag_kernel import compile_kernels as compile_kernels
    from placement.online.greedy import PlacementConfig as PlacementConfig
    from placement.online.greedy import Step as Step
    from placement.online.nodes import FilterResult as FilterResult
    from placement.online.nodes import filter_nodes as filter_nodes
    from placement.online.nodes import place_on as place_on
    from placement.online.nodes import score_nodes as score_nodes
    from placement.online.policies import ONLINE_POLICY_NAMES as ONLINE_POLICY_NAMES
    from placement.online.policies import OnlinePolicy as OnlinePolicy
    from placement.online.policies import online_policy as online_policy
    from placement.online.policies import place as place
    from placement.online.scorers import SCORERS as SCORERS
    from placement.online.scorers.base import Scorer as Scorer
    from placement.online.scorers.base import bounded as bounded
    from placement.scheduling.cycle import schedule as schedule
    from placement.scheduling.errors import QueueConfigError as QueueConfigError
    from placement.scheduling.jobs import DurationEstimate as DurationEstimate
    from placement.scheduling.jobs import JobMode as JobMode
    from placement.scheduling.jobs import PendingJob as PendingJob
    from placement.scheduling.jobs import RunningJob as RunningJob
    from placement.scheduling.orders import ORDERS as ORDERS
    from placement.scheduling.orders import queue_order as queue_order
    from placement.scheduling.plan import Plan as Plan
    from placement.scheduling.plan import PlannedStart as PlannedStart
    from placement.scheduling.plan import Preemption as Preemption
    from placement.scheduling.plan import PreemptReason as PreemptReason
    from placement.scheduling.plan import Reservation as Reservation
    from placement.scheduling.plan import ReservationKind as ReservationKind
    from placement.scheduling.plan import WaitingJob as WaitingJob
    from placement.scheduling.plan import WaitReason as WaitReason
    from placement.scheduling.plan import apply_plan as apply_plan
    from placement.scheduling.queue_config import queues_from_dict as queues_from_dict
    from placement.scheduling.queue_config import queues_to_dict as queues_to_dict
    from placement.scheduling.queue_yaml import load_queues as load_queues
    from placement.scheduling.queue_yaml import parse_queues_yaml as parse_queues_yaml
    from placement.scheduling.queues import Queue as Queue
    from placement.scheduling.queues import QueueSet as QueueSet
    from placement.scheduling.settings import SchedulingSettings as SchedulingSettings
    from placement.sim.derived_pods import derive as derive
    from placement.sim.derived_pods import parse_variant as parse_variant
    from placement.sim.engine import BatchWindow as BatchWindow
    from placement.sim.engine import JobRecord as JobRecord
    from placement.sim.engine import SimResult as SimResult
    from placement.sim.engine import simulate as simulate
    from placement.sim.fill import FillCurve as FillCurve
    from placement.sim.fill import FillSummary as FillSummary
    from placement.sim.fill import fill as fill
    from placement.sim.fill import parse_seeds as parse_seeds
    from placement.sim.fill import summarise_fill as summarise_fill
    from placement.sim.jobs import SimJob as SimJob
    from placement.sim.jobs import without_sharing as without_sharing
    from placement.sim.metrics import summarise as summarise
    from placement.sim.pod_list import load_openb_pods as load_openb_pods
    from placement.sim.queues import QueuePolicy as QueuePolicy
    from placement.sim.queues import queue_policy as queue_policy
    from placement.sim.runtime import MeasuredRuntime as MeasuredRuntime
    from placement.sim.runtime import Runtime as Runtime
    from placement.sim.runtime import TraceRuntime as TraceRuntime
    from placement.sim.scheduled import JobOutcome as JobOutcome
    from placement.sim.scheduled import ReplayJob as ReplayJob
    from placement.sim.scheduled import ReplayResult as ReplayResult
    from placement.sim.scheduled import ReplaySettings as ReplaySettings
    from placement.sim.scheduled import causal_fill as causal_fill
    from placement.sim.scheduled import compressed as compressed
    from placement.sim.scheduled import queue_of as queue_of
    from placement.sim.scheduled import queues_by_share as queues_by_share
    from placement.sim.scheduled import replay_scheduled as replay_scheduled
    from placement.sim.scheduled_summary import jain as jain
    from placement.sim.scheduled_summary import summarise_replay as summarise_replay

EXPORTS: dict[str, tuple[str, ...]] = {
    "placement.batch.policies": ("BATCH_POLICIES", "BatchPolicy", "BatchResult", "batch_policy"),
    "placement.model.cluster": ("CapacityArrays", "Cluster", "Machine", "build_cluster"),
    "placement.model.cluster_io": ("CLUSTERS", "data_dir", "load_cluster"),
    "placement.model.decision": ("Decision", "Verdict"),
    "placement.model.demand": ("Job", "Role", "Task"),
    "placement.model.errors": ("ClusterSpecError", "InputError", "PodListError", "TopologyError"),
    "placement.model.feasibility": ("Need", "need_of", "violations"),
    "placement.filters": ("FILTERS",),
    "placement.filters.base": ("Filter", "Usage", "usage_of"),
    "placement.model.gpu_types": ("CPU_ONLY", "GPU_MEM_GIB", "KNOWN_TYPES"),
    "placement.model.layout": ("MIB_PER_GIB", "MILLI", "Derived", "Layout"),
    "placement.model.network": ("network_cost", "placement_cost"),
    "placement.online.frag_kernel": ("compile_kernels",),
    "placement.online.nodes": ("FilterResult", "filter_nodes", "place_on", "score_nodes"),
    "placement.online.greedy": ("PlacementConfig", "Step"),
    "placement.online.policies": ("ONLINE_POLICY_NAMES", "OnlinePolicy", "online_policy", "place"),
    "placement.online.scorers": ("SCORERS",),
    "placement.online.scorers.base": ("Scorer", "bounded"),
    "placement.scheduling.cycle": ("schedule",),
    "placement.scheduling.errors": ("QueueConfigError",),
    "placement.scheduling.jobs": ("DurationEstimate", "JobMode", "PendingJob", "RunningJob"),
    "placement.scheduling.orders": ("ORDERS", "queue_order"),
    "placement.scheduling.plan": ("Plan", "PlannedStart", "PreemptReason", "Preemption", "Reservation",
                                  "ReservationKind", "WaitReason", "WaitingJob", "apply_plan"),
    "placement.scheduling.queue_config": ("queues_from_dict", "queues_to_dict"),
    "placement.scheduling.queue_yaml": ("load_queues", "parse_queues_yaml"),
    "placement.scheduling.queues": ("Queue", "QueueSet"),
    "placement.scheduling.settings": ("SchedulingSettings",),
    "placement.sim.engine": ("BatchWindow", "JobRecord", "SimResult", "simulate"),
    "placement.sim.derived_pods": ("derive", "parse_variant"),
    "placement.sim.fill": ("FillCurve", "FillSummary", "fill", "parse_seeds", "summarise_fill"),
    "placement.sim.jobs": ("SimJob", "without_sharing"),
    "placement.sim.metrics": ("summarise",),
    "placement.sim.pod_list": ("load_openb_pods",),
    "placement.sim.queues": ("QueuePolicy", "queue_policy"),
    "placement.sim.runtime": ("MeasuredRuntime", "Runtime", "TraceRuntime"),
    "placement.sim.scheduled": ("JobOutcome", "ReplayJob", "ReplayResult", "ReplaySettings", "causal_fill",
                                "compressed", "queue_of", "queues_by_share", "replay_scheduled"),
    "placement.sim.scheduled_summary": ("jain", "summarise_replay"),
    "placement.model.snapshot": ("Allocation", "ClusterSnapshot", "InstancePlacement", "apply", "at_generation",
                                 "empty_snapshot", "layout_of", "release"),
    "placement.model.speed": ("NO_PROFILES", "REFERENCE_SPEED_TYPE", "SpeedModel", "Spread", "SyncCurve",
                              "WorkloadSpeed"),
    "placement.model.topology": ("DEFAULT_DISTANCE_COST", "DEFAULT_RACK_SIZE", "DEFAULT_RACKS_PER_DOMAIN", "Topology",
                                 "default_topology", "dump_topology_yaml", "load_topology_yaml", "parse_topology_yaml"),
}
"""Module -> the public names it defines (the same names as the imports for type checkers above)."""

_HOME = {name: module for module, names in EXPORTS.items() for name in names}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'placement' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups find it without coming here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
