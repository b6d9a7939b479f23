"""The cluster model: machines with their capacities, and the cluster that holds them and their topology."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from placement.model.gpu_types import CPU_ONLY, GPU_MEM_GIB, gpu_mem_gib
from placement.model.layout import Layout
from placement.model.topology import DEFAULT_RACK_SIZE, DEFAULT_RACKS_PER_DOMAIN, Topology, default_topology

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Machine:
    """One machine: ``gpus`` GPUs of ``gpu_type`` (``"CPU"`` and 0 GPUs for a CPU-only machine).

    ``gpu_mem_gib`` is the memory of ONE GPU. Left at its default (NaN) it is taken from
    ``placement.model.gpu_types`` (0 for CPU-only); give it to override the table or to use a GPU type the
    table does not know. The constructor raises ``ValueError`` for an impossible machine.
    """

    name: str
    gpu_type: str
    gpus: int
    cpu_cores: float
    mem_gib: float
    gpu_mem_gib: float = math.nan

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a machine needs a name")
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 0:
            raise ValueError(f"machine {self.name!r}: gpus must be a whole number >= 0 (got {self.gpus!r})")
        if (self.gpu_type == CPU_ONLY) != (self.gpus == 0):
            raise ValueError(f"machine {self.name!r}: gpu_type {self.gpu_type!r} with {self.gpus} GPUs")
        if math.isnan(self.gpu_mem_gib):
            if self.gpu_type != CPU_ONLY and self.gpu_type not in GPU_MEM_GIB:
                problem = f"unknown GPU type {self.gpu_type!r}; give gpu_mem_gib"
                raise ValueError(f"machine {self.name!r}: {problem}")
            object.__setattr__(self, "gpu_mem_gib", gpu_mem_gib(self.gpu_type))
        amounts = {"cpu_cores": self.cpu_cores, "mem_gib": self.mem_gib, "gpu_mem_gib": self.gpu_mem_gib}
        for label, amount in amounts.items():
            if not math.isfinite(amount) or amount < 0:
                raise ValueError(f"machine {self.name!r}: {label} must be finite and >= 0 (got {amount})")

    @property
    def total_gpu_mem_gib(self) -> float:
        """Memory of all GPUs of the machine, GiB."""
        return self.gpus * self.gpu_mem_gib


@dataclass(frozen=True)
class CapacityArrays:
    """Column view of a cluster for vectorised placement: row ``i`` is ``cluster.machines[i]``.

    ``*_index`` arrays index into the matching name tuple (``gpu_types``, ``racks``, ``domains``).
    All arrays are read-only.
    """

    names: tuple[str, ...]
    gpus: IntArray
    cpu_cores: FloatArray
    mem_gib: FloatArray
    gpu_mem_gib: FloatArray
    gpu_types: tuple[str, ...]
    gpu_type_index: IntArray
    racks: tuple[str, ...]
    rack_index: IntArray
    domains: tuple[str, ...]
    domain_index: IntArray


def _int_array(values: Iterable[int]) -> IntArray:
    array = np.fromiter(values, dtype=np.int64)
    array.flags.writeable = False
    return array


def _float_array(values: Iterable[float]) -> FloatArray:
    array = np.fromiter(values, dtype=np.float64)
    array.flags.writeable = False
    return array


@dataclass(frozen=True)
class Cluster:
    """A named set of machines (order kept as given) and the topology that places all of them.

    The constructor raises ``ValueError`` for duplicate machine names or a topology that does not
    place exactly the cluster's machines.
    """

    name: str
    machines: tuple[Machine, ...]
    topology: Topology

    def __post_init__(self) -> None:
        object.__setattr__(self, "machines", tuple(self.machines))
        names = Counter(m.name for m in self.machines)
        if duplicates := sorted(name for name, count in names.items() if count > 1):
            raise ValueError(f"cluster {self.name!r}: duplicate machine names {duplicates[:5]}")
        placed = set(self.topology.machines)
        if placed != names.keys():
            extra, unplaced = sorted(placed - names.keys())[:5], sorted(names.keys() - placed)[:5]
            raise ValueError(
                f"cluster {self.name!r}: the topology does not match (extra {extra}, unplaced {unplaced})"
            )

    def __len__(self) -> int:
        return len(self.machines)

    @cached_property
    def index(self) -> Mapping[str, int]:
        """Machine name -> position in ``machines``."""
        return MappingProxyType({m.name: i for i, m in enumerate(self.machines)})

    def machine(self, name: str) -> Machine:
        """The machine called ``name``; ``KeyError`` if there is none."""
        return self.machines[self.index[name]]

    @property
    def total_gpus(self) -> int:
        """Number of GPUs in the cluster."""
        return sum(m.gpus for m in self.machines)

    def gpus_by_type(self) -> dict[str, int]:
        """GPU type -> number of GPUs, sorted by type; CPU-only machines are left out."""
        counts: dict[str, int] = {}
        for m in self.machines:
            if m.gpus:
                counts[m.gpu_type] = counts.get(m.gpu_type, 0) + m.gpus
        return dict(sorted(counts.items()))

    def machines_by_type(self) -> dict[str, int]:
        """GPU type (``"CPU"`` for CPU-only) -> number of machines, sorted by type."""
        counts: dict[str, int] = {}
        for m in self.machines:
            counts[m.gpu_type] = counts.get(m.gpu_type, 0) + 1
        return dict(sorted(counts.items()))

    @cached_property
    def _capacity_arrays(self) -> CapacityArrays:
        topology = self.topology
        gpu_types = tuple(sorted({m.gpu_type for m in self.machines}))
        type_pos = {t: i for i, t in enumerate(gpu_types)}
        rack_pos = {r: i for i, r in enumerate(topology.racks)}
        domain_pos = {d: i for i, d in enumerate(topology.domains)}
        ms = self.machines
        return CapacityArrays(
            names=tuple(m.name for m in ms),
            gpus=_int_array(m.gpus for m in ms),
            cpu_cores=_float_array(m.cpu_cores for m in ms),
            mem_gib=_float_array(m.mem_gib for m in ms),
            gpu_mem_gib=_float_array(m.gpu_mem_gib for m in ms),
            gpu_types=gpu_types,
            gpu_type_index=_int_array(type_pos[m.gpu_type] for m in ms),
            racks=topology.racks,
            rack_index=_int_array(rack_pos[topology.rack_of(m.name)] for m in ms),
            domains=topology.domains,
            domain_index=_int_array(domain_pos[topology.domain_of(m.name)] for m in ms),
        )

    def capacity_arrays(self) -> CapacityArrays:
        """The cluster as read-only numpy columns (built once, then cached)."""
        return self._capacity_arrays

    @cached_property
    def layout(self) -> Layout:
        """The cluster in integer units, with what is derived from it (``placement.model.layout``; built once)."""
        return Layout.of(self.capacity_arrays())


def build_cluster(
    name: str,
    machines: Iterable[Machine],
    topology: Topology | None = None,
    rack_size: int = DEFAULT_RACK_SIZE,
    racks_per_domain: int = DEFAULT_RACKS_PER_DOMAIN,
) -> Cluster:
    """A cluster of ``machines`` with ``topology``, or the default topology (``rack_size``,
    ``racks_per_domain``; see ``placement.model.topology``) when it is ``None``."""
    machines = tuple(machines)
    if topology is None:
        topology = default_topology(machines, rack_size, racks_per_domain)
    return Cluster(name, machines, topology)
