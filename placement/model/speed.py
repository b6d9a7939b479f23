"""How fast a job runs where it was placed, relative to its reference placement: plain data and functions.

The reference placement of a job is the one its trace duration is taken to have been measured on:
packed on the fewest machines of its own GPU type (its ``reference_type``), in one rack, no GPU shared.
A placement's **relative throughput** is the product of three factors, each 1 at the reference:

* **type** = ``speed(placed type) / speed(reference type)`` per workload class, speeds relative to V100;
  a job on several types runs at its slowest (synchronous data parallelism waits for the last replica).
  Cluster types no profile measured are mapped onto a measured one by ``type_aliases`` (a documented
  assumption, e.g. T4 -> P100 x 0.87 by peak FP32).
* **spread** = ``step(reference) / step(placed)`` with Pollux's iteration-time model (OSDI'21), in
  seconds per step at the class's reference local batch, ``K`` replicas on ``n`` machines:

      sync(K, n) = 0                                      K = 1
                 = local_s[0] + local_s[1] x (K - 2)      n = 1
                 = (network_s[0] + network_s[1] x (K - 2)) x level_factor[level]   n > 1
      step       = (grad_s ** gamma + sync ** gamma) ** (1 / gamma)      (gamma >= 1: overlap)

  ``level`` is the widest distance class the placement crosses (1 one rack, 2 one domain, 3 several
  domains). The profiles measured machines on one switch only, so the factors for crossing racks and
  domains are an assumption of the model, stated where the model is built.
* **sharing** = ``1 / (1 + sum over its neighbours on the GPU of share_n x (1 / colocated[class_n] - 1))``.
  ``colocated[k]`` is the share of its solo throughput a job of this class kept beside one job of class
  k when both used the whole GPU (measured in pairs), so ``1 / colocated - 1`` is the load that
  neighbour put on it. Two assumptions extend the pairs: loads of several neighbours add (k equal jobs
  time-slice to 1/k each), and a neighbour holding a share ``share_n`` of the GPU puts ``share_n`` of a
  whole-GPU neighbour's load on it. A job on several GPUs runs at its slowest replica's factor.

CPU-only jobs and jobs of an unknown class run at 1: no profile measures them. This module is pure
data and arithmetic, so the replay (``placement.sim``) applies it without the ML stack that fits it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from types import MappingProxyType
from typing import Any

REFERENCE_SPEED_TYPE = "V100"
"""The GPU type every class's ``type_speed`` is relative to."""


@dataclass(frozen=True)
class SyncCurve:
    """Pollux's iteration time of one workload class at its reference local batch (seconds)."""

    grad_s: float
    local_s: tuple[float, float]
    network_s: tuple[float, float]
    gamma: float = 1.0

    def __post_init__(self) -> None:
        values = (self.grad_s, *self.local_s, *self.network_s, self.gamma)
        if not all(math.isfinite(v) for v in values) or self.grad_s <= 0 or self.gamma < 1:
            raise ValueError(f"a sync curve needs finite values, grad_s > 0 and gamma >= 1: {self}")

    def sync_s(self, replicas: int, machines: int, network_factor: float = 1.0) -> float:
        """Gradient synchronisation time of one step, s (never negative)."""
        if replicas <= 1:
            return 0.0
        if machines <= 1:
            a, b = self.local_s
            return max(0.0, a + b * (replicas - 2))
        a, b = self.network_s
        return max(0.0, (a + b * (replicas - 2)) * network_factor)

    def step_s(self, replicas: int, machines: int, network_factor: float = 1.0) -> float:
        """One training step, s: compute and synchronisation, overlapped as ``gamma`` says."""
        sync = self.sync_s(replicas, machines, network_factor)
        g = self.gamma
        return float((self.grad_s ** g + sync ** g) ** (1.0 / g))


@dataclass(frozen=True)
class WorkloadSpeed:
    """One workload class: its sync curve, its speed per measured GPU type and its co-location factors."""

    name: str
    sync: SyncCurve
    type_speed: Mapping[str, float]
    """Throughput on each measured GPU type relative to V100 (V100 = 1)."""
    colocated: Mapping[str, float]
    """Share of its solo throughput kept beside one job of each class, 0..1."""

    def __post_init__(self) -> None:
        for label, table in (("type_speed", self.type_speed), ("colocated", self.colocated)):
            bad = {k: v for k, v in table.items() if not (math.isfinite(v) and v > 0)}
            if bad:
                raise ValueError(f"workload {self.name!r}: {label} must be finite and > 0, got {bad}")


@dataclass(frozen=True)
class Spread:
    """Where a job's replicas run: how many replicas, on how many machines, and the widest level crossed
    (0 one machine, 1 one rack, 2 one domain, 3 several domains)."""

    replicas: int
    machines: int
    level: int


