"""The fill-to-capacity experiment of the FGD paper (Weng et al., ATC'23): how much GPU capacity a policy
leaves unallocated as ever more pods arrive and none leaves.

Per seed, the arrivals are every pod of the list in an order shuffled by the seed, then pods drawn from
the list with replacement (the same random stream) until the first whose per-GPU share would take the GPUs
requested past ``to`` x the cluster's GPUs (a pod of several whole GPUs may still pass it, as in FGD's
simulator; a list asking for more than the target loses pods drawn at random instead, until it fits). The
machines are taken in an order the same stream draws. The stream is Go's ``math/rand`` drawn as FGD's
simulator draws it (``placement.sim.go_random``): seeded, one value drawn, the pods sorted by name and
shuffled, the pods to add or remove picked with ``Intn`` from the list sorted by name, then, after
:data:`DRAWS_BEFORE_NODE_ORDER` more values, ``rand.Perm`` over the machines sorted by name, which the
simulator gives as name prefixes that order its nodes (and so its ties between equal scores). A seed's
arrivals and machine order are that simulator's for the same seed, and the two curves of one seed compare
pod for pod. Each arrival is decided on the cluster as the earlier ones left it, by an online policy
registered by name (the same ones the service and the replay run); a placed pod stays, one that does not
fit is dropped. After each arrival:

    arrived_pct     = 100 x (milli-GPUs requested by the arrivals so far) / (cluster milli-GPUs)
    unallocated_pct = 100 x (cluster milli-GPUs - milli-GPUs allocated)   / (cluster milli-GPUs)

A curve read at ``x`` % arrived is the state after the last arrival with ``arrived_pct <= x``. The state
is one snapshot, updated by each placed pod (``placement.apply`` copies the usage arrays and carries the
per-machine sums over, recomputed on the machines the pod touched); nothing is rebuilt per arrival.

``known_mix=True`` gives the learning policies FGD's own knowledge instead of what they learn online: the typical
shapes of the whole pod list before the first arrival (``ShapeMix.known``). With it, ``fgd`` decides the first
4,882 arrivals of seed 47 of the default pod list on FGD's cluster as FGD's simulator does, up to a tie FGD's
floating-point sums break (``tests/placement/test_fill_beside_fgd.py``); it measures what learning the mix online
costs, and is not a policy a cluster could run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from placement.model.cluster import Cluster, build_cluster
from placement.model.decision import Verdict
from placement.model.demand import Job
from placement.model.layout import MILLI
from placement.model.snapshot import ClusterSnapshot, apply
from placement.online.greedy import PlacementConfig
from placement.online.policies import online_policy
from placement.online.shape_mix import ShapeMix
from placement.sim.go_random import GoRand

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
REPORTED_EVERY_PCT = 10
"""The summary reads the curves at 90, 100, 110, ... % arrived (up to the fill's end)."""
FIRST_REPORTED_PCT = 90


def job_milli(job: Job) -> int:
    """Milli-GPUs the whole job requests (every instance; a share in milli-GPUs, a whole GPU 1000)."""
    return sum(round(t.gpu * MILLI) * t.instances for t in job.tasks)


DRAWS_BEFORE_NODE_ORDER = 10
"""Values FGD's simulator draws between the last arrival and the machine order: found by matching the node
names its log gives for seeds 42 and 43 (the same 10 for both); not part of the protocol it describes."""


@dataclass(frozen=True)
class SeedDraws:
    """What one seed draws: the positions in the pod list of the arrivals, in arrival order (a drawn pod as often
    as drawn), and the positions in the cluster's machine list in the order the machines are taken."""

    arrivals: list[int]
    machines: list[int]


def seed_draws(pods: Sequence[Job], machine_names: Sequence[str], capacity_milli: int, to: float,
               seed: int) -> SeedDraws:
    """The arrivals and machine order of ``seed`` (see the module docstring)."""
    milli = [job_milli(p) for p in pods]
    if not any(milli):
        raise ValueError("no pod asks for a GPU: the arrivals would never reach the target")
    per_gpu = [round(min(max(t.gpu for t in p.tasks), 1.0) * MILLI) for p in pods]
    rng = GoRand(seed)
    rng.int_()  # FGD's simulator logs one draw right after seeding, before it shuffles
    by_name = sorted(range(len(pods)), key=lambda i: pods[i].job_id)
    chosen = list(by_name)
    rng.shuffled(chosen)
    target = to * capacity_milli
    requested = sum(milli)
    while requested > target:
        requested -= milli[chosen.pop(rng.intn(len(chosen)))]
    if requested < target:
        while True:
            i = by_name[rng.intn(len(pods))]
            if requested + per_gpu[i] > target:
                break
            chosen.append(i)
            requested += milli[i]
    for _ in range(DRAWS_BEFORE_NODE_ORDER):
        rng.int63()
    named = sorted(range(len(machine_names)), key=lambda m: machine_names[m])
    prefix = rng.perm(len(named))
    return SeedDraws(chosen, [named[k] for k in sorted(range(len(named)), key=prefix.__getitem__)])


def arrivals(pods: Sequence[Job], capacity_milli: int, to: float, seed: int) -> list[Job]:
    """The arrivals of one seed (see the module docstring); arrival ``k`` is job ``"k"``."""
    return _named(pods, seed_draws(pods, (), capacity_milli, to, seed).arrivals)


def _named(pods: Sequence[Job], positions: list[int]) -> list[Job]:
    """The pods at ``positions`` as arrivals: arrival ``k`` is job ``"k"``."""
    return [replace(pods[i], job_id=str(k)) for k, i in enumerate(positions)]


def arrival_order(pods: Sequence[Job], capacity_milli: int, to: float, seed: int) -> list[int]:
    """The positions in ``pods`` of the arrivals of one seed, in arrival order."""
    return seed_draws(pods, (), capacity_milli, to, seed).arrivals


@dataclass(frozen=True)
class FillCurve:
    """One policy's fill on one seed: per arrival, the milli-GPUs arrived and allocated so far, and the
    time the policy took to decide it."""

    policy: str
    seed: int
    capacity_milli: int
    arrived_milli: IntArray
    allocated_milli: IntArray
    decision_ms: FloatArray
    machine: IntArray
    """Per arrival, the machine (position in the cluster's machine list) of its first instance; -1: not placed."""

    def unallocated_pct_at(self, arrived_pct: Sequence[float] | FloatArray) -> FloatArray:
        """Unallocated GPU capacity (%) after the last arrival with ``arrived_pct <= x``, for each ``x``
        (100 before any arrival)."""
        bounds = np.asarray(arrived_pct, dtype=float) / 100 * self.capacity_milli
        last = np.searchsorted(self.arrived_milli, bounds + 1e-9, side="right") - 1
        allocated = np.where(last >= 0, self.allocated_milli[np.maximum(last, 0)], 0)
        result: FloatArray = 100.0 * (self.capacity_milli - allocated) / self.capacity_milli
        return result


def fill(cluster: Cluster, pods: Sequence[Job], policy: str, seed: int, to: float = 1.3,
         config: PlacementConfig | None = None, progress: Callable[[int], None] | None = None,
         known_mix: bool = False) -> FillCurve:
    """Fill ``cluster`` with the arrivals of ``seed`` placed by ``policy`` (a fresh instance: a policy that
    learns from arrivals starts knowing nothing, unless ``known_mix``: see the module docstring). ``progress`` is
    told how many arrivals are done, now and then."""
    capacity = cluster.total_gpus * MILLI
    drawn = seed_draws(pods, [m.name for m in cluster.machines], capacity, to, seed)
    in_order = build_cluster(cluster.name, [cluster.machines[m] for m in drawn.machines], cluster.topology)
    snapshot = ClusterSnapshot.empty(in_order)  # the racks stay where they were: only the order of the machines moves
    jobs = _named(pods, drawn.arrivals)
    decide = online_policy(policy, config, explain=False, mix=ShapeMix.known(pods) if known_mix else None)
    arrived, allocated = np.zeros(len(jobs), np.int64), np.zeros(len(jobs), np.int64)
    machine = np.full(len(jobs), -1, np.int64)
    took_ms = np.zeros(len(jobs))
    requested = placed = 0
    for k, job in enumerate(jobs):
        started = time.perf_counter()
        decision = decide(snapshot, job)
        took_ms[k] = (time.perf_counter() - started) * 1e3
        milli = job_milli(job)
        requested += milli
        if decision.verdict is Verdict.PLACED and decision.allocation is not None:
            snapshot = apply(snapshot, decision.allocation)
            placed += milli
            machine[k] = drawn.machines[decision.allocation.instances[0].machine]
        arrived[k], allocated[k] = requested, placed
        if progress is not None and k % 256 == 255:
            progress(k + 1)
    if progress is not None:
        progress(len(jobs))
    return FillCurve(policy, seed, capacity, arrived, allocated, took_ms, machine)


def reported_pcts(to: float) -> list[int]:
    """Where the summary reads the curves: 90, 100, 110, ... % arrived, up to ``to`` x 100."""
    end = int(np.floor(to * 100 + 1e-9))
    points = list(range(FIRST_REPORTED_PCT, end + 1, REPORTED_EVERY_PCT))
    return points or [end]


@dataclass(frozen=True)
class FillSummary:
    """One policy over its seeds: the mean unallocated % at each reported point, its spread (standard
    deviation over seeds) and the 99th percentile of the decision times of every arrival of every seed."""

    policy: str
    arrived_pct: list[int]
    unallocated_pct: list[float]
    unallocated_std: list[float]
    decision_p99_ms: float
    seeds: int


def summarise_fill(curves: Sequence[FillCurve], to: float) -> FillSummary:
    """The summary of one policy's curves (one per seed)."""
    points = reported_pcts(to)
    table = np.array([c.unallocated_pct_at(points) for c in curves])
    times = np.concatenate([c.decision_ms for c in curves])
    return FillSummary(curves[0].policy, points, table.mean(axis=0).tolist(), table.std(axis=0).tolist(),
                       float(np.percentile(times, 99)) if len(times) else 0.0, len(curves))


def parse_seeds(text: str) -> list[int]:
    """``42-51`` (inclusive), ``42`` or ``1,5,9`` as a list of seeds; ``ValueError`` naming the text otherwise."""
    seeds: list[int] = []
    try:
        for part in text.split(","):
            low, _, high = part.strip().partition("-")
            seeds += list(range(int(low), int(high) + 1)) if high else [int(low)]
    except ValueError:
        raise ValueError(f"seeds must look like 42-51, 42 or 1,5,9; got {text!r}") from None
    if not seeds:
        raise ValueError(f"no seeds in {text!r}")
    return seeds
