"""The filter extension point: what a filter reads (:class:`Usage`) and answers (:class:`Filter`).

A filter is one rule a machine must pass to host one more instance of a demand (a
:class:`~placement.model.feasibility.Need`), as in the Kubernetes scheduler framework's Filter plugins. It
answers for every machine at once (``mask``, numpy), for one machine (``fits_at``, Python scalars, for
the loops that change one machine at a time) and, for a machine it rules out, why, in words a person
can act on (``reason``). It also says how many instances the rule lets each machine take: ``room_bound``
for every machine (an upper bound, cheap: a GPU share's GPU memory is left out) and ``room_at`` for one
(exact). The usage it reads is a snapshot's (:func:`usage_of`) or a decision's scratch copy
(``placement.online.working.WorkingState``): both have the same names.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from placement.model.layout import BoolArray, IntArray, Layout

if TYPE_CHECKING:
    from placement.model.feasibility import Need
    from placement.model.snapshot import ClusterSnapshot

UNBOUNDED = 1 << 30
"""Instances a machine can take by a rule that does not limit them (a count no task reaches)."""

T = TypeVar("T")


class Usage(Protocol):
    """What is allocated now, per GPU (``gpu_milli``, ``gpu_mem``) and per machine (``cpu``, ``mem``,
    ``free_whole``: GPUs with neither a share nor memory taken), in the units of ``placement.model.layout``."""

    @property
    def layout(self) -> Layout: ...

    @property
    def gpu_milli(self) -> IntArray: ...

    @property
    def gpu_mem(self) -> IntArray: ...

    @property
    def cpu(self) -> IntArray: ...

    @property
    def mem(self) -> IntArray: ...

    @property
    def free_whole(self) -> IntArray: ...

    def remember(self, key: Hashable, make: Callable[[], T]) -> T:
        """``make()``, kept under ``key`` where the usage cannot change (a snapshot's)."""
        ...


class SnapshotUsage:
    """A snapshot's usage under the names filters read. A snapshot never changes, so what is worked out
    from it is remembered (:meth:`remember`, in ``kept`` where given: a table several usages of one snapshot
    share). ``free_whole`` may be given: the free whole GPUs after instances placed since the snapshot was
    taken (see ``placement.online.explain``)."""

    def __init__(self, snapshot: ClusterSnapshot, free_whole: IntArray | None = None,
                 kept: dict[Hashable, object] | None = None) -> None:
        self.snapshot = snapshot
        self.layout = snapshot.layout
        self.gpu_milli = snapshot.gpu_milli_used
        self.gpu_mem = snapshot.gpu_mem_used
        self.cpu = snapshot.cpu_used
        self.mem = snapshot.mem_used
        self._free_whole = free_whole
        self._kept: dict[Hashable, object] = {} if kept is None else kept

    @property
    def free_whole(self) -> IntArray:
        # the snapshot derives it when first read: a demand without whole GPUs never pays for it
        return self.snapshot.machine_free_whole if self._free_whole is None else self._free_whole

    def remember(self, key: Hashable, make: Callable[[], T]) -> T:
        if key not in self._kept:
            self._kept[key] = make()
        found: T = self._kept[key]  # type: ignore[assignment]  # stored by this method under this key
        return found


def usage_of(snapshot: ClusterSnapshot) -> SnapshotUsage:
    """The usage of ``snapshot``, for filters."""
    return SnapshotUsage(snapshot)


class Filter(Protocol):
    """One rule a machine must pass to host one more instance (see the module docstring).

    A filter that does not apply to a demand (``applies`` false: a type rule for a job that names no
    type) passes every machine. ``standing`` filters rule out the same machines whatever is allocated
    (they read the layout only): waiting cannot change their verdict. No filter passes a machine it fails, or
    lets it take more instances, when more is in use on it: the scheduling cycle's shortcuts stand on that
    (taking running jobs away only frees room; ``tests/placement/test_filters.py`` holds every filter to it).
    """

    name: str
    standing: bool

    def applies(self, need: Need) -> bool:
        """Whether the rule constrains ``need`` at all."""
        ...

    def mask(self, usage: Usage, need: Need) -> BoolArray:
        """Per machine: whether the rule lets it host one more instance of ``need``."""
        ...

    def fits_at(self, usage: Usage, need: Need, machine: int) -> bool:
        """``mask(usage, need)[machine]``, worked out for that machine alone."""
        ...

    def reason(self, usage: Usage, need: Need, machine: int) -> str | None:
        """Why the rule rules ``machine`` out, with the figures to act on; ``None`` where it passes."""
        ...

    def summary(self, usage: Usage, need: Need, rejected: int, allowed: BoolArray) -> str:
        """Why the rule ruled out ``rejected`` machines, with the best figure among the ``allowed`` ones
        (those the standing filters pass)."""
        ...

    def room_bound(self, usage: Usage, need: Need) -> IntArray | None:
        """Per machine: at most how many more instances the rule lets it take (``None``: no limit)."""
        ...

    def room_at(self, usage: Usage, need: Need, machine: int) -> int | None:
        """Exactly how many more instances the rule lets ``machine`` take (``None``: no limit)."""
        ...


def most(values: npt.NDArray[np.generic], allowed: BoolArray) -> float:
    """The largest of ``values`` over the ``allowed`` entries; 0 if none is allowed."""
    kept = values[allowed]
    return float(kept.max()) if kept.size else 0.0


def largest(usage: Usage, name: str, values: Callable[[], npt.NDArray[np.generic]], allowed: BoolArray) -> float:
    """``most(values(), allowed)``, kept with ``usage`` per ``name`` and allowed machines: the reasons of every
    demand asked about on one usage read the same few (most allow every machine, or those of one GPU type)."""
    return usage.remember((name, allowed.tobytes()), lambda: most(values(), allowed))