@dataclass(frozen=True)
class SpeedModel:
    """Workload classes with their measured behaviour, and the assumptions that map them onto a cluster."""

    workloads: Mapping[str, WorkloadSpeed]
    type_aliases: Mapping[str, tuple[str, float]] = field(default_factory=lambda: MappingProxyType({}))
    """Cluster GPU type -> (measured type, speed multiplier): how an unmeasured type is assumed to run."""
    level_factor: tuple[float, float, float] = (1.0, 2.0, 4.0)
    """Multiplier of cross-machine sync time within a rack, across racks, across domains (assumed)."""
    default_colocated: float = 0.5
    """Share of solo throughput kept beside a job of a class without a co-location factor (assumed)."""
    provenance: str = ""
    _speeds: dict[tuple[str, tuple[str, ...]], tuple[float | None, ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False)
    """:meth:`speeds_on` by its arguments (a memo, not part of the model)."""

    def speed_of(self, workload: str, gpu_type: str) -> float | None:
        """Throughput of ``workload`` on ``gpu_type`` relative to V100; None where nothing is known."""
        known = self.workloads.get(workload)
        if known is None:
            return None
        measured, multiplier = self.type_aliases.get(gpu_type, (gpu_type, 1.0))
        base = known.type_speed.get(measured)
        return None if base is None else base * multiplier

    def speeds_on(self, workload: str, gpu_types: tuple[str, ...]) -> tuple[float | None, ...]:
        """:meth:`speed_of` ``workload`` on each of ``gpu_types`` (worked out once per model and arguments)."""
        key = (workload, gpu_types)
        found = self._speeds.get(key)
        if found is None:
            found = self._speeds[key] = tuple(self.speed_of(workload, name) for name in gpu_types)
        return found

    def type_factor(self, workload: str, placed_types: Iterable[str], reference_type: str) -> float:
        """Relative throughput from the GPU types placed on (the slowest counts); 1 where the reference
        or a placed type is unknown to the model (a typeless big node, a job whose type is not known)."""
        reference = self.speed_of(workload, reference_type)
        speeds = [self.speed_of(workload, t) for t in placed_types]
        if reference is None or not speeds or any(s is None for s in speeds):
            return 1.0
        return min(s for s in speeds if s is not None) / reference

    def spread_factor(self, workload: str, placed: Spread, reference: Spread) -> float:
        """Relative throughput from how the replicas are spread (1 for the reference spread)."""
        known = self.workloads.get(workload)
        if known is None:
            return 1.0
        return known.sync.step_s(reference.replicas, reference.machines, self.network_factor(reference.level)) / \
            known.sync.step_s(placed.replicas, placed.machines, self.network_factor(placed.level))

    def step_s(self, workload: str, spread: Spread) -> float | None:
        """One step of ``workload`` spread as ``spread``, s; None for an unknown class."""
        known = self.workloads.get(workload)
        return None if known is None else known.sync.step_s(spread.replicas, spread.machines,
                                                             self.network_factor(spread.level))

    def share_factor(self, workload: str, neighbours: Iterable[tuple[str, float]]) -> float:
        """Relative throughput beside ``neighbours``: (class, share of the GPU held) of the other jobs on
        the same GPU."""
        known = self.workloads.get(workload)
        if known is None:
            return 1.0
        load = sum(share * (1.0 / known.colocated.get(other, self.default_colocated) - 1.0)
                   for other, share in neighbours)
        return 1.0 / (1.0 + load)

    def network_factor(self, level: int) -> float:
        """Multiplier of cross-machine sync time at distance ``level`` (1 rack, 2 domain, 3 beyond)."""
        return self.level_factor[min(max(level, 1), 3) - 1]

    def to_json(self) -> str:
        return json.dumps(_plain(self), indent=1, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> SpeedModel:
        raw = json.loads(text)
        workloads = {name: WorkloadSpeed(name, SyncCurve(w["sync"]["grad_s"], tuple(w["sync"]["local_s"]),
                                                         tuple(w["sync"]["network_s"]), w["sync"]["gamma"]),
                                         MappingProxyType(dict(w["type_speed"])),
                                         MappingProxyType(dict(w["colocated"])))
                     for name, w in raw["workloads"].items()}
        aliases = {k: (str(v[0]), float(v[1])) for k, v in raw["type_aliases"].items()}
        return SpeedModel(MappingProxyType(workloads), MappingProxyType(aliases), tuple(raw["level_factor"]),
                          float(raw["default_colocated"]), str(raw["provenance"]))


NO_PROFILES = SpeedModel(MappingProxyType({}), provenance="no profiled classes: the assumed level factors only")
"""The speed model of a placement without profiles: what Liquid charges a job with its own predicted
curve (``Job.sync_curve``) for crossing racks and domains."""


def _plain(value: Any) -> Any:
    """JSON-ready copy of the model's dataclasses, mappings and tuples."""
    if is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value) if f.compare}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value
