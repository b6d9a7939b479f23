"""The typical instance shapes of recent arrivals, learned online: what the fragmentation scorer (FGD)
expects the next instances to look like.

A shape is what an instance asks of one machine: CPU (milli-cores), GPUs (none, a share of one, or a
number of whole ones) and the GPU types it accepts. :class:`ShapeMix` counts the shapes of the last
``window`` jobs it was asked about (each job once, however often it is asked again while it waits) and
answers the typical ones: every shape in the window (up to the :data:`MAX_SHAPES` most common), each weighted
by its popularity among them (CPU-only instances included). Memory is not part of a shape, as in FGD.

The FGD paper keeps only the most common shapes that together cover 95% of the instances. Learned online,
that cut is where the estimate is noisiest: which rare shapes fall inside it moves with every few hundred
arrivals, and rare shapes that ask for much GPU (8-GPU pods are rare in the openb traces but hold a fair share
of their GPUs) fall outside it, so a cluster that keeps no machine whole could never host them. Counting every
shape left less unallocated on both shipped pod lists (FGD's fill to 130%, seeds 42-51 and 52-71, GPU nodes
and all nodes; the derived workloads within the seeds' noise): docs/placement.md, "The learned mix".

:meth:`ShapeMix.known` is FGD's own setting instead, for experiments only: the typical shapes of a whole pod list,
worked out before the first arrival and never changed (FGD's simulator reads them from the list it replays).

The mix is worked out again only now and then (after a quarter of the window has arrived, or 8 jobs
early on) and handed out under a new version only when it changed: the scorer keeps what it computed
from one version until the next.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass

from placement.model.demand import Job
from placement.model.feasibility import need_of

MAX_SHAPES = 256
"""Shapes a learned mix counts at most (the most common): each one is a column of the fragmentation measure, so a
workload of ever new shapes (CPU asked for in odd amounts) must not make every decision slower."""
MIN_REFRESH_JOBS = 8
"""Early on, the mix is worked out again after this many new jobs."""


@dataclass(frozen=True, order=True)
class Shape:
    """What one instance asks of a machine: CPU, GPUs (``gpus`` whole ones of ``gpu_milli`` = 1000, one
    share of ``gpu_milli`` < 1000, or none), and the GPU types it accepts (empty: any)."""

    cpu_milli: int
    gpu_milli: int
    gpus: int
    gpu_types: tuple[str, ...] = ()

    @property
    def requested_milli(self) -> int:
        return self.gpu_milli * self.gpus


def shapes_of(job: Job) -> Counter[Shape]:
    """Instances of ``job`` per shape."""
    counts: Counter[Shape] = Counter()
    for task in job.tasks:
        need = need_of(task)
        gpus = need.whole_gpus or (1 if need.gpu_milli else 0)
        shape = Shape(need.cpu_milli, need.gpu_milli if gpus else 0, gpus, tuple(sorted(need.gpu_types)))
        counts[shape] += task.instances
    return counts


@dataclass(frozen=True)
class Mix:
    """Typical shapes and how many of the recent instances had each (their weights are these over the sum,
    kept as counts so that sums over them are exact); ``version`` changes when they do."""

    shapes: tuple[Shape, ...]
    counts: tuple[int, ...]
    version: int

    @property
    def weights(self) -> tuple[float, ...]:
        total = sum(self.counts)
        return tuple(c / total for c in self.counts)


class ShapeMix:
    """The typical shapes of the last ``window`` jobs observed (see the module docstring)."""

    def __init__(self, window: int = 4096, coverage: float = 1.0, refresh_share: float = 0.25,
                 tolerance: float = 0.02) -> None:
        self.window, self.coverage, self.refresh_share, self.tolerance = window, coverage, refresh_share, tolerance
        self._known = False
        self._jobs: deque[tuple[str, Counter[Shape]]] = deque()
        self._ids: set[str] = set()
        self._counts: Counter[Shape] = Counter()
        self._since = 0
        self._at_refresh = 0
        self._mix = Mix((), (), 0)
        self._restricted: Counter[tuple[str, ...]] = Counter()
        self._gpu_demand = 0
        self._restricted_view: dict[tuple[str, ...], int] | None = {}
        """:meth:`restricted_demand` as handed out, until a restricted shape enters or leaves the window."""

    @classmethod
    def known(cls, jobs: Sequence[Job], coverage: float = 0.95) -> ShapeMix:
        """The typical shapes of ``jobs`` as FGD's simulator works them out from the pod list it replays (the most
        common covering ``coverage`` of the instances), fixed: what is observed later changes nothing. Not a
        policy's setting: it knows the arrivals in advance."""
        mix = cls(window=max(len(jobs), 1), coverage=coverage)
        for job in jobs:
            mix.observe(job)
        if not mix._jobs:
            raise ValueError("no jobs to work out the typical shapes from")
        mix.current()
        mix._known = True
        return mix

    def observe(self, job: Job) -> None:
        """Count ``job``'s instances (once per job id among the jobs in the window; never, for a :meth:`known`
        mix)."""
        if self._known or job.job_id in self._ids:
            return
        shapes = shapes_of(job)
        self._jobs.append((job.job_id, shapes))
        self._ids.add(job.job_id)
        self._counts.update(shapes)
        self._tally_demand(shapes, 1)
        if len(self._jobs) > self.window:
            gone, counts = self._jobs.popleft()
            self._ids.discard(gone)
            for shape, count in counts.items():
                self._counts[shape] -= count
                if not self._counts[shape]:
                    del self._counts[shape]
            self._tally_demand(counts, -1)
        self._since += 1

    def _tally_demand(self, shapes: Counter[Shape], sign: int) -> None:
        """Keep the window's GPU demand, and its restricted part per set of types, as jobs enter and leave (every
        decision asks for them: summing the window's shapes each time cost a tenth of a decision)."""
        for shape, count in shapes.items():
            milli = sign * count * shape.requested_milli
            self._gpu_demand += milli
            if shape.gpu_types and milli:
                self._restricted[shape.gpu_types] += milli
                if not self._restricted[shape.gpu_types]:
                    del self._restricted[shape.gpu_types]
                self._restricted_view = None

    def restricted_demand(self) -> dict[tuple[str, ...], int]:
        """Milli-GPUs the instances in the window that accept only some GPU types asked for, per set of types
        (every such instance, typical or not). Read-only."""
        if self._restricted_view is None:
            self._restricted_view = dict(self._restricted)
        return self._restricted_view

    def gpu_demand(self) -> int:
        """Milli-GPUs the instances in the window asked for."""
        return self._gpu_demand

    def current(self) -> Mix:
        """The typical shapes, worked out again if enough jobs arrived since the last time."""
        due = max(MIN_REFRESH_JOBS, self.refresh_share * min(self._at_refresh, self.window))
        if self._jobs and not self._known and (not self._mix.shapes or self._since >= due):
            shapes, counts = typical(self._counts, self.coverage)
            if not _close(self._mix, shapes, counts, self.tolerance):
                self._mix = Mix(shapes, counts, self._mix.version + 1)
            self._since, self._at_refresh = 0, len(self._jobs)
        return self._mix


