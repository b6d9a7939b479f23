"""A cluster in integer units (its :class:`Layout`), and what the policies derive from it (:class:`Derived`).

Amounts are integers so that placing and releasing a job restores the exact prior state: GPU share
in milli-GPUs (1000 = one whole GPU), memory in MiB, CPU in milli-cores. Demands are rounded **up**
to these units and capacities **down**, so rounding never over-allocates.

Every cluster has one layout (``Cluster.layout``), built when first asked for and shared by all the
cluster's snapshots. The layout owns one :class:`Derived`: the per-machine tables that the policies
would otherwise work out again on every decision (where each machine is, which machines have a GPU
type, the tier and speed cost of each machine's type, whether a job shape fits the empty cluster).
An entry that depends on more than the layout is keyed by the values it depends on: a tier table by
the tier of each of the layout's GPU types, a type cost by the speed of each type (the configuration
and the speed model remember those per tuple of types: ``PlacementConfig.tiers_of``,
``SpeedModel.speeds_on``). Equal configurations share an entry and a changed configuration gets its
own; nothing is keyed by object identity. Tables keyed by job shapes or configurations are bounded
(emptied when full).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Generic, TypeVar

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from placement.model.cluster import CapacityArrays
    from placement.model.demand import Task
    from placement.model.snapshot import ClusterSnapshot
    from placement.model.states import StateIds

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
MILLI = 1000
MIB_PER_GIB = 1024
FEW_GPUS_PER_MACHINE = 64
"""Up to this many GPUs a machine's GPUs are handled as Python integers (faster than numpy calls); above it (a
"big node" of thousands of GPUs) in numpy, and a cluster of such machines alone sums over each machine's run of
GPUs (``Derived.gpu_starts``)."""

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
A = TypeVar("A", bound=npt.NDArray[np.generic])


def up(amount: float, per_unit: int) -> int:
    """``amount`` in integer units, rounded up (a demand)."""
    return 0 if amount <= 0 else math.ceil(amount * per_unit - 1e-9)


def down(amount: float, per_unit: int) -> int:
    """``amount`` in integer units, rounded down (a capacity)."""
    return max(0, math.floor(amount * per_unit + 1e-9))


def frozen(array: A) -> A:
    """``array``, made read-only."""
    array.setflags(write=False)  # not through ``array.flags``, which makes a flags object first (twice the time)
    return array


@dataclass(frozen=True)
class Layout:
    """Integer capacities of a cluster and where its GPUs are (shared by all its snapshots).

    GPU ``g`` sits on machine ``gpu_machine[g]``; machine ``m`` has GPUs ``gpu_first[m]`` to
    ``gpu_first[m] + gpu_count[m] - 1``. ``rack``, ``domain`` and ``gpu_type`` index the cluster's
    racks, domains and ``gpu_types``. ``derived`` holds what is worked out from the layout once.
    """

    gpu_machine: IntArray
    gpu_mem_cap: IntArray
    gpu_first: IntArray
    gpu_count: IntArray
    cpu_cap: IntArray
    mem_cap: IntArray
    rack: IntArray
    domain: IntArray
    gpu_type: IntArray
    gpu_types: tuple[str, ...]
    derived: Derived = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "derived", Derived(self))

    def per_machine(self, per_gpu: npt.NDArray[np.int64] | npt.NDArray[np.bool_]) -> IntArray:
        """The sum of ``per_gpu`` (integers or flags, one per GPU) over each machine's GPUs."""
        starts = self.derived.gpu_starts
        if starts is not None:
            summed: IntArray = np.add.reduceat(per_gpu.astype(np.int64, copy=False), starts)
            return summed
        return np.bincount(self.gpu_machine, weights=per_gpu, minlength=len(self.cpu_cap)).astype(np.int64)

    @staticmethod
    def of(caps: CapacityArrays) -> Layout:
        """The layout of a cluster given as columns (``Cluster.capacity_arrays``)."""
        gpus = np.asarray(caps.gpus, dtype=np.int64)
        first = np.concatenate([[0], np.cumsum(gpus)[:-1]]).astype(np.int64)
        return Layout(
            gpu_machine=frozen(np.repeat(np.arange(len(gpus), dtype=np.int64), gpus)),
            gpu_mem_cap=frozen(np.repeat([down(m, MIB_PER_GIB) for m in caps.gpu_mem_gib], gpus).astype(np.int64)),
            gpu_first=frozen(first),
            gpu_count=frozen(gpus.copy()),
            cpu_cap=frozen(np.array([down(c, MILLI) for c in caps.cpu_cores], dtype=np.int64)),
            mem_cap=frozen(np.array([down(m, MIB_PER_GIB) for m in caps.mem_gib], dtype=np.int64)),
            rack=caps.rack_index, domain=caps.domain_index, gpu_type=caps.gpu_type_index, gpu_types=caps.gpu_types,
        )


