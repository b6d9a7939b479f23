"""Lower bounds on the number of machines a set of placed jobs needs, to measure and stop batch solvers.

Items and bins. Every whole-GPU instance is one item of size ``gpu`` (whole GPUs, it cannot be split
over machines); a machine is a bin whose capacity is its number of FREE whole GPUs on the snapshot.

* L1 (trivial): ``ceil(sum(sizes) / C)``.
* L2 (Martello & Toth 1990): for every ``K`` in ``0..C/2``, with
  ``N1 = {w > C - K}``, ``N2 = {C - K >= w > C/2}``, ``N3 = {C/2 >= w >= K}``:
  ``L(K) = |N1| + |N2| + max(0, ceil((sum N3 - (|N2| C - sum N2)) / C))``; ``L2 = max_K L(K) >= L1``.

Why the bound is valid on a heterogeneous, partly used cluster (every step only relaxes the problem,
and a relaxation never needs more machines):

1. Each machine of GPU type ``T`` gets capacity ``C_T`` = the most free whole GPUs any machine of type
   ``T`` has now; real machines have at most that.
2. Instances of jobs restricted to ONE type present in the cluster must sit on machines of that type;
   the type groups are disjoint, so ``sum_T L2(items of T; C_T)`` is a bound (instances allowed on
   several types, or any type, are left out - dropping items never raises the optimum).
3. Every whole-GPU instance sits on some machine of capacity at most ``C_max = max_T C_T``, so
   ``L2(all items; C_max)`` is a bound too.
4. GPU-share and CPU-only instances are left out; any placed instance needs at least one machine.

``machines_lower_bound`` is the largest of 2, 3 and 4. A solution that places every job, has network
cost 0 and touches exactly that many machines is optimal for the batch objective (``meets_bound``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from placement.model.demand import Job
from placement.model.snapshot import ClusterSnapshot


def l1_bound(sizes: Sequence[int], capacity: int) -> int:
    """``ceil(sum(sizes) / capacity)``: machines needed if items could be split."""
    _check(sizes, capacity)
    return -(-sum(sizes) // capacity) if sizes else 0


def l2_bound(sizes: Sequence[int], capacity: int) -> int:
    """Martello-Toth L2 bound for bin packing ``sizes`` into bins of ``capacity`` (see module docstring)."""
    _check(sizes, capacity)
    if not sizes:
        return 0
    items = sorted(sizes)
    best = l1_bound(items, capacity)
    for k in sorted({0, *(w for w in items if w <= capacity // 2)}):
        n1 = [w for w in items if w > capacity - k]
        n2 = [w for w in items if capacity - k >= w > capacity / 2]
        n3 = [w for w in items if capacity / 2 >= w >= k]
        spare = len(n2) * capacity - sum(n2)
        best = max(best, len(n1) + len(n2) + max(0, math.ceil((sum(n3) - spare) / capacity)))
    return best


def _check(sizes: Sequence[int], capacity: int) -> None:
    if capacity <= 0:
        raise ValueError(f"capacity must be > 0, got {capacity}")
    if any(w < 0 or w > capacity for w in sizes):
        raise ValueError(f"every size must be in 0..{capacity}, got {sorted(sizes)}")


def type_capacities(snapshot: ClusterSnapshot) -> dict[str, int]:
    """GPU type -> most free whole GPUs on one machine of that type now (types with GPUs only)."""
    layout = snapshot.layout
    free = (snapshot.gpu_milli_used == 0) & (snapshot.gpu_mem_used == 0)
    per_machine = np.bincount(layout.gpu_machine, weights=free, minlength=len(layout.cpu_cap)).astype(np.int64)
    result: dict[str, int] = {}
    for index, name in enumerate(layout.gpu_types):
        on_type = layout.gpu_type == index
        if on_type.any() and int(layout.gpu_count[on_type].max()) > 0:
            result[name] = int(per_machine[on_type].max())
    return result


def machines_lower_bound(snapshot: ClusterSnapshot, jobs: Sequence[Job]) -> int | None:
    """Fewest machines that can host ``jobs`` on ``snapshot`` (valid lower bound); ``None`` without jobs.

    Raises ``ValueError`` when a whole-GPU instance is larger than every allowed machine's free GPUs
    (such a job cannot have been placed).
    """
    if not jobs:
        return None
    capacity = type_capacities(snapshot)
    by_type: dict[str, list[int]] = {}
    every: list[int] = []
    for job in jobs:
        for task in job.tasks:
            if not task.whole_gpus:
                continue
            allowed = sorted(set(task.gpu_types) & capacity.keys()) if task.gpu_types else sorted(capacity)
            every += [task.whole_gpus] * task.instances
            if len(allowed) == 1:
                by_type.setdefault(allowed[0], []).extend([task.whole_gpus] * task.instances)
    grouped = sum(l2_bound(sizes, capacity[name]) for name, sizes in by_type.items())
    overall = l2_bound(every, max(capacity.values())) if every else 0
    return max(1, grouped, overall)


def meets_bound(jobs_placed: int, jobs_total: int, network_cost: float, machines: int,
                machines_bound: int | None) -> bool:
    """Whether a solution is provably optimal: every job placed, zero network cost, machines at the bound."""
    return (jobs_placed == jobs_total and network_cost <= 1e-9 and machines_bound is not None
            and machines <= machines_bound)