def typical(counts: Counter[Shape], coverage: float,
            most: int = MAX_SHAPES) -> tuple[tuple[Shape, ...], tuple[int, ...]]:
    """The most common shapes covering ``coverage`` of the instances (at most ``most`` of them), and their counts
    (most common first; ties: by shape)."""
    by_count = sorted(counts, key=lambda s: (-counts[s], s))
    shapes = tuple(_covering(by_count, [counts[s] for s in by_count], coverage)[:most])
    return shapes, tuple(counts[s] for s in shapes)


def _covering(ordered: list[Shape], amounts: list[int], coverage: float) -> list[Shape]:
    """The first of ``ordered`` whose ``amounts`` add up to ``coverage`` of them all."""
    goal, total = coverage * sum(amounts), 0
    for k, amount in enumerate(amounts):
        total += amount
        if total >= goal:
            return ordered[:k + 1]
    return ordered


def _close(mix: Mix, shapes: tuple[Shape, ...], counts: tuple[int, ...], tolerance: float) -> bool:
    """Whether ``shapes`` are ``mix``'s and their weights within ``tolerance`` of its weights in sum (L1)."""
    if set(mix.shapes) != set(shapes):
        return False
    old, total = dict(zip(mix.shapes, mix.weights, strict=True)), sum(counts)
    return sum(abs(old[s] - c / total) for s, c in zip(shapes, counts, strict=True)) <= tolerance