class Places:
    """Where each machine is, for network costs: its rack and domain as Python lists (one machine at a
    time) and as arrays (every machine at once), and read-only zero sums per machine, rack and domain."""

    def __init__(self, rack: IntArray, domain: IntArray) -> None:
        self.rack, self.domain = rack, domain
        self.rack_of: list[int] = rack.tolist()
        self.domain_of: list[int] = domain.tolist()
        racks = int(rack.max()) + 1 if len(rack) else 0
        domains = int(domain.max()) + 1 if len(domain) else 0
        self.zeros = (frozen(np.zeros(len(rack))), frozen(np.zeros(racks)), frozen(np.zeros(domains)))

    @cached_property
    def rack_members(self) -> list[IntArray]:
        """The machines of each rack, ascending (read-only)."""
        return _members(self.rack, len(self.zeros[1]))

    @cached_property
    def domain_members(self) -> list[IntArray]:
        """The machines of each domain, ascending (read-only)."""
        return _members(self.domain, len(self.zeros[2]))


def _members(group: IntArray, groups: int) -> list[IntArray]:
    order = np.argsort(group, kind="stable")
    return [frozen(part) for part in np.split(order, np.cumsum(np.bincount(group, minlength=groups))[:-1])]


class Table(Generic[K, V]):
    """Derived values by key, at most ``limit`` of them (the table is emptied when full)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._entries: dict[K, V] = {}

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The value for ``key``, made by ``make`` the first time it is asked for."""
        found = self._entries.get(key)
        if found is None:
            if len(self._entries) >= self.limit:
                self._entries.clear()
            found = self._entries[key] = make()
        return found

    def __len__(self) -> int:
        return len(self._entries)


class Derived:
    """What the policies work out from one layout, worked out once (see the module docstring).

    The fixed entries are built when first read; the keyed tables are filled by the modules that
    compute them (``placement.filters.gpu_type`` the type masks and rooms, ``placement.filters.gpu_share`` the
    share memory, ``placement.online.greedy`` the tiers
    and the empty-cluster verdicts, ``placement.online.type_cost`` the type costs, ``placement.model.snapshot`` the
    empty snapshot).
    """

    def __init__(self, layout: Layout) -> None:
        self.layout = layout
        self.type_masks: Table[frozenset[str], BoolArray] = Table(4096)
        """Machines whose GPU type is one of the key's."""
        self.type_rooms: Table[frozenset[str], IntArray] = Table(4096)
        """Per machine, the instances the type rule lets it take: unbounded on the key's types, else 0."""
        self.tiers: Table[tuple[int, ...], tuple[FloatArray, FloatArray]] = Table(256)
        """Per machine, its type's tier and that tier scaled to 0..1, by the tier of each of ``gpu_types``."""
        self.type_costs: Table[tuple[float | None, ...], FloatArray] = Table(1024)
        """Per machine, seconds lost per hour of work on its type, by the speed of each of ``gpu_types``."""
        self.fits_empty: Table[tuple[Task, ...], bool] = Table(4096)
        """Whether a job of these tasks fits the cluster with nothing allocated."""
        self.empty_snapshot: ClusterSnapshot | None = None
        """The cluster's snapshot with nothing allocated."""
        self.share_mem: Table[float, IntArray] = Table(1024)
        """Per GPU, the memory (MiB) a share of the key (a fraction of a GPU, proportional memory) takes."""

    @cached_property
    def places(self) -> Places:
        """Rack and domain of every machine."""
        return Places(self.layout.rack, self.layout.domain)

    @cached_property
    def state_ids(self) -> StateIds:
        """The ids of the machine states met on the layout (``placement.model.states``)."""
        from placement.model.states import StateIds  # that module imports this one

        return StateIds(self.layout)

    @cached_property
    def gpu_starts(self) -> IntArray | None:
        """Where each machine's GPUs begin, for :meth:`Layout.per_machine` on a cluster of large machines only
        (:data:`FEW_GPUS_PER_MACHINE`), whose sums per machine it then adds up in contiguous runs: on a node of
        thousands of GPUs a quarter of the time of a weighted ``bincount``, which is the faster on many machines of
        a few GPUs; ``None`` where that one is used."""
        layout = self.layout
        if not len(layout.gpu_count) or int(layout.gpu_count.min()) <= FEW_GPUS_PER_MACHINE:
            return None
        return layout.gpu_first

    @cached_property
    def type_index(self) -> dict[str, int]:
        """The index of each of ``gpu_types`` (read-only)."""
        return {t: k for k, t in enumerate(self.layout.gpu_types)}

    @cached_property
    def all_machines(self) -> BoolArray:
        """A read-only mask that admits every machine."""
        return frozen(np.ones(len(self.layout.cpu_cap), dtype=bool))
