"""How long a started job runs in the replay: its trace duration, or that duration at the speed of the
placement it got (``placement.model.speed``).

* ``trace``: a job runs for exactly its trace duration wherever it is placed.
* ``measured``: the trace duration is the job's work at its reference placement (reference seconds).
  It runs at ``rate = type x spread x sharing`` (relative throughput), so it ends when the work done,
  the integral of ``rate dt``, reaches its duration. Type and spread are fixed by its allocation;
  sharing changes whenever a job on one of its shared GPUs starts or ends, and then its remaining
  work and end time are recomputed.

Time lost against the reference is ``T - W = integral of (1 - abc) dt`` for factors a (type), b (spread),
c (sharing); it is split exactly, in that order, as ``(1 - a) dt + a (1 - b) dt + ab (1 - c) dt`` per
stretch of constant rate. A faster GPU type than the reference gives a negative "type" loss.

A runtime answers each start and end with the jobs whose end time changed: ``(job index, new end)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from placement.model.snapshot import MIB_PER_GIB, MILLI, Allocation, Layout
from placement.model.speed import SpeedModel, Spread
from placement.sim.jobs import SimJob


@dataclass
class Lost:
    """Seconds a job lost against its reference placement, by cause (type, spread, sharing)."""

    type_s: float = 0.0
    spread_s: float = 0.0
    share_s: float = 0.0


class Runtime(Protocol):
    name: str

    def start(self, i: int, allocation: Allocation, now: float) -> list[tuple[int, float]]: ...

    def finish(self, i: int, now: float) -> list[tuple[int, float]]: ...

    def lost(self, i: int) -> Lost: ...


class TraceRuntime:
    """Every job runs for its trace duration."""

    name = "trace"

    def __init__(self, jobs: Sequence[SimJob]) -> None:
        self.jobs = jobs

    def start(self, i: int, allocation: Allocation, now: float) -> list[tuple[int, float]]:
        return [(i, now + self.jobs[i].duration_s)]

    def finish(self, i: int, now: float) -> list[tuple[int, float]]:
        return []

    def lost(self, i: int) -> Lost:
        return Lost()


@dataclass
class _Running:
    remaining_s: float
    type_factor: float
    spread_factor: float
    shared_gpus: tuple[int, ...]
    since_s: float
    share_factor: float = 1.0
    lost: Lost = field(default_factory=Lost)

    @property
    def rate(self) -> float:
        return self.type_factor * self.spread_factor * self.share_factor


class MeasuredRuntime:
    """Jobs run at the relative throughput of their placement (see the module docstring)."""

    name = "measured"

    def __init__(self, jobs: Sequence[SimJob], layout: Layout, model: SpeedModel) -> None:
        self.jobs, self.layout, self.model = jobs, layout, model
        self.running: dict[int, _Running] = {}
        self.ended: dict[int, Lost] = {}
        self.on_gpu: dict[int, dict[int, float]] = {}
        """Jobs holding a share of each shared GPU, with the share (of one GPU) each holds."""
        self.biggest = _biggest_machines(layout)

    def start(self, i: int, allocation: Allocation, now: float) -> list[tuple[int, float]]:
        job = self.jobs[i]
        gpu_instances = [p for p in allocation.instances if p.gpus]
        types = {self.layout.gpu_types[int(self.layout.gpu_type[p.machine])] for p in gpu_instances}
        type_factor = self.model.type_factor(job.workload_class, types, job.reference_gpu_type) if types else 1.0
        spread_factor = self._spread_factor(job, [p.machine for p in gpu_instances]) if gpu_instances else 1.0
        held: dict[int, float] = {}
        for p in gpu_instances:
            if p.gpu_milli < MILLI:
                for g in p.gpus:
                    held[g] = held.get(g, 0.0) + p.gpu_milli / MILLI
        shared = tuple(sorted(held))
        neighbours = self._settle_neighbours(i, shared, now)
        for g, share in held.items():
            self.on_gpu.setdefault(g, {})[i] = share
        self.running[i] = _Running(job.duration_s, type_factor, spread_factor, shared, now)
        return [self._reschedule(j, now) for j in sorted(neighbours | {i})]

    def finish(self, i: int, now: float) -> list[tuple[int, float]]:
        run = self.running.pop(i)
        _settle(run, now)
        self.ended[i] = run.lost
        for g in run.shared_gpus:
            self.on_gpu[g].pop(i, None)
            if not self.on_gpu[g]:
                del self.on_gpu[g]
        neighbours = self._settle_neighbours(i, run.shared_gpus, now)
        return [self._reschedule(j, now) for j in sorted(neighbours)]

    def lost(self, i: int) -> Lost:
        return self.ended.get(i) or Lost()

    def _settle_neighbours(self, i: int, shared: tuple[int, ...], now: float) -> set[int]:
        neighbours = {j for g in shared for j in self.on_gpu.get(g, ()) if j != i}
        for j in neighbours:
            _settle(self.running[j], now)
        return neighbours

    def _reschedule(self, j: int, now: float) -> tuple[int, float]:
        run = self.running[j]
        run.share_factor = self._share_factor(j, run.shared_gpus)
        return j, now + run.remaining_s / run.rate

    def _share_factor(self, j: int, shared: tuple[int, ...]) -> float:
        workload = self.jobs[j].workload_class
        factors = [self.model.share_factor(workload, [(self.jobs[k].workload_class, share)
                                                      for k, share in sorted(self.on_gpu[g].items()) if k != j])
                   for g in shared]
        return min(factors, default=1.0)

    def _spread_factor(self, job: SimJob, machines: list[int]) -> float:
        """Spread of the placement against the reference: the same replicas packed on the fewest
        machines of the reference type that hold the job's GPUs, CPU and memory, in as few racks and
        domains as those machines need."""
        replicas = len(machines)
        placed = Spread(replicas, len(set(machines)), _level(self.layout, set(machines)))
        biggest = self.biggest.get(job.reference_gpu_type, self.biggest[""])
        totals = (max(job.job.gpus, 1.0), sum(t.cpu_cores * t.instances for t in job.job.tasks),
                  sum(t.mem_gib * t.instances for t in job.job.tasks))
        fewest = min(replicas, max(1, *(math.ceil(total / cap - 1e-9) for total, cap in zip(totals, biggest[:3],
                                                                                          strict=True) if cap > 0)))
        level = 0 if fewest == 1 else 1 if fewest <= biggest[3] else 2 if fewest <= biggest[4] else 3
        return self.model.spread_factor(job.workload_class, placed, Spread(replicas, fewest, level))


def _settle(run: _Running, now: float) -> None:
    """Book the work done and the time lost since the last change of rate."""
    dt = now - run.since_s
    a, b, c = run.type_factor, run.spread_factor, run.share_factor
    run.lost.type_s += dt * (1 - a)
    run.lost.spread_s += dt * a * (1 - b)
    run.lost.share_s += dt * a * b * (1 - c)
    run.remaining_s = max(0.0, run.remaining_s - run.rate * dt)
    run.since_s = now


def _level(layout: Layout, machines: set[int]) -> int:
    """Widest distance class among ``machines``: 0 one machine, 1 one rack, 2 one domain, 3 more."""
    if len(machines) <= 1:
        return 0
    if len({int(layout.rack[m]) for m in machines}) == 1:
        return 1
    return 2 if len({int(layout.domain[m]) for m in machines}) == 1 else 3


def _biggest_machines(layout: Layout) -> dict[str, tuple[float, float, float, int, int]]:
    """Per GPU type ("" = any): the most GPUs, CPU cores and memory GiB of one machine, and the most
    machines of that type in one rack and in one domain."""
    found: dict[str, tuple[float, float, float, int, int]] = {}
    names = [layout.gpu_types[int(t)] for t in layout.gpu_type.tolist()]
    for name in {"", *names}:
        chosen = [m for m, n in enumerate(names) if name in ("", n)]
        racks = np.bincount(layout.rack[chosen]) if chosen else np.zeros(1, np.int64)
        domains = np.bincount(layout.domain[chosen]) if chosen else np.zeros(1, np.int64)
        found[name] = (float(layout.gpu_count[chosen].max(initial=1)), layout.cpu_cap[chosen].max(initial=0) / MILLI,
                       layout.mem_cap[chosen].max(initial=0) / MIB_PER_GIB, int(racks.max()), int(domains.max()))
    return found
